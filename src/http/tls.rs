//! TLS for listeners (rustls, TLS 1.2 and 1.3, ALPN `h2` and `http/1.1`). Certificates are
//! read when a configuration is compiled, so `mcpgate check` reports a bad file; a
//! listener serves through a `CertStore`, a resolver whose key is swapped atomically on
//! reload: new handshakes get the new certificate, open connections keep theirs.

use arc_swap::ArcSwap;
use rustls::RootCertStore;
use rustls::crypto::ring::sign::any_supported_type;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A listener's TLS files, as configured (paths resolved against the config's folder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

/// What the files hold, loaded and checked.
#[derive(Clone)]
pub struct TlsMaterial {
    pub files: TlsFiles,
    pub key: Arc<CertifiedKey>,
    pub client_roots: Option<Arc<RootCertStore>>,
}

impl fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read certificate {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("bad certificate PEM in {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("no certificate in {}", path.display()));
    }
    Ok(certs)
}

pub fn load(files: &TlsFiles) -> Result<TlsMaterial, String> {
    let chain = certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        format!(
            "cannot read a private key from {}: {e}",
            files.key.display()
        )
    })?;
    let signing = any_supported_type(&key)
        .map_err(|e| format!("unusable private key {}: {e}", files.key.display()))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|e| {
        format!(
            "{} does not match the key {}: {e}",
            files.cert.display(),
            files.key.display()
        )
    })?;
    let client_roots = match &files.client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in certs(ca)? {
                roots
                    .add(c)
                    .map_err(|e| format!("bad CA certificate in {}: {e}", ca.display()))?;
            }
            Some(Arc::new(roots))
        }
        None => None,
    };
    Ok(TlsMaterial {
        files: files.clone(),
        key: Arc::new(certified),
        client_roots,
    })
}

/// The certificate a listener presents, swappable at runtime.
#[derive(Debug)]
pub struct CertStore {
    current: ArcSwap<CertifiedKey>,
}

impl CertStore {
    pub fn new(key: Arc<CertifiedKey>) -> Self {
        CertStore {
            current: ArcSwap::new(key),
        }
    }

    pub fn replace(&self, key: Arc<CertifiedKey>) {
        self.current.store(key);
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The rustls configuration of a listener. Client-certificate roots are fixed for the
/// listener's life (changing them needs a restart); the server certificate is not.
pub fn server_config(
    material: &TlsMaterial,
    store: Arc<CertStore>,
) -> Result<rustls::ServerConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| e.to_string())?;
    let builder = match &material.client_roots {
        Some(roots) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider)
                .build()
                .map_err(|e| format!("client_ca: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(store);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
