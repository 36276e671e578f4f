//! TLS for listeners (rustls, TLS 1.2 and 1.3, ALPN `h2` and `http/1.1`). Certificates are
//! read when a configuration is compiled (`config::tls`); a listener serves through a `CertStore`, a resolver whose key is swapped atomically on
//! reload: new handshakes get the new certificate, open connections keep theirs.

use crate::config::tls::TlsMaterial;
use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use std::sync::Arc;

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

/// `mcpgate_tls_certificate_expiry_timestamp_seconds`, by listener.
#[derive(Clone, Default)]
pub struct CertExpiry(
    prometheus_client::metrics::family::Family<
        ListenerLabels,
        prometheus_client::metrics::gauge::Gauge,
    >,
);

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct ListenerLabels {
    listener: String,
}

impl CertExpiry {
    pub fn register(registry: &mut prometheus_client::registry::Registry) -> CertExpiry {
        let family = prometheus_client::metrics::family::Family::default();
        registry.register(
            "tls_certificate_expiry_timestamp_seconds",
            "When the certificate a TLS listener serves expires (notAfter), in Unix seconds",
            family.clone(),
        );
        CertExpiry(family)
    }

    /// Sets each TLS listener's gauge to the notAfter of the certificate it serves.
    pub fn record(&self, listeners: &[crate::config::Listener]) {
        for l in listeners {
            let Some(tls) = &l.tls else { continue };
            let Some(cert) = tls.key.cert.first() else {
                continue;
            };
            match x509_parser::parse_x509_certificate(cert.as_ref()) {
                Ok((_, parsed)) => {
                    let labels = ListenerLabels {
                        listener: l.name.to_string(),
                    };
                    let not_after = parsed.validity().not_after.timestamp();
                    self.0.get_or_create(&labels).set(not_after);
                }
                Err(error) => {
                    tracing::warn!(listener = %l.name, %error, "cannot read the certificate's expiry");
                }
            }
        }
    }
}
