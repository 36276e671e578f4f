//! A request held at a stage and resumed later, from where it was held: a legacy client's
//! call asked about on its own event stream (docs/approvals.md). What the call had
//! learned and been granted (its context, its judgment by policy and limits, how it
//! crosses to its upstream) is owned here, so the question's stream can carry it past the
//! end of the request's stages; approved, the call goes on to its back and its records
//! are written as any call's. It never goes through the stages again.

use crate::config::{Profile, Route};
use crate::gateway::{Gateway, Live};
use crate::http::body::GateBody;
use crate::http::request::{ClientBody, ClientRequest, Peer};
use crate::mcp::jsonrpc;
use crate::mcp::transport::accept::Want;
use crate::observe::log;
use crate::pipeline::{Ctx, Exchange, Granted, finish};
use bytes::Bytes;
use http::{Method, Response};
use std::sync::Arc;
use std::time::Instant;
use wire::fields::FieldKind;

/// What a request's context borrows from its snapshot, owned.
struct Names {
    route: Option<Arc<Route>>,
    token_id: Option<Box<str>>,
    listener: Box<str>,
    member: Option<Box<str>>,
}

/// A call held for a person's answer, with all it needs to go on.
pub(in crate::pipeline) struct Later {
    gw: Arc<Gateway>,
    live: Arc<Live>,
    profile: Arc<Profile>,
    peer: Peer,
    req: ClientRequest,
    bytes: Bytes,
    want: Want,
    names: Names,
    ctx: Ctx<'static>,
    rest: Granted,
}

impl Later {
    /// Holds the request of `x` (its body `bytes`), taking from `ctx` the call's records,
    /// which are written when it goes on (or never, if it does not).
    pub(super) fn hold(
        gw: Arc<Gateway>,
        x: Exchange<'_, '_>,
        bytes: &Bytes,
        want: Want,
        ctx: &mut Ctx<'_>,
        rest: Granted,
    ) -> Later {
        let names = Names {
            route: ctx.route.cloned(),
            token_id: ctx.token_id.map(Box::from),
            listener: ctx.listener.into(),
            member: ctx.member.map(Box::from),
        };
        let kept = Ctx {
            request_id: ctx.request_id.clone(),
            route: None,
            token_id: None,
            rpc_id: ctx.rpc_id.clone(),
            rpc_method: ctx.rpc_method.clone(),
            tool: ctx.tool.clone(),
            want: ctx.want,
            token: ctx.token,
            caller: ctx.caller.clone(),
            proto: ctx.proto,
            listener: "",
            peer: ctx.peer.clone(),
            calls: std::mem::take(&mut ctx.calls),
            upstream_ms: None,
            started: ctx.started,
            audit_base: ctx.audit_base.clone(),
            access: ctx.access.clone(),
            // A span of its own when it goes on (`go_on`), not the asking request's again.
            trace: None,
            era: ctx.era,
            first_request: ctx.first_request.clone(),
            member: None,
            rename: ctx.rename.clone(),
            approval: ctx.approval.clone(),
            approved: None,
            own: ctx.own,
        };
        Later {
            gw,
            live: x.live.clone(),
            profile: x.profile.clone(),
            peer: x.peer.clone(),
            req: ClientRequest {
                method: Method::POST,
                target: x.req.target.clone(),
                fields: super::copy_fields(&x.req.fields),
                body: ClientBody::Read(bytes.clone()),
            },
            bytes: bytes.clone(),
            want,
            names,
            ctx: kept,
            rest,
        }
    }

    /// The call, approved `by` someone: sent on to its back, its answer shaped, its records
    /// written and its log line made as the request's own would have been.
    pub(super) async fn go_on(self, by: &str) -> Response<GateBody> {
        let Later {
            gw,
            live,
            profile,
            peer,
            req,
            bytes,
            want,
            names,
            ctx,
            rest,
        } = self;
        let mut ctx = Ctx {
            route: names.route.as_ref(),
            token_id: names.token_id.as_deref(),
            listener: &names.listener,
            member: names.member.as_deref(),
            approved: Some(by.into()),
            started: Instant::now(),
            trace: gw
                .tracer
                .as_ref()
                .map(|t| Box::new(t.begin(req.fields.all(FieldKind::Traceparent)))),
            ..ctx
        };
        let x = Exchange {
            gw: &gw,
            live: &live,
            profile: &profile,
            peer: &peer,
            req: &req,
        };
        let id = ctx.request_id.clone();
        let span = log::request_span(&id);
        let sent = async {
            let payload = jsonrpc::parse(&bytes)?;
            rest.send(x, &bytes, payload, want, &mut ctx).await
        };
        let result = log::in_request(id.clone(), span.clone(), sent).await;
        let _entered = span.enter();
        let _in = log::enter_request(&id);
        finish::finish(&gw, &live, &ctx, &Method::POST, result)
    }
}
