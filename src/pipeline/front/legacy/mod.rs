//! The legacy front (docs/protocol.md, "The bridge between generations"): a legacy client in front
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
//!
//! mcpgate's own questions to a legacy client, whatever its server speaks, are asked here
//! too: a call's approval on the call's stream (`asking`), the call held there with what
//! the stages granted it and resumed once approved (`resume`).

mod asking;
mod listen;
mod questions;
mod resume;

pub(in crate::pipeline) use asking::{answer, ask, note_session, notes_elicitation};

pub(in crate::pipeline) use listen::stream;
use questions::asked;

use crate::config::generation::{Era, encode_header};
use crate::config::{Profile, Protocol, Upstream};
use crate::error::{GateError, code};
use crate::gateway::{Gateway, Live};
use crate::http::body::{GateBody, UpstreamBody};
use crate::mcp::bridge::{self, Asks, Session};
use crate::mcp::jsonrpc::{MessageKind, Payload};
use crate::mcp::rounds::{CallerKey, may_ask};
use crate::mcp::transport::accept::Want;
use crate::mcp::transport::relay::{self, error_json};
use crate::mcp::transport::sse;
use crate::pipeline::Ctx;
use crate::pipeline::forward::{self, Answer};
use crate::pipeline::respond::{self, Shaping};
use crate::runtime::waits::{Owner, Waits};
use crate::upstream::encode::Outgoing;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use wire::fields::{FieldKind, Fields};

/// How many times one call may be asked for input before mcpgate gives up on it.
const MAX_ROUNDS: usize = 8;

/// A legacy request on its way to a 2026-07-28 server.
pub(in crate::pipeline) struct Bridge {
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
pub(in crate::pipeline) fn open(
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
    let caller = crate::pipeline::rounds::caller(ctx);
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
pub(in crate::pipeline) fn may_refuse_legacy(live: &Live, upstream: &Upstream) -> bool {
    let state = live.upstream(upstream);
    // A stdio child runs each request's generation: its refusal is learnt alike.
    upstream.protocol == Protocol::Auto && state.era(upstream) != Some(Era::Legacy)
}

/// The upstream's answer to a legacy `initialize` when it may be a 2026-07-28 server:
/// `Ok(Some(answer))` to pass on; `Ok(None)` when the server refused the revision with
/// UnsupportedProtocolVersion (-32022) naming 2026-07-28 or later, which marks the endpoint
/// as of 2026-07-28 only, so the initialize (and its later ones) can be bridged. mcpgate sends such a server nothing the client
/// did not ask for, as it learns from the answer.
pub(in crate::pipeline) async fn refused_as_legacy(
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
pub(in crate::pipeline) fn initializing(ctx: &Ctx<'_>, id: Option<&str>) -> Bridge {
    Bridge {
        session: Session::sessionless(crate::pipeline::rounds::caller(ctx)),
        in_session: false,
        kind: MessageKind::Request,
        method: Some("initialize".into()),
        id: id.map(Into::into),
        name: None,
    }
}

/// What the forward stage needs of the request to send it on: the request's own parts,
/// not its context, which the answer's stages write.
pub(in crate::pipeline) struct Sending<'a> {
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
    pub(in crate::pipeline) fn outgoing(&self, method: Method, body: Bytes) -> Outgoing<'_> {
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
pub(in crate::pipeline) async fn post(
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
        &mut s.out(bridge.session.caller, method, modern.clone(), name.clone()),
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
        &mut s.out(session.caller, "server/discover", body, None),
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
pub(in crate::pipeline) async fn one_message(
    answer: Answer,
    id: &str,
) -> Result<String, GateError> {
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

/// The client's header fields, owned, for the retries of a call.
pub(in crate::pipeline) fn copy_fields(fields: &Fields) -> Fields {
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
        let mut out = Outgoing {
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
        forward::send(&self.live, &self.profile.upstream, &mut out).await
    }
}

/// A bridged DELETE: the server holds no session, so there is nothing to end upstream;
/// what mcpgate kept of it is forgotten (its GET stream ends).
pub(in crate::pipeline) fn delete(
    gw: &Gateway,
    bridge: &Bridge,
    fields: &Fields,
    ctx: &Ctx<'_>,
) -> Response<GateBody> {
    gw.legacy_sessions.end(&bridge.owner(fields));
    respond::empty(StatusCode::OK, &ctx.request_id)
}
