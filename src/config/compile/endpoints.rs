//! An upstream's endpoints compiled: each url read (TCP, unix socket, https), its TLS
//! settings, the `Host` it is sent, and the session keys that seal session ids across
//! several endpoints.

use super::upstreams::*;
use super::{Compiler, Fail, at, fail};
use crate::config::raw::{self, S};
use crate::config::tls::Pem;
use crate::config::units::resolve_secrets_noting;
use http::{HeaderValue, Uri};
use std::sync::Arc;

impl Compiler<'_> {
    /// One url of `url` or `endpoints`, with its TLS settings if it is https.
    pub(super) fn endpoint(
        &self,
        text: &S<String>,
        tls: Option<&S<raw::RawUpstreamTls>>,
    ) -> Result<Endpoint, Fail> {
        let (address, url, https) = at(text, parse_url(text.get_ref()))?;
        let tls = match &address {
            // https urls are TCP addresses; their host is the default name to verify.
            Address::Tcp { host, .. } if https => {
                Some(Arc::new(self.upstream_tls(host, text.span(), tls)?))
            }
            _ => None,
        };
        Ok(Endpoint {
            host: host_header(&url),
            address,
            tls,
            url,
            // Without its query, which may hold a key (`?api_key=…`): the label is shown
            // in metrics and logs.
            label: text
                .get_ref()
                .split_once('?')
                .map_or(text.get_ref().as_str(), |(before, _)| before)
                .into(),
        })
    }

    pub(super) fn session_keys(&self, v: &S<toml::Value>) -> Result<Box<[SessionKey]>, Fail> {
        let texts: Vec<&str> = match v.get_ref() {
            toml::Value::String(s) => vec![s],
            toml::Value::Array(list) => list
                .iter()
                .map(|k| k.as_str().ok_or(()))
                .collect::<Result<_, ()>>()
                .map_err(|()| {
                    (
                        v.span(),
                        "session_key is a string or a list of strings".to_string(),
                    )
                })?,
            _ => return fail(v.span(), "session_key is a string or a list of strings"),
        };
        if texts.is_empty() {
            return fail(v.span(), "session_key lists no key");
        }
        let mut keys: Vec<SessionKey> = Vec::with_capacity(texts.len());
        for (i, text) in texts.into_iter().enumerate() {
            let text = at(
                v,
                resolve_secrets_noting(text, &mut self.files.borrow_mut()),
            )?;
            // The key's text is never part of an error.
            let key = session_key(text.trim())
                .map_err(|why| (v.span(), format!("session_key (key {}): {why}", i + 1)))?;
            if keys.contains(&key) {
                return fail(
                    v.span(),
                    format!("session_key (key {}) is listed twice", i + 1),
                );
            }
            keys.push(key);
        }
        Ok(keys.into())
    }

    /// The TLS client for an https upstream, its material read now: a bad file or name is
    /// an error of the configuration, not of the first request.
    pub(super) fn upstream_tls(
        &self,
        host: &str,
        url_span: std::ops::Range<usize>,
        raw: Option<&S<raw::RawUpstreamTls>>,
    ) -> Result<crate::config::tls::UpstreamTls, Fail> {
        let Some(raw) = raw else {
            return crate::config::tls::upstream_client(host, None, None)
                .map_err(|e| (url_span, e));
        };
        let t = raw.get_ref();
        let pem = |v: &Option<S<String>>| -> Result<Option<Pem>, Fail> {
            let Some(v) = v else { return Ok(None) };
            let text = at(
                v,
                resolve_secrets_noting(v.get_ref(), &mut self.files.borrow_mut()),
            )?;
            if text.trim_start().starts_with("-----BEGIN") {
                return Ok(Some(Pem {
                    text: text.into_bytes(),
                    what: "the PEM text given".to_string(),
                }));
            }
            let path = self.path(&text);
            let bytes = std::fs::read(&path)
                .map_err(|e| (v.span(), format!("cannot read {}: {e}", path.display())))?;
            Ok(Some(Pem {
                text: bytes,
                what: path.display().to_string(),
            }))
        };
        if t.cert.is_some() != t.key.is_some() {
            return fail(raw.span(), "tls: cert and key go together");
        }
        let ca = pem(&t.ca)?;
        let client = pem(&t.cert)?.zip(pem(&t.key)?);
        let name = t
            .server_name
            .as_ref()
            .map_or(host, |n| n.get_ref().as_str());
        crate::config::tls::upstream_client(name, ca.as_ref(), client.as_ref().map(|(c, k)| (c, k)))
            .map_err(|e| (raw.span(), e))
    }
}

/// The URL as written: `http://host:port/path`, `https://…`, or `unix:/socket:/path` for a
/// unix socket. Also whether it is https.
pub(super) fn parse_url(text: &str) -> Result<(Address, Uri, bool), String> {
    if let Some(rest) = text.strip_prefix("unix:") {
        const FORM: &str = "a unix socket upstream is written unix:/path/to/socket:/request/path";
        let (socket, path) = rest.split_once(':').ok_or(FORM)?;
        if !socket.starts_with('/') || !path.starts_with('/') {
            return Err(FORM.to_string());
        }
        let url: Uri = format!("http://localhost{path}")
            .parse()
            .map_err(|e| format!("bad request path {path:?}: {e}"))?;
        return Ok((Address::Unix(socket.into()), url, false));
    }
    let url: Uri = text.parse().map_err(|e| format!("bad upstream url: {e}"))?;
    let https = match url.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err("upstream url must start with http://, https:// or unix:".into()),
    };
    let Some(host) = url.host() else {
        return Err("upstream url needs a host and port".into());
    };
    if url.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(
            "an upstream url cannot carry credentials; send them with headers (see upstreams.*.headers)"
                .into(),
        );
    }
    let address = Address::Tcp {
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port: url.port_u16().unwrap_or(if https { 443 } else { 80 }),
    };
    Ok((address, url, https))
}

/// `Host` for an upstream URL: the host as written, with the port unless it is the
/// scheme's own (80, or 443 for https).
pub(super) fn host_header(url: &Uri) -> HeaderValue {
    let host = url.host().unwrap_or_default();
    let default = if url.scheme_str() == Some("https") {
        443
    } else {
        80
    };
    let text = match url.port_u16() {
        Some(port) if port != default => format!("{host}:{port}"),
        _ => host.to_string(),
    };
    HeaderValue::from_str(&text).expect("a URI's host and port make a valid header value")
}

/// A session key from its base64 text (standard or URL-safe alphabet, padded or not).
pub(super) fn session_key(text: &str) -> Result<SessionKey, String> {
    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let bytes = [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|e| e.decode(text).ok())
        .ok_or("not base64 (make one with `openssl rand -base64 32`)")?;
    let key: [u8; 32] = bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("{} bytes; a key is 32", b.len()))?;
    Ok(SessionKey(key))
}
