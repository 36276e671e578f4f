//! Moving an upstream answer to the client in the format the client asked for:
//! - an event stream relayed as it comes: `super::events` (`SseRelay`, here too by name);
//! - `sse_to_json`: an SSE answer read until every request of the payload is answered, and
//!   returned as one JSON body (notifications in between are dropped and counted);
//! - `json_text`: a JSON answer read whole (for rewriting, or to frame it as one SSE event).

use super::events::looks_like_json;
pub use super::events::{PendingIds, SseRelay, StreamTiming, error_json, response_ids};
use super::sse;
use crate::error::GateError;
use crate::http::body::{BoxError, DeadlineExceeded, GateBody};
use crate::mcp::tools_list::{ListRewrite, MAX_REWRITE_BYTES};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use serde_json::value::RawValue;

fn body_error(e: BoxError) -> GateError {
    if e.is::<DeadlineExceeded>() {
        GateError::UpstreamTimeout
    } else {
        GateError::UpstreamUnreachable("connection closed before a complete answer".into())
    }
}

/// A JSON answer up to this size is read whole before it is sent on.
pub const WHOLE_JSON_BYTES: usize = 64 << 10;

/// A JSON answer passed on as it is. A client can only use a JSON body whole, so waiting
/// for a small one costs it nothing, and the gateway gains: the answer leaves with a
/// `Content-Length` in one write, and an upstream that fails mid-body gets a JSON-RPC
/// error instead of a cut-off body. Past `WHOLE_JSON_BYTES` the bytes read so far are sent
/// and the rest streams, so a large answer is never held in memory.
/// `Ok(body, true)`: the body is whole.
pub async fn json_answer(mut body: GateBody) -> Result<(GateBody, bool), GateError> {
    let mut first: Option<Bytes> = None;
    let mut more = bytes::BytesMut::new();
    loop {
        let Some(frame) = body.frame().await else {
            let whole = match first {
                Some(b) if more.is_empty() => b,
                Some(b) => {
                    let mut all = bytes::BytesMut::with_capacity(b.len() + more.len());
                    all.extend_from_slice(&b);
                    all.extend_from_slice(&more);
                    all.freeze()
                }
                None => Bytes::new(),
            };
            return Ok((GateBody::full(whole), true));
        };
        let Ok(data) = frame.map_err(body_error)?.into_data() else {
            continue;
        };
        if first.is_none() {
            first = Some(data);
        } else {
            more.extend_from_slice(&data);
        }
        let read = first.as_ref().map_or(0, Bytes::len) + more.len();
        if read > WHOLE_JSON_BYTES {
            let mut head = bytes::BytesMut::from(first.take().unwrap_or_default());
            head.extend_from_slice(&more);
            let body = GateBody::Continued {
                head: Some(head.freeze()),
                rest: Box::new(body),
            };
            return Ok((body, false));
        }
    }
}

/// Reads a JSON answer whole (at most `MAX_REWRITE_BYTES`) and applies the tools/list
/// rewrite if there is one.
pub async fn json_text(body: GateBody, list: Option<&ListRewrite>) -> Result<Bytes, GateError> {
    let bytes = Limited::new(body, MAX_REWRITE_BYTES)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                GateError::UpstreamBadResponse(
                    "the answer is too large to convert or filter".into(),
                )
            } else {
                body_error(e)
            }
        })?
        .to_bytes();
    let Some(list) = list else { return Ok(bytes) };
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| GateError::UpstreamBadResponse("the tools/list answer is not UTF-8".into()))?;
    match list.apply(text) {
        Ok(Some(new)) => Ok(Bytes::from(new)),
        Ok(None) => Ok(bytes),
        Err(e) => Err(GateError::UpstreamBadResponse(format!(
            "cannot filter the tools/list answer: {e}"
        ))),
    }
}

/// Reads an SSE answer until every id in `pending` has its response, and returns those
/// responses as JSON: one object, or an array when the request was a batch. Returns the
/// body and how many other messages (notifications, server requests) were dropped.
pub async fn sse_to_json(
    mut body: GateBody,
    list: Option<&ListRewrite>,
    mut pending: PendingIds,
    batch: bool,
) -> Result<(Bytes, usize), GateError> {
    let mut decoder = sse::Decoder::new();
    let mut answers: Vec<String> = Vec::new();
    let mut dropped = 0;
    while !pending.is_empty() {
        let Some(frame) = body.frame().await else {
            return Err(GateError::UpstreamBadResponse(
                "the upstream ended its stream before answering".into(),
            ));
        };
        let Ok(data) = frame.map_err(body_error)?.into_data() else {
            continue;
        };
        decoder.feed(&data);
        if decoder.pending() > MAX_REWRITE_BYTES {
            return Err(GateError::UpstreamBadResponse("SSE event too large".into()));
        }
        while let Some(ev) = decoder.next_event() {
            let Some(data) = ev.data.filter(|d| looks_like_json(d)) else {
                continue;
            };
            let ids = response_ids(&data);
            if ids.is_empty()
                || !ids
                    .iter()
                    .any(|id| pending.iter().any(|p| p.get().trim() == *id))
            {
                dropped += 1;
                continue;
            }
            pending.retain(|p| !ids.contains(&p.get().trim()));
            let data = match list.map(|l| l.apply(&data)).transpose() {
                Ok(Some(Some(new))) => new,
                Ok(_) => data,
                Err(e) => {
                    return Err(GateError::UpstreamBadResponse(format!(
                        "cannot filter the tools/list answer: {e}"
                    )));
                }
            };
            answers.push(data);
        }
    }
    let text = if batch || answers.len() != 1 {
        // Each answer may itself be an array (a batch answered in one event): flatten.
        let mut items = Vec::new();
        for a in &answers {
            if a.trim_start().starts_with('[') {
                let inner: Vec<&RawValue> = serde_json::from_str(a).map_err(|e| {
                    GateError::UpstreamBadResponse(format!("bad batch answer: {e}"))
                })?;
                items.extend(inner.into_iter().map(|r| r.get().to_string()));
            } else {
                items.push(a.clone());
            }
        }
        format!("[{}]", items.join(","))
    } else {
        answers.pop().expect("one answer")
    };
    Ok((Bytes::from(text), dropped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::hints::HintStore;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn response_ids_skip_requests_and_notifications() {
        assert_eq!(
            response_ids(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            ["1"]
        );
        assert_eq!(
            response_ids(r#"{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage"}"#),
            Vec::<&str>::new()
        );
        assert_eq!(
            response_ids(r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#),
            Vec::<&str>::new()
        );
        assert_eq!(
            response_ids(r#"[{"id":"a","result":{}},{"id": 2 ,"error":{}}]"#),
            ["\"a\"", "2"]
        );
        assert_eq!(response_ids("not json"), Vec::<&str>::new());
    }

    /// An upstream's tools/list_changed passing through marks its hints stale (the fetch
    /// task then reads the list again); other events do not.
    #[tokio::test]
    async fn the_upstreams_list_changed_marks_its_hints_stale() {
        let relay = |text: &'static str, store: Arc<HintStore>| {
            SseRelay::new(
                GateBody::full(text),
                None,
                Default::default(),
                "r".into(),
                StreamTiming {
                    keepalive: Duration::from_secs(60),
                    idle: None,
                },
                None,
            )
            .marking_stale(Some(store))
        };
        let quick = |store: Arc<HintStore>| async move {
            tokio::time::timeout(Duration::from_millis(50), store.stale())
                .await
                .is_ok()
        };
        let store = Arc::new(HintStore::default());
        let body = relay(
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"notifications/tools/list_changed\"}}\n\n",
            store.clone(),
        );
        body.collect().await.unwrap();
        assert!(
            !quick(store.clone()).await,
            "a mere mention is not the notification"
        );
        let body = relay(
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n",
            store.clone(),
        );
        let out = body.collect().await.unwrap().to_bytes();
        assert!(
            String::from_utf8_lossy(&out).contains("tools/list_changed"),
            "passed on"
        );
        assert!(quick(store).await);
    }

    #[test]
    fn error_events_are_well_formed() {
        let id = RawValue::from_string("7".into()).unwrap();
        let j = error_json(Some(&id), -32004, "m", "rid");
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["id"], 7);
        assert_eq!(v["error"]["data"]["request_id"], "rid");
    }
}
