//! The back for one upstream: what a request the stages let through becomes on its way to
//! one profile's upstream (HTTP or stdio), and its answer on the way back. The generations
//! meet here: a legacy client's request to a 2026-07-28 server goes over `front::legacy`
//! (mcpgate is the legacy server its client expects), a 2026-07-28 client's to a legacy
//! server over `back::legacy` (mcpgate is the legacy client that server expects), and an
//! upstream nobody has
//! probed yet is tried as the client speaks and bridged if it refuses.
//!
//! A federated profile's members are reached through this back too (`federation` opens,
//! turns and sends for the member's profile): it never calls a stage or the entry of the
//! path, so what it sends was judged once, under the names the client sees.

use super::{Ctx, Exchange, audit, forward, front, limits, respond, rounds};

pub mod federated;
pub mod legacy;
use crate::config::generation::encode_header;
use crate::config::pins::{PinKind, PinMode};
use crate::error::GateError;
use crate::http::body::GateBody;
use crate::mcp::era::Era;
use crate::mcp::jsonrpc::{self, Payload};
use crate::mcp::transport::accept::Want;
use crate::upstream::encode::Outgoing;
use crate::upstream::hints::{Hints, OneUpstream, UpstreamSays};
use crate::upstream::pins::Standing;
use crate::upstream::session::EndpointId;
use bytes::Bytes;
use http::{Method, Response};
use std::time::Duration;
use wire::fields::FieldKind;

/// How a POST crosses to its upstream, decided before the stages judge it: the bridge a
/// generation needs, and the round or task a 2026-07-28 retry continues.
pub(super) struct Ready {
    /// A legacy client's request to a 2026-07-28 server.
    bridged: Option<Box<front::legacy::Bridge>>,
    /// A 2026-07-28 client's request to a legacy server.
    to_legacy: Option<Box<legacy::ToLegacy>>,
    /// A 2026-07-28 request to an upstream of unknown generation: bridged if it refuses.
    maybe_legacy: Option<jsonrpc::MessageKind>,
    /// A legacy `initialize` to an upstream nobody has probed: bridged if it refuses.
    may_refuse: bool,
    round: Option<Box<rounds::Round>>,
    task: Option<Box<rounds::TaskRequest>>,
}

impl Ready {
    /// The generations' edges of `payload` to the exchange's upstream: the revision a
    /// legacy request names checked, and which bridge (if any) it needs.
    fn open(x: Exchange<'_, '_>, payload: &Payload<'_>, ctx: &Ctx<'_>) -> Result<Ready, GateError> {
        let (live, profile) = (x.live, x.profile);
        let mut ready = Ready {
            bridged: None,
            to_legacy: None,
            maybe_legacy: None,
            may_refuse: false,
            round: None,
            task: None,
        };
        match ctx.era {
            Era::Legacy => {
                legacy::check_revision(live, profile, payload, &x.req.fields)?;
                ready.bridged =
                    front::legacy::open(live, profile, &x.req.fields, Some(payload), ctx)?
                        .map(Box::new);
                // A legacy initialize to a server nobody has probed: its answer may show it
                // speaks only 2026-07-28, and the initialize is then bridged.
                ready.may_refuse = ready.bridged.is_none()
                    && matches!(payload, Payload::Single(m) if m.method() == Some("initialize"))
                    && front::legacy::may_refuse_legacy(live, &profile.upstream);
            }
            // A 2026-07-28 request to a server of the legacy protocol only (docs/protocol.md).
            Era::Modern => match legacy::open(live, profile, payload, ctx)? {
                legacy::Bridging::Now(b) => ready.to_legacy = Some(Box::new(b)),
                legacy::Bridging::IfRefused(b) => ready.maybe_legacy = Some(b),
                legacy::Bridging::No => {}
            },
        }
        Ok(ready)
    }

    /// [`Ready::open`], then [`Ready::turn`]: how `payload` crosses to the exchange's
    /// upstream, all of it.
    fn opened(
        x: Exchange<'_, '_>,
        payload: &Payload<'_>,
        ctx: &mut Ctx<'_>,
    ) -> Result<Ready, GateError> {
        let mut ready = Ready::open(x, payload, ctx)?;
        ready.turn(x, payload, ctx)?;
        Ok(ready)
    }

    /// A 2026-07-28 retry's round or task opened (its state sealed for this caller and
    /// upstream); a task request is recorded under the tool that made the task.
    fn turn(
        &mut self,
        x: Exchange<'_, '_>,
        payload: &Payload<'_>,
        ctx: &mut Ctx<'_>,
    ) -> Result<(), GateError> {
        if ctx.era == Era::Legacy {
            return Ok(());
        }
        self.round = rounds::prepare(x.live, x.profile, payload, ctx)?.map(Box::new);
        self.task = rounds::task(x.live, x.profile, payload, ctx)?.map(Box::new);
        if let Some(t) = &self.task {
            audit::note_task(x.gw, &t.id, &t.opened.tool, ctx);
        }
        Ok(())
    }
}

/// How a POST goes on to its back, opened before the stages judge it: to its profile's one
/// upstream as `Ready` says, or on a federated profile's way to its members.
pub(super) enum Way {
    One(Box<Ready>),
    Federated(Box<federated::Way>),
}

impl Way {
    /// Opens the way of `payload` to the exchange's back (`Ready::open` and `turn` for one
    /// upstream; `federated::open` for a federated profile).
    pub(super) async fn open<'s>(
        x: Exchange<'_, 's>,
        payload: &Payload<'_>,
        ctx: &mut Ctx<'s>,
    ) -> Result<Way, GateError> {
        if let Some(fed) = &x.profile.federation {
            // Boxed, as are the other paths only some routes take: a boxed path costs its
            // routes one allocation, the others nothing (docs/benchmarks.md).
            let way = Box::pin(federated::open(x, fed, payload, ctx)).await?;
            return Ok(Way::Federated(Box::new(way)));
        }
        Ok(Way::One(Box::new(Ready::opened(x, payload, ctx)?)))
    }

    /// What the back says of its tools (annotations, pins), by the names the client sees:
    /// for policy and approval rules.
    pub(super) fn says<'a, 's: 'a>(&'a self, x: Exchange<'a, 's>) -> Says<'a> {
        match (self, &x.profile.federation) {
            (Way::Federated(way), Some(fed)) => Says::Members(way.says(x.live, fed)),
            _ => Says::One(super::one_upstream(x)),
        }
    }

    /// Sends a POST the stages let through (`admitted`) on this way.
    pub(super) async fn send<'s>(
        self,
        x: Exchange<'_, 's>,
        bytes: &Bytes,
        payload: Payload<'_>,
        want: Want,
        admitted: limits::Admitted,
        ctx: &mut Ctx<'s>,
    ) -> Result<Response<GateBody>, GateError> {
        match self {
            Way::One(ready) => send(x, *ready, bytes, payload, want, admitted, ctx).await,
            Way::Federated(way) => {
                federated::send(x, *way, bytes, payload, want, admitted, ctx).await
            }
        }
    }
}

/// What a back says of its tools: its one upstream, or a federated profile's members.
pub(super) enum Says<'a> {
    One(OneUpstream<'a>),
    Members(federated::MemberHints<'a>),
}

impl UpstreamSays for Says<'_> {
    fn hints_of(&self, tool: &str) -> Option<Hints> {
        match self {
            Says::One(one) => one.hints_of(tool),
            Says::Members(members) => members.hints_of(tool),
        }
    }

    fn pinned(&self, kind: PinKind, name: &str) -> Option<(PinMode, Standing)> {
        match self {
            Says::One(one) => one.pinned(kind, name),
            Says::Members(members) => members.pinned(kind, name),
        }
    }
}

/// Sends a request the stages judged elsewhere (a federated profile's, to its member):
/// opened and turned for the exchange's profile, then sent.
pub(super) async fn forward<'s>(
    x: Exchange<'_, 's>,
    bytes: &Bytes,
    payload: Payload<'_>,
    want: Want,
    admitted: limits::Admitted,
    ctx: &mut Ctx<'s>,
) -> Result<Response<GateBody>, GateError> {
    let ready = Ready::opened(x, &payload, ctx)?;
    Box::pin(send(x, ready, bytes, payload, want, admitted, ctx)).await
}

/// Sends a POST that the stages let through (`admitted`) to the exchange's upstream, and
/// shapes its answer for the client.
pub(super) async fn send<'s>(
    x: Exchange<'_, 's>,
    ready: Ready,
    bytes: &Bytes,
    payload: Payload<'_>,
    want: Want,
    admitted: limits::Admitted,
    ctx: &mut Ctx<'s>,
) -> Result<Response<GateBody>, GateError> {
    let (live, profile) = (x.live, x.profile);
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
        bytes = traced(x, &bytes, at, &given, trace);
    }
    let mut pinned = None;
    if listen {
        (bytes, pinned) = listening(x, bytes, &mut shaping, ctx)?;
    }
    if let Some(round) = ready.round {
        if let Some(retry) = &round.retry {
            bytes = rounds::restore(&bytes, retry)?;
            pinned = Some(retry.endpoint);
        }
        shaping.seal_rounds(live, profile, round.issue);
    }
    let mut mcp_name = ctx.rename.as_deref().map(|n| encode_header(n).into_owned());
    if let Some(task) = ready.task {
        bytes = rounds::restore_task(&bytes, &task)?;
        pinned = Some(task.opened.endpoint);
        mcp_name = Some(encode_header(&task.opened.original).into_owned());
        shaping.show_tasks(live, profile, task.shown);
    }
    // From here the calls count as allowed; the guard records them if the client leaves
    // before their answer is back.
    let mut unanswered = audit::begin(x.gw, ctx).await?;
    let body_deadline = !shaping.long_lived();
    // Each way is awaited here, not in a block of its own: a level less of futures, moved
    // whole as each is built (docs/benchmarks.md).
    let timeout = admitted.timeout;
    let answered = if let Some(bridged) = ready.bridged {
        let sending = sending(x, ctx, shaping, bytes, timeout);
        Box::pin(front::legacy::post(x.gw, *bridged, sending, ctx)).await
    } else if let Some(down) = ready.to_legacy {
        let sending = sending(x, ctx, shaping, bytes, timeout);
        Box::pin(legacy::post(x.gw, *down, sending, ctx)).await
    } else {
        let direct = Direct {
            body: bytes,
            timeout,
            body_deadline,
            pinned,
            mcp_name,
            maybe_legacy: ready.maybe_legacy,
            may_refuse: ready.may_refuse,
        };
        direct.send(x, shaping, ctx).await
    };
    audit::answered(&mut unanswered, ctx);
    Ok(limits::hold(answered?, admitted.permits))
}

/// A request sent to the upstream as the client speaks, and what happens if the upstream
/// refuses that generation.
struct Direct {
    body: Bytes,
    timeout: Duration,
    /// Whether the deadline bounds the answer's body too (not for long-lived streams).
    body_deadline: bool,
    /// The endpoint a retry's round or a task must go back to.
    pinned: Option<EndpointId>,
    /// The `Mcp-Name` the upstream knows the call by, when not the client's.
    mcp_name: Option<String>,
    /// A 2026-07-28 request to an upstream of unknown generation: bridged if it refuses.
    maybe_legacy: Option<jsonrpc::MessageKind>,
    /// A legacy `initialize` to an upstream nobody has probed: bridged if it refuses.
    may_refuse: bool,
}

impl Direct {
    /// Sends the request; an upstream that refuses the client's generation (rarely: once
    /// per endpoint) gets it again over the bridge.
    async fn send<'s>(
        self,
        x: Exchange<'_, 's>,
        mut shaping: respond::Shaping,
        ctx: &mut Ctx<'s>,
    ) -> Result<Response<GateBody>, GateError> {
        let (live, upstream) = (x.live, &x.profile.upstream);
        let again = (self.may_refuse || self.maybe_legacy.is_some())
            .then(|| (self.body.clone(), self.timeout));
        let mut out = outgoing(x, ctx, self.body, self.timeout, self.body_deadline);
        out.pinned = self.pinned;
        out.era = ctx.era;
        out.mcp_name = self.mcp_name;
        out.who = who(ctx, upstream);
        // A stdio upstream runs a process per modern caller; its sessions are their
        // opener's.
        if live.upstream(upstream).stdio.is_some() {
            out.caller = Some(rounds::caller(ctx));
        }
        let answer = forward::send(live, upstream, &mut out).await?;
        if let (Some(down), Some((body, timeout))) = (self.maybe_legacy, &again)
            && legacy::refused_as_modern(live, upstream, &answer).await
        {
            drop(answer);
            // Read again: the request is bridged after all.
            let reread = jsonrpc::parse(body)?;
            let meta = match &reread {
                Payload::Single(m) => m.meta,
                Payload::Batch(_) => None,
            };
            let down = legacy::ToLegacy::of(down, meta, ctx)?;
            let sending = sending(x, ctx, shaping, body.clone(), *timeout);
            return Box::pin(legacy::post(x.gw, down, sending, ctx)).await;
        }
        let answer = match again.filter(|_| self.may_refuse) {
            None => answer,
            Some((body, timeout)) => {
                match front::legacy::refused_as_legacy(live, upstream, answer).await? {
                    Some(answer) => answer,
                    None => {
                        let id = ctx.rpc_id.as_deref().map(|i| i.get().to_string());
                        let bridged = front::legacy::initializing(ctx, id.as_deref());
                        let sending = sending(x, ctx, shaping, body, timeout);
                        return Box::pin(front::legacy::post(x.gw, bridged, sending, ctx)).await;
                    }
                }
            }
        };
        shaping.answered_by(answer.endpoint);
        respond::answer(x.gw, answer, shaping, upstream, ctx).await
    }
}

/// `_meta.traceparent` is a trace context like the header (docs/protocol.md): continued
/// when the header did not name one, and rewritten to this request's span.
fn traced(
    x: Exchange<'_, '_>,
    bytes: &Bytes,
    at: std::ops::Range<usize>,
    given: &str,
    trace: &mut crate::observe::trace::Context,
) -> Bytes {
    if !trace.continued()
        && !x.req.fields.has(FieldKind::Traceparent)
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
    Bytes::from(edited)
}

/// A `subscriptions/listen`: what the profile may not see is not asked for, nor tasks not
/// the caller's (docs/protocol.md). The body as narrowed, and the endpoint the caller's
/// tasks pin it to.
fn listening(
    x: Exchange<'_, '_>,
    bytes: Bytes,
    shaping: &mut respond::Shaping,
    ctx: &Ctx<'_>,
) -> Result<(Bytes, Option<EndpointId>), GateError> {
    let (live, profile) = (x.live, x.profile);
    let tasks_at = std::cell::Cell::new(None);
    let tasks = rounds::listen_tasks(live, profile, ctx, &tasks_at);
    let (narrowed, listening, shown) =
        crate::mcp::listen::prepare(&bytes, profile, &tasks).map_err(GateError::InvalidRequest)?;
    shaping.notices = Some(profile.name.clone());
    shaping.listening = Some(listening);
    if let Some(shown) = shown {
        shaping.show_tasks(live, profile, shown);
    }
    let bytes = narrowed.map_or(bytes, Bytes::from);
    Ok((bytes, tasks_at.get()))
}

/// A GET or DELETE to the exchange's upstream, once admitted: a legacy client's GET
/// stream or DELETE over the bridge, or sent as it came.
pub(super) async fn without_body<'s>(
    x: Exchange<'_, 's>,
    body_deadline: bool,
    want: Want,
    ctx: &mut Ctx<'s>,
) -> Result<Response<GateBody>, GateError> {
    let (live, profile, req) = (x.live, x.profile, x.req);
    let upstream = &profile.upstream;
    if let Some(bridged) = front::legacy::open(live, profile, &req.fields, None, ctx)? {
        // A legacy client of a 2026-07-28 server (docs/protocol.md, the bridge).
        if req.method == Method::DELETE {
            return Ok(front::legacy::delete(x.gw, &bridged, &req.fields, ctx));
        }
        let mut shaping = respond::Shaping::plain(Want::Sse, live, upstream, ctx.token);
        shaping.notices = Some(profile.name.clone());
        let sending = sending(x, ctx, shaping, Bytes::new(), upstream.timeout);
        return Box::pin(front::legacy::stream(x.gw, bridged, sending, ctx)).await;
    }
    let mut out = outgoing(x, ctx, Bytes::new(), upstream.timeout, body_deadline);
    out.who = who(ctx, upstream);
    // A stdio upstream's sessions are their opener's.
    if live.upstream(upstream).stdio.is_some() {
        out.caller = Some(rounds::caller(ctx));
    }
    let answer = forward::send(live, upstream, &mut out).await?;
    let mut shaping = respond::Shaping::plain(want, live, upstream, ctx.token);
    if req.method == Method::GET {
        shaping.notices = Some(profile.name.clone());
    }
    respond::answer(x.gw, answer, shaping, upstream, ctx).await
}

/// The request as it goes upstream: `timeout` is its deadline, and `body_deadline` says
/// whether that bounds the answer's body too (not for long-lived streams).
fn outgoing<'a>(
    x: Exchange<'a, '_>,
    ctx: &'a Ctx<'_>,
    body: Bytes,
    timeout: Duration,
    body_deadline: bool,
) -> Outgoing<'a> {
    let req = x.req;
    Outgoing {
        method: req.method.clone(),
        timeout,
        body_deadline,
        query: req.target.query(),
        fields: &req.fields,
        body,
        forwarded_for: &x.peer.forwarded_for,
        proto: ctx.proto,
        request_id: &ctx.request_id,
        underscores: x.live.server.underscores_in_headers,
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

/// A bridged request's parts (docs/protocol.md, the bridge): what `outgoing` takes, owned
/// where it would borrow the context.
fn sending<'a, 's: 'a>(
    x: Exchange<'a, 's>,
    ctx: &Ctx<'_>,
    shaping: respond::Shaping,
    body: Bytes,
    timeout: Duration,
) -> front::legacy::Sending<'a> {
    front::legacy::Sending {
        live: x.live,
        profile: x.profile,
        shaping,
        fields: &x.req.fields,
        query: x.req.target.query(),
        forwarded_for: &x.peer.forwarded_for,
        proto: ctx.proto,
        request_id: ctx.request_id.clone(),
        trace: ctx.trace.as_deref().map(|t| {
            let t: &crate::http::traceparent::Context = t;
            t.clone()
        }),
        timeout,
        body,
        who: who(ctx, &x.profile.upstream),
    }
}

/// Who calls, for an upstream with `identity` (docs/oauth.md); `None` for one without. The
/// token id, else the OAuth caller's subject (its client when it has none) with its
/// client, else `anonymous` (a route without authentication); with the route's profile.
fn who(
    ctx: &Ctx<'_>,
    upstream: &crate::config::Upstream,
) -> Option<crate::upstream::identity::Who> {
    use std::sync::Arc;
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
