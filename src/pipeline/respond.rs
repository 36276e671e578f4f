//! Every answer leaves through here: errors mcpgate makes itself (one JSON-RPC envelope
//! per docs/behaviour.md, with the request id in `error.data`; one SSE frame when the client prefers
//! SSE), policy refusals (one error per request element), and upstream answers — headers
//! cleaned, tools/list filtered, and converted between JSON and SSE per the client's
//! `Accept` (docs/behaviour.md). Every other body streams through untouched.

use super::Ctx;
use super::auth::Credential;
use super::forward::Answer;
use crate::config::pins::PinMode;
use crate::config::{Profile, Upstream};
use crate::error::GateError;
use crate::gateway::Gateway;
use crate::gateway::Live;
use crate::http::body::GateBody;
use crate::mcp::jsonrpc::{MessageKind, Payload};
use crate::mcp::rounds::Issue;
use crate::mcp::tools_list::ListRewrite;
use crate::mcp::tools_list::ToolFilter;
use crate::mcp::transport::accept::Want;
use crate::mcp::transport::events::Input;
use crate::mcp::transport::relay::{self, SseRelay, StreamTiming};
use crate::mcp::transport::sse;
use crate::runtime::streams::StreamWatch;
use crate::upstream::session::EndpointId;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use serde_json::value::RawValue;
use std::sync::Arc;
use wire::headval::{BodyFormat, body_format};

/// A body mcpgate wrote itself: JSON, or that JSON as one SSE frame.
fn own_response(
    status: StatusCode,
    json: Vec<u8>,
    request_id: &str,
    sse_frame: bool,
) -> Response<GateBody> {
    let body = if sse_frame {
        GateBody::WholeAsStream(Some(sse::encode_json(
            &String::from_utf8_lossy(&json),
            None,
        )))
    } else {
        GateBody::full(json)
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    if sse_frame {
        set_sse_headers(r.headers_mut());
    } else {
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    set_request_id(&mut r, request_id);
    r
}

pub fn set_request_id<B>(r: &mut Response<B>, request_id: &str) {
    if let Ok(v) = HeaderValue::from_str(request_id) {
        r.headers_mut().insert(wire::headval::X_REQUEST_ID, v);
    }
}

/// docs/behaviour.md: what every SSE answer carries, so no proxy or cache in between buffers it.
fn set_sse_headers(h: &mut HeaderMap) {
    h.remove(header::CONTENT_LENGTH);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");
    h.insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
}

/// The answer for an error. `rpc_id` is the id of the single request it concerns, if known;
/// `sse_frame` when the client prefers SSE.
pub fn error(
    err: &GateError,
    rpc_id: Option<&RawValue>,
    request_id: &str,
    sse_frame: bool,
) -> Response<GateBody> {
    let json = match err {
        GateError::Refused { refusals, batch } => {
            crate::error::envelopes(refusals, *batch, request_id)
        }
        _ => crate::error::envelope(err, rpc_id, request_id),
    };
    // A 406 answer must be readable by a client that accepts neither type: JSON.
    let sse_frame = sse_frame
        && !matches!(
            err,
            GateError::NotAcceptable | GateError::StreamNotAcceptable
        );
    let mut r = own_response(err.status(), json, request_id, sse_frame);
    match err {
        GateError::Unauthorized => {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"mcpgate\""),
            );
        }
        GateError::OAuth(c) => {
            if let Some(v) = &c.www_authenticate {
                r.headers_mut().insert(header::WWW_AUTHENTICATE, v.clone());
            }
        }
        GateError::MethodNotAllowed => {
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST, GET, DELETE"));
        }
        _ => {}
    }
    if let Some(wait) = err.retry_after() {
        // Whole seconds, rounded up (RFC 9110 §10.2.3), never 0.
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    }
    r
}

/// A JSON-RPC answer mcpgate wrote itself (200), in the format the client prefers.
pub(super) fn own(json: String, want: Want, request_id: &str) -> Response<GateBody> {
    own_response(
        StatusCode::OK,
        json.into_bytes(),
        request_id,
        want == Want::Sse,
    )
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
    pub want: Want,
    /// The tools/list requests of the payload and the caller's filter.
    pub list: Option<Box<ListRewrite>>,
    /// Ids of the requests in the payload: each is owed an answer.
    pub pending: crate::mcp::transport::relay::PendingIds,
    pub batch: bool,
    pub timing: StreamTiming,
    /// The caller's credential: a stream ends when it expires, or when a reload revokes
    /// it.
    pub token: Option<Credential>,
    /// A GET or listen stream's profile: the list changes of that profile are sent on it.
    pub notices: Option<Arc<str>>,
    /// A `subscriptions/listen` stream's opt-ins (2026-07-28).
    pub listening: Option<crate::mcp::listen::Listening>,
    /// The upstream's tool hints, when mcpgate reads its lists (annotation rules,
    /// pinning): marked stale when the upstream announces a change, so it reads them again.
    pub hints: Option<Arc<crate::upstream::hints::HintStore>>,
    /// A legacy client's GET stream served by a `subscriptions/listen` (the bridge): the
    /// listen's acknowledgement and closing answer are not for it.
    pub legacy_stream: bool,
    /// A 2026-07-28 request to a legacy server (the bridge): the log messages its level
    /// does not ask for are dropped.
    pub logs: Option<crate::mcp::to_legacy::LogFloor>,
}

impl Shaping {
    /// For a request without a JSON-RPC body (GET, DELETE): its stream, if any, is
    /// long-lived.
    pub(super) fn plain(
        want: Want,
        live: &Live,
        upstream: &Upstream,
        token: Option<Credential>,
    ) -> Shaping {
        Shaping {
            want,
            list: None,
            pending: Default::default(),
            batch: false,
            timing: StreamTiming {
                keepalive: live.sse_keepalive,
                idle: Some(upstream.stream_idle_timeout),
            },
            token,
            notices: None,
            listening: None,
            hints: live
                .reads_lists(upstream)
                .then(|| live.upstream(upstream).hints.clone()),
            legacy_stream: false,
            logs: None,
        }
    }

    /// For a POST of `payload`: its tools/list answers are filtered for `profile`, each of
    /// its requests is owed an answer, and a subscription stream (2026-07-28) is
    /// long-lived, like a GET stream: an idle timeout governs it rather than the deadline.
    pub(super) fn for_payload(
        want: Want,
        live: &Live,
        profile: &Arc<Profile>,
        payload: &Payload<'_>,
        token: Option<Credential>,
    ) -> Shaping {
        let ids = payload.list_ids();
        let discover = payload.discover_id();
        // A federated member's answers are merged and judged by the federated profile.
        let list = (!profile.judged_above && (!ids.is_empty() || discover.is_some())).then(|| {
            let filter = ToolFilter::new(live.config.clone(), profile.clone());
            Box::new(ListRewrite {
                ids,
                discover,
                rounds: None,
                tasks: None,
                completes: None,
                filter: {
                    let state = live.upstream(&profile.upstream);
                    let filter = match live.judges_hints(&profile.upstream) {
                        true => filter.learning(state.hints.clone()),
                        false => filter,
                    };
                    match profile.upstream.pin {
                        PinMode::Off => filter,
                        _ => filter.pinning(state.pins.clone()),
                    }
                },
            })
        });
        let pending = payload
            .messages()
            .iter()
            .filter(|m| m.kind == MessageKind::Request)
            .filter_map(|m| m.id.map(ToOwned::to_owned))
            .collect();
        let long_lived =
            matches!(payload, Payload::Single(m) if m.method() == Some("subscriptions/listen"));
        Shaping {
            want,
            list,
            pending,
            batch: payload.is_batch(),
            timing: StreamTiming {
                keepalive: live.sse_keepalive,
                idle: long_lived.then_some(profile.upstream.stream_idle_timeout),
            },
            token,
            notices: None,
            listening: None,
            hints: live
                .reads_lists(&profile.upstream)
                .then(|| live.upstream(&profile.upstream).hints.clone()),
            legacy_stream: false,
            logs: None,
        }
    }

    /// Seals the `requestState` of an `input_required` answer to `issue`'s request, or
    /// the id of the task it makes.
    pub(super) fn seal_rounds(&mut self, live: &Live, profile: &Arc<Profile>, issue: Issue) {
        self.rewrite(live, profile).rounds = Some(issue);
    }

    /// Shows the task ids in the answers as the client's sealed ones.
    pub(super) fn show_tasks(
        &mut self,
        live: &Live,
        profile: &Arc<Profile>,
        shown: crate::mcp::task_ids::Shown,
    ) {
        self.rewrite(live, profile).tasks = Some(shown);
    }

    fn rewrite(&mut self, live: &Live, profile: &Arc<Profile>) -> &mut ListRewrite {
        self.list.get_or_insert_with(|| {
            Box::new(ListRewrite {
                ids: Vec::new(),
                discover: None,
                rounds: None,
                tasks: None,
                completes: None,
                filter: ToolFilter::new(live.config.clone(), profile.clone()),
            })
        })
    }

    /// Makes a legacy server's answer a 2026-07-28 result (the bridge).
    pub(super) fn complete(
        &mut self,
        live: &Live,
        profile: &Arc<Profile>,
        completes: crate::mcp::to_legacy::Completes,
    ) {
        self.rewrite(live, profile).completes = Some(completes);
    }

    /// Notes which endpoint answered, whose the sealed state says it is.
    pub(super) fn answered_by(&mut self, endpoint: Option<EndpointId>) {
        if let (Some(issue), Some(e)) =
            (self.list.as_mut().and_then(|l| l.rounds.as_mut()), endpoint)
        {
            issue.endpoint = e;
        }
    }

    /// Whether the answer may be a stream that outlives the request deadline.
    pub(super) fn long_lived(&self) -> bool {
        self.timing.idle.is_some()
    }
}

/// The respond stage for an upstream's answer: its time is counted, then it is shaped.
pub(super) fn answer<'a>(
    gw: &'a Gateway,
    answer: Answer,
    shaping: Shaping,
    upstream: &Upstream,
    ctx: &'a mut Ctx<'_>,
) -> impl Future<Output = Result<Response<GateBody>, GateError>> + 'a {
    gw.metrics.observe_upstream(&upstream.name, answer.took);
    ctx.upstream_ms = Some(answer.took.as_secs_f64() * 1000.0);
    // Not a future of its own around `upstream`'s: the answer and its shaping are moved
    // into one future, not two (docs/benchmarks.md).
    self::upstream(gw, answer, shaping, &ctx.request_id)
}

pub async fn upstream(
    gw: &Gateway,
    answer: Answer,
    shaping: Shaping,
    request_id: &str,
) -> Result<Response<GateBody>, GateError> {
    // The pool hands over the head without hop-by-hop fields.
    let (mut parts, incoming) = answer.response.into_parts();
    let body = GateBody::Upstream {
        body: incoming,
        deadline: answer.deadline,
    };
    let format = body_format(&parts.headers);

    if !shaping.pending.is_empty() && parts.status == StatusCode::OK && format == BodyFormat::Other
    {
        return Err(GateError::UpstreamBadResponse(
            "the upstream answered 200 with neither JSON nor an event stream".into(),
        ));
    }
    // Only a 200 carries JSON-RPC answers to filter or convert. Other statuses (202 for
    // notifications, bodiless whatever its `Content-Type`; 4xx such as 404 for an expired
    // session) and other formats are the upstream's own answer: pass them on.
    let passthrough = parts.status != StatusCode::OK || format == BodyFormat::Other;
    let converts = matches!(
        (format, shaping.want),
        (BodyFormat::Json, Want::Sse) | (BodyFormat::Sse, Want::Json)
    );
    let encoded = || {
        parts
            .headers
            .get(header::CONTENT_ENCODING)
            .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"))
    };
    if !passthrough && (converts || shaping.list.is_some()) && encoded() {
        // mcpgate never asks for compression; an encoded body cannot be read, so it cannot
        // be filtered or converted. Never let it through unchecked.
        return Err(GateError::UpstreamBadResponse(
            "the upstream compressed an answer that must be read".into(),
        ));
    }

    // A listen answered as JSON is a stream of messages, a line each, never whole: relayed
    // as it comes (as events to a client that takes them), never waited for.
    let lines = !passthrough && format == BodyFormat::Json && shaping.listening.is_some();
    let body = if passthrough {
        body
    } else if lines && shaping.want == Want::Json {
        parts.headers.remove(header::CONTENT_LENGTH);
        body
    } else if lines {
        parts.headers.remove(header::CONTENT_LENGTH);
        set_sse_headers(&mut parts.headers);
        relayed(
            gw,
            crate::mcp::transport::lines::json_lines_as_events(body),
            shaping,
            request_id,
        )
    } else if relays(format, &shaping) {
        set_sse_headers(&mut parts.headers);
        relayed(gw, body, shaping, request_id)
    } else {
        // Lent, not moved: what is read whole needs only to read the shaping.
        let mut shaping = shaping;
        shaped(gw, &mut parts.headers, body, format, &mut shaping).await?
    };
    let mut response = Response::from_parts(parts, body);
    set_request_id(&mut response, request_id);
    Ok(response)
}

/// Whether a 200's JSON-RPC answers go to the client as relayed events (an event stream
/// to a client that takes one, or that answers nothing the client waits for), rather than
/// read whole by [`shaped`].
fn relays(format: BodyFormat, shaping: &Shaping) -> bool {
    match (format, shaping.want) {
        (BodyFormat::Json, _) => false,
        (BodyFormat::Sse, Want::Json) => shaping.pending.is_empty(),
        _ => true,
    }
}

/// A 200's JSON-RPC answers read whole and given as the client wants them: JSON (its list
/// rewritten), JSON as one event, or events gathered into JSON.
async fn shaped(
    gw: &Gateway,
    headers: &mut http::HeaderMap,
    body: GateBody,
    format: BodyFormat,
    shaping: &mut Shaping,
) -> Result<GateBody, GateError> {
    Ok(match (format, shaping.want) {
        (BodyFormat::Json, Want::Json | Want::Either) => match shaping.list.as_deref() {
            Some(list) => {
                headers.remove(header::CONTENT_LENGTH);
                GateBody::full(relay::json_text(body, Some(list)).await?)
            }
            None => {
                let (body, whole) = relay::json_answer(body).await?;
                if whole {
                    // The server frames it by the bytes actually sent (the body's size).
                    headers.remove(header::CONTENT_LENGTH);
                }
                body
            }
        },
        (BodyFormat::Json, Want::Sse) => {
            let text = relay::json_text(body, shaping.list.as_deref()).await?;
            set_sse_headers(headers);
            GateBody::WholeAsStream(Some(sse::encode_json(
                &String::from_utf8_lossy(&text),
                None,
            )))
        }
        (BodyFormat::Sse, _) => {
            let pending = std::mem::take(&mut shaping.pending);
            let (text, dropped) =
                relay::sse_to_json(body, shaping.list.as_deref(), pending, shaping.batch).await?;
            if dropped > 0 {
                gw.metrics.sse_dropped.inc_by(dropped as u64);
                tracing::debug!(
                    dropped,
                    "messages without an answer dropped converting SSE to JSON"
                );
            }
            headers.remove(header::CONTENT_LENGTH);
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            GateBody::full(text)
        }
        // Passed through before it gets here (`upstream`); as it came, if it did.
        (BodyFormat::Other, _) => body,
    })
}

/// An event stream relayed to the client as `shaping` says: rewritten, kept alive, ended
/// with the caller's credential, carrying mcpgate's own notices.
fn relayed(gw: &Gateway, body: impl Into<Input>, shaping: Shaping, request_id: &str) -> GateBody {
    let token = shaping.token;
    let guard = gw.streams.register(
        token.filter(|t| t.configured).map(|t| t.key),
        shaping.notices,
    );
    let watch = StreamWatch::new(guard, token.and_then(|t| t.not_after));
    let relay = SseRelay::new(
        body,
        shaping.list,
        shaping.pending,
        request_id.to_string(),
        shaping.timing,
        Some(watch),
    )
    .marking_stale(shaping.hints)
    .listening(shaping.listening)
    .for_legacy(shaping.legacy_stream)
    .with_log_floor(shaping.logs);
    relay.boxed()
}

/// A 200 event stream of `input` (streams mcpgate opened, and what it sends first),
/// relayed as `shaping` says.
pub(super) fn event_stream(
    gw: &Gateway,
    input: Input,
    shaping: Shaping,
    request_id: &str,
) -> Response<GateBody> {
    let mut response = Response::new(relayed(gw, input, shaping, request_id));
    set_sse_headers(response.headers_mut());
    set_request_id(&mut response, request_id);
    response
}

/// A 200 event stream of the events `task` writes to `rx`, the task driven as the stream
/// is polled: dropped with it when the client leaves, so nothing of a call outlives its
/// client.
pub(super) fn written(
    task: crate::mcp::transport::events::Task,
    rx: tokio::sync::mpsc::Receiver<bytes::Bytes>,
    request_id: &str,
) -> Response<GateBody> {
    let mut response = Response::new(SseRelay::passing(Input::task(task, rx)).boxed());
    set_sse_headers(response.headers_mut());
    set_request_id(&mut response, request_id);
    response
}

/// A JWKS (the identity tokens' public keys, docs/oauth.md), cacheable for a minute.
pub(super) fn jwks(json: bytes::Bytes, request_id: &str) -> Response<GateBody> {
    let mut r = Response::new(GateBody::full(json));
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/jwk-set+json"),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=60"),
    );
    set_request_id(&mut r, request_id);
    r
}
