//! The response body type of the gateway: either bytes mcpgate made, the upstream's body
//! streamed through untouched, or a rewriting stream (tools/list over SSE). An enum rather
//! than a boxed trait object so the common pass-through case costs no allocation.

use crate::http::h1::client::{BodyError, UpBody};
use crate::http::h1::stream::Stream;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body error raised when an upstream's answer outlives its request deadline.
#[derive(Debug, thiserror::Error)]
#[error("upstream deadline passed")]
pub struct DeadlineExceeded;

pub enum GateBody {
    Empty,
    Full(Option<Bytes>),
    /// Bytes sent as a stream of unknown length: an SSE answer never carries
    /// `Content-Length` (docs/behaviour.md), even when mcpgate wrote it whole.
    WholeAsStream(Option<Bytes>),
    /// The upstream's body, cut off with `DeadlineExceeded` if `deadline` fires first.
    Upstream {
        body: UpstreamBody,
        deadline: Option<crate::runtime::deadline::Deadline>,
    },
    /// A body that rewrites or watches another (tools/list over SSE, the audit tap).
    Boxed(UnsyncBoxBody<Bytes, BoxError>),
    /// Bytes already read from `rest`, sent first.
    Continued {
        head: Option<Bytes>,
        rest: Box<GateBody>,
    },
    /// A body that holds concurrency permits until it is done or dropped.
    Held(Box<GateBody>, Vec<tokio::sync::OwnedSemaphorePermit>),
}

/// What an upstream's answer is read from: its HTTP/1.1 connection, or, for a stdio
/// upstream, the bytes its bridge makes of the messages the process sends for the request.
pub enum UpstreamBody {
    H1(UpBody<Stream>),
    /// `first`, then what comes on `rx` until every sender is gone.
    Messages {
        first: Option<Bytes>,
        rx: tokio::sync::mpsc::Receiver<Result<Bytes, BodyError>>,
    },
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.get_mut() {
            UpstreamBody::H1(body) => Pin::new(body).poll_frame(cx),
            UpstreamBody::Messages { first, rx } => match first.take() {
                Some(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
                None => rx.poll_recv(cx).map(|m| m.map(|r| r.map(Frame::data))),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::H1(body) => body.is_end_stream(),
            UpstreamBody::Messages { first, rx } => {
                first.is_none() && rx.is_closed() && rx.is_empty()
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::H1(body) => body.size_hint(),
            UpstreamBody::Messages { first, rx } if rx.is_closed() && rx.is_empty() => {
                SizeHint::with_exact(first.as_ref().map_or(0, |b| b.len() as u64))
            }
            UpstreamBody::Messages { .. } => SizeHint::default(),
        }
    }
}

impl GateBody {
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        GateBody::Full(Some(bytes.into()))
    }
}

impl Body for GateBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            GateBody::Empty => Poll::Ready(None),
            GateBody::Full(bytes) | GateBody::WholeAsStream(bytes) => {
                Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b))))
            }
            GateBody::Upstream { body, deadline } => {
                if let Poll::Ready(frame) = Pin::new(body).poll_frame(cx) {
                    return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
                }
                if deadline
                    .as_mut()
                    .is_some_and(|d| Pin::new(d).poll(cx).is_ready())
                {
                    *deadline = None;
                    return Poll::Ready(Some(Err(Box::new(DeadlineExceeded))));
                }
                Poll::Pending
            }
            GateBody::Boxed(inner) => Pin::new(inner).poll_frame(cx),
            GateBody::Continued { head, rest } => match head.take() {
                Some(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
                None => Pin::new(rest.as_mut()).poll_frame(cx),
            },
            GateBody::Held(inner, _) => Pin::new(inner.as_mut()).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            GateBody::Empty => true,
            GateBody::Full(bytes) | GateBody::WholeAsStream(bytes) => bytes.is_none(),
            GateBody::Upstream { body, .. } => body.is_end_stream(),
            GateBody::Boxed(inner) => inner.is_end_stream(),
            GateBody::Continued { head, rest } => head.is_none() && rest.is_end_stream(),
            GateBody::Held(inner, _) => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            GateBody::Empty => SizeHint::with_exact(0),
            GateBody::Full(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            GateBody::WholeAsStream(_) => SizeHint::default(),
            GateBody::Upstream { body, .. } => body.size_hint(),
            GateBody::Boxed(inner) => inner.size_hint(),
            GateBody::Continued { head, rest } => {
                let rest = rest.size_hint();
                let n = head.as_ref().map_or(0, |b| b.len() as u64);
                // Upper bound first: `set_lower` asserts the lower bound stays under it.
                let mut hint = SizeHint::new();
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper + n);
                }
                hint.set_lower(rest.lower() + n);
                hint
            }
            GateBody::Held(inner, _) => inner.size_hint(),
        }
    }
}
