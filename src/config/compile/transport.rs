//! `[transport]`: how streams to clients are kept alive, and how long a client may cache a
//! list.

use super::{
    DEFAULT_FANOUT_TIMEOUT, DEFAULT_INPUT_TIMEOUT, DEFAULT_LIST_TTL, DEFAULT_SSE_KEEPALIVE, Fail,
    at, fail,
};
use crate::config::raw::{self, S};
use crate::config::units::parse_duration;
use std::time::Duration;

/// The silence after which a client's SSE stream gets a `: keepalive` comment.
pub(super) fn sse_keepalive(raw: Option<&S<raw::RawTransport>>) -> Result<Duration, Fail> {
    match raw.and_then(|t| t.get_ref().sse_keepalive.as_ref()) {
        Some(v) => at(v, parse_duration(v.get_ref())),
        None => Ok(DEFAULT_SSE_KEEPALIVE),
    }
}

/// The longest a 2026-07-28 client is told a list stays fresh (`ttlMs`): a reload may
/// change what its profile sees, and its cache should not outlive that by much.
pub(super) fn list_ttl(raw: Option<&S<raw::RawTransport>>) -> Result<Duration, Fail> {
    match raw.and_then(|t| t.get_ref().list_ttl.as_ref()) {
        Some(v) => at(v, parse_duration(v.get_ref())),
        None => Ok(DEFAULT_LIST_TTL),
    }
}

/// How long after an `input_required` answer the client's retry is taken: the life of
/// the `requestState` mcpgate seals (docs/protocol.md).
pub(super) fn input_timeout(raw: Option<&S<raw::RawTransport>>) -> Result<Duration, Fail> {
    match raw.and_then(|t| t.get_ref().input_timeout.as_ref()) {
        Some(v) => at(v, parse_duration(v.get_ref())),
        None => Ok(DEFAULT_INPUT_TIMEOUT),
    }
}

/// How long a federated list waits for each member (docs/federation.md): past it the list goes out
/// with the others' items and names the member unavailable.
pub(super) fn fanout_timeout(raw: Option<&S<raw::RawTransport>>) -> Result<Duration, Fail> {
    match raw.and_then(|t| t.get_ref().fanout_timeout.as_ref()) {
        Some(v) => {
            let d = at(v, parse_duration(v.get_ref()))?;
            if d.is_zero() {
                return fail(v.span(), "fanout_timeout must be more than 0");
            }
            Ok(d)
        }
        None => Ok(DEFAULT_FANOUT_TIMEOUT),
    }
}
