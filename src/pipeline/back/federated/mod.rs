//! The federation stage (docs/federation.md): a profile with `upstreams = [...]` serves its members
//! as one server. Its request has been routed, authenticated, read and its headers
//! checked; here it is judged by the profile's policy and limits under the names the
//! client sees, then
//!
//! - a list (`tools/list`, `prompts/list`, `resources/list`,
//!   `resources/templates/list`) goes to every member at once, each with its own cursor,
//!   and the answers are merged (`mcp::federation::lists`) under a sealed cursor; a member
//!   that fails or passes `[transport] fanout_timeout` is named in
//!   `_meta["mcpgate/unavailable"]`;
//! - `server/discover` goes to every member, and the answers are merged; a listen opens
//!   at every member and their streams are merged (`streams`);
//! - a call (`tools/call`, `prompts/get`, `completion/complete`) goes to the member whose
//!   name it is, with the member's own name (and `Mcp-Name`); a `resources/read` to the
//!   member whose list or template holds its URI;
//! - a name no member is known to show makes mcpgate read the members' lists itself, at
//!   most once a second ([`REREAD_AFTER`]), before it is refused as unknown.
//!
//! What goes to a member goes through the rest of the request path (`checked`) with the
//! member's profile: the member's transport, its replicas, the bridge to a legacy member,
//! the seals of its `requestState` and task ids (which name the member's profile, so they
//! open for no other). A legacy client's session over the members is `legacy`'s.

mod everyone;
mod fan;
mod legacy;
mod listing;
mod own;
mod streams;

pub use own::{own_lists, probe};

use crate::config::Profile;
use crate::config::federation::{Federation, Member};
use crate::config::pins::{PinKind, PinMode};
use crate::error::{GateError, Refusal, code};
use crate::gateway::{Gateway, Live};
use crate::http::body::GateBody;
use crate::http::request::{ClientRequest, Peer};
use crate::mcp::era::Era;
use crate::mcp::federation::directory::{self, Directory};
use crate::mcp::jsonrpc::{self, ListKind, MessageKind, Payload, ToolName};
use crate::mcp::transport::accept::Want;
use crate::pipeline::{Ctx, Exchange, back, limits, respond};
use crate::upstream::hints::{Hints, OneUpstream, UpstreamSays};
use crate::upstream::pins::Standing;
use bytes::Bytes;
use fan::renamed;
use http::{Response, StatusCode};
use std::sync::Arc;
use std::time::Instant;

/// Opens a POST's way to the federated profile's members, before the stages judge it: a
/// legacy client's session over them (404, initialize anew, when its id does not open),
/// the directory its names are routed by, and the member a call goes to noted for its
/// records. Annotation rules, pins and approvals judge a call by what its member says of
/// the tool or prompt: a name the directory does not know yet is looked for first.
pub(in crate::pipeline) async fn open<'s>(
    x: Exchange<'_, 's>,
    fed: &'s Arc<Federation>,
    payload: &Payload<'_>,
    ctx: &mut Ctx<'s>,
) -> Result<Way, GateError> {
    let (live, profile) = (x.live, x.profile);
    let m = single(payload)?;
    let session = match ctx.era {
        Era::Legacy => legacy::open(live, profile, fed, &x.req.fields, ctx)?,
        Era::Modern => None,
    };
    let dir = x.gw.federation.directories.of(&profile.name, fed);
    let pinned = fed
        .members
        .iter()
        .any(|m| m.profile.upstream.pin != PinMode::Off);
    let lookup = match (m.method(), &m.tool, &m.target) {
        (Some("tools/call"), Some(ToolName::Name(name)), _)
            if pinned || profile.needs_hints(name) || ctx.approval.is_some() =>
        {
            Some((ListKind::Tools, name))
        }
        (Some("prompts/get"), _, Some(ToolName::Name(name))) if pinned => {
            Some((ListKind::Prompts, name))
        }
        _ => None,
    };
    if let Some((kind, name)) = lookup {
        let at = At {
            fed,
            dir: &dir,
            session: session.as_ref(),
        };
        let _ = at.fan(x, m.meta).by_name(kind, name, ctx).await;
    }
    // Its refusal or approval records name the member it would go to, as every record of
    // a federated call does (docs/federation.md).
    note_member(fed, &dir, payload, ctx);
    Ok(Way { dir, session })
}

/// A federated POST's way to its members, opened before the stages judged it (and kept
/// while its call is held for an approval: `front::legacy::resume`): the directory its name is
/// routed by, a legacy client's session over the members.
pub(in crate::pipeline) struct Way {
    dir: directory::Handle,
    session: Option<legacy::Session>,
}

impl Way {
    /// What the members say of their tools, by the names the client sees.
    pub(in crate::pipeline) fn says<'a>(
        &'a self,
        live: &'a Live,
        fed: &'a Federation,
    ) -> MemberHints<'a> {
        MemberHints {
            live,
            fed,
            dir: &self.dir,
        }
    }
}

/// Where a federated request is served: its profile's federation, the directory of its
/// members' names, and a legacy client's session over them.
struct At<'a, 's> {
    fed: &'s Arc<Federation>,
    dir: &'a Directory,
    session: Option<&'a legacy::Session>,
}

impl<'a, 's> At<'a, 's> {
    fn fan(&self, x: Exchange<'a, 's>, meta: Option<&'a str>) -> Fan<'a, 's> {
        Fan {
            gw: x.gw,
            live: x.live,
            profile: x.profile,
            fed: self.fed,
            dir: self.dir,
            peer: x.peer,
            req: x.req,
            meta,
            session: self.session,
        }
    }
}

/// Sends a POST the stages let through (`admitted`) on its `way` to the members.
pub(in crate::pipeline) async fn send<'s>(
    x: Exchange<'_, 's>,
    way: Way,
    bytes: &Bytes,
    payload: Payload<'_>,
    want: Want,
    admitted: limits::Admitted,
    ctx: &mut Ctx<'s>,
) -> Result<Response<GateBody>, GateError> {
    let Some(fed) = &x.profile.federation else {
        return Err(GateError::NoRoute);
    };
    let at = At {
        fed,
        dir: &way.dir,
        session: way.session.as_ref(),
    };
    let meta = single(&payload)?.meta;
    at.fan(x, meta)
        .serve(bytes, payload, want, admitted, ctx)
        .await
}

impl<'s> Fan<'_, 's> {
    /// A request the stages let through (`admitted`), served by the federated profile: an
    /// answer or notification in a legacy session, a legacy session's own methods, a list,
    /// a listen or discover of every member, or a request for one member.
    async fn serve(
        &self,
        bytes: &Bytes,
        payload: Payload<'_>,
        want: Want,
        admitted: limits::Admitted,
        ctx: &mut Ctx<'s>,
    ) -> Result<Response<GateBody>, GateError> {
        let m = single(&payload)?;
        let method = m.method().unwrap_or("");
        match (m.kind, self.session) {
            (MessageKind::Request, _) => {}
            // The client's answer to a member's question, by the id mcpgate gave it.
            (MessageKind::Response, Some(s)) => {
                return Box::pin(self.answer(s, m, bytes, ctx)).await;
            }
            // Told to every member the session has opened.
            (MessageKind::Notification, Some(s)) => {
                Box::pin(self.tell(s, bytes, ctx)).await;
                return Ok(respond::empty(StatusCode::ACCEPTED, &ctx.request_id));
            }
            // A 2026-07-28 server has no session to tell of a notification.
            _ => return Ok(respond::empty(StatusCode::ACCEPTED, &ctx.request_id)),
        }
        let id = m.id_text().unwrap_or("null");
        if ctx.era == Era::Legacy {
            let ok = || format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#);
            match (method, self.session) {
                ("initialize", None) => {
                    return Box::pin(self.initialize(m, bytes, want, ctx)).await;
                }
                ("initialize", Some(_)) => {
                    return Err(GateError::InvalidRequest(
                        "the session is initialized already".into(),
                    ));
                }
                ("ping", _) => return Ok(respond::own(ok(), want, &ctx.request_id)),
                ("logging/setLevel", Some(s)) => {
                    Box::pin(self.tell(s, bytes, ctx)).await;
                    return Ok(respond::own(ok(), want, &ctx.request_id));
                }
                ("server/discover" | "subscriptions/listen", _) => {
                    return Err(not_found(ctx, method));
                }
                _ => {}
            }
        }
        if let Some(kind) = ListKind::of(method) {
            let json = Box::pin(self.list(kind, id, bytes, ctx)).await?;
            return Ok(respond::own(json, want, &ctx.request_id));
        }
        if method == "subscriptions/listen" {
            return Box::pin(self.listen(bytes, ctx)).await;
        }
        if method == "server/discover" {
            let json = Box::pin(self.discover(id, bytes, ctx)).await?;
            return Ok(respond::own(json, want, &ctx.request_id));
        }
        if method == "completion/complete" {
            return Box::pin(self.complete(bytes, want, admitted, ctx)).await;
        }
        self.to_one(bytes, payload, want, admitted, ctx).await
    }

    /// A request for one member: a call or prompt to the member whose name it is, with the
    /// member's own name; a resource's to the member that lists it; a task's to the member
    /// that sealed its id.
    async fn to_one(
        &self,
        bytes: &Bytes,
        payload: Payload<'_>,
        want: Want,
        admitted: limits::Admitted,
        ctx: &mut Ctx<'s>,
    ) -> Result<Response<GateBody>, GateError> {
        let m = single(&payload)?;
        let method = m.method().unwrap_or("");
        let (member, rename) = match (method, &m.tool, &m.target) {
            ("tools/call", Some(ToolName::Name(name)), _) => {
                let (member, own) = self.by_name(ListKind::Tools, name, ctx).await?;
                (member, (own != **name).then_some(own))
            }
            ("prompts/get", _, Some(ToolName::Name(name))) => {
                let (member, own) = self.by_name(ListKind::Prompts, name, ctx).await?;
                (member, (own != **name).then_some(own))
            }
            (
                "resources/read" | "resources/subscribe" | "resources/unsubscribe",
                _,
                Some(ToolName::Name(uri)),
            ) => (self.by_uri(uri, ctx).await?, None),
            ("tools/call" | "prompts/get", _, _) => {
                return Err(invalid(ctx, format!("{method} needs a string name")));
            }
            ("resources/read" | "resources/subscribe" | "resources/unsubscribe", _, _) => {
                return Err(invalid(ctx, format!("{method} needs a string uri")));
            }
            _ if ctx.era == Era::Legacy => return Err(not_found(ctx, method)),
            // A task's request goes to the member whose seal its id is (docs/protocol.md),
            // which opens it again as for one upstream.
            _ if jsonrpc::is_task_method(method) => (self.by_task(m, ctx)?, None),
            _ => return Err(GateError::MethodNotFound(method.to_string())),
        };
        if self.session.is_some() {
            // A legacy session's request goes in the member's own session.
            let body = match &rename {
                Some(own) => Bytes::from(renamed(bytes, m, own)?.0),
                None => bytes.clone(),
            };
            drop(payload);
            return Box::pin(self.routed(member, body, rename.as_deref(), want, admitted, ctx))
                .await;
        }
        ctx.member = Some(&self.fed.members[member].name);
        let x = self.to_member(member, self.req);
        let Some(own) = rename else {
            return back::forward(x, bytes, payload, want, admitted, ctx).await;
        };
        // The member's own name, in the body and in `Mcp-Name`.
        let (body, splice) = renamed(bytes, m, &own)?;
        let body = Bytes::from(body);
        // The request as read, moved with the name; read again only when it cannot be.
        let moved = splice.and_then(|s| m.moved(bytes, &body, &s));
        drop(payload);
        ctx.rename = Some(own);
        let payload = match moved {
            Some(m) => Payload::Single(m),
            None => jsonrpc::parse(&body)?,
        };
        back::forward(x, &body, payload, want, admitted, ctx).await
    }
}

/// The payload's one message: a batch cannot be sent to a federated profile, whose
/// messages may go to different members.
fn single<'p, 'a>(payload: &'p Payload<'a>) -> Result<&'p jsonrpc::Message<'a>, GateError> {
    match payload {
        Payload::Single(m) => Ok(m),
        Payload::Batch(_) => Err(GateError::InvalidRequest(
            "a batch cannot be sent to a federated profile: send its messages one by one".into(),
        )),
    }
}

/// What a federated profile's members say of their tools, by the names the client sees.
pub(in crate::pipeline) struct MemberHints<'a> {
    pub live: &'a Live,
    pub fed: &'a Federation,
    pub dir: &'a Directory,
}

impl MemberHints<'_> {
    /// What the member of a shown name says of it, by its own name.
    fn member<T>(
        &self,
        kind: ListKind,
        name: &str,
        f: impl FnOnce(OneUpstream<'_>, &str) -> T,
    ) -> Option<T> {
        let names = self.dir.names(kind);
        let (m, own) = names.route(name)?;
        let upstream = &self.fed.members[m].profile.upstream;
        let state = self.live.upstream(upstream);
        let one = OneUpstream {
            upstream,
            hints: &state.hints,
            pins: &state.pins,
            book: &self.live.config.pins,
        };
        Some(f(one, own))
    }
}

impl UpstreamSays for MemberHints<'_> {
    fn hints_of(&self, tool: &str) -> Option<Hints> {
        self.member(ListKind::Tools, tool, |one, own| one.hints_of(own))?
    }

    fn pinned(&self, kind: PinKind, name: &str) -> Option<(PinMode, Standing)> {
        let list = match kind {
            PinKind::Tool => ListKind::Tools,
            PinKind::Prompt => ListKind::Prompts,
        };
        // A name no member is known to show (after the lists were read for it) is refused
        // as unknown by its route.
        self.member(list, name, |one, own| one.pinned(kind, own))?
    }
}

/// Notes in `ctx` the member a call or prompt of `payload` goes to, when the directory
/// knows its name already, for the records written before it is sent (a refusal, an
/// approval's steps).
pub(in crate::pipeline) fn note_member<'s>(
    fed: &'s Federation,
    dir: &Directory,
    payload: &Payload<'_>,
    ctx: &mut Ctx<'s>,
) {
    let Payload::Single(m) = payload else { return };
    let (kind, name) = match (m.method(), &m.tool, &m.target) {
        (Some("tools/call"), Some(ToolName::Name(n)), _) => (ListKind::Tools, n),
        (Some("prompts/get"), _, Some(ToolName::Name(n))) => (ListKind::Prompts, n),
        _ => return,
    };
    if let Some((at, _)) = dir.names(kind).route(name) {
        ctx.member = fed.members.get(at).map(|x| &*x.name);
    }
}

/// A method the federated profile does not serve, as a legacy server answers it (200
/// with the error: a 404 would end the client's session).
fn not_found(ctx: &Ctx<'_>, method: &str) -> GateError {
    GateError::Refused {
        refusals: vec![Refusal {
            id: ctx.rpc_id.clone(),
            code: code::METHOD_NOT_FOUND,
            message: format!("Method not found: {}", shown(method)),
            tool: None,
        }],
        batch: false,
    }
}

/// What a fan-out to the members needs.
struct Fan<'a, 's> {
    gw: &'a Gateway,
    live: &'s Arc<Live>,
    profile: &'s Arc<Profile>,
    fed: &'s Arc<Federation>,
    dir: &'a Directory,
    peer: &'a Peer,
    req: &'a ClientRequest,
    /// The client's `params._meta`, for the requests mcpgate makes itself.
    meta: Option<&'a str>,
    /// A legacy client's federated session: what goes to a member goes in the member's
    /// own session.
    session: Option<&'a legacy::Session>,
}

/// A refusal of the request's params (-32602), as a server answers them.
fn invalid(ctx: &Ctx<'_>, message: String) -> GateError {
    GateError::Refused {
        refusals: vec![Refusal {
            id: ctx.rpc_id.clone(),
            code: code::INVALID_PARAMS,
            message,
            tool: None,
        }],
        batch: false,
    }
}

/// A GET (a legacy session's stream) or DELETE (its end) on a federated profile.
pub(in crate::pipeline) async fn without_body<'s>(
    x: Exchange<'_, 's>,
    fed: &'s Arc<Federation>,
    ctx: &mut Ctx<'s>,
) -> Result<Response<GateBody>, GateError> {
    let (gw, live, profile, req) = (x.gw, x.live, x.profile, x.req);
    // A 2026-07-28 client has no stream of its own, nor a session to end.
    let Some(session) = legacy::open(live, profile, fed, &req.fields, ctx)? else {
        return Err(GateError::MethodNotAllowed);
    };
    let dir = gw.federation.directories.of(&profile.name, fed);
    let at = At {
        fed,
        dir: &dir,
        session: Some(&session),
    };
    let fan = at.fan(x, None);
    match req.method == http::Method::DELETE {
        true => Ok(fan.end(&session, ctx).await),
        false => fan.stream(&session, ctx).await,
    }
}

/// Names in messages are cut so a hostile name cannot bloat an error or a log line.
fn shown(name: &str) -> String {
    const MAX: usize = 128;
    match name.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &name[..i]),
        None => name.to_string(),
    }
}

/// What a call of a name no member shows gets: the error a server gives a name it does
/// not have.
fn unknown(ctx: &Ctx<'_>, kind: ListKind, name: &str) -> GateError {
    let what = match kind {
        ListKind::Prompts => "prompt",
        _ => "tool",
    };
    GateError::Refused {
        refusals: vec![Refusal {
            id: ctx.rpc_id.clone(),
            code: code::INVALID_PARAMS,
            message: format!("Unknown {what}: {}", shown(name)),
            tool: (kind == ListKind::Tools).then(|| shown(name)),
        }],
        batch: false,
    }
}

impl<'s> Ctx<'s> {
    /// The context of a request mcpgate sends to `member` as part of this one (a list
    /// fanned out): the caller's, with its own records.
    fn for_member(&self, member: &'s Member) -> Ctx<'s> {
        self.derived(Some(&member.name))
    }

    fn derived(&self, member: Option<&'s str>) -> Ctx<'s> {
        Ctx {
            request_id: self.request_id.clone(),
            route: self.route,
            token_id: self.token_id,
            rpc_id: None,
            rpc_method: None,
            tool: None,
            want: Ok(Want::Json),
            token: self.token,
            caller: self.caller.clone(),
            proto: self.proto,
            listener: self.listener,
            peer: self.peer.clone(),
            calls: Vec::new(),
            upstream_ms: None,
            started: Instant::now(),
            audit_base: None,
            access: None,
            trace: self.trace.clone(),
            era: self.era,
            first_request: None,
            member,
            rename: None,
            approval: None,
            approved: None,
            own: self.own,
        }
    }

    /// The context of a request mcpgate makes for itself while serving this one: the
    /// same route and session, told upstream as mcpgate's.
    fn as_own(&self) -> Ctx<'s> {
        let mut own = self.derived(self.member);
        own.own = true;
        own
    }
}
