//! The headers stage: what the request's own headers must agree with (`Mcp-Method` and
//! `Mcp-Name` say what the body says), and the request's id (`X-Request-Id`, kept when it is
//! a plain token, made otherwise).

use crate::error::GateError;
use crate::mcp::jsonrpc;
use std::sync::Arc;
use wire::fields::{FieldKind, Fields};

/// `Mcp-Method` / `Mcp-Name` (MCP 2026-07-28) must say what the body says, or an
/// intermediary routing on the header and the server reading the body would disagree.
pub fn check(fields: &Fields, payload: &jsonrpc::Payload) -> Result<(), GateError> {
    let method = fields.get(FieldKind::McpMethod);
    let name = fields.get(FieldKind::McpName);
    if method.is_none() && name.is_none() {
        return Ok(());
    }
    let jsonrpc::Payload::Single(m) = payload else {
        return Err(GateError::InvalidRequest(
            "Mcp-Method / Mcp-Name headers cannot describe a batch".into(),
        ));
    };
    if let Some(h) = method {
        if m.method().map(str::as_bytes) != Some(h) {
            return Err(GateError::InvalidRequest(
                "the Mcp-Method header does not match the body's method".into(),
            ));
        }
    }
    if let Some(h) = name {
        if m.mcp_name.as_deref().map(str::as_bytes) != Some(h) {
            return Err(GateError::InvalidRequest(
                "the Mcp-Name header does not match the body's params".into(),
            ));
        }
    }
    Ok(())
}

/// Keeps a client's `X-Request-Id` when it is a plain token (1–128 of `A-Za-z0-9._:-`, so
/// it is safe in logs and headers); otherwise makes one: a random prefix per thread and
/// the thread's count, unique without a syscall or a shared counter per request.
pub fn request_id(fields: &Fields) -> Arc<str> {
    if let Some(b) = fields.get(FieldKind::XRequestId) {
        if (1..=128).contains(&b.len())
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || b"._:-".contains(c))
        {
            return Arc::from(String::from_utf8_lossy(b));
        }
    }
    thread_local! {
        /// This thread's random prefix and its count of ids made: the pair is unique
        /// without a counter shared (and contended) between worker threads.
        static NEXT: std::cell::Cell<(u64, u64)> = std::cell::Cell::new((random_u64(), 0));
    }
    let (prefix, n) = NEXT.with(|next| {
        let (prefix, n) = next.get();
        next.set((prefix, n.wrapping_add(1)));
        (prefix, n)
    });
    let mut pair = [0u8; 16];
    pair[..8].copy_from_slice(&prefix.to_be_bytes());
    pair[8..].copy_from_slice(&n.to_be_bytes());
    let mut id = [0u8; 32];
    let id = crate::config::token::hex_into(&mut id, &pair);
    Arc::from(std::str::from_utf8(id).unwrap_or_default())
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    let _ = getrandom::fill(&mut b);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue};

    #[test]
    fn request_ids() {
        let mut h = HeaderMap::new();
        let a = request_id(&Fields::from_map(&h));
        assert_eq!(a.len(), 32);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        // The first half is fixed per thread, the second counts up.
        let b = request_id(&Fields::from_map(&h));
        assert_eq!(a[..16], b[..16]);
        assert!(
            u64::from_str_radix(&b[16..], 16).unwrap() > u64::from_str_radix(&a[16..], 16).unwrap()
        );
        assert_ne!(a, request_id(&Fields::from_map(&h)));
        // Another thread has a prefix of its own (64 random bits), so its ids never meet ours
        // even though its count starts where ours did.
        let other = std::thread::spawn(|| request_id(&Fields::new()))
            .join()
            .unwrap();
        assert_ne!(other[..16], a[..16]);
        h.insert("x-request-id", HeaderValue::from_static("abc-1.2:3"));
        assert_eq!(&*request_id(&Fields::from_map(&h)), "abc-1.2:3");
        h.insert(
            "x-request-id",
            HeaderValue::from_static("bad id\twith spaces"),
        );
        assert_eq!(request_id(&Fields::from_map(&h)).len(), 32);
    }
}
