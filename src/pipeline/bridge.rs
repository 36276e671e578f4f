//! The bridge stage (docs/protocol.md, "The bridge between generations"): a legacy client in front
//! of a 2026-07-28 server. Its request has been routed, authenticated, read, checked by
//! policy and limits like any other; here it becomes what the server understands, or is
//! answered by mcpgate where the server has nothing to say (`mcp::bridge` writes the
//! messages):
//!
//! - `initialize` is answered from the server's `server/discover`, with a sealed session id
//!   that holds what the server must be told of the client on every request;
//! - `ping`, `DELETE` and the client's notifications are answered here;
//! - every other request goes on with the 2026-07-28 `_meta` and headers;
//! - a GET stream is a `subscriptions/listen`;
//! - a call the server answers `input_required` is played to the client as the server's
//!   questions on the call's event stream; the client's answers (its POSTs) are handed to
//!   the waiting call (`runtime::waits`) and the call is retried with them.

use super::Ctx;
use super::forward::{self, Answer};
use super::respond::{self, Shaping};
use crate::config::generation::{Era, encode_header};
use crate::config::{Profile, Protocol, Upstream};
use crate::error::{GateError, code};
use crate::gateway::{Gateway, Live};
use crate::http::body::{BoxError, GateBody, UpstreamBody};
use crate::mcp::bridge::{self, Asks, Session};
use crate::mcp::jsonrpc::{MessageKind, Payload};
use crate::mcp::rounds::{CallerKey, may_ask};
use crate::mcp::transport::accept::Want;
use crate::mcp::transport::relay::{self, error_json};
use crate::mcp::transport::sse;
use crate::runtime::waits::{Owner, Waits};
use crate::upstream::encode::Outgoing;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use http_body::Frame;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use wire::fields::{FieldKind, Fields};

/// How many times one call may be asked for input before mcpgate gives up on it.
const MAX_ROUNDS: usize = 8;

/// A legacy request on its way to a 2026-07-28 server.
pub(super) struct Bridge {
    pub session: Session,
    /// Whether the request came in a session (it has an id to digest: [`Bridge::owner`]).
    in_session: bool,
    /// What the request's one message is.
    kind: MessageKind,
    method: Option<Box<str>>,
    id: Option<Box<str>>,
    /// What its `Mcp-Name` would say (`params.name`, `params.uri`).
    name: Option<Box<str>>,
}

const MCP_SESSION_ID: http::HeaderName = http::HeaderName::from_static("mcp-session-id");

/// Whether a legacy request must be bridged: its upstream speaks 2026-07-28. A session id
/// that does not open as a bridged one, or is another caller's: 404, the signal to
/// initialize anew. (An `auto` upstream whose era nobody knows yet shows it when it answers
/// a legacy `initialize`: [`refused_as_legacy`].)
pub(super) fn open(
    live: &Live,
    profile: &Profile,
    fields: &Fields,
    payload: Option<&Payload<'_>>,
    ctx: &Ctx<'_>,
) -> Result<Option<Bridge>, GateError> {
    let upstream = &profile.upstream;
    let state = live.upstream(upstream);
    if !state.bridges_legacy(upstream) {
        return Ok(None);
    }
    let message = match payload {
        Some(Payload::Batch(_)) => {
            return Err(GateError::InvalidRequest(
                "a batch cannot be bridged to a 2026-07-28 server: send its messages one by one"
                    .into(),
            ));
        }
        Some(Payload::Single(m)) => Some(m),
        None => None,
    };
    let caller = super::rounds::caller(ctx);
    let sealed = fields.get(FieldKind::McpSessionId);
    let session = match sealed {
        Some(sealed) => state
            .bridge_sealer
            .open(sealed)
            .and_then(|(_, inner)| Session::from_inner(&inner))
            .filter(|s| s.caller == caller)
            .ok_or(GateError::SessionNotFound)?,
        // `initialize` makes its session when it is answered.
        None => Session::sessionless(caller),
    };
    Ok(Some(Bridge {
        session,
        in_session: sealed.is_some(),
        kind: message.map_or(MessageKind::Request, |m| m.kind),
        method: message.and_then(|m| m.method()).map(Into::into),
        id: message.and_then(|m| m.id_text()).map(Into::into),
        name: message.and_then(|m| m.mcp_name.as_deref()).map(Into::into),
    }))
}

/// Whether a legacy `initialize` may meet a server of 2026-07-28 only: an `auto` HTTP
/// upstream not known to refuse legacy clients (one that speaks both serves them itself).
pub(super) fn may_refuse_legacy(live: &Live, upstream: &Upstream) -> bool {
    let state = live.upstream(upstream);
    // A stdio child runs each request's generation: its refusal is learnt alike.
    upstream.protocol == Protocol::Auto && state.era(upstream) != Some(Era::Legacy)
}

/// The upstream's answer to a legacy `initialize` when it may be a 2026-07-28 server:
/// `Ok(Some(answer))` to pass on; `Ok(None)` when the server refused the revision with
/// UnsupportedProtocolVersion (-32022) naming 2026-07-28 or later, which marks the endpoint
/// as of 2026-07-28 only, so the initialize (and its later ones) can be bridged. mcpgate sends such a server nothing the client
/// did not ask for, as it learns from the answer.
pub(super) async fn refused_as_legacy(
    live: &Live,
    upstream: &Upstream,
    answer: Answer,
) -> Result<Option<Answer>, GateError> {
    // A stdio child's refusal is answered 400 by its upstream, as an HTTP server's is.
    if answer.response.status() != StatusCode::BAD_REQUEST {
        return Ok(Some(answer));
    }
    let (parts, body) = answer.response.into_parts();
    let text = relay::json_text(
        GateBody::Upstream {
            body,
            deadline: answer.deadline,
        },
        None,
    )
    .await?;
    if bridge::refuses_legacy(&text) {
        let state = live.upstream(upstream);
        if let Some(stdio) = &state.stdio {
            stdio.set_modern_only();
            return Ok(None);
        }
        if let Some(i) = answer.endpoint.and_then(|e| state.named(&e)) {
            state.endpoints[i].set_modern_only();
            return Ok(None);
        }
    }
    let (_, rx) = tokio::sync::mpsc::channel(1);
    let body = UpstreamBody::Messages {
        first: Some(text),
        rx,
    };
    Ok(Some(Answer {
        response: Response::from_parts(parts, body),
        deadline: None,
        took: answer.took,
        endpoint: answer.endpoint,
    }))
}

/// The bridge of a legacy `initialize` (JSON-RPC id `id`), once its server showed it
/// speaks 2026-07-28.
pub(super) fn initializing(ctx: &Ctx<'_>, id: Option<&str>) -> Bridge {
    Bridge {
        session: Session::sessionless(super::rounds::caller(ctx)),
        in_session: false,
        kind: MessageKind::Request,
        method: Some("initialize".into()),
        id: id.map(Into::into),
        name: None,
    }
}

/// What the forward stage needs of the request to send it on: the request's own parts,
/// not its context, which the answer's stages write.
pub(super) struct Sending<'a> {
    pub live: &'a Arc<Live>,
    pub profile: &'a Arc<Profile>,
    pub shaping: Shaping,
    pub fields: &'a Fields,
    pub query: Option<&'a str>,
    pub forwarded_for: &'a HeaderValue,
    pub proto: &'static str,
    pub request_id: Arc<str>,
    pub trace: Option<crate::http::traceparent::Context>,
    pub timeout: std::time::Duration,
    pub body: Bytes,
    /// Who calls, for an upstream with `identity` (docs/oauth.md).
    pub who: Option<crate::upstream::identity::Who>,
}

impl Sending<'_> {
    /// The request as it goes upstream, for `caller` (a stdio child runs a process per
    /// caller): a 2026-07-28 POST of `method` with `body`.
    fn out<'s>(
        &'s self,
        caller: CallerKey,
        method: &'s str,
        body: Bytes,
        name: Option<String>,
    ) -> Outgoing<'s> {
        Outgoing {
            era: Era::Modern,
            // A 2026-07-28 stdio child: a process per caller, as for modern clients.
            caller: Some(caller),
            mcp_name: name,
            bridged: Some(method),
            ..self.outgoing(Method::POST, body)
        }
    }

    /// The request's own parts as they go upstream, with `method` and `body`; the bridge
    /// of each direction fills in the rest.
    pub(super) fn outgoing(&self, method: Method, body: Bytes) -> Outgoing<'_> {
        Outgoing {
            body_deadline: method != Method::GET && !self.shaping.long_lived(),
            method,
            timeout: self.timeout,
            query: self.query,
            fields: self.fields,
            body,
            forwarded_for: self.forwarded_for,
            proto: self.proto,
            request_id: &self.request_id,
            underscores: self.live.server.underscores_in_headers,
            trace: self.trace.as_ref(),
            pinned: None,
            era: Era::Legacy,
            caller: None,
            mcp_name: None,
            bridged: None,
            in_session: None,
            who: self.who.clone(),
            authorization: None,
        }
    }
}

/// Serves a bridged POST: answered here, or forwarded as 2026-07-28.
pub(super) async fn post(
    gw: &Gateway,
    bridge: Bridge,
    s: Sending<'_>,
    ctx: &mut Ctx<'_>,
) -> Result<Response<GateBody>, GateError> {
    let want = s.shaping.want;
    match bridge.kind {
        MessageKind::Response => {
            // The client's answer to a question it was asked on a call's stream.
            let id = bridge.id.as_deref().unwrap_or("null");
            return match gw.waits.answer(id, &bridge.owner(s.fields), s.body.clone()) {
                Ok(()) => Ok(respond::empty(StatusCode::ACCEPTED, &ctx.request_id)),
                Err(why) => {
                    tracing::info!(?why, "an answer no question of its session waits for");
                    Err(GateError::InvalidRequest(format!(
                        "no question of this session waits for an answer with id {id}"
                    )))
                }
            };
        }
        // `notifications/initialized`, `notifications/roots/list_changed`, a cancel: a
        // 2026-07-28 server has no session to tell (docs/protocol.md, the bridge).
        MessageKind::Notification => {
            return Ok(respond::empty(StatusCode::ACCEPTED, &ctx.request_id));
        }
        MessageKind::Request => {}
    }
    let id = bridge.id.as_deref().unwrap_or("null");
    let method = bridge.method.as_deref().unwrap_or("");
    match method {
        "initialize" => return initialize(bridge, s, ctx).await,
        "ping" => {
            let json = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#);
            return Ok(respond::own(json, want, &ctx.request_id));
        }
        "resources/subscribe" | "resources/unsubscribe" | "logging/setLevel" => {
            let owner = bridge.owner(s.fields);
            let json = kept(gw, owner, method, &s.body, s.timeout, &ctx.request_id).await?;
            return Ok(respond::own(json, want, &ctx.request_id));
        }
        _ => {}
    }
    let text = std::str::from_utf8(&s.body).map_err(|_| GateError::Parse("not UTF-8".into()))?;
    let level = match gw.legacy_sessions.any_level() {
        true => gw.legacy_sessions.level(&bridge.owner(s.fields)),
        false => None,
    };
    let meta = with_level(&bridge.session, level);
    let modern = bridge::modernize(text, &meta).ok_or_else(|| {
        GateError::InvalidRequest("a request bridged to 2026-07-28 needs object params".into())
    })?;
    let modern = Bytes::from(modern);
    let name = bridge
        .name
        .as_deref()
        .map(|n| encode_header(n).into_owned());
    let upstream = &s.profile.upstream;
    let answer = forward::send(
        s.live,
        upstream,
        s.out(bridge.session.caller, method, modern.clone(), name.clone()),
    )
    .await?;
    if !may_ask(method) {
        return respond::answer(gw, answer, s.shaping, upstream, ctx).await;
    }
    let method: Box<str> = method.into();
    asked(gw, bridge, s, (method, modern, name), answer, ctx).await
}

impl Bridge {
    /// Who may answer the questions asked in the request's session, and whose level and
    /// subscriptions it uses: a digest of its id (of `fields`); zeros without one. Made
    /// only where needed: most requests need none.
    fn owner(&self, fields: &Fields) -> Owner {
        match fields.get(FieldKind::McpSessionId) {
            Some(sealed) if self.in_session => Sha256::digest(sealed).into(),
            _ => [0; 32],
        }
    }
}

/// What a bridged request's `_meta` gets: the session's members, and the log level its
/// client set, if it did.
fn with_level<'a>(session: &'a Session, level: Option<&str>) -> std::borrow::Cow<'a, str> {
    match level {
        None => session.meta.as_str().into(),
        Some(l) => format!(
            r#"{},"io.modelcontextprotocol/logLevel":"{l}""#,
            session.meta
        )
        .into(),
    }
}

/// A session's `resources/subscribe`, `resources/unsubscribe` or `logging/setLevel`,
/// kept by mcpgate (`runtime::legacy_sessions`): a 2026-07-28 server takes these with each
/// request and each listen stream, not once per session. A change of subscriptions is
/// answered once the session's GET stream (if open) listens with it, at most `timeout`
/// later. The answer's JSON text.
async fn kept(
    gw: &Gateway,
    owner: Owner,
    method: &str,
    body: &[u8],
    timeout: std::time::Duration,
    request_id: &str,
) -> Result<String, GateError> {
    #[derive(serde::Deserialize)]
    struct Request<'a> {
        #[serde(borrow)]
        id: &'a RawValue,
        #[serde(default)]
        params: serde_json::Map<String, serde_json::Value>,
    }
    if owner == [0; 32] {
        return Err(GateError::InvalidRequest(format!(
            "`{method}` needs the session its initialize opened (Mcp-Session-Id)"
        )));
    }
    let request: Request = serde_json::from_slice(body)
        .map_err(|e| GateError::InvalidRequest(format!("{method}: {e}")))?;
    let sessions = &gw.legacy_sessions;
    let field = if method == "logging/setLevel" {
        "level"
    } else {
        "uri"
    };
    let value = request.params.get(field).and_then(|v| v.as_str());
    let mut done = match (method, value) {
        (_, None) => Err(format!("params.{field} must be a string")),
        ("logging/setLevel", Some(level)) => sessions.set_level(&owner, level).map(|()| None),
        ("resources/subscribe", Some(uri)) => sessions.subscribe(&owner, uri),
        (_, Some(uri)) => Ok(sessions.unsubscribe(&owner, uri)),
    };
    if let Ok(Some(mut change)) = done {
        let followed = change.followed.wait_for(|v| *v >= change.version);
        done = match tokio::time::timeout(timeout, followed).await {
            Ok(Ok(_)) => Ok(None),
            _ => {
                // The stream still listens with the subscriptions it had: so do they stay.
                if method == "resources/subscribe"
                    && let Some(uri) = value
                {
                    sessions.unsubscribe(&owner, uri);
                }
                Err("the server's listen stream did not take the change in time".into())
            }
        };
    }
    let id = request.id.get();
    Ok(match done {
        Ok(_) => format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#),
        Err(why) => error_json(
            Some(request.id),
            code::INVALID_PARAMS,
            &format!("Invalid params: {why}"),
            request_id,
        ),
    })
}

/// `initialize`, answered from the server's `server/discover` with a new sealed session.
async fn initialize(
    bridge: Bridge,
    s: Sending<'_>,
    ctx: &mut Ctx<'_>,
) -> Result<Response<GateBody>, GateError> {
    #[derive(serde::Deserialize)]
    struct Init<'a> {
        #[serde(borrow)]
        params: Option<&'a RawValue>,
    }
    let init: Init = serde_json::from_slice(&s.body)
        .map_err(|e| GateError::InvalidRequest(format!("initialize: {e}")))?;
    let session = Session::of_initialize(init.params.map(RawValue::get), bridge.session.caller)
        .map_err(GateError::InvalidRequest)?;
    let state = s.live.upstream(&s.profile.upstream);
    let sealed = state
        .bridge_sealer
        .seal(&[0; 8], &session.inner())
        .ok_or_else(|| {
            GateError::InvalidRequest(
                "the client's capabilities and info are too long to carry in a session id".into(),
            )
        })?;
    let body = Bytes::from(bridge::discover_request(&session));
    let answer = forward::send(
        s.live,
        &s.profile.upstream,
        s.out(session.caller, "server/discover", body, None),
    )
    .await?;
    ctx.upstream_ms = Some(answer.took.as_secs_f64() * 1000.0);
    let text = one_message(answer, "\"mcpgate-initialize\"").await?;
    let fresh = crate::mcp::tools_list::ToolFilter::new(s.live.config.clone(), s.profile.clone())
        .fresh_for();
    let narrowed = crate::mcp::discover::narrow(&text, "\"mcpgate-initialize\"", s.profile, fresh)
        .map_err(GateError::UpstreamBadResponse)?
        .unwrap_or(text);
    let id = bridge.id.as_deref().unwrap_or("null");
    let json = bridge::initialize_answer(id, &session, &narrowed)
        .map_err(GateError::UpstreamBadResponse)?;
    let mut r = respond::own(json, s.shaping.want, &ctx.request_id);
    let value = HeaderValue::from_str(&sealed).expect("a seal is URL-safe base64");
    r.headers_mut().insert(MCP_SESSION_ID, value);
    Ok(r)
}

/// The one JSON-RPC message answering `id` in an upstream's answer, JSON or SSE.
pub(super) async fn one_message(answer: Answer, id: &str) -> Result<String, GateError> {
    let (parts, body) = answer.response.into_parts();
    if parts.status != StatusCode::OK {
        return Err(GateError::UpstreamBadResponse(format!(
            "the upstream answered {} to a bridged request",
            parts.status
        )));
    }
    let body = GateBody::Upstream {
        body,
        deadline: answer.deadline,
    };
    let bytes = match wire::headval::body_format(&parts.headers) {
        wire::headval::BodyFormat::Sse => {
            let pending =
                smallvec::smallvec![RawValue::from_string(id.to_string()).expect("an id")];
            relay::sse_to_json(body, None, pending, false).await?.0
        }
        _ => relay::json_text(body, None).await?,
    };
    String::from_utf8(Vec::from(bytes))
        .map_err(|_| GateError::UpstreamBadResponse("the answer is not UTF-8".into()))
}

/// A call that may ask for input, answered: passed on as it is unless it asks, and then
/// played to the client (an event stream it accepts) or refused (JSON only).
async fn asked(
    gw: &Gateway,
    bridge: Bridge,
    s: Sending<'_>,
    (method, body, name): (Box<str>, Bytes, Option<String>),
    answer: Answer,
    ctx: &mut Ctx<'_>,
) -> Result<Response<GateBody>, GateError> {
    let want = s.shaping.want;
    let upstream = &s.profile.upstream;
    gw.metrics.observe_upstream(&upstream.name, answer.took);
    ctx.upstream_ms = Some(answer.took.as_secs_f64() * 1000.0);
    let id = bridge.id.clone().unwrap_or_else(|| "null".into());
    let format = wire::headval::body_format(answer.response.headers());
    let status = answer.response.status();
    if status != StatusCode::OK || format == wire::headval::BodyFormat::Other {
        return respond::upstream(gw, answer, s.shaping, &ctx.request_id).await;
    }
    let sse_client = matches!(want, Want::Sse | Want::Either);
    let first = if format == wire::headval::BodyFormat::Json || !sse_client {
        let text = one_message(answer, &id).await?;
        match bridge::asks(&text, &id).map_err(GateError::UpstreamBadResponse)? {
            None => return Ok(respond::own(text, want, &ctx.request_id)),
            Some(_) if !sse_client => {
                return Err(GateError::InputNotBridged(
                    "the server needs input from the client, which can only be asked on an event stream (Accept: text/event-stream)".into(),
                ));
            }
            Some(asks) => Round::Asks(asks),
        }
    } else {
        let (_, body) = answer.response.into_parts();
        Round::Stream(GateBody::Upstream {
            body,
            deadline: answer.deadline,
        })
    };
    let owner = bridge.owner(s.fields);
    let replay = Replay {
        parts: Parts::of(&s, &ctx.request_id, bridge.session),
        waits: gw.waits.clone(),
        method,
        name,
        body,
        client_id: id.clone(),
        id,
        owner,
        revoked: super::auth::Credential::hold(ctx.token, gw),
    };
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let driven = Driven {
        task: Some(Box::pin(replay.run(first, tx))),
        rx,
    };
    let mut r = Response::new(GateBody::Boxed(http_body_util::BodyExt::boxed_unsync(
        driven,
    )));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    respond::set_request_id(&mut r, &ctx.request_id);
    Ok(r)
}

/// The client's header fields, owned, for the retries of a call.
pub(super) fn copy_fields(fields: &Fields) -> Fields {
    let mut map = HeaderMap::new();
    for (_, name, value) in fields.iter() {
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(name),
            HeaderValue::from_bytes(value),
        ) {
            map.append(n, v);
        }
    }
    Fields::from_map(&map)
}

/// A round of a call: the upstream's stream still to read, its whole answer (JSON) to
/// send on, or what it asked.
enum Round {
    Stream(GateBody),
    Answer(String),
    Asks(Asks),
}

/// A call being played to its client between rounds: owned, as the answer's body outlives
/// the request's stages.
struct Replay {
    parts: Parts,
    waits: Arc<Waits>,
    method: Box<str>,
    name: Option<String>,
    /// The 2026-07-28 request, as last sent.
    body: Bytes,
    /// The call's id as the upstream knows it this round, as JSON text: the client's in
    /// the first round, a new one in each retry (a retry is a new request, and its id must
    /// differ from the first's: docs/protocol.md).
    id: Box<str>,
    /// The client's id of the call, which its answer and errors carry.
    client_id: Box<str>,
    owner: Owner,
    /// Ready when the caller's token is revoked or expires: the call ends where it is.
    revoked: Option<crate::runtime::streams::StreamWatch>,
}

/// A bridged request's parts, owned, for what mcpgate sends upstream once the request's
/// stages are over: a call's retries, a GET stream's new listens.
struct Parts {
    live: Arc<Live>,
    profile: Arc<Profile>,
    fields: Fields,
    forwarded_for: HeaderValue,
    proto: &'static str,
    request_id: String,
    timeout: std::time::Duration,
    session: Session,
    who: Option<crate::upstream::identity::Who>,
}

impl Parts {
    fn of(s: &Sending<'_>, request_id: &str, session: Session) -> Parts {
        Parts {
            live: s.live.clone(),
            profile: s.profile.clone(),
            fields: copy_fields(s.fields),
            forwarded_for: s.forwarded_for.clone(),
            proto: s.proto,
            request_id: request_id.to_string(),
            timeout: s.timeout,
            session,
            who: s.who.clone(),
        }
    }

    /// Sends a 2026-07-28 POST of `method` with `body` upstream; `long_lived` for a listen
    /// stream, whose body no deadline bounds.
    async fn send(
        &self,
        method: &str,
        body: Bytes,
        name: Option<String>,
        long_lived: bool,
    ) -> Result<Answer, GateError> {
        let out = Outgoing {
            method: Method::POST,
            timeout: self.timeout,
            body_deadline: !long_lived,
            query: None,
            fields: &self.fields,
            body,
            forwarded_for: &self.forwarded_for,
            proto: self.proto,
            request_id: &self.request_id,
            underscores: self.live.server.underscores_in_headers,
            trace: None,
            pinned: None,
            era: Era::Modern,
            caller: Some(self.session.caller),
            mcp_name: name,
            bridged: Some(method),
            in_session: None,
            who: self.who.clone(),
            authorization: None,
        };
        forward::send(&self.live, &self.profile.upstream, out).await
    }
}

/// How a round ended for the client.
enum Ending {
    /// The call's answer, sent.
    Answered,
    /// The client left.
    Gone,
    /// The call failed: this error goes to the client as the call's answer.
    Failed(i64, String),
}

impl Replay {
    async fn run(mut self, round: Round, tx: tokio::sync::mpsc::Sender<Bytes>) {
        let mut revoked = self.revoked.take();
        let ending = tokio::select! {
            e = self.rounds(round, &tx) => e,
            () = crate::runtime::streams::until_revoked(&mut revoked) => {
                tracing::info!("a bridged call ended: its caller's token was revoked or expired");
                Ending::Failed(code::UNAUTHORIZED, GateError::Revoked.to_string())
            }
        };
        if let Ending::Failed(code, message) = ending {
            let id = RawValue::from_string(self.client_id.to_string()).ok();
            let json = error_json(id.as_deref(), code, &message, &self.parts.request_id);
            let _ = tx.send(sse::encode_json(&json, None)).await;
        }
    }

    /// The call's rounds until it ends: its answer, its client gone, or a failure.
    async fn rounds(&mut self, mut round: Round, tx: &tokio::sync::mpsc::Sender<Bytes>) -> Ending {
        let mut rounds = 0;
        loop {
            let asks = match round {
                Round::Asks(asks) => asks,
                Round::Answer(text) => {
                    let text = match self.to_client(&text) {
                        Ok(t) => t,
                        Err(e) => break e,
                    };
                    let _ = tx.send(sse::encode_json(&text, None)).await;
                    break Ending::Answered;
                }
                Round::Stream(body) => match self.relay(body, tx).await {
                    Ok(Some(asks)) => asks,
                    Ok(None) => break Ending::Answered,
                    Err(e) => break e,
                },
            };
            rounds += 1;
            if rounds > MAX_ROUNDS {
                break Ending::Failed(
                    code::UPSTREAM,
                    format!(
                        "Upstream error: the server asked for input more than {MAX_ROUNDS} times"
                    ),
                );
            }
            let answers = match self.ask(&asks, tx).await {
                Ok(a) => a,
                Err(e) => break e,
            };
            let retry = match bridge::retry(
                std::str::from_utf8(&self.body).unwrap_or(""),
                &answers,
                asks.state.as_deref(),
            ) {
                Ok(r) => r,
                Err(e) => {
                    break Ending::Failed(code::INVALID_REQUEST, format!("Invalid request: {e}"));
                }
            };
            // A new request, with an id of its own.
            self.id = format!("\"mcpgate-retry-{}\"", self.waits.next()).into();
            let retry = match crate::mcp::to_legacy::renumbered(&retry, &self.id) {
                Ok(r) => r,
                Err(e) => {
                    break Ending::Failed(code::INVALID_REQUEST, format!("Invalid request: {e}"));
                }
            };
            self.body = Bytes::from(retry);
            round = match self.send().await {
                Ok(r) => r,
                Err(e) => break e,
            };
        }
    }

    /// The call's answer `text` (the upstream's) with the client's id.
    fn to_client(&self, text: &str) -> Result<String, Ending> {
        if *self.id == *self.client_id {
            return Ok(text.to_string());
        }
        crate::mcp::to_legacy::renumbered(text, &self.client_id)
            .map_err(|e| Ending::Failed(code::UPSTREAM, format!("Upstream error: {e}")))
    }

    /// Sends the call's retry upstream: the next round.
    async fn send(&self) -> Result<Round, Ending> {
        let failed = |e: GateError| Ending::Failed(e.rpc_code(), e.to_string());
        let answer = self
            .parts
            .send(&self.method, self.body.clone(), self.name.clone(), false)
            .await
            .map_err(failed)?;
        let format = wire::headval::body_format(answer.response.headers());
        if answer.response.status() != StatusCode::OK {
            return Err(Ending::Failed(
                code::UPSTREAM,
                format!(
                    "Upstream error: status {} to a retry",
                    answer.response.status()
                ),
            ));
        }
        if format == wire::headval::BodyFormat::Sse {
            let (_, body) = answer.response.into_parts();
            return Ok(Round::Stream(GateBody::Upstream {
                body,
                deadline: answer.deadline,
            }));
        }
        let text = one_message(answer, &self.id).await.map_err(failed)?;
        match bridge::asks(&text, &self.id) {
            Ok(Some(asks)) => Ok(Round::Asks(asks)),
            Ok(None) => Ok(Round::Answer(text)),
            Err(e) => Err(Ending::Failed(
                code::UPSTREAM,
                format!("Upstream error: {e}"),
            )),
        }
    }

    /// Passes the upstream's events to the client until the call's answer: `Some` when
    /// that asks for input (it is kept), `None` when it was sent on.
    async fn relay(
        &self,
        mut body: GateBody,
        tx: &tokio::sync::mpsc::Sender<Bytes>,
    ) -> Result<Option<Asks>, Ending> {
        use http_body_util::BodyExt;
        let mut decoder = sse::Decoder::new();
        let broke = || {
            Ending::Failed(
                code::UPSTREAM,
                "Upstream error: the stream broke off before the answer".into(),
            )
        };
        loop {
            let Some(frame) = body.frame().await else {
                return Err(broke());
            };
            let data = match frame {
                Ok(f) => match f.into_data() {
                    Ok(d) => d,
                    Err(_) => continue,
                },
                Err(e) if e.is::<crate::http::body::DeadlineExceeded>() => {
                    return Err(Ending::Failed(
                        code::UPSTREAM_TIMEOUT,
                        GateError::UpstreamTimeout.to_string(),
                    ));
                }
                Err(_) => return Err(broke()),
            };
            decoder.feed(&data);
            if decoder.pending() > crate::mcp::tools_list::MAX_REWRITE_BYTES {
                return Err(Ending::Failed(
                    code::UPSTREAM,
                    "Upstream error: SSE event too large".into(),
                ));
            }
            while let Some(ev) = decoder.next_event() {
                let (Some(data), raw) = (ev.data, ev.raw) else {
                    continue;
                };
                let answers_call = relay::response_ids(&data).contains(&&*self.id);
                if answers_call {
                    match bridge::asks(&data, &self.id) {
                        Ok(Some(asks)) => return Ok(Some(asks)),
                        Ok(None) => {
                            // A retry's answer goes to the client under its own id.
                            let raw = match *self.id == *self.client_id {
                                true => raw,
                                false => sse::encode_json(&self.to_client(&data)?, None),
                            };
                            tx.send(raw).await.map_err(|_| Ending::Gone)?;
                            return Ok(None);
                        }
                        Err(e) => {
                            return Err(Ending::Failed(
                                code::UPSTREAM,
                                format!("Upstream error: {e}"),
                            ));
                        }
                    }
                }
                tx.send(raw).await.map_err(|_| Ending::Gone)?;
            }
        }
    }

    /// Asks the client each of `asks`' questions on the stream and waits for all its
    /// answers (at most `[transport] input_timeout`): each key with the client's result.
    async fn ask(
        &self,
        asks: &Asks,
        tx: &tokio::sync::mpsc::Sender<Bytes>,
    ) -> Result<Vec<(String, Box<RawValue>)>, Ending> {
        let mut waiting = Vec::with_capacity(asks.requests.len());
        for (key, method, request) in &asks.requests {
            let capability = bridge::capability_of(method);
            if !self.parts.session.declares(capability) {
                return Err(Ending::Failed(
                    code::INVALID_REQUEST,
                    format!(
                        "Input required: the server asks for `{method}`, and the client did not declare `{capability}`"
                    ),
                ));
            }
            let qid = format!("\"mcpgate-{}\"", self.waits.next());
            let waiter = self.waits.ask(&qid, self.owner);
            let json = bridge::client_request(&qid, request);
            tx.send(sse::encode_json(&json, None))
                .await
                .map_err(|_| Ending::Gone)?;
            waiting.push((key.clone(), method.as_str(), waiter));
        }
        let limit = tokio::time::sleep(self.parts.live.config.input_timeout);
        tokio::pin!(limit);
        let mut answers = Vec::with_capacity(waiting.len());
        for (key, method, mut waiter) in waiting {
            let answer = tokio::select! {
                a = &mut waiter.answer => a.map_err(|_| Ending::Gone)?,
                _ = &mut limit => return Err(Ending::Failed(
                    code::UPSTREAM_TIMEOUT,
                    format!("Input required: the client did not answer the server's `{method}` in time"),
                )),
                _ = tx.closed() => return Err(Ending::Gone),
            };
            answers.push((key, result_of(&answer, method)?));
        }
        Ok(answers)
    }
}

/// The result of the client's answer (a JSON-RPC response it POSTed) to a question of
/// `method`; its error fails the call.
fn result_of(answer: &[u8], method: &str) -> Result<Box<RawValue>, Ending> {
    #[derive(serde::Deserialize)]
    struct Response {
        result: Option<Box<RawValue>>,
        error: Option<ErrorBody>,
    }
    #[derive(serde::Deserialize)]
    struct ErrorBody {
        #[serde(default)]
        message: String,
    }
    match serde_json::from_slice::<Response>(answer) {
        Ok(Response {
            result: Some(r), ..
        }) if r.get().trim_start().starts_with('{') => Ok(r),
        Ok(Response { error: Some(e), .. }) => Err(Ending::Failed(
            code::INVALID_REQUEST,
            format!(
                "Input required: the client refused the server's `{method}`: {}",
                e.message
            ),
        )),
        _ => Err(Ending::Failed(
            code::INVALID_REQUEST,
            format!("Input required: the client's answer to `{method}` holds no result object"),
        )),
    }
}

/// A body written by a task that runs as it is polled: dropped with it, when the client
/// leaves, so nothing of a call outlives its client.
pub(super) struct Driven {
    pub task: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    pub rx: tokio::sync::mpsc::Receiver<Bytes>,
}

impl http_body::Body for Driven {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(task) = self.task.as_mut()
            && task.as_mut().poll(cx).is_ready()
        {
            self.task = None;
        }
        self.rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

/// A bridged GET: the session's `subscriptions/listen` (to every list change and the
/// resources its client subscribed to), whose acknowledgement and closing answer the
/// legacy client does not get. When the client subscribes or unsubscribes, a listen with
/// the new set is opened, and the old one closed once the new one answers: a notification
/// may come twice across the change, none is lost.
pub(super) async fn stream(
    gw: &Gateway,
    bridge: Bridge,
    mut s: Sending<'_>,
    ctx: &mut Ctx<'_>,
) -> Result<Response<GateBody>, GateError> {
    s.shaping.legacy_stream = true;
    let upstream = &s.profile.upstream;
    let owner = bridge.owner(s.fields);
    let sessionless = owner == [0; 32];
    let mut subscribed = (!sessionless).then(|| gw.legacy_sessions.watch(&owner));
    let wanted = subscribed
        .as_mut()
        .map(|w| w.borrow_and_update().clone())
        .unwrap_or_default();
    let level = gw.legacy_sessions.level(&owner);
    let body = Bytes::from(bridge::listen_request(
        &with_level(&bridge.session, level),
        &wanted.uris,
    ));
    let answer = forward::send(
        s.live,
        upstream,
        s.out(bridge.session.caller, "subscriptions/listen", body, None),
    )
    .await?;
    let listening = answer.response.status() == StatusCode::OK
        && wire::headval::body_format(answer.response.headers()) == wire::headval::BodyFormat::Sse;
    let Some(subscribed) = subscribed.filter(|_| listening) else {
        return respond::answer(gw, answer, s.shaping, upstream, ctx).await;
    };
    gw.metrics.observe_upstream(&upstream.name, answer.took);
    ctx.upstream_ms = Some(answer.took.as_secs_f64() * 1000.0);
    gw.legacy_sessions.followed(&owner, wanted.version);
    let (_, first) = answer.response.into_parts();
    let relisten = Relisten {
        parts: Parts::of(&s, &ctx.request_id, bridge.session),
        sessions: gw.legacy_sessions.clone(),
        owner,
        subscribed,
    };
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let driven = Driven {
        task: Some(Box::pin(relisten.run(
            GateBody::Upstream {
                body: first,
                deadline: None,
            },
            tx,
        ))),
        rx,
    };
    let body = GateBody::Boxed(http_body_util::BodyExt::boxed_unsync(driven));
    Ok(respond::event_stream(gw, body, s.shaping, &ctx.request_id))
}

/// A bridged GET stream that follows its session's subscriptions: owned, as the answer's
/// body outlives the request's stages.
struct Relisten {
    parts: Parts,
    sessions: Arc<crate::runtime::legacy_sessions::LegacySessions>,
    owner: Owner,
    subscribed: crate::runtime::legacy_sessions::Subscribed,
}

impl Relisten {
    /// Passes the listen stream's whole events on (a switch to a new listen never cuts
    /// one), until the upstream ends it, the client leaves or the session ends.
    async fn run(mut self, mut current: GateBody, tx: tokio::sync::mpsc::Sender<Bytes>) {
        use http_body_util::BodyExt;
        let mut decoder = sse::Decoder::new();
        loop {
            tokio::select! {
                frame = current.frame() => {
                    let Some(Ok(frame)) = frame else { return };
                    let Ok(data) = frame.into_data() else { continue };
                    if !pass_events(&mut decoder, &data, &tx).await {
                        return;
                    }
                }
                changed = self.subscribed.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let wanted = self.subscribed.borrow_and_update().clone();
                    match self.listen(&wanted.uris).await {
                        Ok((next, next_decoder, early)) => {
                            // What the old stream had already sent goes on before it closes.
                            while let Some(Some(Ok(frame))) =
                                futures_util::FutureExt::now_or_never(current.frame())
                            {
                                if let Ok(data) = frame.into_data()
                                    && !pass_events(&mut decoder, &data, &tx).await
                                {
                                    return;
                                }
                            }
                            current = next;
                            decoder = next_decoder;
                            self.sessions.followed(&self.owner, wanted.version);
                            for ev in early {
                                if tx.send(ev).await.is_err() {
                                    return;
                                }
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "a bridged GET stream could not follow its subscriptions; the previous ones stay");
                        }
                    }
                }
                _ = tx.closed() => return,
            }
        }
    }

    /// A new listen stream for `uris`, read up to the server's acknowledgement (at most the
    /// upstream's timeout): from then on it sends what they name. With it, the decoder
    /// that read it and the events before the acknowledgement.
    async fn listen(
        &self,
        uris: &[Box<str>],
    ) -> Result<(GateBody, sse::Decoder, Vec<Bytes>), GateError> {
        let body = bridge::listen_request(
            &with_level(&self.parts.session, self.sessions.level(&self.owner)),
            uris,
        );
        let answer = self
            .parts
            .send("subscriptions/listen", Bytes::from(body), None, true)
            .await?;
        let format = wire::headval::body_format(answer.response.headers());
        if answer.response.status() != StatusCode::OK || format != wire::headval::BodyFormat::Sse {
            return Err(GateError::UpstreamBadResponse(format!(
                "the upstream answered {} to a subscriptions/listen",
                answer.response.status()
            )));
        }
        let (_, body) = answer.response.into_parts();
        let mut body = GateBody::Upstream {
            body,
            deadline: None,
        };
        let mut decoder = sse::Decoder::new();
        let mut early = Vec::new();
        let acknowledged = async {
            use http_body_util::BodyExt;
            loop {
                let Some(Ok(frame)) = body.frame().await else {
                    return false;
                };
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                decoder.feed(&data);
                while let Some(ev) = decoder.next_event() {
                    if ev.data.as_deref().is_some_and(bridge::is_acknowledgement) {
                        return true;
                    }
                    early.push(ev.raw);
                }
            }
        };
        match tokio::time::timeout(self.parts.timeout, acknowledged).await {
            Ok(true) => Ok((body, decoder, early)),
            Ok(false) => Err(GateError::UpstreamBadResponse(
                "the listen stream ended before its acknowledgement".into(),
            )),
            Err(_) => Err(GateError::UpstreamTimeout),
        }
    }
}

/// Sends each whole event `data` completes; `false` when the client has left.
async fn pass_events(
    decoder: &mut sse::Decoder,
    data: &[u8],
    tx: &tokio::sync::mpsc::Sender<Bytes>,
) -> bool {
    decoder.feed(data);
    while let Some(ev) = decoder.next_event() {
        if tx.send(ev.raw).await.is_err() {
            return false;
        }
    }
    true
}

/// A bridged DELETE: the server holds no session, so there is nothing to end upstream;
/// what mcpgate kept of it is forgotten (its GET stream ends).
pub(super) fn delete(
    gw: &Gateway,
    bridge: &Bridge,
    fields: &Fields,
    ctx: &Ctx<'_>,
) -> Response<GateBody> {
    gw.legacy_sessions.end(&bridge.owner(fields));
    respond::empty(StatusCode::OK, &ctx.request_id)
}
