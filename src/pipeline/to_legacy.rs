//! The bridge stage for a 2026-07-28 client in front of a legacy server (docs/protocol.md, "The
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

use super::Ctx;
use super::bridge::{Driven, Sending, copy_fields, one_message};
use super::forward::{self, Answer};
use super::respond;
use crate::config::generation::{Era, MODERN};
use crate::config::{Profile, Protocol, Upstream};
use crate::error::GateError;
use crate::gateway::{Gateway, Live};
use crate::http::body::{BoxError, GateBody};
use crate::mcp::jsonrpc::{MessageKind, Payload};
use crate::mcp::rounds::may_ask;
use crate::mcp::to_legacy::{self as msg, ClientMeta, Completes, Listen, LogFloor, ServerRequest};
use crate::mcp::transport::accept::Want;
use crate::mcp::transport::sse;
use crate::upstream::bridged::{Key, Opened, Sessions};
use crate::upstream::encode::{InSession, Outgoing};
use crate::upstream::registry::UpstreamState;
use crate::upstream::session::EndpointId;
use bytes::Bytes;
use http::{HeaderValue, Method, Response, StatusCode};
use http_body::Frame;
use http_body_util::BodyExt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use wire::fields::Fields;

/// The key of the one input request an `input_required` made here holds.
const INPUT: &str = "input";

/// A 2026-07-28 request on its way to a legacy server.
pub(super) struct ToLegacy {
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
pub(super) enum Bridging {
    No,
    Now(ToLegacy),
    /// The request's kind, to make it a [`ToLegacy`] ([`ToLegacy::of`]) only if it is
    /// refused: what the client's `_meta` says is not read for requests that pass.
    IfRefused(MessageKind),
}

pub(super) fn open(
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
pub(super) fn check_revision(
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
    pub(super) fn of(
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
        key[..16].copy_from_slice(&super::rounds::caller(ctx));
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
pub(super) async fn refused_as_modern(live: &Live, upstream: &Upstream, answer: &Answer) -> bool {
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
    let answer = forward::send(s.live, upstream, s.in_session(to, Method::POST, body)).await?;
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
    let answer = forward::send(s.live, upstream, s.in_session(to, Method::POST, body)).await?;
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
        let answer = forward::send(s.live, upstream, s.in_session(to, Method::POST, body)).await?;
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
        let out = own_request(
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
        if let Ok(answer) = forward::send(&live, &profile.upstream, out).await {
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
            s.in_session(session.to(), method.clone(), body.clone()),
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
pub(super) async fn post(
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
        "subscriptions/listen" => return listen(gw, b, s, ctx).await,
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

/// `subscriptions/listen`: the resources it names subscribed to, then the session's GET
/// stream, of which the client gets what it opted in to.
async fn listen(
    gw: &Gateway,
    b: ToLegacy,
    s: Sending<'_>,
    ctx: &mut Ctx<'_>,
) -> Result<Response<GateBody>, GateError> {
    let mut listen = Listen::of(&s.body).map_err(GateError::InvalidRequest)?;
    let mut kept = Vec::with_capacity(listen.uris.len());
    for (n, uri) in listen.uris.iter().enumerate() {
        let body = Bytes::from(msg::subscribe_request(uri, n));
        let (answer, _) = send(&s, &b, Method::POST, body).await?;
        let id = format!("\"mcpgate-subscribe-{n}\"");
        let text = one_message(answer, &id).await?;
        let accepted = serde_json::from_str::<serde_json::Value>(&text)
            .is_ok_and(|v| v.get("result").is_some_and(serde_json::Value::is_object));
        if accepted {
            kept.push(uri.clone());
        } else {
            tracing::info!(%uri, "the legacy server refused a resource subscription");
        }
    }
    listen.uris = kept;
    let (answer, _) = send(&s, &b, Method::GET, Bytes::new()).await?;
    let streams = answer.response.status() == StatusCode::OK
        && wire::headval::body_format(answer.response.headers()) == wire::headval::BodyFormat::Sse;
    let inner = match streams {
        true => {
            let deadline = answer.deadline;
            let (_, body) = answer.response.into_parts();
            Some(GateBody::Upstream { body, deadline })
        }
        // A server without a GET stream sends nothing about no call: the client's stream
        // carries only mcpgate's own notices.
        false => {
            drain(answer).await;
            None
        }
    };
    let body = ListenBody {
        ack: Some(sse::encode_json(&listen.acknowledged(), None)),
        inner,
        decoder: sse::Decoder::new(),
        listen,
    };
    Ok(respond::event_stream(
        gw,
        GateBody::Boxed(BodyExt::boxed_unsync(body)),
        s.shaping,
        &ctx.request_id,
    ))
}

/// A listen stream made of a session's GET stream.
struct ListenBody {
    ack: Option<Bytes>,
    inner: Option<GateBody>,
    decoder: sse::Decoder,
    listen: Listen,
}

impl http_body::Body for ListenBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some(ack) = this.ack.take() {
            return Poll::Ready(Some(Ok(Frame::data(ack))));
        }
        loop {
            while let Some(ev) = this.decoder.next_event() {
                if let Some(carried) = ev.data.as_deref().and_then(|d| this.listen.carry(d)) {
                    return Poll::Ready(Some(Ok(Frame::data(sse::encode_json(&carried, None)))));
                }
            }
            let Some(inner) = this.inner.as_mut() else {
                return Poll::Pending;
            };
            match std::task::ready!(Pin::new(inner).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        this.decoder.feed(&data);
                    }
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => return Poll::Ready(None),
            }
        }
    }
}

/// A call at the server, answered on an event stream that may ask the client something.
/// Dropped before its answer (the client left, or its retry did not come in time), it is
/// cancelled upstream.
struct Call {
    live: Arc<Live>,
    profile: Arc<Profile>,
    fields: Fields,
    forwarded_for: HeaderValue,
    key: Key,
    session: Session,
    /// The call's id at the server, as JSON text.
    up_id: Box<str>,
    /// The call as it was sent, which its retries must repeat.
    request: Bytes,
    /// The server's answer, until it is read to the call's end.
    body: Option<GateBody>,
    decoder: sse::Decoder,
    /// What the request (or its latest retry) said of its client: what it can be asked,
    /// and the log level it wants.
    client: ClientMeta,
}

/// A call held for its retry, and the server's request the retry answers.
struct Holding {
    call: Call,
    /// The server's request; what the client was shown of it is gone.
    asked: ServerRequest,
    /// What a retry must be (`to_legacy::call_digest`).
    digest: [u8; 16],
}

/// How far a call got.
enum Step {
    /// Its answer (JSON text, with the server's id).
    Answered(String),
    /// The server asks the client something.
    Asks(ServerRequest),
    /// The first message for the client (`Pass::Peek`): the call goes on.
    Passing(Bytes),
}

/// Where a call's messages before its answer (progress, logs) go.
enum Pass<'a> {
    /// Nowhere: the client takes JSON.
    Drop,
    /// Onto the client's event stream.
    To(&'a tokio::sync::mpsc::Sender<Bytes>),
    /// The first one ends the step, as `Step::Passing`.
    Peek,
}

impl Call {
    /// Reads the server's stream until the call's answer or a request for the client,
    /// passing what comes before (progress, logs) to `tx`. The server's `ping` is answered
    /// here; a request the bridge does not carry gets an error.
    async fn step(&mut self, pass: Pass<'_>) -> Result<Step, GateError> {
        loop {
            while let Some(ev) = self.decoder.next_event() {
                let Some(data) = ev.data else { continue };
                if crate::mcp::transport::relay::response_ids(&data).contains(&&*self.up_id) {
                    self.body = None;
                    return Ok(Step::Answered(data));
                }
                if let Some(asked) = msg::server_request(&data) {
                    match asked.method.as_str() {
                        m @ ("elicitation/create" | "sampling/createMessage" | "roots/list") => {
                            let capability = crate::mcp::bridge::capability_of(m);
                            if !self.client.declares(capability) {
                                let refusal = format!(
                                    r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":-32601,"message":"the client did not declare {capability}"}}}}"#,
                                    asked.id
                                );
                                self.tell(&refusal).await?;
                                return Err(GateError::MissingClientCapability(capability));
                            }
                            return Ok(Step::Asks(asked));
                        }
                        "ping" => self.tell(&msg::answer_to_server(&asked.id, "{}")).await?,
                        _ => {
                            let refusal = format!(
                                r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":-32601,"message":"mcpgate does not carry this request to a 2026-07-28 client"}}}}"#,
                                asked.id
                            );
                            self.tell(&refusal).await?;
                        }
                    }
                    continue;
                }
                // A priming event (an id, no message) is for resuming the legacy stream,
                // which a 2026-07-28 client cannot do; log messages go by its level.
                if data.trim().is_empty() || !LogFloor(self.client.level).passes(&data) {
                    continue;
                }
                match pass {
                    Pass::Drop => {}
                    // The client may have left; the call ends when its body is dropped.
                    Pass::To(tx) => {
                        let _ = tx.send(ev.raw).await;
                    }
                    Pass::Peek => return Ok(Step::Passing(ev.raw)),
                }
            }
            let body = self.body.as_mut().ok_or_else(broke)?;
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.decoder.feed(&data);
                    }
                    if self.decoder.pending() > crate::mcp::tools_list::MAX_REWRITE_BYTES {
                        return Err(GateError::UpstreamBadResponse("SSE event too large".into()));
                    }
                }
                Some(Err(e)) if e.is::<crate::http::body::DeadlineExceeded>() => {
                    return Err(GateError::UpstreamTimeout);
                }
                _ => return Err(broke()),
            }
        }
    }

    /// Sends the server `json` (an answer to its request) in the call's session.
    async fn tell(&mut self, json: &str) -> Result<(), GateError> {
        // Borrowed field by field: the body is not `Sync`, and this future is sent.
        tell(
            &self.live,
            &self.profile.upstream,
            &self.fields,
            &self.forwarded_for,
            &self.session,
            json,
        )
        .await
    }
}

async fn tell(
    live: &Live,
    upstream: &Upstream,
    fields: &Fields,
    forwarded_for: &HeaderValue,
    session: &Session,
    json: &str,
) -> Result<(), GateError> {
    let out = own_request(
        live,
        fields,
        forwarded_for,
        session.to(),
        Method::POST,
        Bytes::from(json.to_string()),
    );
    let answer = forward::send(live, upstream, out).await?;
    let status = answer.response.status();
    drain(answer).await;
    if !status.is_success() {
        return Err(GateError::UpstreamBadResponse(format!(
            "the server answered {status} to the client's input"
        )));
    }
    Ok(())
}

fn broke() -> GateError {
    GateError::UpstreamBadResponse("the stream broke off before the answer".into())
}

impl Drop for Call {
    fn drop(&mut self) {
        if self.body.is_none() {
            return;
        }
        // Unanswered: the server is told the call is no longer wanted.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (live, profile) = (self.live.clone(), self.profile.clone());
        let (fields, forwarded_for) =
            (std::mem::take(&mut self.fields), self.forwarded_for.clone());
        let session = self.session.clone();
        let cancel = Bytes::from(msg::cancelled(
            &self.up_id,
            "the 2026-07-28 client left, or did not retry in time",
        ));
        rt.spawn(async move {
            let out = own_request(
                &live,
                &fields,
                &forwarded_for,
                session.to(),
                Method::POST,
                cancel,
            );
            if let Ok(answer) = forward::send(&live, &profile.upstream, out).await {
                drain(answer).await;
            }
        });
    }
}

/// A retry of a held call: the client's answer goes to the server, and the rest of the
/// call is this request's answer.
async fn resume(
    gw: &Gateway,
    b: ToLegacy,
    s: Sending<'_>,
    retry: msg::Retry,
    ctx: &mut Ctx<'_>,
) -> Result<Response<GateBody>, GateError> {
    let (held, token) = gw.held.take(retry.held).ok_or(GateError::BadRequestState)?;
    let holding = match held.downcast::<Holding>() {
        Ok(h) => h,
        Err(other) => {
            gw.held.give_back(retry.held, other, token);
            return Err(GateError::BadRequestState);
        }
    };
    let refuse = |holding: Box<Holding>, why: &str| {
        gw.held.give_back(retry.held, holding, token);
        Err(GateError::InvalidRequest(why.into()))
    };
    if holding.call.key != b.key {
        gw.held.give_back(retry.held, holding, token);
        return Err(GateError::BadRequestState);
    }
    let digest = msg::call_digest(&s.body).map_err(GateError::InvalidRequest)?;
    if digest != retry.digest || digest != holding.digest {
        return refuse(
            holding,
            "the retry is not the call that was asked: its method or arguments differ",
        );
    }
    let Some((_, response)) = retry.responses.iter().find(|(k, _)| k == INPUT) else {
        return refuse(holding, "the retry's inputResponses has no \"input\"");
    };
    let Holding {
        mut call, asked, ..
    } = *holding;
    call.client = b.meta;
    call.tell(&msg::answer_to_server(&asked.id, response))
        .await?;
    drive(gw, call, b.id, s, &ctx.request_id).await
}

/// Plays `call` to its client as the answer to request `id`: as an event stream as it
/// comes (an SSE client), or once its answer is in (JSON).
async fn drive(
    gw: &Gateway,
    call: Call,
    id: Box<str>,
    s: Sending<'_>,
    request_id: &str,
) -> Result<Response<GateBody>, GateError> {
    let list = s.shaping.list.clone();
    let life = s.live.config.input_timeout;
    let held = gw.held.clone();
    // Held for its caller: a reload that removes the token, or its expiry, ends it.
    let caller = crate::runtime::held::Caller {
        token: s.shaping.token.filter(|t| t.configured).map(|t| t.key),
        not_after: s.shaping.token.and_then(|t| t.not_after),
    };
    let rid = request_id.to_string();
    let finish = move |call: Call, step: Result<Step, GateError>| -> String {
        let text = match step {
            Ok(Step::Answered(answer)) => {
                let answer = match *call.up_id == *id {
                    true => Ok(answer),
                    false => msg::renumbered(&answer, &id),
                };
                answer.map_err(GateError::UpstreamBadResponse)
            }
            Ok(Step::Asks(mut asked)) => {
                // Read only now that a retry must match it: most calls ask nothing.
                msg::call_digest(&call.request)
                    .map_err(GateError::InvalidRequest)
                    .map(|digest| {
                        let shown = std::mem::take(&mut asked.request);
                        let n = held.hold(
                            Box::new(Holding {
                                call,
                                asked,
                                digest,
                            }),
                            life,
                            caller,
                        );
                        msg::input_required(&id, INPUT, &shown, &msg::held_state(n, &digest))
                    })
            }
            // Only a peek ends a step there.
            Ok(Step::Passing(_)) => Err(GateError::UpstreamBadResponse(
                "the call's stream was left mid-way".into(),
            )),
            Err(e) => Err(e),
        };
        let text = text.and_then(|t| match &list {
            Some(l) => l
                .apply(&t)
                .map(|o| o.unwrap_or(t))
                .map_err(GateError::UpstreamBadResponse),
            None => Ok(t),
        });
        text.unwrap_or_else(|e| {
            let rpc = serde_json::value::RawValue::from_string(id.to_string()).ok();
            String::from_utf8(crate::error::envelope(&e, rpc.as_deref(), &rid))
                .expect("serde_json writes UTF-8")
        })
    };
    // A call that fails for want of a capability the client did not declare, before
    // anything of it reached the client, is refused with a status of its own (400), as a
    // 2026-07-28 server refuses it.
    let mut call = call;
    if s.shaping.want == Want::Json {
        let step = call.step(Pass::Drop).await;
        if let Err(e @ GateError::MissingClientCapability(_)) = step {
            return Err(e);
        }
        return Ok(respond::own(finish(call, step), Want::Json, request_id));
    }
    let first = call.step(Pass::Peek).await;
    if let Err(e @ GateError::MissingClientCapability(_)) = first {
        return Err(e);
    }
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let task = async move {
        let step = match first {
            Ok(Step::Passing(message)) => {
                // The client may have left; the call ends when its body is dropped.
                let _ = tx.send(message).await;
                call.step(Pass::To(&tx)).await
            }
            other => other,
        };
        let text = finish(call, step);
        let _ = tx.send(sse::encode_json(&text, None)).await;
    };
    let driven = Driven {
        task: Some(Box::pin(task)),
        rx,
    };
    let mut r = Response::new(GateBody::Boxed(BodyExt::boxed_unsync(driven)));
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    respond::set_request_id(&mut r, request_id);
    Ok(r)
}
