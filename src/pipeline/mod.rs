//! The request path: one stage per module, called in order from [`handle`], which this
//! file is so the order reads in one screen:
//!
//! `route` → `auth` → `origin` → method and Accept → `body` → JSON-RPC (`mcp::jsonrpc`) →
//! `headers` → `approvals` (the rule that holds the call, a retry's approval opened; on
//! profiles with rules) → `audit` (the calls to record) → `policy` → `limits` →
//! `approvals` (the person asked) → `audit` (durable `begin` records) → `forward` →
//! `respond` → `finish` (the error answer, the audit records, the log line, the metrics).
//!
//! A stage returns `Err(GateError)` to end the request; `finish` turns that into the answer
//! in exactly one place. What the request learns on the way is kept in a small [`Ctx`].

pub mod approvals;
pub mod audit;
pub mod auth;
pub mod body;
pub mod bridge;
pub mod federation;
pub mod finish;
pub mod forward;
pub mod headers;
pub mod limits;
pub mod metadata;
pub mod origin;
pub mod policy;
pub mod respond;
pub mod rounds;
pub mod route;
pub mod to_legacy;

use crate::config::generation::encode_header;
use crate::config::{Auth, Profile, Route};
use crate::error::GateError;
use crate::gateway::{Gateway, Live};
use crate::http::body::GateBody;
use crate::http::request::{ClientRequest, Peer};
use crate::mcp::era::Era;
use crate::mcp::jsonrpc::{self, Payload, ToolName};
use crate::mcp::transport::accept::{self, Want};
use crate::observe::audit as trail;
use crate::observe::combined;
use crate::observe::log;
use crate::upstream::encode::Outgoing;
use crate::upstream::hints::{OneUpstream, UpstreamSays};
use bytes::Bytes;
use http::{Method, Response, StatusCode};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;
use wire::fields::FieldKind;

/// What one request has learned about itself so far; logged when it ends. What comes from
/// the configuration is borrowed from the request's snapshot (`'s`), not cloned: those
/// `Arc`s are shared by both worker threads, and a clone writes their counts.
struct Ctx<'s> {
    request_id: Arc<str>,
    route: Option<&'s Route>,
    token_id: Option<&'s str>,
    /// The JSON-RPC id of a single-message request, for error envelopes.
    rpc_id: Option<Box<RawValue>>,
    /// Borrowed from `finish::KNOWN_METHODS` for the methods MCP defines (the metrics label
    /// relies on it), so the usual ones cost no copy.
    rpc_method: Option<Cow<'static, str>>,
    /// Shared with the call's audit record.
    tool: Option<Arc<str>>,
    /// The client's `Accept`, negotiated once; errors are framed as SSE when it prefers SSE.
    want: Result<Want, accept::NotAcceptable>,
    /// The caller's credential, so its streams can be closed on expiry or revocation.
    token: Option<auth::Credential>,
    /// The caller an OAuth access token speaks for (`auth = "oauth"` routes).
    caller: Option<Arc<crate::oauth::Caller>>,
    proto: &'static str,
    listener: &'s str,
    peer: Peer,
    /// The tools/call elements of the payload, for the audit trail.
    calls: Vec<Arc<trail::Call>>,
    /// How long the upstream took to answer's head, if it was asked.
    upstream_ms: Option<f64>,
    started: Instant,
    /// The audit records' shared fields, once made.
    audit_base: Option<Arc<trail::Base>>,
    /// What the combined access log needs of the request, when that log is on.
    access: Option<Box<combined::Access>>,
    /// The request's trace context, when traces are exported.
    trace: Option<Box<crate::observe::trace::Context>>,
    /// Which generation of MCP the request speaks (docs/protocol.md), once its headers are read.
    era: Era,
    /// A multi round-trip retry's first request id, for its audit records.
    first_request: Option<Box<str>>,
    /// The member of a federated profile the request goes to (docs/federation.md).
    member: Option<&'s str>,
    /// The name that member knows the called tool or prompt by, for its `Mcp-Name`.
    rename: Option<String>,
    /// The listener's number, for a call sent again once approved (docs/approvals.md).
    listener_at: usize,
    /// The `[[approvals]]` rule that holds the request's call, and what the call does.
    approval: Option<approvals::Need>,
    /// Who approved the request's call (`client`, or the operator), once approved.
    approved: Option<Box<str>>,
    /// A request mcpgate makes for itself (a federated profile reading its members'
    /// lists): an upstream with `identity` is told `sub = mcpgate`, not the caller whose
    /// request made the read happen (docs/oauth.md).
    own: bool,
}

/// Serves one HTTP request that arrived on listener number `listener`. The request uses the
/// configuration current when it arrived until it ends, even if a reload swaps it.
pub async fn handle(
    gw: &Gateway,
    listener: usize,
    peer: Peer,
    req: ClientRequest,
) -> Response<GateBody> {
    serve(gw, listener, peer, req, None).await
}

/// Serves a call that a person approved (`by`) after it was first sent: it goes through
/// every stage again but the approval (docs/approvals.md).
pub(super) async fn handle_approved(
    gw: &Gateway,
    listener: usize,
    peer: Peer,
    req: ClientRequest,
    by: &str,
) -> Response<GateBody> {
    serve(gw, listener, peer, req, Some(by.into())).await
}

async fn serve(
    gw: &Gateway,
    listener: usize,
    peer: Peer,
    req: ClientRequest,
    approved: Option<Box<str>>,
) -> Response<GateBody> {
    let started = Instant::now();
    let live = gw.live_here();
    // Behind a trusted proxy, the client is whom it names (docs/configuration.md); the
    // guard, the limits, the logs and the audit trail all see that address.
    let peer = crate::http::forwarded::client(&live.server.trusted_proxies, &peer, &req.fields)
        .unwrap_or(peer);
    let on = live.listeners.get(listener);
    let mut ctx = Ctx {
        listener: on.map_or("", |l| &l.name),
        proto: if on.is_some_and(|l| l.tls.is_some()) {
            "https"
        } else {
            "http"
        },
        want: accept::negotiate(req.fields.get(FieldKind::Accept)),
        request_id: headers::request_id(&req.fields),
        peer: peer.clone(),
        started,
        calls: Vec::new(),
        upstream_ms: None,
        audit_base: None,
        token: None,
        caller: None,
        route: None,
        token_id: None,
        rpc_id: None,
        rpc_method: None,
        tool: None,
        access: combined::on().then(|| Box::new(access(&req))),
        trace: gw
            .tracer
            .as_ref()
            .map(|t| Box::new(t.begin(req.fields.all(FieldKind::Traceparent)))),
        era: Era::Legacy,
        first_request: None,
        member: None,
        rename: None,
        listener_at: listener,
        approval: None,
        approved,
        own: false,
    };
    let method = req.method.clone();
    // Every log line of the request carries its id (`observe::log` explains how).
    let id = ctx.request_id.clone();
    let span = log::request_span(&id);
    let run = run(gw, &live, listener, &peer, req, &mut ctx);
    let result = log::in_request(id.clone(), span.clone(), run).await;
    let _entered = span.enter();
    let _in = log::enter_request(&id);
    finish::finish(gw, &live, &ctx, &method, result)
}

async fn run<'s>(
    gw: &Gateway,
    live: &'s Arc<Live>,
    listener: usize,
    peer: &Peer,
    req: ClientRequest,
    ctx: &mut Ctx<'s>,
) -> Result<Response<GateBody>, GateError> {
    if let Some(on) = live.listeners.get(listener)
        && !on.metadata_paths.is_empty()
        && let Some(answer) = metadata::serve(
            live.config.oauth.as_deref(),
            on,
            &req.method,
            req.target.path(),
            &ctx.request_id,
        )
    {
        return Ok(answer);
    }
    if let Some(jwks) = &live.config.identity_jwks
        && req.method == Method::GET
        && jwks.paths.iter().any(|p| *p == req.target.path())
    {
        // The public keys of the identity tokens upstreams get (docs/oauth.md).
        return Ok(respond::jwks(jwks.json.clone(), &ctx.request_id));
    }
    let (route, path_token) = route::find(live, listener, &req.target)?;
    ctx.route = Some(route);
    if route.auth == Auth::OAuth {
        auth::oauth(live, route, &req.fields, peer, ctx).await?;
    } else {
        auth::check(live, route, path_token, &req.fields, peer, ctx)?;
    }
    origin::check(&live.listeners[listener], &req.target, &req.fields)?;
    let profile = &route.profile;
    let (body_deadline, want) = match req.method {
        Method::POST => return post(gw, live, profile, peer, req, ctx).await,
        Method::GET if !accept::accepts_sse(req.fields.get(FieldKind::Accept)) => {
            return Err(GateError::StreamNotAcceptable);
        }
        // A GET stream is long-lived: the deadline bounds its head, an idle timeout the rest.
        Method::GET => (false, Want::Sse),
        Method::DELETE => (true, Want::Either),
        _ => return Err(GateError::MethodNotAllowed),
    };
    limits::check(live, profile, peer, ctx, &[]).await?;
    if let Some(fed) = &profile.federation {
        return federation::without_body(gw, live, profile, fed, peer, &req, ctx).await;
    }
    without_body(gw, live, profile, peer, &req, body_deadline, want, ctx).await
}

/// A GET or DELETE to `profile`'s upstream, once admitted.
#[allow(clippy::too_many_arguments)]
async fn without_body<'s>(
    gw: &Gateway,
    live: &'s Arc<Live>,
    profile: &'s Arc<Profile>,
    peer: &Peer,
    req: &ClientRequest,
    body_deadline: bool,
    want: Want,
    ctx: &mut Ctx<'s>,
) -> Result<Response<GateBody>, GateError> {
    let upstream = &profile.upstream;
    if let Some(bridged) = bridge::open(live, profile, &req.fields, None, ctx)? {
        // A legacy client of a 2026-07-28 server (docs/protocol.md, the bridge).
        if req.method == Method::DELETE {
            return Ok(bridge::delete(gw, &bridged, &req.fields, ctx));
        }
        let mut shaping = respond::Shaping::plain(Want::Sse, live, upstream, ctx.token);
        shaping.notices = Some(profile.name.clone());
        let sending = sending(
            live,
            profile,
            peer,
            ctx,
            req,
            shaping,
            Bytes::new(),
            upstream.timeout,
        );
        return bridge::stream(gw, bridged, sending, ctx).await;
    }
    let mut out = outgoing(
        live,
        peer,
        ctx,
        req,
        Bytes::new(),
        upstream.timeout,
        body_deadline,
    );
    out.who = who(ctx, upstream);
    // A stdio upstream's sessions are their opener's.
    if live.upstream(upstream).stdio.is_some() {
        out.caller = Some(rounds::caller(ctx));
    }
    let answer = forward::send(live, upstream, out).await?;
    let mut shaping = respond::Shaping::plain(want, live, upstream, ctx.token);
    if req.method == Method::GET {
        shaping.notices = Some(profile.name.clone());
    }
    respond::answer(gw, answer, shaping, upstream, ctx).await
}

async fn post<'s>(
    gw: &Gateway,
    live: &'s Arc<Live>,
    profile: &'s Arc<Profile>,
    peer: &Peer,
    mut req: ClientRequest,
    ctx: &mut Ctx<'s>,
) -> Result<Response<GateBody>, GateError> {
    let want = ctx.want.map_err(|_| GateError::NotAcceptable)?;
    let bytes = body::read(&req.fields, &mut req.body, live.max_body).await?;
    body::check_depth(&bytes, live.limits.max_json_depth)?;
    let payload = jsonrpc::parse(&bytes)?;
    ctx.note(&payload);
    ctx.era = headers::check(&req.fields, &payload)?;
    if profile.approvals.is_empty() {
        return dispatch(gw, live, profile, peer, &req, &bytes, payload, want, ctx).await;
    }
    // Approvals (docs/approvals.md): a legacy client's answer to mcpgate's question; the rule that
    // holds the call; a 2026-07-28 retry's approval, opened.
    if ctx.era == Era::Legacy
        && let Some(answered) = approvals::answer(gw, &payload, &bytes, &req.fields, ctx)?
    {
        return Ok(answered);
    }
    let remember =
        ctx.era == Era::Legacy && approvals::notes_elicitation(profile, &payload, &bytes);
    match &profile.federation {
        Some(fed) => {
            let dir = gw.directories.of(&profile.name, fed);
            let says = federation::MemberHints {
                live,
                fed,
                dir: &dir,
            };
            approvals::find(profile, &says, &payload, ctx)?;
            if ctx.approval.is_some() {
                // The approval's records name the member, as the call's do.
                federation::note_member(fed, &dir, &payload, ctx);
            }
        }
        None => {
            let state = live.upstream(&profile.upstream);
            let says = OneUpstream {
                upstream: &profile.upstream,
                hints: &state.hints,
                pins: &state.pins,
                book: &live.config.pins,
            };
            approvals::find(profile, &says, &payload, ctx)?;
        }
    }
    let answer = match approvals::opened(gw, live, profile, &payload, &bytes, ctx).await? {
        Some(stripped) => {
            drop(payload);
            let payload = jsonrpc::parse(&stripped)?;
            dispatch(gw, live, profile, peer, &req, &stripped, payload, want, ctx).await
        }
        None => dispatch(gw, live, profile, peer, &req, &bytes, payload, want, ctx).await,
    };
    if remember && let Ok(r) = &answer {
        approvals::note_session(gw, r, ctx);
    }
    answer
}

/// A POST, read and checked, to its profile's upstream or federation.
#[allow(clippy::too_many_arguments)]
async fn dispatch<'s>(
    gw: &Gateway,
    live: &'s Arc<Live>,
    profile: &'s Arc<Profile>,
    peer: &Peer,
    req: &ClientRequest,
    bytes: &Bytes,
    payload: Payload<'_>,
    want: Want,
    ctx: &mut Ctx<'s>,
) -> Result<Response<GateBody>, GateError> {
    if let Some(fed) = &profile.federation {
        return federation::post(gw, live, profile, fed, peer, req, bytes, payload, want, ctx)
            .await;
    }
    checked(
        gw, live, profile, peer, req, bytes, payload, want, None, ctx,
    )
    .await
}

/// The rest of a POST once its payload is read and its headers checked: to `profile`'s
/// upstream. `admitted`: the payload was judged by policy and limits already (a federated
/// profile judges the names its clients see, then sends to a member: `federation`).
#[allow(clippy::too_many_arguments)]
async fn checked<'s>(
    gw: &Gateway,
    live: &'s Arc<Live>,
    profile: &'s Arc<Profile>,
    peer: &Peer,
    req: &ClientRequest,
    bytes: &Bytes,
    payload: Payload<'_>,
    want: Want,
    admitted: Option<limits::Admitted>,
    ctx: &mut Ctx<'s>,
) -> Result<Response<GateBody>, GateError> {
    if ctx.era == Era::Legacy {
        to_legacy::check_revision(live, profile, &payload, &req.fields)?;
    }
    let bridged = match ctx.era {
        Era::Legacy => bridge::open(live, profile, &req.fields, Some(&payload), ctx)?,
        Era::Modern => None,
    };
    // A 2026-07-28 request to a server of the legacy protocol only (the bridge, docs/protocol.md).
    let (to_legacy, maybe_legacy) = match ctx.era {
        Era::Modern => match to_legacy::open(live, profile, &payload, ctx)? {
            to_legacy::Bridging::Now(b) => (Some(b), None),
            to_legacy::Bridging::IfRefused(b) => (None, Some(b)),
            to_legacy::Bridging::No => (None, None),
        },
        Era::Legacy => (None, None),
    };
    // A legacy initialize to a server nobody has probed: its answer may show it speaks
    // only 2026-07-28, and the initialize is then bridged.
    let may_refuse = bridged.is_none()
        && ctx.era == Era::Legacy
        && matches!(&payload, Payload::Single(m) if m.method() == Some("initialize"))
        && bridge::may_refuse_legacy(live, &profile.upstream);
    if admitted.is_none() {
        audit::note_calls(gw, &payload, ctx);
    }
    let (round, task) = match ctx.era {
        Era::Modern => (
            rounds::prepare(live, profile, &payload, ctx)?,
            rounds::task(live, profile, &payload, ctx)?,
        ),
        Era::Legacy => (None, None),
    };
    if let Some(t) = &task {
        audit::note_task(gw, &t.id, &t.opened.tool, ctx);
    }
    let admitted = match admitted {
        Some(a) => a,
        None => match judge(
            gw,
            live,
            profile,
            peer,
            &payload,
            &OneUpstream {
                upstream: &profile.upstream,
                hints: &live.upstream(&profile.upstream).hints,
                pins: &live.upstream(&profile.upstream).pins,
                book: &live.config.pins,
            },
            ctx,
        )
        .await?
        {
            Some(a) => {
                if let Some(asked) =
                    approvals::ask(gw, live, profile, peer, req, bytes, &payload, want, ctx).await?
                {
                    return Ok(asked);
                }
                a
            }
            None => return Ok(respond::empty(StatusCode::ACCEPTED, &ctx.request_id)),
        },
    };
    let mut shaping = respond::Shaping::for_payload(want, live, profile, &payload, ctx.token);
    let listen =
        matches!(&payload, Payload::Single(m) if m.method() == Some("subscriptions/listen"));
    let meta_trace = match (&payload, &ctx.trace) {
        (Payload::Single(m), Some(_)) => m
            .meta
            .and_then(|meta| crate::mcp::meta_trace::traceparent_in(bytes, meta)),
        _ => None,
    };
    drop(payload);
    let mut bytes = bytes.clone();
    if let (Some((at, given)), Some(trace)) = (meta_trace, ctx.trace.as_mut()) {
        // `_meta.traceparent` is a trace context like the header (docs/protocol.md): continued
        // when the header did not name one, and rewritten to this request's span.
        if !trace.continued()
            && !req.fields.has(FieldKind::Traceparent)
            && let Some(parent) = crate::http::traceparent::parse(given.as_bytes())
        {
            trace.continue_from(parent);
        }
        let mut edited = Vec::with_capacity(bytes.len());
        edited.extend_from_slice(&bytes[..at.start]);
        edited.push(b'"');
        edited.extend_from_slice(&trace.header);
        edited.push(b'"');
        edited.extend_from_slice(&bytes[at.end..]);
        bytes = Bytes::from(edited);
    }
    let mut pinned = None;
    if listen {
        // What the profile may not see is not asked for, nor tasks not the caller's
        // (docs/protocol.md).
        let tasks_at = std::cell::Cell::new(None);
        let tasks = rounds::listen_tasks(live, profile, ctx, &tasks_at);
        let (narrowed, listening, shown) = crate::mcp::listen::prepare(&bytes, profile, &tasks)
            .map_err(GateError::InvalidRequest)?;
        pinned = tasks_at.get();
        if let Some(narrowed) = narrowed {
            bytes = Bytes::from(narrowed);
        }
        shaping.notices = Some(profile.name.clone());
        shaping.listening = Some(listening);
        if let Some(shown) = shown {
            shaping.show_tasks(live, profile, shown);
        }
    }
    if let Some(round) = round {
        if let Some(retry) = &round.retry {
            bytes = rounds::restore(&bytes, retry)?;
            pinned = Some(retry.endpoint);
        }
        shaping.seal_rounds(live, profile, round.issue);
    }
    let mut mcp_name = ctx.rename.as_deref().map(|n| encode_header(n).into_owned());
    if let Some(task) = task {
        bytes = rounds::restore_task(&bytes, &task)?;
        pinned = Some(task.opened.endpoint);
        mcp_name = Some(encode_header(&task.opened.original).into_owned());
        shaping.show_tasks(live, profile, task.shown);
    }
    // From here the calls count as allowed; the guard records them if the client leaves
    // before their answer is back.
    let mut unanswered = audit::begin(gw, ctx).await?;
    let upstream = &profile.upstream;
    let body_deadline = !shaping.long_lived();
    let answered = async {
        let mut out = outgoing(live, peer, ctx, req, bytes, admitted.timeout, body_deadline);
        if let Some(bridged) = bridged {
            let timeout = out.timeout;
            let body = std::mem::take(&mut out.body);
            drop(out);
            let sending = sending(live, profile, peer, ctx, req, shaping, body, timeout);
            return bridge::post(gw, bridged, sending, ctx).await;
        }
        if let Some(down) = to_legacy {
            let timeout = out.timeout;
            let body = std::mem::take(&mut out.body);
            drop(out);
            let sending = sending(live, profile, peer, ctx, req, shaping, body, timeout);
            return to_legacy::post(gw, down, sending, ctx).await;
        }
        out.pinned = pinned;
        out.era = ctx.era;
        out.mcp_name = mcp_name;
        out.who = who(ctx, upstream);
        // A stdio upstream runs a process per modern caller; its sessions are their
        // opener's.
        if live.upstream(upstream).stdio.is_some() {
            out.caller = Some(rounds::caller(ctx));
        }
        let again = (may_refuse || maybe_legacy.is_some()).then(|| (out.body.clone(), out.timeout));
        let answer = forward::send(live, upstream, out).await?;
        if let (Some(down), Some((body, timeout))) = (maybe_legacy, &again)
            && to_legacy::refused_as_modern(live, upstream, &answer).await
        {
            drop(answer);
            // Read again: the request is bridged after all (rarely: once per endpoint).
            let reread = jsonrpc::parse(body)?;
            let meta = match &reread {
                Payload::Single(m) => m.meta,
                Payload::Batch(_) => None,
            };
            let down = to_legacy::ToLegacy::of(down, meta, ctx)?;
            let sending = sending(
                live,
                profile,
                peer,
                ctx,
                req,
                shaping,
                body.clone(),
                *timeout,
            );
            return to_legacy::post(gw, down, sending, ctx).await;
        }
        let answer = match again.filter(|_| may_refuse) {
            None => answer,
            Some((body, timeout)) => match bridge::refused_as_legacy(live, upstream, answer).await?
            {
                Some(answer) => answer,
                None => {
                    let id = ctx.rpc_id.as_deref().map(|i| i.get().to_string());
                    let bridged = bridge::initializing(ctx, id.as_deref());
                    let sending = sending(live, profile, peer, ctx, req, shaping, body, timeout);
                    return bridge::post(gw, bridged, sending, ctx).await;
                }
            },
        };
        shaping.answered_by(answer.endpoint);
        respond::answer(gw, answer, shaping, upstream, ctx).await
    }
    .await;
    audit::answered(&mut unanswered, ctx);
    Ok(limits::hold(answered?, admitted.permits))
}

/// The policy and limits stages for `payload` on `profile`: `None` when the policy
/// swallows it (a notification it does not pass: answered 202).
async fn judge(
    gw: &Gateway,
    live: &Live,
    profile: &Profile,
    peer: &Peer,
    payload: &Payload<'_>,
    hints: &dyn UpstreamSays,
    ctx: &mut Ctx<'_>,
) -> Result<Option<limits::Admitted>, GateError> {
    if let policy::Admit::Swallow = policy::admit(live, profile, hints, payload)? {
        return Ok(None);
    }
    if !live.deprecated.is_empty() {
        count_deprecated(gw, live, payload, ctx);
    }
    Ok(Some(
        limits::admit(live, profile, peer, ctx, payload).await?,
    ))
}

/// The request as it goes upstream: `timeout` is its deadline, and `body_deadline` says
/// whether that bounds the answer's body too (not for long-lived streams).
fn outgoing<'a>(
    live: &Live,
    peer: &'a Peer,
    ctx: &'a Ctx<'_>,
    req: &'a ClientRequest,
    body: Bytes,
    timeout: std::time::Duration,
    body_deadline: bool,
) -> Outgoing<'a> {
    Outgoing {
        method: req.method.clone(),
        timeout,
        body_deadline,
        query: req.target.query(),
        fields: &req.fields,
        body,
        forwarded_for: &peer.forwarded_for,
        proto: ctx.proto,
        request_id: &ctx.request_id,
        underscores: live.server.underscores_in_headers,
        trace: ctx.trace.as_deref(),
        pinned: None,
        era: crate::config::generation::Era::Legacy,
        caller: None,
        mcp_name: None,
        bridged: None,
        in_session: None,
        who: None,
        authorization: None,
    }
}

/// A bridged request's parts (docs/protocol.md, the bridge): what `outgoing` takes, owned where it
/// would borrow the context.
#[allow(clippy::too_many_arguments)]
fn sending<'a>(
    live: &'a Arc<Live>,
    profile: &'a Arc<Profile>,
    peer: &'a Peer,
    ctx: &Ctx<'_>,
    req: &'a ClientRequest,
    shaping: respond::Shaping,
    body: Bytes,
    timeout: std::time::Duration,
) -> bridge::Sending<'a> {
    bridge::Sending {
        live,
        profile,
        shaping,
        fields: &req.fields,
        query: req.target.query(),
        forwarded_for: &peer.forwarded_for,
        proto: ctx.proto,
        request_id: ctx.request_id.clone(),
        trace: ctx.trace.as_deref().map(|t| {
            let t: &crate::http::traceparent::Context = t;
            t.clone()
        }),
        timeout,
        body,
        who: who(ctx, &profile.upstream),
    }
}

/// Who calls, for an upstream with `identity` (docs/oauth.md); `None` for one without. The
/// token id, else the OAuth caller's subject (its client when it has none) with its
/// client, else `anonymous` (a route without authentication); with the route's profile.
fn who(
    ctx: &Ctx<'_>,
    upstream: &crate::config::Upstream,
) -> Option<crate::upstream::identity::Who> {
    upstream.identity.as_ref()?;
    if ctx.own {
        return Some(crate::upstream::identity::Who::gateway());
    }
    let (sub, client_id): (Arc<str>, _) = match (ctx.token_id, ctx.caller.as_deref()) {
        (Some(id), _) => (id.into(), None),
        (None, Some(c)) => (
            c.sub
                .as_deref()
                .or(c.client_id.as_deref())
                .unwrap_or("-")
                .into(),
            c.client_id.as_deref().map(Arc::from),
        ),
        (None, None) => ("anonymous".into(), None),
    };
    Some(crate::upstream::identity::Who {
        sub,
        client_id,
        profile: ctx.route.map(|r| r.profile.name.clone()),
    })
}

/// The request's version, `Referer` and `User-Agent`, for the combined access log.
fn access(req: &ClientRequest) -> combined::Access {
    let field = |name: &[u8]| {
        req.fields
            .iter()
            .find(|(kind, n, _)| *kind == FieldKind::Other && n.eq_ignore_ascii_case(name))
            .map(|(_, _, v)| Box::<[u8]>::from(v))
    };
    combined::Access {
        version: match req.body {
            crate::http::request::ClientBody::H2(_) => "HTTP/2.0",
            _ => "HTTP/1.1",
        },
        referer: field(b"referer"),
        agent: field(b"user-agent"),
    }
}

/// Counts the calls of deprecated tools (still listed: the policy refused those past
/// their sunset) by caller.
fn count_deprecated(gw: &Gateway, live: &Live, payload: &Payload<'_>, ctx: &Ctx<'_>) {
    let caller = ctx.client();
    for m in payload.messages() {
        if let Some(ToolName::Name(tool)) = &m.tool
            && live.deprecation(tool).is_some()
        {
            gw.metrics.count_deprecated(tool, caller);
        }
    }
}

impl Ctx<'_> {
    /// Who is calling, for the status page and the combined log: the token id, or an
    /// OAuth caller's subject (its client when the token has none), or `-`.
    fn who(&self) -> &str {
        self.caller_name(|c| c.sub.as_deref().or(c.client_id.as_deref()))
    }

    /// Which client is calling, for metric labels (`mcpgate_deprecated_calls`): the token
    /// id, or an OAuth caller's client (its subject when the token has none), or `-`. A
    /// client rather than a person: there are few clients and many subjects, and a label's
    /// values must stay few.
    fn client(&self) -> &str {
        self.caller_name(|c| c.client_id.as_deref().or(c.sub.as_deref()))
    }

    /// The token id, else what `oauth` picks from the OAuth caller, else `-`.
    fn caller_name<'c>(
        &'c self,
        oauth: impl FnOnce(&'c crate::oauth::Caller) -> Option<&'c str>,
    ) -> &'c str {
        match (self.token_id, self.caller.as_deref()) {
            (Some(id), _) => id,
            (None, Some(c)) => oauth(c).unwrap_or("-"),
            (None, None) => "-",
        }
    }

    /// What a single message names (its id, method and tool), for errors, logs, metrics.
    fn note(&mut self, payload: &Payload<'_>) {
        let Payload::Single(m) = payload else {
            self.rpc_method = Some(Cow::Borrowed("(batch)"));
            return;
        };
        self.rpc_id = m.id.map(ToOwned::to_owned);
        self.rpc_method = m.method.as_deref().map(finish::known_method);
        if let Some(ToolName::Name(t)) = &m.tool {
            self.tool = Some(Arc::from(&**t));
        }
    }
}
