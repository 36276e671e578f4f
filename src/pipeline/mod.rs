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
pub mod back;
pub mod body;
pub mod finish;
pub mod forward;
pub mod front;
pub mod headers;
pub mod limits;
pub mod metadata;
pub mod origin;
pub mod policy;
pub mod respond;
pub mod rounds;
pub mod route;

use crate::config::{Head, Judge, Profile, Read, Route, Stages};
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
use crate::upstream::hints::OneUpstream;
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
    route: Option<&'s Arc<Route>>,
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
    /// The `[[approvals]]` rule that holds the request's call, and what the call does.
    approval: Option<approvals::Need>,
    /// Who approved the request's call (`client`, or the operator), once approved.
    approved: Option<Box<str>>,
    /// A request mcpgate makes for itself (a federated profile reading its members'
    /// lists): an upstream with `identity` is told `sub = mcpgate`, not the caller whose
    /// request made the read happen (docs/oauth.md).
    own: bool,
}

/// The request as its stages and its back read it: the gateway, the configuration it
/// arrived under, the profile it goes to, the client and what it sent. A federated
/// profile's member gets one of its own (`federation`), with the member's profile and the
/// request as the member is sent it.
#[derive(Clone, Copy)]
struct Exchange<'a, 's> {
    gw: &'a Gateway,
    live: &'s Arc<Live>,
    profile: &'s Arc<Profile>,
    peer: &'a Peer,
    req: &'a ClientRequest,
}

/// Serves one HTTP request that arrived on listener number `listener`. The request uses the
/// configuration current when it arrived until it ends, even if a reload swaps it.
pub async fn handle(
    gw: &Gateway,
    listener: usize,
    peer: Peer,
    req: ClientRequest,
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
        approval: None,
        approved: None,
        own: false,
    };
    let method = req.method.clone();
    // Every log line of the request carries its id (`observe::log` explains how).
    let id = ctx.request_id.clone();
    let span = log::request_span(&id);
    let result = {
        // Pinned where it is: the wrapper holds a pointer to it, not a copy of the whole.
        let run = std::pin::pin!(run(gw, &live, listener, &peer, req, &mut ctx));
        log::in_request(id.clone(), span.clone(), run).await
    };
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
    for stage in &route.stages.head {
        match stage {
            Head::Token => auth::check(live, route, path_token, &req.fields, peer, ctx)?,
            Head::OAuth => Box::pin(auth::oauth(live, route, &req.fields, peer, ctx)).await?,
            Head::Origin => origin::check(&live.listeners[listener], &req.target, &req.fields)?,
        }
    }
    let profile = &route.profile;
    let (body_deadline, want) = match req.method {
        Method::POST => return post(gw, live, route, peer, req, ctx).await,
        Method::GET if !accept::accepts_sse(req.fields.get(FieldKind::Accept)) => {
            return Err(GateError::StreamNotAcceptable);
        }
        // A GET stream is long-lived: the deadline bounds its head, an idle timeout the rest.
        Method::GET => (false, Want::Sse),
        Method::DELETE => (true, Want::Either),
        _ => return Err(GateError::MethodNotAllowed),
    };
    if route.stages.limited() {
        // Rate rules only: a concurrency cap counts calls, and a GET or DELETE has none.
        limits::check(live, profile, peer, ctx, &[]).await?;
    }
    let x = Exchange {
        gw,
        live,
        profile,
        peer,
        req: &req,
    };
    // Boxed, as every path only some requests take: the POST's future then carries no
    // room for a GET stream's or a DELETE's.
    if let Some(fed) = &profile.federation {
        return Box::pin(back::federated::without_body(x, fed, ctx)).await;
    }
    Box::pin(back::without_body(x, body_deadline, want, ctx)).await
}

/// A POST: the front reads its body, its JSON-RPC and its generation's headers; then the
/// route's stages (`read`, `judge`) and its back.
async fn post<'s>(
    gw: &Gateway,
    live: &'s Arc<Live>,
    route: &'s Arc<Route>,
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
    let x = Exchange {
        gw,
        live,
        profile: &route.profile,
        peer,
        req: &req,
    };
    let stages = &route.stages;
    if !stages.asks() || ctx.era != Era::Legacy {
        return read(x, stages, 0, &bytes, payload, want, ctx).await;
    }
    // The legacy front's part in approvals (docs/approvals.md): a client's answer to
    // mcpgate's question, and the sessions whose clients can be asked.
    if let Some(answered) = front::legacy::answer(gw, &payload, &bytes, &req.fields, ctx)? {
        return Ok(answered);
    }
    let remember = front::legacy::notes_elicitation(x.profile, &payload, &bytes);
    let answer = read(x, stages, 0, &bytes, payload, want, ctx).await;
    if remember && let Ok(r) = &answer {
        front::legacy::note_session(gw, r, ctx);
    }
    answer
}

/// The route's `read` stages from number `from` on, over the payload as read; then its
/// back's way opened, and on to [`judge`].
async fn read<'s>(
    x: Exchange<'_, 's>,
    stages: &'s Stages,
    from: usize,
    bytes: &Bytes,
    payload: Payload<'_>,
    want: Want,
    ctx: &mut Ctx<'s>,
) -> Result<Response<GateBody>, GateError> {
    for (at, stage) in stages.read.iter().enumerate().skip(from) {
        match stage {
            Read::Approvals => {
                held(x, &payload, ctx)?;
                let opened = approvals::opened(x.gw, x.live, x.profile, &payload, bytes, ctx);
                if let Some(stripped) = Box::pin(opened).await? {
                    // An approved retry goes on without the approval's fields, through the
                    // stages after this one.
                    drop(payload);
                    let payload = jsonrpc::parse(&stripped)?;
                    let rest = read(x, stages, at + 1, &stripped, payload, want, ctx);
                    return Box::pin(rest).await;
                }
            }
            Read::Audit => audit::note_calls(x.gw, &payload, ctx),
        }
    }
    let way = back::Way::open(x, &payload, ctx).await?;
    match judge(x, stages, way, bytes, &payload, want, ctx).await? {
        // Boxed once here: the stages' futures above it then move a pointer, not the whole
        // of the send and its answer's shaping (measured: docs/benchmarks.md).
        Judged::Go(granted) => Box::pin(granted.send(x, bytes, payload, want, ctx)).await,
        Judged::Answered(answer) => Ok(*answer),
    }
}

/// What the `judge` stages made of a request: it goes on to its back with what they
/// granted it, or it is answered already (a notification swallowed, a question asked).
enum Judged {
    Go(Granted),
    Answered(Box<Response<GateBody>>),
}

/// The route's `judge` stages, with the back's `way` open: what the payload may do (a
/// notification the policy does not pass is answered 202 and goes nowhere), how much, and
/// who says yes to it.
async fn judge<'s>(
    x: Exchange<'_, 's>,
    stages: &Stages,
    way: back::Way,
    bytes: &Bytes,
    payload: &Payload<'_>,
    want: Want,
    ctx: &mut Ctx<'s>,
) -> Result<Judged, GateError> {
    let (live, profile) = (x.live, x.profile);
    let mut granted = Granted {
        way,
        admitted: limits::Admitted::unlimited(profile),
    };
    for stage in &stages.judge {
        match stage {
            Judge::Policy => {
                let says = granted.way.says(x);
                if let policy::Admit::Swallow = policy::admit(live, profile, &says, payload)? {
                    let swallowed = respond::empty(StatusCode::ACCEPTED, &ctx.request_id);
                    return Ok(Judged::Answered(Box::new(swallowed)));
                }
            }
            Judge::Deprecated => count_deprecated(x.gw, live, payload, ctx),
            Judge::Limits => {
                granted.admitted = limits::admit(live, profile, x.peer, ctx, payload).await?;
            }
            // Only a call a rule holds is asked about (`approvals::find`).
            Judge::Ask if ctx.approval.is_some() => {
                granted = match Box::pin(approvals::ask(x, payload, ctx, granted)).await? {
                    approvals::Asked::GoOn(granted) => granted,
                    // The front that holds the client asks it.
                    approvals::Asked::Ask(question, granted) => {
                        let asking = front::ask(x, bytes, payload, want, ctx, question, granted);
                        return Ok(Judged::Answered(Box::new(Box::pin(asking).await?)));
                    }
                };
            }
            Judge::Ask => {}
        }
    }
    Ok(Judged::Go(granted))
}

/// What the stages granted a call: its back's way, and what the limits admitted. A call
/// held for an approval (`resume`) keeps it until it goes on.
struct Granted {
    way: back::Way,
    admitted: limits::Admitted,
}

impl Granted {
    /// On to the back.
    async fn send<'s>(
        self,
        x: Exchange<'_, 's>,
        bytes: &Bytes,
        payload: Payload<'_>,
        want: Want,
        ctx: &mut Ctx<'s>,
    ) -> Result<Response<GateBody>, GateError> {
        self.way
            .send(x, bytes, payload, want, self.admitted, ctx)
            .await
    }
}

/// The approvals stage's first step: the rule that holds the payload's call, by what the
/// back says of its tools (a federated profile's members, by their directory; the
/// approval's records then name the member, as the call's do).
fn held<'s>(
    x: Exchange<'_, 's>,
    payload: &Payload<'_>,
    ctx: &mut Ctx<'s>,
) -> Result<(), GateError> {
    let Some(fed) = &x.profile.federation else {
        return approvals::find(x.profile, &one_upstream(x), payload, ctx);
    };
    let dir = x.gw.federation.directories.of(&x.profile.name, fed);
    let says = back::federated::MemberHints {
        live: x.live,
        fed,
        dir: &dir,
    };
    approvals::find(x.profile, &says, payload, ctx)?;
    if ctx.approval.is_some() {
        back::federated::note_member(fed, &dir, payload, ctx);
    }
    Ok(())
}

/// What the exchange's one upstream says of its tools, for policy and approval rules.
fn one_upstream<'s>(x: Exchange<'_, 's>) -> OneUpstream<'s> {
    let upstream = &x.profile.upstream;
    let state = x.live.upstream(upstream);
    OneUpstream {
        upstream,
        hints: &state.hints,
        pins: &state.pins,
        book: &x.live.config.pins,
    }
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
