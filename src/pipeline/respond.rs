//! Every answer leaves through here: errors mcpgate makes itself (one JSON-RPC envelope
//! per SPEC §6, with the request id in `error.data`), policy refusals (one error per
//! request element), and upstream answers (headers cleaned, tools/list filtered, every
//! other body streamed through untouched).

use super::forward::{Answer, strip_hop_by_hop};
use super::policy::Refusal;
use crate::body::{DeadlineExceeded, GateBody};
use crate::error::GateError;
use crate::tools_list::{self, MAX_REWRITE_BYTES, SseRewrite, ToolFilter};
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use serde::Serialize;
use serde_json::value::RawValue;

#[derive(Serialize)]
struct Envelope<'a> {
    jsonrpc: &'static str,
    id: Option<&'a RawValue>,
    error: ErrorObject<'a>,
}

#[derive(Serialize)]
struct ErrorObject<'a> {
    code: i64,
    message: &'a str,
    data: ErrorData<'a>,
}

#[derive(Serialize)]
struct ErrorData<'a> {
    request_id: &'a str,
}

fn envelope<'a>(
    id: Option<&'a RawValue>,
    code: i64,
    message: &'a str,
    request_id: &'a str,
) -> Envelope<'a> {
    Envelope {
        jsonrpc: "2.0",
        id,
        error: ErrorObject {
            code,
            message,
            data: ErrorData { request_id },
        },
    }
}

fn json_response(status: StatusCode, body: Vec<u8>, request_id: &str) -> Response<GateBody> {
    let mut r = Response::new(GateBody::full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    set_request_id(&mut r, request_id);
    r
}

pub fn set_request_id<B>(r: &mut Response<B>, request_id: &str) {
    if let Ok(v) = HeaderValue::from_str(request_id) {
        r.headers_mut().insert("x-request-id", v);
    }
}

/// The answer for an error. `rpc_id` is the id of the single request it concerns, if known.
pub fn error(err: &GateError, rpc_id: Option<&RawValue>, request_id: &str) -> Response<GateBody> {
    if let GateError::Refused { refusals, batch } = err {
        return refused(refusals, *batch, request_id);
    }
    let message = err.to_string();
    let body = serde_json::to_vec(&envelope(rpc_id, err.rpc_code(), &message, request_id))
        .expect("an envelope of strings and numbers serialises");
    let mut r = json_response(err.status(), body, request_id);
    match err {
        GateError::Unauthorized => {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"mcpgate\""),
            );
        }
        GateError::MethodNotAllowed => {
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST, GET, DELETE"));
        }
        _ => {}
    }
    r
}

/// HTTP 200 with one JSON-RPC error per refused request: an object for a single message,
/// an array for a batch.
fn refused(refusals: &[Refusal], batch: bool, request_id: &str) -> Response<GateBody> {
    let envelopes: Vec<Envelope> = refusals
        .iter()
        .map(|r| envelope(r.id.as_deref(), r.code, &r.message, request_id))
        .collect();
    let body = if batch || envelopes.len() != 1 {
        serde_json::to_vec(&envelopes)
    } else {
        serde_json::to_vec(&envelopes[0])
    }
    .expect("envelopes serialise");
    json_response(StatusCode::OK, body, request_id)
}

/// An answer with a status and no body (a swallowed notification).
pub fn empty(status: StatusCode, request_id: &str) -> Response<GateBody> {
    let mut r = Response::new(GateBody::Empty);
    *r.status_mut() = status;
    set_request_id(&mut r, request_id);
    r
}

/// What the upstream answer must go through before it reaches the client.
pub struct Shaping {
    /// Ids of tools/list requests in the payload, and the filter of the caller's profile.
    pub tools_list: Option<(Vec<Box<str>>, ToolFilter)>,
    /// The payload holds requests, so a 200 must carry JSON or SSE.
    pub expects_rpc: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Sse,
    Other,
}

fn format_of(headers: &http::HeaderMap) -> Format {
    let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return Format::Other;
    };
    let media = ct.split(';').next().unwrap_or("").trim();
    if media.eq_ignore_ascii_case("application/json") {
        Format::Json
    } else if media.eq_ignore_ascii_case("text/event-stream") {
        Format::Sse
    } else {
        Format::Other
    }
}

pub async fn upstream(
    answer: Answer,
    shaping: Shaping,
    request_id: &str,
) -> Result<Response<GateBody>, GateError> {
    let (mut parts, incoming) = answer.response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let body = GateBody::Upstream {
        body: incoming,
        deadline: answer.deadline,
    };
    let format = format_of(&parts.headers);
    let ok = parts.status.is_success();

    if shaping.expects_rpc && parts.status == StatusCode::OK && format == Format::Other {
        return Err(GateError::UpstreamBadResponse(
            "the upstream answered 200 with neither JSON nor an event stream".into(),
        ));
    }
    let encoded = parts
        .headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));

    let body = match shaping.tools_list {
        Some((ids, filter)) if ok && format != Format::Other => {
            if encoded {
                // A compressed list cannot be filtered; never let it through unfiltered.
                return Err(GateError::UpstreamBadResponse(
                    "the upstream compressed a tools/list answer".into(),
                ));
            }
            parts.headers.remove(header::CONTENT_LENGTH);
            match format {
                Format::Json => GateBody::full(rewrite_json(body, &ids, &filter).await?),
                _ => GateBody::Stream(BodyExt::boxed_unsync(SseRewrite::new(body, ids, filter))),
            }
        }
        _ => body,
    };
    let mut response = Response::from_parts(parts, body);
    set_request_id(&mut response, request_id);
    Ok(response)
}

async fn rewrite_json(
    body: GateBody,
    ids: &[Box<str>],
    filter: &ToolFilter,
) -> Result<Bytes, GateError> {
    let bytes = Limited::new(body, MAX_REWRITE_BYTES)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<DeadlineExceeded>() {
                GateError::UpstreamTimeout
            } else {
                GateError::UpstreamBadResponse(format!("reading the tools/list answer failed: {e}"))
            }
        })?
        .to_bytes();
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| GateError::UpstreamBadResponse("the tools/list answer is not UTF-8".into()))?;
    match tools_list::rewrite(text, ids, filter) {
        Ok(Some(new)) => Ok(Bytes::from(new)),
        Ok(None) => Ok(bytes),
        Err(e) => Err(GateError::UpstreamBadResponse(format!(
            "cannot filter the tools/list answer: {e}"
        ))),
    }
}
