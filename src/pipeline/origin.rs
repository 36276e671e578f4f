//! DNS-rebinding and cross-site defence: the `Host` (or HTTP/2 `:authority`) of a request
//! must be one the listener serves, and a browser's `Origin`, when present, must be one the
//! listener allows. Loopback listeners allow only localhost names by default (a web page
//! that rebinds its own name to 127.0.0.1 still sends its own Host and Origin).

use crate::config::Listener;
use crate::error::GateError;
use crate::http::request::Target;
use wire::fields::{FieldKind, Fields};

pub fn check(listener: &Listener, target: &Target, fields: &Fields) -> Result<(), GateError> {
    // An absolute-form target's authority is the request's host, whatever `Host` says
    // (RFC 9112 §3.2.2), as HTTP/2's `:authority` is.
    let host = target
        .authority()
        .or_else(|| fields.get_str(FieldKind::Host));
    // HTTP/1.1 requires Host; a request without one cannot be checked, so it is refused.
    if !host.is_some_and(|h| listener.hosts.allows(h)) {
        return Err(GateError::HostRefused);
    }
    if let Some(origin) = fields.get(FieldKind::Origin) {
        if !wire::fields::visible(origin).is_some_and(|o| listener.origins.allows(o)) {
            return Err(GateError::OriginRefused);
        }
    }
    Ok(())
}
