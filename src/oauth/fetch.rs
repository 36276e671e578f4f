//! Requests to the authorization server: its metadata, its JWKS, token introspection.
//! They go out on the upstream client (`upstream::pool`), one keep-alive pool per host,
//! with the `[oauth]` TLS settings, and their answers are read whole up to [`MAX_ANSWER`].

use crate::config::compile::IdpUrl;
use crate::config::tls::UpstreamTls;
use crate::upstream::pool::Pool;
use bytes::{Bytes, BytesMut};
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most of an answer read: JWKS and metadata documents are a few KiB.
pub const MAX_ANSWER: usize = 1 << 20;
/// How long one exchange with the authorization server may take, connect included.
pub const TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The authorization server's hosts, each with its pool.
pub struct IdpClient {
    tls: Arc<rustls::ClientConfig>,
    pools: Mutex<Vec<(IdpUrl, Arc<Pool>)>>,
}

impl IdpClient {
    pub fn new(tls: Arc<rustls::ClientConfig>) -> IdpClient {
        IdpClient {
            tls,
            pools: Mutex::new(Vec::new()),
        }
    }

    fn pool(&self, url: &IdpUrl) -> Result<Arc<Pool>, String> {
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, p)) = pools
            .iter()
            .find(|(u, _)| u.address == url.address && u.https == url.https)
        {
            return Ok(p.clone());
        }
        let tls = if url.https {
            let host = url.uri.host().unwrap_or_default();
            let name = host.trim_start_matches('[').trim_end_matches(']');
            let server_name = rustls_pki_types::ServerName::try_from(name.to_string())
                .map_err(|_| format!("{name:?} is not a valid TLS server name"))?;
            Some(Arc::new(UpstreamTls {
                config: self.tls.clone(),
                server_name,
                identity: [0; 32],
                extra_ca: false,
                client_cert: false,
            }))
        } else {
            None
        };
        let pool = Pool::new(url.address.clone(), tls, CONNECT_TIMEOUT);
        pools.push((url.clone(), pool.clone()));
        Ok(pool)
    }

    /// `GET url` for a JSON document: its status and body.
    pub async fn get(&self, url: &IdpUrl) -> Result<(StatusCode, Bytes), String> {
        let head = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nUser-Agent: mcpgate/{}\r\n\r\n",
            target(url),
            authority(url),
            env!("CARGO_PKG_VERSION"),
        );
        self.exchange(url, &Method::GET, head.into_bytes()).await
    }

    /// `POST url` of a form, with HTTP Basic client authentication (RFC 6749 §2.3.1: the
    /// id and secret form-encoded first).
    pub async fn post_form(
        &self,
        url: &IdpUrl,
        client: (&str, &str),
        form: &str,
    ) -> Result<(StatusCode, Bytes), String> {
        use base64::Engine as _;
        let enc = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        let basic = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            enc(client.0),
            enc(client.1)
        ));
        let mut request = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nUser-Agent: mcpgate/{}\r\nAuthorization: Basic {basic}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n",
            target(url),
            authority(url),
            env!("CARGO_PKG_VERSION"),
            form.len(),
        )
        .into_bytes();
        request.extend_from_slice(form.as_bytes());
        self.exchange(url, &Method::POST, request).await
    }

    /// `POST url` of a form that authenticates the client itself (`private_key_jwt`,
    /// RFC 7523: the assertion is in the form).
    pub async fn post_form_alone(
        &self,
        url: &IdpUrl,
        form: &str,
    ) -> Result<(StatusCode, Bytes), String> {
        let mut request = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nUser-Agent: mcpgate/{}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n",
            target(url),
            authority(url),
            env!("CARGO_PKG_VERSION"),
            form.len(),
        )
        .into_bytes();
        request.extend_from_slice(form.as_bytes());
        self.exchange(url, &Method::POST, request).await
    }

    async fn exchange(
        &self,
        url: &IdpUrl,
        method: &Method,
        request: Vec<u8>,
    ) -> Result<(StatusCode, Bytes), String> {
        let pool = self.pool(url)?;
        let go = async {
            let answer = pool
                .send(method, &request, &mut || {})
                .await
                .map_err(|e| e.to_string())?;
            let status = answer.status();
            let mut body = answer.into_body();
            let mut seen = BytesMut::new();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| e.to_string())?;
                if let Ok(data) = frame.into_data() {
                    if seen.len() + data.len() > MAX_ANSWER {
                        return Err(format!("the answer is larger than {MAX_ANSWER} bytes"));
                    }
                    seen.extend_from_slice(&data);
                }
            }
            Ok((status, seen.freeze()))
        };
        tokio::time::timeout(TIMEOUT, go)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {TIMEOUT:?}")))
    }
}

fn target(url: &IdpUrl) -> &str {
    url.uri.path_and_query().map_or("/", |p| p.as_str())
}

fn authority(url: &IdpUrl) -> &str {
    url.uri.authority().map_or("", |a| a.as_str())
}
