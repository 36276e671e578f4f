//! The legacy back, for a 2026-07-28 client in front of a legacy server (docs/protocol.md, "The
//! bridge between generations"). Its request has been routed, authenticated, read, checked
//! by policy and limits like any other modern one (its `requestState` opened by the rounds
//! stage); here it is served in a session mcpgate holds on the server for the caller and
//! client (`upstream::bridged`), opened with the first request that needs it:
//!
//! - `server/discover` is answered from that session's `initialize`;
//! - every other request goes in the session, in the revision the server chose; its
//!   result gets `resultType` (and, on lists and reads, `ttlMs` and `cacheScope`);
//! - a request the server sends during a call (elicitation, sampling, roots) ends the
//!   client's answer with `input_required`; the call is held (`runtime::held`) for at most
//!   `[transport] input_timeout`, and the client's retry hands the server its answer and
//!   gets the rest of the call. A call whose client left, or whose time is up, is
//!   cancelled upstream;
//! - `subscriptions/listen` is the session's GET stream, with `resources/subscribe` for
//!   each resource it names.
//!
//! `mcp::to_legacy` writes the messages.

mod held;
mod listen;

use crate::config::generation::{Era, MODERN};
use crate::config::{Profile, Protocol, Upstream};
use crate::error::GateError;
use crate::gateway::{Gateway, Live};
use crate::http::body::GateBody;
use crate::mcp::jsonrpc::{MessageKind, Payload};
use crate::mcp::rounds::may_ask;
use crate::mcp::to_legacy::{self as msg, ClientMeta, Completes, Listen, LogFloor, ServerRequest};
use crate::mcp::transport::accept::Want;
use crate::mcp::transport::sse;
use crate::pipeline::Ctx;
use crate::pipeline::forward::{self, Answer};
use crate::pipeline::front::legacy::{Sending, copy_fields, one_message};
use crate::pipeline::respond;
use crate::upstream::bridged::{Key, Opened, Sessions};
use crate::upstream::encode::{InSession, Outgoing};
use crate::upstream::registry::UpstreamState;
use crate::upstream::session::EndpointId;
use bytes::Bytes;
use held::{Call, drive, resume};
use http::{HeaderValue, Method, Response, StatusCode};
use http_body_util::BodyExt;
use std::sync::Arc;
use wire::fields::Fields;

/// The key of the one input request an `input_required` made here holds.
const INPUT: &str = "input";

/// A 2026-07-28 request on its way to a legacy server.
pub(in crate::pipeline) struct ToLegacy {
    key: Key,
    meta: ClientMeta,
    kind: MessageKind,
    method: Box<str>,
    /// The request's id, as JSON text.
    id: Box<str>,
}

/// Whether a modern request is bridged: `Now` when its upstream speaks only the legacy
/// protocol, as configured (`protocol = "legacy"`) or as it showed; `IfRefused` when no one
/// knows yet (`auto`): the request goes as it came, and if the server refuses it, a
/// `server/discover` shows whether it is legacy (mcpgate sends a server nothing before it
/// has refused a client's request).
pub(in crate::pipeline) enum Bridging {
    No,
    Now(ToLegacy),
    /// The request's kind, to make it a [`ToLegacy`] ([`ToLegacy::of`]) only if it is
    /// refused: what the client's `_meta` says is not read for requests that pass.
    IfRefused(MessageKind),
}

pub(in crate::pipeline) fn open(
    live: &Live,
    profile: &Profile,
    payload: &Payload<'_>,
    ctx: &Ctx<'_>,
) -> Result<Bridging, GateError> {
    let upstream = &profile.upstream;
    let state = live.upstream(upstream);
    let now = match (upstream.protocol, state.era(upstream)) {
        _ if legacy_only(state, upstream) => true,
        (Protocol::Auto, None) if state.stdio.is_none() => false,
        _ => return Ok(Bridging::No),
    };
    let m = match payload {
        Payload::Single(m) => m,
        Payload::Batch(_) if now => {
            return Err(GateError::InvalidRequest(
                "a batch cannot be bridged to a legacy server: send its messages one by one".into(),
            ));
        }
        Payload::Batch(_) => return Ok(Bridging::No),
    };
    Ok(match now {
        true => Bridging::Now(ToLegacy::of(m.kind, m.meta, ctx)?),
        false => Bridging::IfRefused(m.kind),
    })
}

/// Whether `upstream` speaks only the legacy protocol, as configured or as it showed: its
/// 2026-07-28 clients are bridged. (A stdio child left at `auto` runs each request's
/// generation.)
fn legacy_only(state: &UpstreamState, upstream: &Upstream) -> bool {
    match (upstream.protocol, state.era(upstream)) {
        (Protocol::Legacy, _) => true,
        (Protocol::Auto, Some(Era::Legacy)) => state.stdio.is_none(),
        _ => false,
    }
}

/// A request taken for a legacy one whose `_meta` names a protocol version, as only a
/// 2026-07-28 client's does, but one that is not 2026-07-28, to an upstream the bridge
/// serves: refused as a 2026-07-28 server refuses a revision it does not implement (400,
/// UnsupportedProtocolVersionError naming 2026-07-28), not sent into a session.
pub(in crate::pipeline) fn check_revision(
    live: &Live,
    profile: &Profile,
    payload: &Payload<'_>,
    fields: &Fields,
) -> Result<(), GateError> {
    let Payload::Single(m) = payload else {
        return Ok(());
    };
    let upstream = &profile.upstream;
    if !legacy_only(live.upstream(upstream), upstream)
        || fields.has(wire::fields::FieldKind::McpSessionId)
        || m.method() == Some("initialize")
    {
        return Ok(());
    }
    match m
        .meta
        .map(crate::mcp::era::envelope)
        .and_then(|e| e.version)
    {
        Some(v) if v != MODERN => Err(GateError::UnsupportedVersion {
            requested: v,
            supported: &[MODERN],
        }),
        _ => Ok(()),
    }
}

impl ToLegacy {
    /// The single message of `kind` whose `params._meta` is `meta` and whose method and id
    /// `ctx` noted. A revision other than 2026-07-28 is refused as a 2026-07-28 server
    /// refuses one it does not implement (400, UnsupportedProtocolVersionError).
    pub(in crate::pipeline) fn of(
        kind: MessageKind,
        meta: Option<&str>,
        ctx: &Ctx<'_>,
    ) -> Result<ToLegacy, GateError> {
        let meta = ClientMeta::of(meta);
        if let Some(v) = meta.version.as_deref().filter(|v| *v != MODERN) {
            return Err(GateError::UnsupportedVersion {
                requested: v.to_string(),
                supported: &[MODERN],
            });
        }
        let mut key = [0u8; 32];
        key[..16].copy_from_slice(&crate::pipeline::rounds::caller(ctx));
        key[16..].copy_from_slice(&meta.digest());
        Ok(ToLegacy {
            key,
            meta,
            kind,
            method: ctx.rpc_method.as_deref().unwrap_or("").into(),
            id: ctx
                .rpc_id
                .as_deref()
                .map_or("null", |i| i.get().trim())
                .into(),
        })
    }
}

/// After an `auto` upstream of unknown era refused a modern request (a 4xx): whether the
/// endpoint that refused it speaks only the legacy protocol, as its answer to a
/// `server/discover` shows (which also settles its era for the next requests).
pub(in crate::pipeline) async fn refused_as_modern(
    live: &Live,
    upstream: &Upstream,
    answer: &Answer,
) -> bool {
    if !answer.response.status().is_client_error() {
        return false;
    }
    let state = live.upstream(upstream);
    let Some(i) = answer.endpoint.and_then(|e| state.named(&e)) else {
        return false;
    };
    let probe = crate::upstream::encode::discover(upstream, &upstream.endpoints[i]);
    let probe = crate::upstream::encode::authorized(&probe, upstream);
    let era = crate::upstream::health::probe(state.endpoints[i].here(), &probe).await;
    if let Some(era) = era {
        state.endpoints[i].set_era(era);
    }
    era == Some(Era::Legacy)
}

impl Sending<'_> {
    /// A request in mcpgate's session `to`.
    fn in_session<'s>(&'s self, to: InSession<'s>, method: Method, body: Bytes) -> Outgoing<'s> {
        Outgoing {
            in_session: Some(to),
            ..self.outgoing(method, body)
        }
    }
}

/// A session of the caller's on the server: where it is (the endpoint and its place; none
/// for a stdio child) and what it is.
#[derive(Clone)]
struct Session {
    endpoint: Option<EndpointId>,
    at: Option<usize>,
    opened: Arc<Opened>,
}

impl Session {
    fn to(&self) -> InSession<'_> {
        InSession {
            endpoint: self.endpoint,
            session: self.opened.id.as_deref(),
            version: &self.opened.init.version,
        }
    }
}

/// Where the sessions of endpoint `at` (none: the stdio child's) are kept.
fn sessions(state: &UpstreamState, at: Option<usize>) -> Option<&Sessions> {
    match at {
        Some(i) => Some(&state.endpoints[i].bridged),
        None => state.stdio.as_ref().map(|s| &s.bridged),
    }
}

/// The caller's session on an endpoint the balancer picks (or the stdio child), opened if
/// it has none there.
async fn session(s: &Sending<'_>, b: &ToLegacy) -> Result<Session, GateError> {
    let upstream = &s.profile.upstream;
    let state = s.live.upstream(upstream);
    let at = match state.stdio {
        Some(_) => None,
        None => Some(
            state
                .pick(upstream, &[])
                .ok_or(GateError::NoHealthyEndpoint)?,
        ),
    };
    let endpoint = at.map(|i| state.endpoints[i].id);
    let table = sessions(state, at).ok_or(GateError::NoHealthyEndpoint)?;
    let (slot, evicted) = table.slot(&b.key);
    if let Some(gone) = evicted {
        end_session(s.live.clone(), s.profile.clone(), endpoint, gone);
    }
    let opened = slot
        .get_or_try_init(|| initialize(s, endpoint, &b.meta))
        .await?
        .clone();
    Ok(Session {
        endpoint,
        at,
        opened,
    })
}

/// Opens a session on `endpoint` for a client of `meta`: `initialize`, then
/// `notifications/initialized`.
async fn initialize(
    s: &Sending<'_>,
    endpoint: Option<EndpointId>,
    meta: &ClientMeta,
) -> Result<Arc<Opened>, GateError> {
    let upstream = &s.profile.upstream;
    let to = InSession {
        endpoint,
        session: None,
        version: msg::LEGACY_VERSION,
    };
    let body = Bytes::from(msg::initialize_request(meta));
    let answer = forward::send(s.live, upstream, &mut s.in_session(to, Method::POST, body)).await?;
    let id = answer
        .response
        .headers()
        .get("mcp-session-id")
        .map(|v| Box::<[u8]>::from(v.as_bytes()));
    let text = one_message(answer, "\"mcpgate-bridge-init\"").await?;
    let init = msg::initialized(&text).map_err(GateError::UpstreamBadResponse)?;
    let opened = Opened { id, init };
    let to = InSession {
        endpoint,
        session: opened.id.as_deref(),
        version: &opened.init.version,
    };
    let body = Bytes::from_static(msg::INITIALIZED.as_bytes());
    let answer = forward::send(s.live, upstream, &mut s.in_session(to, Method::POST, body)).await?;
    drain(answer).await;
    if msg::declares_logging(&opened.init.result) {
        // Each 2026-07-28 request names its own level, which mcpgate applies to what the
        // server sends: the session's is the lowest. A server that refuses it logs as it
        // would anyway.
        let to = InSession {
            endpoint,
            session: opened.id.as_deref(),
            version: &opened.init.version,
        };
        let body = Bytes::from_static(msg::SET_LEVEL.as_bytes());
        let answer =
            forward::send(s.live, upstream, &mut s.in_session(to, Method::POST, body)).await?;
        drain(answer).await;
    }
    Ok(Arc::new(opened))
}

/// Reads an answer nobody needs to its end, so its connection goes back to the pool.
async fn drain(answer: Answer) {
    let mut body = answer.response.into_body();
    while let Some(Ok(_)) = body.frame().await {}
}

/// Ends a session let go to make room (best effort: the server forgets it either way).
fn end_session(
    live: Arc<Live>,
    profile: Arc<Profile>,
    endpoint: Option<EndpointId>,
    gone: Arc<Opened>,
) {
    let Some(id) = gone.id.clone() else { return };
    tokio::spawn(async move {
        let fields = Fields::default();
        let forwarded_for = HeaderValue::from_static("-");
        let mut out = own_request(
            &live,
            &fields,
            &forwarded_for,
            InSession {
                endpoint,
                session: Some(&id),
                version: &gone.init.version,
            },
            Method::DELETE,
            Bytes::new(),
        );
        if let Ok(answer) = forward::send(&live, &profile.upstream, &mut out).await {
            drain(answer).await;
        }
    });
}

/// A request of mcpgate's own in a session (ending it, cancelling a call).
fn own_request<'a>(
    live: &'a Live,
    fields: &'a Fields,
    forwarded_for: &'a HeaderValue,
    to: InSession<'a>,
    method: Method,
    body: Bytes,
) -> Outgoing<'a> {
    Outgoing {
        method,
        body_deadline: true,
        query: None,
        fields,
        body,
        forwarded_for,
        timeout: std::time::Duration::from_secs(10),
        proto: "http",
        request_id: "mcpgate",
        underscores: live.server.underscores_in_headers,
        trace: None,
        pinned: None,
        era: Era::Legacy,
        caller: None,
        mcp_name: None,
        bridged: None,
        in_session: Some(to),
        who: None,
        authorization: None,
    }
}

/// Sends `body` in the caller's session; a session the server no longer knows (404) is
/// opened anew and the request sent again, once (a 404 means it did not act on it).
async fn send(
    s: &Sending<'_>,
    b: &ToLegacy,
    method: Method,
    body: Bytes,
) -> Result<(Answer, Session), GateError> {
    let upstream = &s.profile.upstream;
    // What the 2026-07-28 envelope told is the session's now; a server that knows both
    // generations refuses it inside a legacy session.
    let body = match std::str::from_utf8(&body).map(msg::without_envelope) {
        Ok(std::borrow::Cow::Owned(stripped)) => Bytes::from(stripped),
        _ => body,
    };
    let mut tries = 0;
    loop {
        tries += 1;
        let session = session(s, b).await?;
        let sent = forward::send(
            s.live,
            upstream,
            &mut s.in_session(session.to(), method.clone(), body.clone()),
        )
        .await;
        let gone = match &sent {
            Err(GateError::SessionNotFound) => true,
            Ok(a) => a.response.status() == StatusCode::NOT_FOUND && session.opened.id.is_some(),
            Err(_) => false,
        };
        if gone {
            if let Some(table) = sessions(s.live.upstream(upstream), session.at) {
                table.forget(&b.key, &session.opened);
            }
            if tries < 2 {
                continue;
            }
        }
        return sent.map(|a| (a, session));
    }
}

/// Serves a bridged POST.
pub(in crate::pipeline) async fn post(
    gw: &Gateway,
    b: ToLegacy,
    mut s: Sending<'_>,
    ctx: &mut Ctx<'_>,
) -> Result<Response<GateBody>, GateError> {
    match b.kind {
        MessageKind::Response => {
            return Err(GateError::InvalidRequest(
                "a 2026-07-28 client answers a server's request in its retry, not in a response"
                    .into(),
            ));
        }
        MessageKind::Notification => {
            let body = std::mem::take(&mut s.body);
            let (answer, _) = send(&s, &b, Method::POST, body).await?;
            drain(answer).await;
            return Ok(respond::empty(StatusCode::ACCEPTED, &ctx.request_id));
        }
        MessageKind::Request => {}
    }
    match &*b.method {
        "server/discover" => return discover(b, s, ctx).await,
        "subscriptions/listen" => return listen::listen(gw, b, s, ctx).await,
        m if msg::removed(m) => {
            return Err(GateError::MethodNotFound(format!(
                "`{m}` is not a method of 2026-07-28"
            )));
        }
        m if !msg::defined(m) => return undefined(b, s, ctx).await,
        _ => {}
    }
    let held = match may_ask(&b.method) {
        true => msg::retry(&s.body).map_err(GateError::InvalidRequest)?,
        false => None,
    };
    let fresh = crate::mcp::tools_list::ToolFilter::new(s.live.config.clone(), s.profile.clone())
        .fresh_for();
    let marks = &s.live.upstream(&s.profile.upstream).bridge_params;
    if &*b.method == "tools/call" {
        // A 2026-07-28 server checks a call's `Mcp-Param-*` headers; a legacy one never
        // sees them, so mcpgate checks them for it (against the marks of the lists it saw).
        check_params(marks, s.fields, &s.body)?;
    }
    let completes = Completes {
        id: b.id.clone(),
        ttl_ms: msg::cacheable(&b.method).then_some(fresh.as_millis() as u64),
        learn: (&*b.method == "tools/list").then(|| marks.clone()),
    };
    s.shaping.complete(s.live, s.profile, completes);
    s.shaping.logs = Some(LogFloor(b.meta.level));
    if let Some(retry) = held {
        return resume(gw, b, s, retry, ctx).await;
    }
    let body = s.body.clone();
    let (answer, session) = send(&s, &b, Method::POST, body).await?;
    let upstream = &s.profile.upstream;
    let streams = answer.response.status() == StatusCode::OK
        && wire::headval::body_format(answer.response.headers()) == wire::headval::BodyFormat::Sse;
    if !may_ask(&b.method) || !streams {
        s.shaping.answered_by(session.endpoint);
        return respond::answer(gw, answer, s.shaping, upstream, ctx).await;
    }
    gw.metrics.observe_upstream(&upstream.name, answer.took);
    ctx.upstream_ms = Some(answer.took.as_secs_f64() * 1000.0);
    s.shaping.answered_by(session.endpoint);
    let (_, body) = answer.response.into_parts();
    let call = Call {
        live: s.live.clone(),
        profile: s.profile.clone(),
        fields: copy_fields(s.fields),
        forwarded_for: s.forwarded_for.clone(),
        key: b.key,
        session,
        up_id: b.id.clone(),
        request: s.body.clone(),
        body: Some(GateBody::Upstream {
            body,
            deadline: answer.deadline,
        }),
        decoder: sse::Decoder::new(),
        client: b.meta,
    };
    drive(gw, call, b.id, s, &ctx.request_id).await
}

/// Checks a bridged `tools/call`'s `Mcp-Param-*` headers against its arguments.
fn check_params(
    marks: &crate::upstream::stdio::params::ParamHeaders,
    fields: &Fields,
    body: &[u8],
) -> Result<(), GateError> {
    if !marks.any() {
        return Ok(());
    }
    #[derive(serde::Deserialize)]
    struct Call {
        params: Option<Params>,
    }
    #[derive(serde::Deserialize)]
    struct Params {
        name: Option<String>,
        arguments: Option<serde_json::Value>,
    }
    let Some(Params {
        name: Some(name),
        arguments,
    }) = serde_json::from_slice::<Call>(body)
        .ok()
        .and_then(|c| c.params)
    else {
        return Ok(());
    };
    marks
        .check(fields, &name, arguments.as_ref())
        .map_err(GateError::HeaderMismatch)
}

/// A request of a method 2026-07-28 does not define, which the legacy server may know (an
/// extension of its own): its answer whole, and when that is -32601, a 404, as a
/// 2026-07-28 server answers a method it does not have.
async fn undefined(
    b: ToLegacy,
    s: Sending<'_>,
    ctx: &mut Ctx<'_>,
) -> Result<Response<GateBody>, GateError> {
    let body = s.body.clone();
    let (answer, _) = send(&s, &b, Method::POST, body).await?;
    ctx.upstream_ms = Some(answer.took.as_secs_f64() * 1000.0);
    let text = one_message(answer, &b.id).await?;
    if let Some(message) = msg::method_not_found(&text) {
        return Err(GateError::MethodNotFound(message));
    }
    let completes = Completes {
        id: b.id.clone(),
        ttl_ms: None,
        learn: None,
    };
    let text = completes
        .apply(&text)
        .map_err(GateError::UpstreamBadResponse)?
        .unwrap_or(text);
    Ok(respond::own(text, s.shaping.want, &ctx.request_id))
}

/// `server/discover`, answered from the session's `initialize`.
async fn discover(
    b: ToLegacy,
    s: Sending<'_>,
    ctx: &mut Ctx<'_>,
) -> Result<Response<GateBody>, GateError> {
    let session = session(&s, &b).await?;
    let fresh = crate::mcp::tools_list::ToolFilter::new(s.live.config.clone(), s.profile.clone())
        .fresh_for();
    let json = msg::discover_answer(&b.id, &session.opened.init, fresh.as_millis() as u64)
        .map_err(GateError::UpstreamBadResponse)?;
    let narrowed = crate::mcp::discover::narrow(&json, &b.id, s.profile, fresh)
        .map_err(GateError::UpstreamBadResponse)?
        .unwrap_or(json);
    Ok(respond::own(narrowed, s.shaping.want, &ctx.request_id))
}
