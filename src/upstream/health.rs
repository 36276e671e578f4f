//! Active health checks (docs/configuration.md): every `interval`, each endpoint of an upstream with
//! `health` set is sent a JSON-RPC `ping` on a connection of the check's own.
//!
//! - A ping passes when an answer head comes within `timeout` with a status below 500 and
//!   its body holds a JSON-RPC message (a JSON body, or the first `data:` of an event
//!   stream). A server that wants a session answers a ping without one with a 400 and a
//!   JSON-RPC error: that passes too, as it shows the MCP server is up and reading.
//! - `unhealthy_after` failed pings in a row take the endpoint out; `healthy_after`
//!   passed ones in a row bring it back. It starts healthy, and the first ping goes at
//!   once.
//! - The check runs on the control thread's runtime, for as long as its endpoint lives
//!   with the same settings (`registry` restarts it when they change).

use super::endpoint::{Checker, EndpointState};
use crate::config::HealthCheck;
use crate::config::generation::Era;
use bytes::BytesMut;
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use std::sync::{Arc, Weak};

/// The most of a ping's answer read to find a JSON-RPC message in it.
const MAX_PING_ANSWER: usize = 64 << 10;

/// Makes `endpoint`'s check run with `settings` and the ping `request` (none when
/// `settings` is `None`): a check already running with both is left alone.
/// With `learns_era` (an upstream whose era is probed), each answer also sets the
/// endpoint's era.
pub fn ensure(
    endpoint: &Arc<EndpointState>,
    settings: Option<HealthCheck>,
    request: Vec<u8>,
    learns_era: bool,
    upstream: &Arc<crate::config::Upstream>,
    at: usize,
) {
    let mut running = endpoint.checker.lock().unwrap_or_else(|p| p.into_inner());
    let same_identity = |c: &super::endpoint::Checker| match (
        c.upstream.identity.as_deref(),
        upstream.identity.as_deref(),
    ) {
        (None, None) => true,
        (Some(a), Some(b)) => super::identity::Tokens::same_as(a, b),
        _ => false,
    };
    if let (Some(c), Some(s)) = (&*running, &settings)
        && c.settings == *s
        && *c.request == *request
        && c.learns_era == learns_era
        && same_identity(c)
    {
        return;
    }
    if let Some(c) = running.take() {
        c.task.abort();
    }
    let Some(settings) = settings else {
        // Without active checks, only ejections take it out.
        endpoint.set_healthy(true);
        return;
    };
    let request: Arc<[u8]> = request.into();
    let task = tokio::spawn(run(
        Arc::downgrade(endpoint),
        settings,
        request.clone(),
        learns_era,
        upstream.clone(),
        at,
    ));
    *running = Some(Checker {
        settings,
        request,
        learns_era,
        upstream: upstream.clone(),
        task: task.abort_handle(),
    });
}

async fn run(
    endpoint: Weak<EndpointState>,
    settings: HealthCheck,
    request: Arc<[u8]>,
    learns_era: bool,
    upstream: Arc<crate::config::Upstream>,
    at: usize,
) {
    let pool = match endpoint.upgrade() {
        Some(e) => e.new_pool(),
        None => return,
    };
    let (mut passed, mut failed) = (0u32, 0u32);
    loop {
        // With `identity`, each check carries a token of its own (a kept one would expire).
        let request = super::encode::authorized(&request, &upstream);
        let verdict = tokio::time::timeout(settings.timeout, ping(&pool, &request))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {:?}", settings.timeout)));
        let Some(endpoint) = endpoint.upgrade() else {
            return;
        };
        match verdict {
            Ok(era) => {
                if let Some(era) = era.filter(|_| learns_era) {
                    let newly_modern = era == Era::Modern && endpoint.era() != Some(Era::Modern);
                    endpoint.set_era(era);
                    if newly_modern {
                        legacy_probe(&pool, &upstream, at, &endpoint).await;
                    }
                }
                failed = 0;
                passed = passed.saturating_add(1);
                if passed >= settings.healthy_after {
                    endpoint.set_healthy(true);
                }
            }
            Err(why) => {
                passed = 0;
                failed = failed.saturating_add(1);
                tracing::debug!(endpoint = %endpoint.label, failed, why, "health ping failed");
                if failed >= settings.unhealthy_after {
                    endpoint.set_healthy(false);
                }
            }
        }
        drop(endpoint);
        tokio::time::sleep(settings.interval).await;
    }
}

/// The second half of an era probe (docs/protocol.md), once endpoint `at` of `upstream`
/// answered `server/discover` as a 2026-07-28 server: whether it also keeps legacy
/// sessions. A discover answer cannot tell (the SDK v2 server lists 2026-07-28 alone
/// either way), so mcpgate sends a legacy `initialize` of its own: refused with -32022,
/// the endpoint is of 2026-07-28 only and its legacy clients are bridged from the start;
/// accepted, the session it opened is closed at once and legacy clients are served in
/// sessions of their own. So no client's `initialize` is sent only to be refused.
pub async fn legacy_probe(
    pool: &Arc<super::pool::Pool>,
    upstream: &crate::config::Upstream,
    at: usize,
    state: &EndpointState,
) {
    if state.modern_only() || !state.claim_legacy_probe() {
        return;
    }
    // Bounded: a server that does not answer must not hold up its health checks.
    let probed = tokio::time::timeout(LEGACY_PROBE_TIME, ask_legacy(pool, upstream, at, state));
    if probed.await.is_err() {
        tracing::debug!(endpoint = %state.label, "no answer to the legacy initialize probe");
    }
}

/// How long the legacy half of an era probe may take, its session's close included.
const LEGACY_PROBE_TIME: std::time::Duration = std::time::Duration::from_secs(5);

async fn ask_legacy(
    pool: &Arc<super::pool::Pool>,
    upstream: &crate::config::Upstream,
    at: usize,
    state: &EndpointState,
) {
    let Some(endpoint) = upstream.endpoints.get(at) else {
        return;
    };
    const INIT: &[u8] = br#"{"jsonrpc":"2.0","id":"mcpgate-era","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcpgate","version":"1"}}}"#;
    let request = super::encode::own(upstream, endpoint, &Method::POST, None, INIT, &[]);
    let request = super::encode::authorized(&request, upstream);
    let Ok(answer) = pool.send(&Method::POST, &request, &mut || {}).await else {
        return;
    };
    let status = answer.status();
    let session = answer
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut body = answer.into_body();
    let mut seen = BytesMut::new();
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            seen.extend_from_slice(&data);
        }
        if seen.len() > MAX_PING_ANSWER {
            break;
        }
    }
    if status == StatusCode::BAD_REQUEST && refuses_legacy(&seen) {
        state.set_modern_only();
        return;
    }
    if let Some(session) = session {
        let delete = super::encode::own(
            upstream,
            endpoint,
            &Method::DELETE,
            Some(&session),
            b"",
            &[],
        );
        let delete = super::encode::authorized(&delete, upstream);
        if let Ok(answer) = pool.send(&Method::DELETE, &delete, &mut || {}).await {
            let mut body = answer.into_body();
            while let Some(Ok(_)) = body.frame().await {}
        }
    }
}

/// Whether `text` (a JSON body, or event data) is an error -32022 (UnsupportedProtocolVersion).
fn refuses_legacy(text: &[u8]) -> bool {
    let code_of = |bytes: &[u8]| {
        serde_json::from_slice::<serde_json::Value>(bytes)
            .ok()
            .and_then(|v| v["error"]["code"].as_i64())
    };
    if code_of(text) == Some(-32022) {
        return true;
    }
    text.split(|b| *b == b'\n')
        .filter_map(|line| line.strip_prefix(b"data:"))
        .any(|data| code_of(data.trim_ascii()) == Some(-32022))
}

/// Asks `pool`'s endpoint `request` (a `server/discover`) and reads its era from the
/// answer; `None` when it did not answer with a JSON-RPC message.
pub async fn probe(pool: &Arc<super::pool::Pool>, request: &[u8]) -> Option<Era> {
    ping(pool, request).await.ok().flatten()
}

/// One ping: `Ok` when it passes (with the era its message shows), else why not.
async fn ping(pool: &Arc<super::pool::Pool>, request: &[u8]) -> Result<Option<Era>, String> {
    let answer = pool
        .send(&Method::POST, request, &mut || {})
        .await
        .map_err(|e| e.to_string())?;
    let status = answer.status();
    if status.is_server_error() {
        return Err(format!("status {status}"));
    }
    let sse = wire::headval::body_format(answer.headers()) == wire::headval::BodyFormat::Sse;
    let mut body = answer.into_body();
    let mut seen = BytesMut::new();
    loop {
        let frame = match body.frame().await {
            Some(Ok(f)) => f,
            Some(Err(e)) => return Err(e.to_string()),
            None => break,
        };
        if let Ok(data) = frame.into_data() {
            seen.extend_from_slice(&data);
        }
        if sse && holds_message(&seen, true).is_some() {
            return Ok(holds_message(&seen, true));
        }
        if seen.len() > MAX_PING_ANSWER {
            break;
        }
    }
    if let Some(era) = holds_message(&seen, sse) {
        Ok(Some(era))
    } else if status == StatusCode::OK || status.is_client_error() {
        Err(format!("status {status} without a JSON-RPC message"))
    } else {
        Err(format!("status {status}"))
    }
}

/// The era of the JSON-RPC message `text` holds (the whole body, or (`sse`) the data of
/// an event), if it holds one: a result naming a 2026-07-28 or later version among its
/// `supportedVersions` is a modern server's; any other message a legacy one's.
fn holds_message(text: &[u8], sse: bool) -> Option<Era> {
    let era_of = |bytes: &[u8]| {
        let v = serde_json::from_slice::<serde_json::Value>(bytes).ok()?;
        let m = match v {
            serde_json::Value::Array(items) => items.into_iter().find(|m| m["jsonrpc"] == "2.0")?,
            m if m["jsonrpc"] == "2.0" => m,
            _ => return None,
        };
        let modern = m["result"]["supportedVersions"]
            .as_array()
            .is_some_and(|v| {
                v.iter()
                    .filter_map(|v| v.as_str())
                    .any(crate::config::generation::is_modern)
            });
        Some(if modern { Era::Modern } else { Era::Legacy })
    };
    if !sse {
        return era_of(text);
    }
    text.split(|b| *b == b'\n')
        .filter_map(|line| line.strip_prefix(b"data:"))
        .find_map(|data| era_of(data.trim_ascii()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ping_answer_is_a_json_rpc_message() {
        assert_eq!(
            holds_message(
                br#"{"jsonrpc":"2.0","id":"h","result":{"supportedVersions":["2025-11-25","2026-07-28"],"capabilities":{}}}"#,
                false
            ),
            Some(Era::Modern)
        );
        assert!(holds_message(br#"{"jsonrpc":"2.0","id":"h","result":{}}"#, false).is_some());
        assert!(holds_message(
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request: Missing session ID"}}"#,
            false
        ).is_some());
        assert!(holds_message(
            b"id: 1\ndata: \n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"h\",\"result\":{}}\n\n",
            true
        ).is_some());
        assert!(holds_message(b"<html>Bad Gateway</html>", false).is_none());
        assert!(holds_message(b"{\"ok\":true}", false).is_none());
        assert!(holds_message(b"event: message\ndata: {\"jsonrpc\":\"2.0\"", true).is_none());
    }
}
