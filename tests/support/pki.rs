//! A test CA issuing server and client certificates (rcgen).
use super::*;

/// A test CA in a temporary folder, issuing server and client certificates (rcgen).
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca_cert: rcgen::Certificate,
    pub ca: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Pki {
    pub fn new() -> Pki {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "mcpgate test CA");
        let key = rcgen::KeyPair::generate().unwrap();
        let ca_cert = params.self_signed(&key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).unwrap();
        Pki {
            dir,
            ca_cert,
            ca: rcgen::Issuer::new(params, key),
        }
    }

    /// Issues a certificate; writes `NAME.pem` and `NAME.key`; returns its DER.
    pub fn issue(&self, name: &str, sans: &[&str], client: bool) -> Vec<u8> {
        self.issue_valid(name, sans, client, true)
    }

    /// A server certificate whose validity ended in 2021.
    pub fn issue_expired(&self, name: &str, sans: &[&str]) -> Vec<u8> {
        self.issue_valid(name, sans, false, false)
    }

    fn issue_valid(&self, name: &str, sans: &[&str], client: bool, valid: bool) -> Vec<u8> {
        let mut params =
            rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![if client {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        }];
        if !valid {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        // Write the key first and the cert by rename, so a watcher never sees a half pair.
        std::fs::write(
            self.dir.path().join(format!("{name}.key")),
            key.serialize_pem(),
        )
        .unwrap();
        let tmp = self.dir.path().join(format!(".{name}.pem"));
        std::fs::write(&tmp, cert.pem()).unwrap();
        std::fs::rename(&tmp, self.dir.path().join(format!("{name}.pem"))).unwrap();
        cert.der().to_vec()
    }

    pub fn path(&self, file: &str) -> String {
        self.dir.path().join(file).display().to_string()
    }

    pub fn client_config(&self, client_cert: Option<&str>) -> rustls::ClientConfig {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_cert.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let mut config = match client_cert {
            Some(name) => {
                use rustls_pki_types::pem::PemObject;
                let certs = rustls_pki_types::CertificateDer::pem_file_iter(
                    self.dir.path().join(format!("{name}.pem")),
                )
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
                let key = rustls_pki_types::PrivateKeyDer::from_pem_file(
                    self.dir.path().join(format!("{name}.key")),
                )
                .unwrap();
                builder.with_client_auth_cert(certs, key).unwrap()
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        config
    }
}
