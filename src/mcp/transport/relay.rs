//! Moving an upstream answer to the client in the format the client asked for:
//! - `SseRelay`: an SSE answer forwarded event by event as each event completes (tools/list
//!   events rewritten), with `: keepalive` comments on idle streams, a request deadline or
//!   an idle timeout, and — when the upstream fails after the stream started — a final
//!   JSON-RPC error event for every request still owed an answer;
//! - `sse_to_json`: an SSE answer read until every request of the payload is answered, and
//!   returned as one JSON body (notifications in between are dropped and counted);
//! - `json_text`: a JSON answer read whole (for rewriting, or to frame it as one SSE event).

use super::sse;
use crate::error::{GateError, code};
use crate::http::body::{BoxError, DeadlineExceeded, GateBody};
use crate::mcp::listen::Listening;
use crate::mcp::tools_list::{ListRewrite, MAX_REWRITE_BYTES};
use crate::runtime::streams::StreamWatch;
use crate::upstream::hints::HintStore;
use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Limited};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// The ids of the requests an answer must still answer: usually one, kept inline.
pub type PendingIds = smallvec::SmallVec<[Box<RawValue>; 1]>;

/// The id and method of a JSON-RPC message, enough to tell a response from the rest.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Option<&'a RawValue>,
}

/// The ids of the responses in one JSON text (a message or a batch).
pub fn response_ids(text: &str) -> Vec<&str> {
    crate::mcp::jsonrpc::one_or_many::<Head>(text)
        .into_iter()
        .filter(|h| h.method.is_none())
        .filter_map(|h| h.id.map(|id| id.get().trim()))
        .collect()
}

fn looks_like_json(data: &str) -> bool {
    data.trim_start().starts_with(['{', '['])
}

/// An error envelope mcpgate writes into a stream or a body.
pub fn error_json(id: Option<&RawValue>, code: i64, message: &str, request_id: &str) -> String {
    let reason = crate::error::code::stream_reason(code);
    let bytes = crate::error::Envelope::new(id, code, message, reason, request_id).to_vec();
    String::from_utf8(bytes).expect("serde_json writes UTF-8")
}

/// Timers of a relayed stream.
#[derive(Debug, Clone, Copy)]
pub struct StreamTiming {
    /// Send `: keepalive` after this long without sending anything.
    pub keepalive: Duration,
    /// End the stream after this long without a byte from the upstream (long-lived streams).
    pub idle: Option<Duration>,
}

enum Ending {
    Finished,
    Failed { code: i64, message: &'static str },
}

pub struct SseRelay {
    inner: GateBody,
    decoder: sse::Decoder,
    list: Option<Box<ListRewrite>>,
    /// Request ids still owed an answer.
    pending: PendingIds,
    request_id: String,
    out: VecDeque<Bytes>,
    keepalive: Duration,
    keepalive_timer: Pin<Box<Sleep>>,
    idle: Option<(Duration, Pin<Box<Sleep>>)>,
    watch: Option<StreamWatch>,
    /// Told when the upstream announces a change of its tool list (annotation rules).
    tools_changed: Option<Arc<HintStore>>,
    /// A `subscriptions/listen` stream's opt-ins: mcpgate's own notices go on it only
    /// when opted into, tagged with its subscription id, and only after the upstream's
    /// acknowledgement (its first event).
    listening: Option<Listening>,
    /// Whether an event from the upstream has been relayed.
    relayed: bool,
    /// A `subscriptions/listen` serving a legacy client's GET stream (the bridge): its
    /// acknowledgement and closing answer are dropped.
    legacy: bool,
    /// A 2026-07-28 request served by a legacy server (the bridge): the log messages its
    /// level does not ask for are dropped.
    logs: Option<crate::mcp::to_legacy::LogFloor>,
    done: bool,
}

impl SseRelay {
    /// The same, marking `store` stale when the upstream says its tools changed.
    pub fn marking_stale(mut self, store: Option<Arc<HintStore>>) -> Self {
        self.tools_changed = store;
        self
    }

    /// The same, for a `subscriptions/listen` stream that opted into `listening`.
    pub fn listening(mut self, listening: Option<Listening>) -> Self {
        self.listening = listening;
        self
    }

    /// The same, serving a legacy client's GET stream from a `subscriptions/listen`.
    pub fn for_legacy(mut self, legacy: bool) -> Self {
        self.legacy = legacy;
        self
    }

    /// The same, dropping the log messages `logs` does not pass.
    pub fn with_log_floor(mut self, logs: Option<crate::mcp::to_legacy::LogFloor>) -> Self {
        self.logs = logs;
        self
    }

    pub fn new(
        inner: GateBody,
        list: Option<Box<ListRewrite>>,
        pending: PendingIds,
        request_id: String,
        timing: StreamTiming,
        watch: Option<StreamWatch>,
    ) -> Self {
        let now = Instant::now();
        SseRelay {
            inner,
            decoder: sse::Decoder::new(),
            list,
            pending,
            request_id,
            out: VecDeque::new(),
            keepalive: timing.keepalive,
            keepalive_timer: Box::pin(tokio::time::sleep_until(now + timing.keepalive)),
            idle: timing
                .idle
                .map(|d| (d, Box::pin(tokio::time::sleep_until(now + d)))),
            watch,
            tools_changed: None,
            listening: None,
            relayed: false,
            legacy: false,
            logs: None,
            done: false,
        }
    }

    fn event(&mut self, ev: sse::Event) -> Result<Bytes, String> {
        let Some(data) = ev.data.as_deref().filter(|d| looks_like_json(d)) else {
            return Ok(ev.raw);
        };
        if self.legacy && !crate::mcp::bridge::for_legacy_stream(data) {
            return Ok(Bytes::new());
        }
        if self.logs.is_some_and(|f| !f.passes(data)) {
            return Ok(Bytes::new());
        }
        if let Some(store) = &self.tools_changed
            && data.contains("notifications/tools/list_changed")
            && serde_json::from_str::<serde_json::Value>(data)
                .is_ok_and(|m| m["method"] == "notifications/tools/list_changed")
        {
            store.mark_stale();
        }
        let answered = response_ids(data);
        self.pending.retain(|p| !answered.contains(&p.get().trim()));
        match self
            .list
            .as_ref()
            .map(|l| l.apply(data))
            .transpose()?
            .flatten()
        {
            Some(new) => Ok(sse::encode_event(&ev, &new)),
            None => Ok(ev.raw),
        }
    }

    /// Ends the stream; on failure, first answers every pending request with an error.
    fn end(&mut self, ending: Ending) {
        self.done = true;
        if let Ending::Failed { code, message } = ending {
            for id in std::mem::take(&mut self.pending) {
                let json = error_json(Some(&id), code, message, &self.request_id);
                self.out.push_back(sse::encode_json(&json, None));
            }
        }
    }
}

impl Body for SseRelay {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if let Some(b) = this.out.pop_front() {
                let next = Instant::now() + this.keepalive;
                this.keepalive_timer.as_mut().reset(next);
                return Poll::Ready(Some(Ok(Frame::data(b))));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some((d, timer)) = &mut this.idle {
                        timer.as_mut().reset(Instant::now() + *d);
                    }
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    this.decoder.feed(&data);
                    while let Some(ev) = this.decoder.next_event() {
                        this.relayed = true;
                        match this.event(ev) {
                            Ok(bytes) if bytes.is_empty() => {}
                            Ok(bytes) => this.out.push_back(bytes),
                            Err(e) => {
                                tracing::warn!(error = %e, "cannot filter a tools/list event; ending the stream");
                                this.end(Ending::Failed {
                                    code: code::UPSTREAM,
                                    message: "Upstream error: unreadable tools/list answer",
                                });
                                break;
                            }
                        }
                    }
                    if !this.done && this.decoder.pending() > MAX_REWRITE_BYTES {
                        this.end(Ending::Failed {
                            code: code::UPSTREAM,
                            message: "Upstream error: SSE event too large",
                        });
                    }
                }
                Poll::Ready(None) => {
                    if let Some(rest) = this.decoder.finish() {
                        this.out.push_back(rest);
                    }
                    // A stream may end before its answer on purpose (the client resumes with
                    // Last-Event-ID), so a clean end is not an error.
                    this.end(Ending::Finished);
                }
                Poll::Ready(Some(Err(e))) => {
                    let ending = if e.is::<DeadlineExceeded>() {
                        Ending::Failed {
                            code: code::UPSTREAM_TIMEOUT,
                            message: "Upstream timeout: no complete answer within the deadline",
                        }
                    } else {
                        tracing::warn!(error = %e, "upstream stream failed");
                        Ending::Failed {
                            code: code::UPSTREAM,
                            message: "Upstream error: the stream broke off",
                        }
                    };
                    this.end(ending);
                }
                Poll::Pending => {
                    if this
                        .watch
                        .as_mut()
                        .is_some_and(|w| w.poll_revoked(cx).is_ready())
                    {
                        this.end(Ending::Failed {
                            code: code::UNAUTHORIZED,
                            message: "Unauthorized: the token was revoked or has expired",
                        });
                        continue;
                    }
                    // A change of what the client may list (docs/policy.md), between events; on a
                    // listen stream, once the upstream has acknowledged it.
                    let ready = this.listening.is_none() || this.relayed;
                    if ready
                        && let Some(Poll::Ready(Some(method))) =
                            this.watch.as_mut().map(|w| w.poll_notice(cx))
                    {
                        let json = match &this.listening {
                            None => Some(format!(r#"{{"jsonrpc":"2.0","method":"{method}"}}"#)),
                            Some(l) => l.notice(method),
                        };
                        if let Some(json) = json {
                            this.out.push_back(super::sse::encode_json(&json, None));
                        }
                        continue;
                    }
                    if let Some((_, timer)) = &mut this.idle {
                        if timer.as_mut().poll(cx).is_ready() {
                            this.end(Ending::Failed {
                                code: code::UPSTREAM_TIMEOUT,
                                message: "Upstream timeout: the stream was idle too long",
                            });
                            continue;
                        }
                    }
                    if this.keepalive_timer.as_mut().poll(cx).is_ready() {
                        // Only whole events are ever sent, so a comment cannot split one.
                        this.out.push_back(Bytes::from_static(b": keepalive\n\n"));
                        continue;
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

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
