//! DNS-rebinding and cross-site defence: the `Host` (or HTTP/2 `:authority`) of a request
//! must be one the listener serves, and a browser's `Origin`, when present, must be one the
//! listener allows. Loopback listeners allow only localhost names by default (a web page
//! that rebinds its own name to 127.0.0.1 still sends its own Host and Origin).

use super::Seldom;
use crate::config::Listener;
use crate::error::GateError;
use http::request::Parts;

pub fn check(listener: &Listener, parts: &Parts, seldom: Seldom) -> Result<(), GateError> {
    let host = parts
        .headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| parts.uri.authority().map(|a| a.as_str()));
    // HTTP/1.1 requires Host; a request without one cannot be checked, so it is refused.
    if !host.is_some_and(|h| listener.hosts.allows(h)) {
        return Err(GateError::HostRefused);
    }
    let origin = seldom
        .has(Seldom::ORIGIN)
        .then(|| parts.headers.get(http::header::ORIGIN))
        .flatten();
    if let Some(origin) = origin {
        if !origin.to_str().is_ok_and(|o| listener.origins.allows(o)) {
            return Err(GateError::OriginRefused);
        }
    }
    Ok(())
}
