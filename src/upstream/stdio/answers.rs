//! What a stdio upstream answers, as its Streamable HTTP server would: a process's
//! messages as a JSON body or an event stream, its refusals, and errors of the pipe.

use super::*;

/// The answer to a call: an event stream, once its first event is in (so a process that
/// dies first is a 502, not an empty stream).
pub(super) async fn stream(
    mut rx: mpsc::Receiver<Result<Bytes, BodyError>>,
) -> Result<Response<UpstreamBody>, GateError> {
    let first = match rx.recv().await {
        Some(Ok(first)) => first,
        Some(Err(_)) | None => {
            return Err(GateError::UpstreamUnreachable(
                "the stdio server exited before answering".into(),
            ));
        }
    };
    let mut r = Response::new(UpstreamBody::Messages {
        first: Some(first),
        rx,
    });
    r.headers_mut().insert(http::header::CONTENT_TYPE, SSE);
    Ok(r)
}

/// A first event that is a JSON-RPC error the 2026-07-28 transport gives an HTTP status
/// of its own: 404 for -32601 (method not found), 400 for -32020…-32022 (header mismatch,
/// missing client capability, unsupported version); with the error as a JSON body.
pub(super) fn error_status(first: &Bytes) -> Option<(StatusCode, Bytes)> {
    let data = first.strip_prefix(b"event: message\ndata: ")?.trim_ascii();
    #[derive(serde::Deserialize)]
    struct Answer {
        error: Option<Code>,
    }
    #[derive(serde::Deserialize)]
    struct Code {
        code: i64,
    }
    let status = match serde_json::from_slice::<Answer>(data).ok()?.error?.code {
        -32601 => StatusCode::NOT_FOUND,
        -32022..=-32020 => StatusCode::BAD_REQUEST,
        _ => return None,
    };
    Some((status, Bytes::copy_from_slice(data)))
}

/// Sends `initialize` and waits for its answer's first event.
pub(super) async fn first_answer(
    child: &Arc<Child>,
    request: Value,
) -> Result<Response<UpstreamBody>, GateError> {
    // Its call belongs to no session yet: nothing can cancel it.
    match child.send(vec![request], 0).await.map_err(send_error)? {
        Some(rx) => stream(rx).await,
        None => Err(GateError::InvalidRequest(
            "initialize is a request: it needs an id".into(),
        )),
    }
}

/// The `result` of an `initialize` answer's first event, for the next clients of a
/// shared process.
pub(super) fn initialize_result(r: &Response<UpstreamBody>) -> Option<Value> {
    first_message(r)?.0.get("result").cloned()
}

/// The first message of an answer made here (its first event), and its text.
pub(super) fn first_message(r: &Response<UpstreamBody>) -> Option<(Value, &[u8])> {
    let UpstreamBody::Messages {
        first: Some(first), ..
    } = r.body()
    else {
        return None;
    };
    let data = first.strip_prefix(b"event: message\ndata: ")?.trim_ascii();
    Some((serde_json::from_slice::<Value>(data).ok()?, data))
}

/// The error message of an `initialize` answer that refused (its first event), as JSON.
pub(super) fn refusal(r: &Response<UpstreamBody>) -> Option<Bytes> {
    let (message, text) = first_message(r)?;
    message
        .get("error")
        .is_some()
        .then(|| Bytes::copy_from_slice(text))
}

/// An answer made here, whole: `body` is JSON (none when empty).
pub(super) fn whole(status: StatusCode, body: Bytes) -> Response<UpstreamBody> {
    let (_, rx) = mpsc::channel(1);
    let empty = body.is_empty();
    let mut r = Response::new(UpstreamBody::Messages {
        first: (!empty).then_some(body),
        rx,
    });
    *r.status_mut() = status;
    if !empty {
        r.headers_mut().insert(http::header::CONTENT_TYPE, JSON);
    }
    r
}

pub(super) fn empty(status: StatusCode) -> Response<UpstreamBody> {
    whole(status, Bytes::new())
}

/// A POST's messages. The pipeline has checked the body is JSON-RPC; it is read as values
/// here.
pub(super) fn messages(body: &Bytes) -> Result<Vec<Value>, GateError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(items)) => Ok(items),
        Ok(one) => Ok(vec![one]),
        Err(_) => Err(GateError::Parse("not JSON".into())),
    }
}

pub(super) fn send_error(e: SendError) -> GateError {
    match e {
        SendError::Gone => GateError::SessionNotFound,
        SendError::NotReading => {
            GateError::UpstreamUnreachable("the stdio server is not reading its input".into())
        }
    }
}
