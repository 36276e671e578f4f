//! The headers stage: what the request's own headers must agree with (`MCP-Protocol-Version`,
//! `Mcp-Method` and `Mcp-Name` say what the body says, and so which generation it is), and the request's id (`X-Request-Id`, kept when it is
//! a plain token, made otherwise).

use crate::error::GateError;
use crate::mcp::era::{self, Era};
use crate::mcp::jsonrpc::{self, Message, MessageKind};
use std::sync::Arc;
use wire::fields::{FieldKind, Fields};

/// Which generation the request speaks (docs/protocol.md), once its headers are shown to agree
/// with its body. `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` must say what the
/// body says, or an intermediary routing on the header and the server reading the body
/// would disagree: a doubled header, one that does not decode, or one that says something
/// else is refused with HeaderMismatch (-32020). A modern request must carry all three
/// (`Mcp-Name` for the methods that name something); a legacy one is held only to those it
/// sends.
pub fn check(fields: &Fields, payload: &jsonrpc::Payload) -> Result<Era, GateError> {
    let jsonrpc::Payload::Single(m) = payload else {
        if [FieldKind::McpMethod, FieldKind::McpName]
            .into_iter()
            .any(|k| fields.has(k))
        {
            return Err(mismatch("Mcp-Method and Mcp-Name cannot describe a batch"));
        }
        return Ok(Era::Legacy);
    };
    let version = one(
        fields,
        FieldKind::McpProtocolVersion,
        "MCP-Protocol-Version",
    )?;
    let method = one(fields, FieldKind::McpMethod, "Mcp-Method")?;
    let name = one(fields, FieldKind::McpName, "Mcp-Name")?;
    let envelope = m.meta.map(era::envelope).unwrap_or_default();
    let claimed = envelope.version;
    let modern = !fields.has(FieldKind::McpSessionId)
        && (claimed.as_deref().is_some_and(era::is_modern)
            || version.is_some_and(|v| era::is_modern(&String::from_utf8_lossy(v))));
    let strict = modern && m.kind == MessageKind::Request;
    match (version, claimed.as_deref()) {
        (Some(h), Some(b)) if h != b.as_bytes() => {
            return Err(mismatch(
                "MCP-Protocol-Version does not match params._meta's protocolVersion",
            ));
        }
        (None, _) if strict => return Err(mismatch("MCP-Protocol-Version is missing")),
        // The envelope is the body's to carry: a request without it is invalid, as a
        // 2026-07-28 server would say (-32602), whatever its header.
        (Some(_), None) if strict => {
            return Err(GateError::InvalidMeta(
                "params._meta must name the protocol version (io.modelcontextprotocol/protocolVersion)"
                    .into(),
            ));
        }
        _ => {}
    }
    if strict && claimed.is_some() && !envelope.capabilities {
        return Err(GateError::InvalidMeta(
            "params._meta must hold io.modelcontextprotocol/clientCapabilities (an object)".into(),
        ));
    }
    match method {
        Some(h) if m.method().map(str::as_bytes) != Some(h) => {
            return Err(mismatch("Mcp-Method does not match the body's method"));
        }
        None if strict => return Err(mismatch("Mcp-Method is missing")),
        _ => {}
    }
    match name {
        Some(h) => {
            let decoded = era::decode_header(h)
                .ok_or_else(|| mismatch("Mcp-Name is neither printable ASCII nor =?base64?…?="))?;
            if m.mcp_name.as_deref() != Some(&*decoded) {
                return Err(mismatch("Mcp-Name does not match the body's params"));
            }
        }
        None if strict && names_target(m) => return Err(mismatch("Mcp-Name is missing")),
        None => {}
    }
    Ok(if modern { Era::Modern } else { Era::Legacy })
}

/// Whether `Mcp-Name` is required of a modern request: it names a tool, prompt, resource
/// or task, and the body says which.
fn names_target(m: &Message<'_>) -> bool {
    m.mcp_name.is_some()
        && m.method().is_some_and(|method| {
            matches!(method, "tools/call" | "prompts/get" | "resources/read")
                || jsonrpc::is_task_method(method)
        })
}

/// The one value of a header that may appear once.
fn one<'f>(fields: &'f Fields, kind: FieldKind, name: &str) -> Result<Option<&'f [u8]>, GateError> {
    let mut all = fields.all(kind);
    let first = all.next();
    if all.next().is_some() {
        return Err(mismatch(&format!("{name} is sent more than once")));
    }
    Ok(first)
}

fn mismatch(why: &str) -> GateError {
    GateError::HeaderMismatch(why.to_string())
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
