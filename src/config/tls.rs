//! TLS material, read and checked when a configuration is compiled, so `mcpgate check`
//! reports a bad file and a reload with one keeps the old configuration: for listeners,
//! the certificate chain, key and client CA files a listener names; for https upstreams,
//! the client configuration (roots, the name to verify, a client certificate).

use rustls::RootCertStore;
use rustls::crypto::ring::sign::any_supported_type;
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

/// TLS towards one upstream: what its connections are made with.
pub struct UpstreamTls {
    pub config: Arc<rustls::ClientConfig>,
    /// Sent as SNI and checked against the upstream's certificate.
    pub server_name: rustls_pki_types::ServerName<'static>,
    /// SHA-256 over the name and the PEM material: equal for equal settings, so a reload
    /// that keeps them keeps the upstream's pools.
    pub identity: [u8; 32],
    /// What `mcpgate check` says of it: an extra CA, a client certificate.
    pub extra_ca: bool,
    pub client_cert: bool,
}

impl fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// PEM text given for an upstream's TLS setting, and what to call it in errors.
pub struct Pem {
    pub text: Vec<u8>,
    pub what: String,
}

/// The client side of TLS to an upstream: Mozilla's roots (webpki-roots) and `ca`, TLS 1.3
/// and 1.2, ALPN `http/1.1`, and `cert` + `key` offered when the upstream asks.
pub fn upstream_client(
    server_name: &str,
    ca: Option<&Pem>,
    client: Option<(&Pem, &Pem)>,
) -> Result<UpstreamTls, String> {
    use sha2::{Digest, Sha256};
    let name = rustls_pki_types::ServerName::try_from(server_name.to_string())
        .map_err(|_| format!("{server_name:?} is not a valid TLS server name"))?;
    let mut identity = Sha256::new();
    identity.update(server_name.as_bytes());
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(ca) = ca {
        identity.update(b"\0ca\0");
        identity.update(&ca.text);
        for c in pem_certs(ca)? {
            roots
                .add(c)
                .map_err(|e| format!("bad CA certificate in {}: {e}", ca.what))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_root_certificates(roots);
    let mut config = match client {
        Some((cert, key)) => {
            identity.update(b"\0cert\0");
            identity.update(&cert.text);
            identity.update(b"\0key\0");
            identity.update(&key.text);
            let chain = pem_certs(cert)?;
            let key_der = PrivateKeyDer::from_pem_slice(&key.text)
                .map_err(|e| format!("cannot read a private key from {}: {e}", key.what))?;
            builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                format!(
                    "{} and {} do not make a client certificate: {e}",
                    cert.what, key.what
                )
            })?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(UpstreamTls {
        config: Arc::new(config),
        server_name: name,
        identity: identity.finalize().into(),
        extra_ca: ca.is_some(),
        client_cert: client.is_some(),
    })
}

fn pem_certs(pem: &Pem) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem.text)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("bad certificate PEM in {}: {e}", pem.what))?;
    if certs.is_empty() {
        return Err(format!("no certificate in {}", pem.what));
    }
    Ok(certs)
}
