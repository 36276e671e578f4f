//! The one event stream body every relay to a client uses ([`SseRelay`]): events in from
//! its inputs, each carried as its stream says, events out as each completes, `: keepalive`
//! comments while it is quiet, and its end.
//!
//! - **In.** An upstream's answer ([`Input::body`]); several streams merged as their
//!   events come, each that ends dropped and the stream over with the last
//!   ([`Input::merged`]); the events of a task driven as the stream is polled, so nothing
//!   of a call outlives its client ([`Input::task`]); or none, the stream carrying
//!   mcpgate's own notices only ([`Input::nothing`]). Events mcpgate sends first (a
//!   listen's acknowledgement) go before any of them.
//! - **Carried.** A stream's [`Carry`] sees each event first, with the input it came from:
//!   it may drop it or give it new data (a merged listen's members, a federated member's
//!   questions). Then the stream's own rules: tools/list events rewritten, the requests
//!   still owed an answer followed, a legacy client's events kept to what it can read.
//! - **Out.** As each event completes; `: keepalive` after the stream's keepalive period
//!   without a byte sent.
//! - **The end.** With its input; after the request deadline or an idle timeout; when the
//!   caller's credential is revoked or expires. Ended by a failure, the stream first
//!   answers every request still owed one with a JSON-RPC error event.

use super::sse;
use crate::error::code;
use crate::http::body::{BoxError, DeadlineExceeded, GateBody};
use crate::mcp::listen::Listening;
use crate::mcp::tools_list::{ListRewrite, MAX_REWRITE_BYTES};
use crate::runtime::streams::StreamWatch;
use crate::upstream::hints::HintStore;
use bytes::Bytes;
use http_body::{Body, Frame};
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

pub(super) fn looks_like_json(data: &str) -> bool {
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

/// What a stream does with each event of its inputs before its own rules: `None` drops
/// the event. `from` is the input's number (a merged stream's member).
pub trait Carry: Send {
    fn carry(&mut self, from: usize, ev: sse::Event) -> Option<sse::Event>;
}

/// A task writing a stream's events, driven as the stream is polled.
pub type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Where a stream's events come from.
pub struct Input {
    bodies: Vec<(usize, GateBody, sse::Decoder)>,
    task: Option<Task>,
    written: Option<(tokio::sync::mpsc::Receiver<Bytes>, sse::Decoder)>,
    /// Events mcpgate sends first, as they are.
    first: VecDeque<Bytes>,
    /// Several inputs: one that fails or ends is dropped, and the stream ends with the
    /// last.
    merged: bool,
    /// Without inputs the stream stays open (for mcpgate's own notices).
    open: bool,
    carry: Option<Box<dyn Carry>>,
}

impl Input {
    fn of(bodies: Vec<(usize, GateBody, sse::Decoder)>, merged: bool) -> Input {
        Input {
            bodies,
            task: None,
            written: None,
            first: VecDeque::new(),
            merged,
            open: false,
            carry: None,
        }
    }

    /// One event stream, such as an upstream's answer.
    pub fn body(body: GateBody) -> Input {
        Input::of(vec![(0, body, sse::Decoder::new())], false)
    }

    /// Several event streams, merged as their events come; `(number, stream)`, the number
    /// being what [`Carry`] is told. Stays open while any goes on; with none, stays open.
    pub fn merged(bodies: Vec<(usize, GateBody, sse::Decoder)>) -> Input {
        let open = bodies.is_empty();
        Input {
            open,
            ..Input::of(bodies, true)
        }
    }

    /// The events `task` writes to `rx`, the task driven as the stream is polled and
    /// dropped with it.
    pub fn task(task: Task, rx: tokio::sync::mpsc::Receiver<Bytes>) -> Input {
        Input {
            task: Some(task),
            written: Some((rx, sse::Decoder::new())),
            ..Input::of(Vec::new(), false)
        }
    }

    /// No events but mcpgate's own: the stream stays open.
    pub fn nothing() -> Input {
        Input::merged(Vec::new())
    }

    /// The same, sending `event` (an encoded event) before anything else.
    pub fn first(mut self, event: Bytes) -> Input {
        self.first.push_back(event);
        self
    }

    /// The same, each event carried by `carry` first.
    pub fn carried(mut self, carry: impl Carry + 'static) -> Input {
        self.carry = Some(Box::new(carry));
        self
    }

    /// The next piece of any input: its bytes and the input's number (and decoder's
    /// place), `Ready(None)` once the stream's inputs are over.
    fn poll_piece(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Piece, BoxError>>> {
        if let Some(task) = self.task.as_mut()
            && task.as_mut().poll(cx).is_ready()
        {
            self.task = None;
        }
        if let Some((rx, _)) = self.written.as_mut() {
            return match rx.poll_recv(cx) {
                Poll::Ready(Some(b)) => Poll::Ready(Some(Ok(Piece::Written(b)))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            };
        }
        let mut i = 0;
        while i < self.bodies.len() {
            match Pin::new(&mut self.bodies[i].1).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => return Poll::Ready(Some(Ok(Piece::Body(i, data)))),
                    Err(_) => continue,
                },
                Poll::Ready(Some(Err(e))) if !self.merged => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) if !self.merged => {
                    return Poll::Ready(None);
                }
                // A merged input that ends or fails is over; the others go on.
                Poll::Ready(_) => {
                    self.bodies.remove(i);
                    if self.bodies.is_empty() && !self.open {
                        return Poll::Ready(None);
                    }
                }
                Poll::Pending => i += 1,
            }
        }
        Poll::Pending
    }

    /// The decoder a piece is read with.
    fn decoder(&mut self, piece: &Piece) -> Option<(usize, &mut sse::Decoder)> {
        match piece {
            Piece::Body(i, _) => self.bodies.get_mut(*i).map(|(n, _, d)| (*n, d)),
            Piece::Written(_) => self.written.as_mut().map(|(_, d)| (0, d)),
        }
    }

    /// What is left in the decoders once the stream's inputs are over: an event the last
    /// input did not end.
    fn finish(&mut self) -> Option<Bytes> {
        let mut rest = None;
        for (_, _, d) in &mut self.bodies {
            rest = rest.or(d.finish());
        }
        if let Some((_, d)) = &mut self.written {
            rest = rest.or(d.finish());
        }
        rest
    }
}

impl From<GateBody> for Input {
    fn from(body: GateBody) -> Input {
        Input::body(body)
    }
}

/// A piece of an input: bytes of body number `.0`, or bytes a task wrote.
enum Piece {
    Body(usize, Bytes),
    Written(Bytes),
}

impl Piece {
    fn bytes(&self) -> &Bytes {
        match self {
            Piece::Body(_, b) | Piece::Written(b) => b,
        }
    }
}

enum Ending {
    Finished,
    Failed { code: i64, message: &'static str },
}

pub struct SseRelay {
    input: Input,
    list: Option<Box<ListRewrite>>,
    /// Request ids still owed an answer.
    pending: PendingIds,
    request_id: String,
    out: VecDeque<Bytes>,
    keepalive: Option<(Duration, Pin<Box<Sleep>>)>,
    idle: Option<(Duration, Pin<Box<Sleep>>)>,
    watch: Option<StreamWatch>,
    /// Told when the upstream announces a change of its tool list (annotation rules).
    tools_changed: Option<Arc<HintStore>>,
    /// A `subscriptions/listen` stream's opt-ins: mcpgate's own notices go on it only
    /// when opted into, tagged with its subscription id, and only after the upstream's
    /// acknowledgement (its first event).
    listening: Option<Listening>,
    /// Whether an event has been relayed.
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
        input: impl Into<Input>,
        list: Option<Box<ListRewrite>>,
        pending: PendingIds,
        request_id: String,
        timing: StreamTiming,
        watch: Option<StreamWatch>,
    ) -> Self {
        let now = Instant::now();
        SseRelay {
            keepalive: Some((
                timing.keepalive,
                Box::pin(tokio::time::sleep_until(now + timing.keepalive)),
            )),
            idle: timing
                .idle
                .map(|d| (d, Box::pin(tokio::time::sleep_until(now + d)))),
            watch,
            list,
            pending,
            request_id,
            ..SseRelay::passing(input.into())
        }
    }

    /// A stream of `input`'s events as its [`Carry`] makes them, and nothing else: no
    /// timers, no requests followed (a stream that another relays, or that its task keeps
    /// alive).
    pub fn passing(input: Input) -> Self {
        SseRelay {
            input,
            list: None,
            pending: PendingIds::new(),
            request_id: String::new(),
            out: VecDeque::new(),
            keepalive: None,
            idle: None,
            watch: None,
            tools_changed: None,
            listening: None,
            relayed: false,
            legacy: false,
            logs: None,
            done: false,
        }
    }

    /// As a body for the client.
    pub fn boxed(self) -> GateBody {
        GateBody::Boxed(http_body_util::BodyExt::boxed_unsync(self))
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
        if !self.pending.is_empty() {
            let answered = response_ids(data);
            self.pending.retain(|p| !answered.contains(&p.get().trim()));
        }
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

    /// The events of a piece of input, carried and judged, into `out`.
    fn take(&mut self, piece: Piece) {
        if let Some((d, timer)) = &mut self.idle {
            timer.as_mut().reset(Instant::now() + *d);
        }
        let Some((from, decoder)) = self.input.decoder(&piece) else {
            return;
        };
        decoder.feed(piece.bytes());
        loop {
            let Some((_, decoder)) = self.input.decoder(&piece) else {
                return;
            };
            let Some(ev) = decoder.next_event() else {
                break;
            };
            let ev = match self.input.carry.as_mut() {
                Some(c) => match c.carry(from, ev) {
                    Some(ev) => ev,
                    None => continue,
                },
                None => ev,
            };
            self.relayed = true;
            match self.event(ev) {
                Ok(bytes) if bytes.is_empty() => {}
                Ok(bytes) => self.out.push_back(bytes),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot filter a tools/list event; ending the stream");
                    self.end(Ending::Failed {
                        code: code::UPSTREAM,
                        message: "Upstream error: unreadable tools/list answer",
                    });
                    return;
                }
            }
        }
        let too_large = self
            .input
            .decoder(&piece)
            .is_some_and(|(_, d)| d.pending() > MAX_REWRITE_BYTES);
        if too_large {
            self.end(Ending::Failed {
                code: code::UPSTREAM,
                message: "Upstream error: SSE event too large",
            });
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

    /// While the inputs are quiet: the credential's end, mcpgate's own notices, the idle
    /// timeout, a keepalive. `true` when one of them gave the stream something to do.
    fn quiet(&mut self, cx: &mut Context<'_>) -> bool {
        if self
            .watch
            .as_mut()
            .is_some_and(|w| w.poll_revoked(cx).is_ready())
        {
            self.end(Ending::Failed {
                code: code::UNAUTHORIZED,
                message: "Unauthorized: the token was revoked or has expired",
            });
            return true;
        }
        // A change of what the client may list (docs/policy.md), between events; on a
        // listen stream, once the upstream has acknowledged it.
        let ready = self.listening.is_none() || self.relayed;
        if ready
            && let Some(Poll::Ready(Some(method))) = self.watch.as_mut().map(|w| w.poll_notice(cx))
        {
            let json = match &self.listening {
                None => Some(format!(r#"{{"jsonrpc":"2.0","method":"{method}"}}"#)),
                Some(l) => l.notice(method),
            };
            if let Some(json) = json {
                self.out.push_back(sse::encode_json(&json, None));
            }
            return true;
        }
        if let Some((_, timer)) = &mut self.idle
            && timer.as_mut().poll(cx).is_ready()
        {
            self.end(Ending::Failed {
                code: code::UPSTREAM_TIMEOUT,
                message: "Upstream timeout: the stream was idle too long",
            });
            return true;
        }
        if let Some((_, timer)) = &mut self.keepalive
            && timer.as_mut().poll(cx).is_ready()
        {
            // Only whole events are ever sent, so a comment cannot split one.
            self.out.push_back(Bytes::from_static(b": keepalive\n\n"));
            return true;
        }
        false
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
            if let Some(b) = this.input.first.pop_front() {
                this.relayed = true;
                this.out.push_back(b);
            }
            if let Some(b) = this.out.pop_front() {
                if let Some((d, timer)) = &mut this.keepalive {
                    let next = Instant::now() + *d;
                    timer.as_mut().reset(next);
                }
                return Poll::Ready(Some(Ok(Frame::data(b))));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match this.input.poll_piece(cx) {
                Poll::Ready(Some(Ok(piece))) => this.take(piece),
                Poll::Ready(None) => {
                    if let Some(rest) = this.input.finish() {
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
                    if !this.quiet(cx) {
                        return Poll::Pending;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
