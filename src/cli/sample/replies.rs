//! How the sample server replies: plain, JSON, or an event stream (with the requests it asks
//! of the client, or the notifications of a listen), and the body that carries them.

use super::*;

pub(super) fn plain(status: StatusCode, text: &'static str) -> Reply {
    let mut r = Response::new(SampleBody::Full(Some(Bytes::from_static(text.as_bytes()))));
    *r.status_mut() = status;
    r
}

pub(super) fn json_reply(status: StatusCode, v: &Value, session: Option<String>) -> Reply {
    let mut r = Response::new(SampleBody::Full(Some(Bytes::from(v.to_string()))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    add_session(&mut r, session);
    r
}

pub(super) fn add_session(r: &mut Reply, session: Option<String>) {
    if let Some(v) = session.and_then(|s| HeaderValue::from_str(&s).ok()) {
        r.headers_mut().insert("mcp-session-id", v);
    }
}

/// SSE like the TypeScript SDK: a priming event (an id and empty data), a log
/// notification before a tool result, then one `event: message` per response, each its own
/// write so a client sees them arrive one by one.
pub(super) fn sse_reply(
    state: &Arc<State>,
    answers: Vec<Value>,
    has_call: bool,
    delay: Option<Duration>,
    session: Option<String>,
) -> Reply {
    let (tx, rx) = mpsc::channel::<Bytes>(8);
    let base = state.counter.fetch_add(1, Ordering::Relaxed) * 100;
    let cancelled = state.cancelled.clone();
    tokio::spawn(async move {
        let mut n = base;
        let mut event = |data: String| {
            n += 1;
            Bytes::from(format!("event: message\nid: {n}\ndata: {data}\n\n"))
        };
        let _ = tx
            .send(Bytes::from(format!("id: {base}\ndata: \n\n")))
            .await;
        if has_call {
            let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "working"}});
            let _ = tx.send(event(note.to_string())).await;
        }
        if let Some(d) = delay {
            // The client going away shows as the channel closing while the tool "runs".
            tokio::select! {
                _ = tokio::time::sleep(d) => {}
                _ = tx.closed() => {
                    cancelled.fetch_add(1, Ordering::SeqCst);
                    return;
                }
            }
        }
        for a in answers {
            if tx.send(event(a.to_string())).await.is_err() {
                return;
            }
        }
    });
    let mut r = Response::new(SampleBody::Channel(rx));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    add_session(&mut r, session);
    r
}

/// A long-lived stream: `count` notifications `interval` apart, then silence, held open
/// until the client leaves. For GET (server-initiated messages) and
/// `subscriptions/listen` (2026-07-28), whose id `listen` is.
pub(super) fn notification_stream(state: &Arc<State>, listen: Option<Value>) -> Reply {
    let (count, interval) = state.opts.stream.expect("checked by the caller");
    let (tx, rx) = mpsc::channel::<Bytes>(8);
    tokio::spawn(async move {
        if let Some(id) = &listen {
            let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {"id": id}});
            let _ = tx
                .send(Bytes::from(format!("event: message\ndata: {ack}\n\n")))
                .await;
        }
        for n in 0..count {
            tokio::time::sleep(interval).await;
            let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": format!("tick {n}")}});
            if tx
                .send(Bytes::from(format!(
                    "event: message\nid: t{n}\ndata: {note}\n\n"
                )))
                .await
                .is_err()
            {
                return;
            }
        }
        tx.closed().await;
    });
    let mut r = Response::new(SampleBody::Channel(rx));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r
}

pub enum SampleBody {
    Full(Option<Bytes>),
    Channel(mpsc::Receiver<Bytes>),
}

impl Body for SampleBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            SampleBody::Full(b) => Poll::Ready(
                b.take()
                    .filter(|b| !b.is_empty())
                    .map(|b| Ok(Frame::data(b))),
            ),
            SampleBody::Channel(rx) => rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b)))),
        }
    }
}
