//! TLS material for listeners: the certificate chain, key and client CA files a listener
//! names, read and checked when a configuration is compiled, so `mcpgate check` reports a
//! bad file and a reload with one keeps the old configuration.

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
