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

mod legacy;
mod streams;

use super::{Ctx, Exchange, back, judge, limits, respond};
use crate::config::Profile;
use crate::config::federation::{Federation, Member};
use crate::config::generation::{MODERN, encode_header};
use crate::config::pins::{PinKind, PinMode};
use crate::error::{GateError, Refusal, code};
use crate::gateway::{Gateway, Live};
use crate::http::body::GateBody;
use crate::http::request::{ClientBody, ClientRequest, Peer};
use crate::mcp::era::Era;
use crate::mcp::federation::directory::{Directory, REREAD_AFTER, place};
use crate::mcp::federation::lists::{self, Answer, Page};
use crate::mcp::jsonrpc::{self, ListKind, MessageKind, Payload, Splice, ToolName};
use crate::mcp::pointer::Entries;
use crate::mcp::task_ids;
use crate::mcp::transport::accept::Want;
use crate::mcp::transport::relay;
use crate::upstream::hints::{Hints, OneUpstream, UpstreamSays, item_hints};
use crate::upstream::pins::Standing;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;
use wire::fields::{FieldKind, Fields};

/// The most pages of one member's list mcpgate reads when it reads the lists itself.
const MAX_PAGES: usize = 16;

pub(super) async fn post<'s>(
    x: Exchange<'_, 's>,
    fed: &'s Arc<Federation>,
    bytes: &Bytes,
    payload: Payload<'_>,
    want: Want,
    ctx: &mut Ctx<'s>,
) -> Result<Response<GateBody>, GateError> {
    let (gw, live, profile, peer, req) = (x.gw, x.live, x.profile, x.peer, x.req);
    let Payload::Single(m) = &payload else {
        return Err(GateError::InvalidRequest(
            "a batch cannot be sent to a federated profile: send its messages one by one".into(),
        ));
    };
    // A legacy client's session: 404 (initialize anew) when its id does not open.
    let session = match ctx.era {
        Era::Legacy => legacy::open(live, profile, fed, &req.fields, ctx)?,
        Era::Modern => None,
    };
    super::audit::note_calls(gw, &payload, ctx);
    let dir = gw.directories.of(&profile.name, fed);
    let fan = Fan {
        gw,
        live,
        profile,
        fed,
        dir: &dir,
        peer,
        req,
        meta: m.meta,
        session: session.as_ref(),
    };
    // Annotation rules and pins judge a call by what its member says of the tool or
    // prompt, and an approval's records name the member: a name the directory does not
    // know yet is looked for first.
    let pinned = fed
        .members
        .iter()
        .any(|m| m.profile.upstream.pin != PinMode::Off);
    match (m.method(), &m.tool, &m.target) {
        (Some("tools/call"), Some(ToolName::Name(name)), _)
            if pinned || profile.needs_hints(name) || ctx.approval.is_some() =>
        {
            let _ = fan.by_name(ListKind::Tools, name, ctx).await;
        }
        (Some("prompts/get"), _, Some(ToolName::Name(name))) if pinned => {
            let _ = fan.by_name(ListKind::Prompts, name, ctx).await;
        }
        _ => {}
    }
    let hints = MemberHints {
        live,
        fed,
        dir: &dir,
    };
    // Its refusal or approval records name the member it would go to, as every record of
    // a federated call does (docs/federation.md).
    note_member(fed, &dir, &payload, ctx);
    let Some(admitted) = judge(x, &payload, &hints, ctx).await? else {
        return Ok(respond::empty(StatusCode::ACCEPTED, &ctx.request_id));
    };
    if let Some(asked) = super::approvals::ask(x, bytes, &payload, want, ctx).await? {
        return Ok(asked);
    }
    let method = m.method().unwrap_or("");
    match (m.kind, &session) {
        (MessageKind::Request, _) => {}
        // The client's answer to a member's question, by the id mcpgate gave it.
        (MessageKind::Response, Some(s)) => return fan.answer(s, m, bytes, ctx).await,
        // Told to every member the session has opened.
        (MessageKind::Notification, Some(s)) => {
            fan.tell(s, bytes, ctx).await;
            return Ok(respond::empty(StatusCode::ACCEPTED, &ctx.request_id));
        }
        // A 2026-07-28 server has no session to tell of a notification.
        _ => return Ok(respond::empty(StatusCode::ACCEPTED, &ctx.request_id)),
    }
    let id = m.id_text().unwrap_or("null");
    if ctx.era == Era::Legacy {
        match (method, &session) {
            ("initialize", None) => return fan.initialize(m, bytes, want, ctx).await,
            ("initialize", Some(_)) => {
                return Err(GateError::InvalidRequest(
                    "the session is initialized already".into(),
                ));
            }
            ("ping", _) => {
                let json = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#);
                return Ok(respond::own(json, want, &ctx.request_id));
            }
            ("logging/setLevel", Some(s)) => {
                fan.tell(s, bytes, ctx).await;
                let json = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#);
                return Ok(respond::own(json, want, &ctx.request_id));
            }
            ("server/discover" | "subscriptions/listen", _) => {
                return Err(not_found(ctx, method));
            }
            _ => {}
        }
    }
    if let Some(kind) = ListKind::of(method) {
        let json = fan.list(kind, id, bytes, ctx).await?;
        return Ok(respond::own(json, want, &ctx.request_id));
    }
    if method == "subscriptions/listen" {
        return fan.listen(bytes, ctx).await;
    }
    if method == "server/discover" {
        let json = fan.discover(id, bytes, ctx).await?;
        return Ok(respond::own(json, want, &ctx.request_id));
    }
    let (member, rename) = match (method, &m.tool, &m.target) {
        ("tools/call", Some(ToolName::Name(name)), _) => {
            let (member, own) = fan.by_name(ListKind::Tools, name, ctx).await?;
            (member, (own != **name).then_some(own))
        }
        ("prompts/get", _, Some(ToolName::Name(name))) => {
            let (member, own) = fan.by_name(ListKind::Prompts, name, ctx).await?;
            (member, (own != **name).then_some(own))
        }
        (
            "resources/read" | "resources/subscribe" | "resources/unsubscribe",
            _,
            Some(ToolName::Name(uri)),
        ) => (fan.by_uri(uri, ctx).await?, None),
        ("completion/complete", _, _) => return fan.complete(bytes, want, admitted, ctx).await,
        ("tools/call" | "prompts/get", _, _) => {
            return Err(invalid(ctx, format!("{method} needs a string name")));
        }
        ("resources/read" | "resources/subscribe" | "resources/unsubscribe", _, _) => {
            return Err(invalid(ctx, format!("{method} needs a string uri")));
        }
        _ if ctx.era == Era::Legacy => return Err(not_found(ctx, method)),
        // A task's request goes to the member whose seal its id is (docs/protocol.md), which opens
        // it again as for one upstream.
        _ if jsonrpc::is_task_method(method) => (fan.by_task(m, ctx)?, None),
        _ => return Err(GateError::MethodNotFound(method.to_string())),
    };
    if session.is_some() {
        // A legacy session's request goes in the member's own session.
        let body = match &rename {
            Some(own) => Bytes::from(renamed(bytes, m, own)?.0),
            None => bytes.clone(),
        };
        drop(payload);
        return fan
            .routed(member, body, rename.as_deref(), want, admitted, ctx)
            .await;
    }
    let member = &fed.members[member];
    ctx.member = Some(&member.name);
    let x = Exchange {
        profile: &member.profile,
        ..x
    };
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
pub(super) fn note_member<'s>(
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

/// The body with the call's name (`params.name`) made the member's own `own`, and where it
/// changed when that was in place.
fn renamed(
    bytes: &[u8],
    m: &jsonrpc::Message<'_>,
    own: &str,
) -> Result<(Vec<u8>, Option<Splice>), GateError> {
    let given = match (&m.tool, &m.target) {
        (Some(ToolName::Name(n)), _) | (None, Some(ToolName::Name(n))) => n,
        _ => return Err(GateError::InvalidRequest("no name to route by".into())),
    };
    let quoted = serde_json::to_string(own).expect("a string serializes");
    if let Cow::Borrowed(name) = given {
        // The name as the client wrote it, without escapes: its quotes are either side.
        let start = name.as_ptr() as usize - bytes.as_ptr() as usize;
        let end = start + name.len();
        if start >= 1 && bytes.get(start - 1) == Some(&b'"') && bytes.get(end) == Some(&b'"') {
            let mut out = Vec::with_capacity(bytes.len() + quoted.len());
            out.extend_from_slice(&bytes[..start - 1]);
            out.extend_from_slice(quoted.as_bytes());
            out.extend_from_slice(&bytes[end + 1..]);
            let splice = Splice {
                cut: start - 1..end + 1,
                put: quoted.len(),
            };
            return Ok((out, Some(splice)));
        }
    }
    // A name written with escapes: the message is read and written whole (rare).
    let mut v: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| GateError::Parse(format!("the request cannot be read again: {e}")))?;
    v["params"]["name"] = serde_json::Value::String(own.to_string());
    Ok((serde_json::to_vec(&v).expect("a value serializes"), None))
}

/// The client's request with `body`, as it goes to a member: `method` (for a request
/// mcpgate makes, which then wants JSON) and `name` replace `Mcp-Method` and `Mcp-Name`,
/// and `session` (the member's own, in a legacy session) the client's `Mcp-Session-Id`.
fn sub_request(
    req: &ClientRequest,
    body: &Bytes,
    method: Option<&str>,
    name: Option<&str>,
    session: Option<&str>,
) -> ClientRequest {
    let mut map = HeaderMap::with_capacity(req.fields.len() + 2);
    for (kind, n, v) in req.fields.iter() {
        let replaced = match kind {
            FieldKind::ContentLength => true,
            FieldKind::McpMethod | FieldKind::Accept => method.is_some(),
            FieldKind::McpName => method.is_some() || name.is_some(),
            FieldKind::McpSessionId => true,
            _ => false,
        };
        if replaced {
            continue;
        }
        if let (Ok(n), Ok(v)) = (http::HeaderName::from_bytes(n), HeaderValue::from_bytes(v)) {
            map.append(n, v);
        }
    }
    if let Some(method) = method {
        map.insert(
            http::header::ACCEPT,
            HeaderValue::from_static("application/json"),
        );
        if let Ok(v) = HeaderValue::from_str(method) {
            map.insert("mcp-method", v);
        }
    }
    if let Some(name) = name
        && let Ok(v) = HeaderValue::from_str(&encode_header(name))
    {
        map.insert("mcp-name", v);
    }
    // A member that gave no session id (a stateless server) is sent none.
    if let Some(session) = session.filter(|s| !s.is_empty())
        && let Ok(v) = HeaderValue::from_str(session)
    {
        map.insert("mcp-session-id", v);
    }
    ClientRequest {
        method: http::Method::POST,
        target: req.target.clone(),
        fields: Fields::from_map(&map),
        body: ClientBody::Read(body.clone()),
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

impl<'s> Fan<'_, 's> {
    /// The exchange as it goes on to member `m`: `req` as the member is sent it.
    fn to_member<'b>(&'b self, m: usize, req: &'b ClientRequest) -> Exchange<'b, 's> {
        Exchange {
            gw: self.gw,
            live: self.live,
            profile: &self.fed.members[m].profile,
            peer: self.peer,
            req,
        }
    }
}

/// A request to one member of a fan-out: its JSON answer, or why there is none.
type Asked = Result<Bytes, String>;

impl<'s> Fan<'_, 's> {
    /// Sends `body` to member `m` through the rest of the request path, in the member's
    /// own session when the client is in a legacy one (opened now if this replica has
    /// none for it). `method`: a request mcpgate makes itself (its answer is JSON).
    async fn send(
        &self,
        m: usize,
        method: Option<&str>,
        body: Bytes,
        want: Want,
        ctx: &Ctx<'s>,
    ) -> Result<Response<GateBody>, String> {
        let session = match self.session {
            Some(s) => Some(self.member_session(s, m, ctx).await?),
            None => None,
        };
        let answer = self
            .send_with(m, method, body, want, session.as_deref(), ctx)
            .await?;
        if let (Some(s), true) = (self.session, answer.status() == StatusCode::NOT_FOUND) {
            // The member ended its session: the next request opens another.
            self.gw.fed_sessions.forget(&s.key, m);
        }
        Ok(answer)
    }

    /// [`Fan::send`] in the member session `session`, or in none.
    async fn send_with(
        &self,
        m: usize,
        method: Option<&str>,
        body: Bytes,
        want: Want,
        session: Option<&str>,
        ctx: &Ctx<'s>,
    ) -> Result<Response<GateBody>, String> {
        let member = &self.fed.members[m];
        let mut sub_ctx = ctx.for_member(member);
        sub_ctx.want = Ok(want);
        // The client's own request when it asks the same of the member (its list, out of
        // a session): nothing to rewrite in its headers.
        let same = session.is_none()
            && method.is_none_or(|m| ctx.rpc_method.as_deref() == Some(m))
            && !self.req.fields.has(FieldKind::McpName);
        let owned;
        let sub = match same {
            true => self.req,
            false => {
                owned = sub_request(self.req, &body, method, None, session);
                &owned
            }
        };
        let payload = jsonrpc::parse(&body).map_err(|e| e.to_string())?;
        // What the member's request says of itself (its id and method), as the stages
        // after this one read it from the context.
        sub_ctx.note(&payload);
        let admitted = limits::Admitted {
            permits: Vec::new(),
            timeout: member.profile.upstream.timeout,
        };
        back::forward(
            self.to_member(m, sub),
            &body,
            payload,
            want,
            admitted,
            &mut sub_ctx,
        )
        .await
        .map_err(|e| e.to_string())
    }

    /// Sends `body` (a request of `method` mcpgate makes) to member `m` and reads its
    /// answer as JSON, within `[transport] fanout_timeout`.
    async fn ask(&self, m: usize, method: &str, body: Bytes, ctx: &Ctx<'s>) -> Asked {
        let asked = async {
            let answer = self.send(m, Some(method), body, Want::Json, ctx).await?;
            let status = answer.status();
            let text = relay::json_text(answer.into_body(), None)
                .await
                .map_err(|e| e.to_string())?;
            if text.is_empty() {
                return Err(format!("an answer without a body ({status})"));
            }
            Ok(text)
        };
        match tokio::time::timeout(self.live.config.fanout_timeout, asked).await {
            Ok(r) => r,
            Err(_) => Err("no answer within fanout_timeout".into()),
        }
    }

    /// A `kind` list of every member, merged. The client's cursor, if any, is the sealed
    /// one of an earlier page: only the members with more are asked.
    async fn list(
        &self,
        kind: ListKind,
        id: &str,
        bytes: &Bytes,
        ctx: &Ctx<'s>,
    ) -> Result<String, GateError> {
        let given = cursor_of(bytes).map_err(|e| invalid(ctx, e))?;
        if given.is_none() && !self.dir.complete(kind) {
            // Before a first page is shown, every member's whole list is read once, so a
            // name another page holds cannot change what this page's names are.
            self.read_lists(&[kind], ctx).await;
        }
        let cursors: Vec<(usize, Option<String>)> = match &given {
            None => (0..self.fed.members.len()).map(|m| (m, None)).collect(),
            Some(sealed) => self.open_cursor(sealed, kind, ctx)?,
        };
        let method = kind_method(kind);
        let asks = cursors.iter().map(|(m, cursor)| {
            // The client's request as it is, unless it or the member has a cursor.
            let body = match (&given, cursor) {
                (None, None) => Some(bytes.clone()),
                _ => with_cursor(bytes, cursor.as_deref()).map(Bytes::from),
            };
            async move {
                match body {
                    Some(b) => self.ask(*m, method, b, ctx).await,
                    None => Err("the request cannot be rewritten".into()),
                }
            }
        });
        let answers = futures_util::future::join_all(asks).await;
        let mut pages: Vec<(usize, Page<'_>)> = Vec::new();
        let mut unavailable: Vec<&str> = Vec::new();
        let mut next: Vec<(usize, String)> = Vec::new();
        for ((m, cursor), answer) in cursors.iter().zip(&answers) {
            let name = &*self.fed.members[*m].name;
            let text = match answer {
                Ok(t) => std::str::from_utf8(t).map_err(|_| "not UTF-8".to_string()),
                Err(e) => Err(e.clone()),
            };
            let page = match text.map(|t| lists::read(t, kind)) {
                Ok(Answer::Page(p)) => p,
                Ok(Answer::Lacks) => continue,
                Ok(Answer::Failed(why)) | Err(why) => {
                    self.unavailable(&self.fed.members[*m].name, &why);
                    unavailable.push(name);
                    continue;
                }
            };
            let member = &self.fed.members[*m].name;
            self.gw
                .metrics
                .federation_member(&self.profile.name, member, true);
            self.gw
                .directories
                .answered(&self.profile.name, member, Ok(()));
            let last = page.next.is_none();
            self.dir.learn(
                self.fed,
                kind,
                *m,
                cursor.is_none(),
                last,
                &lists::names(&page),
            );
            if let Some(n) = &page.next {
                next.push((*m, n.to_string()));
            }
            pages.push((*m, page));
        }
        let cursor = match next.is_empty() {
            true => None,
            false => Some(self.seal_cursor(kind, &next)?),
        };
        let names = match kind {
            ListKind::Tools | ListKind::Prompts => Some(self.dir.names(kind).clone()),
            _ => None,
        };
        // The profile's own rules, by the names the client sees, as the items are merged.
        let filter =
            crate::mcp::tools_list::ToolFilter::new(self.live.config.clone(), self.profile.clone());
        // With annotation rules a tool is judged by the annotations its item carries, and
        // its member's store learns them (by the member's own name).
        let read_hints = kind == ListKind::Tools && filter.judges_hints();
        let learned = std::cell::RefCell::new(vec![Vec::new(); self.fed.members.len()]);
        // A pinned member's names whose definitions are not approved (docs/pinning.md).
        let unpinned: Vec<Option<Arc<std::collections::HashSet<Box<str>>>>> = {
            let mut by_member = vec![None; self.fed.members.len()];
            for (m, page) in &pages {
                by_member[*m] = self.unpinned(*m, kind, page);
            }
            by_member
        };
        let keep = |m: usize, own: &str, name: &str, item: &str| {
            if unpinned[m].as_ref().is_some_and(|h| h.contains(own)) {
                return false;
            }
            if !read_hints {
                return filter.keeps_item(kind, name);
            }
            let hints = item_hints(item);
            let keep = filter.keeps_with(name, hints.as_ref().map(|(_, h)| &**h));
            learned.borrow_mut()[m].extend(hints);
            keep
        };
        let rules = lists::Rules {
            keep: &keep,
            restricts: filter.restricts(kind),
            max_ttl_ms: filter.fresh_for().as_millis() as u64,
        };
        let to = lists::Answering {
            modern: ctx.era == Era::Modern,
            kind,
            id,
            cursor: cursor.as_deref(),
            unavailable: &unavailable,
        };
        let merged = lists::merge(to, &pages, names.as_deref(), &rules);
        for (m, learned) in learned.into_inner().into_iter().enumerate() {
            let upstream = &self.fed.members[m].profile.upstream;
            self.live.upstream(upstream).hints.learn(learned);
        }
        if kind != ListKind::Tools || self.live.deprecated.is_empty() {
            return Ok(merged);
        }
        // Deprecated tools are marked (and past their sunset, left out) by the list
        // rewrite, as for one upstream.
        let rewrite = crate::mcp::tools_list::ListRewrite {
            ids: vec![(id.into(), kind)],
            discover: None,
            rounds: None,
            tasks: None,
            completes: None,
            filter,
        };
        match rewrite.apply(&merged) {
            Ok(Some(filtered)) => Ok(filtered),
            Ok(None) => Ok(merged),
            Err(e) => Err(GateError::UpstreamBadResponse(format!(
                "cannot filter the merged list: {e}"
            ))),
        }
    }

    /// The names of a member's page that its pins hide (none unless it is pinned and the
    /// list is of tools or prompts); the page is learnt either way.
    fn unpinned(
        &self,
        m: usize,
        kind: ListKind,
        page: &Page<'_>,
    ) -> Option<Arc<std::collections::HashSet<Box<str>>>> {
        let upstream = &self.fed.members[m].profile.upstream;
        let pin_kind = match kind {
            ListKind::Tools => PinKind::Tool,
            ListKind::Prompts => PinKind::Prompt,
            _ => return None,
        };
        if upstream.pin == PinMode::Off {
            return None;
        }
        let hidden = self.live.upstream(upstream).pins.page(
            &upstream.name,
            upstream.pin,
            &self.live.config.pins,
            pin_kind,
            page.region.as_bytes(),
            page.items.iter().map(|i| i.get()),
        );
        (!hidden.is_empty()).then_some(hidden)
    }

    /// Logs and counts a member that did not answer a fan-out.
    fn unavailable(&self, member: &Arc<str>, why: &str) {
        tracing::warn!(%member, why, "a federated member did not answer; listed as unavailable");
        self.gw
            .metrics
            .federation_member(&self.profile.name, member, false);
        self.gw
            .directories
            .answered(&self.profile.name, member, Err(why));
    }

    fn seal_cursor(&self, kind: ListKind, next: &[(usize, String)]) -> Result<String, GateError> {
        let inner = serde_json::json!({
            "p": &*self.profile.name,
            "k": kind_method(kind),
            "m": next,
        })
        .to_string();
        self.sealer()
            .seal(&[0; 8], inner.as_bytes())
            .ok_or_else(|| {
                GateError::UpstreamBadResponse("the members' cursors are too long to seal".into())
            })
    }

    /// The members' cursors a sealed cursor holds; one that does not open, or was sealed
    /// for another profile or list, is refused (-32602).
    fn open_cursor(
        &self,
        sealed: &str,
        kind: ListKind,
        ctx: &Ctx<'_>,
    ) -> Result<Vec<(usize, Option<String>)>, GateError> {
        #[derive(serde::Deserialize)]
        struct Inner {
            p: String,
            k: String,
            m: Vec<(usize, String)>,
        }
        let bad = || invalid(ctx, "Invalid cursor".into());
        let (_, inner) = self.sealer().open(sealed.as_bytes()).ok_or_else(bad)?;
        let inner: Inner = serde_json::from_slice(&inner).map_err(|_| bad())?;
        if inner.p != *self.profile.name
            || inner.k != kind_method(kind)
            || inner.m.iter().any(|(m, _)| *m >= self.fed.members.len())
        {
            return Err(bad());
        }
        Ok(inner.m.into_iter().map(|(m, c)| (m, Some(c))).collect())
    }

    fn sealer(&self) -> &crate::upstream::session::Sealer {
        &self
            .live
            .upstream(&self.fed.members[0].profile.upstream)
            .fed_sealer
    }

    /// The member and its own name for the name a client sent; when no member is known
    /// to show it, the members' lists are read first (at most once per [`REREAD_AFTER`]).
    async fn by_name(
        &self,
        kind: ListKind,
        name: &str,
        ctx: &Ctx<'s>,
    ) -> Result<(usize, String), GateError> {
        if let Some((m, own)) = self.dir.names(kind).route(name) {
            return Ok((m, own.to_string()));
        }
        self.read_lists(&[kind], ctx).await;
        match self.dir.names(kind).route(name) {
            Some((m, own)) => Ok((m, own.to_string())),
            None => Err(unknown(ctx, kind, name)),
        }
    }

    /// The member whose task a `tasks/get|update|cancel` names: the one whose upstream
    /// sealed its id for this caller. Refused as for one upstream otherwise.
    fn by_task(&self, m: &jsonrpc::Message<'_>, ctx: &Ctx<'s>) -> Result<usize, GateError> {
        if !m.meta.is_some_and(task_ids::declares_tasks) {
            return Err(GateError::MissingTasksCapability);
        }
        let sealed = m.mcp_name.as_deref().ok_or(GateError::UnknownTask)?;
        let caller = super::rounds::caller(ctx);
        self.fed
            .members
            .iter()
            .position(|member| {
                let sealer = &self.live.upstream(&member.profile.upstream).task_sealer;
                task_ids::open(sealer, sealed, &caller).is_ok()
            })
            .ok_or(GateError::UnknownTask)
    }

    /// The member that serves `uri`.
    async fn by_uri(&self, uri: &str, ctx: &Ctx<'s>) -> Result<usize, GateError> {
        if let Some(m) = self.dir.resource_member(uri) {
            return Ok(m);
        }
        self.read_lists(&[ListKind::Resources, ListKind::ResourceTemplates], ctx)
            .await;
        self.dir
            .resource_member(uri)
            .ok_or_else(|| invalid(ctx, format!("Resource not found: {}", shown(uri))))
    }

    /// Reads every page of the `kinds` lists of every member, into the directory; not
    /// again within [`REREAD_AFTER`] of the last time (the lock makes callers that come
    /// together wait for one read).
    async fn read_lists(&self, kinds: &[ListKind], ctx: &Ctx<'s>) {
        // mcpgate's own reads, whoever's request made them happen.
        let ctx = &ctx.as_own();
        let mut read_at = self.dir.read_at.lock().await;
        let kinds: Vec<ListKind> = kinds
            .iter()
            .copied()
            .filter(|k| {
                read_at[place(*k)].is_none_or(|(t, changes)| {
                    t.elapsed() >= REREAD_AFTER || changes != self.dir.changes(*k)
                })
            })
            .collect();
        let kinds = &kinds;
        let reads = self.fed.members.iter().enumerate().flat_map(|(m, member)| {
            kinds.iter().map(move |&kind| async move {
                let mut cursor: Option<String> = None;
                for _ in 0..MAX_PAGES {
                    let body = own_request(kind_method(kind), self.meta, cursor.as_deref());
                    let text = match self.ask(m, kind_method(kind), body, ctx).await {
                        Ok(t) => t,
                        Err(why) => {
                            self.unavailable(&member.name, &why);
                            return;
                        }
                    };
                    let Ok(text) = std::str::from_utf8(&text) else {
                        return;
                    };
                    let Answer::Page(page) = lists::read(text, kind) else {
                        return;
                    };
                    let last = page.next.is_none();
                    self.dir.learn(
                        self.fed,
                        kind,
                        m,
                        cursor.is_none(),
                        last,
                        &lists::names(&page),
                    );
                    // What a pinned member lists is learnt (and its changes reported).
                    self.unpinned(m, kind, &page);
                    // The member's store learns what it says of its tools, for annotation
                    // rules.
                    let upstream = &member.profile.upstream;
                    if kind == ListKind::Tools && self.live.judges_hints(upstream) {
                        let hints = page.items.iter().filter_map(|i| item_hints(i.get()));
                        self.live.upstream(upstream).hints.learn(hints.collect());
                    }
                    match page.next {
                        Some(n) => cursor = Some(n.into_owned()),
                        None => return,
                    }
                }
            })
        });
        let changes: Vec<u64> = kinds.iter().map(|k| self.dir.changes(*k)).collect();
        futures_util::future::join_all(reads).await;
        for (kind, changes) in kinds.iter().zip(changes) {
            read_at[place(*kind)] = Some((Instant::now(), changes));
        }
    }

    /// `completion/complete`: to the member of the prompt or resource its `ref` names.
    async fn complete(
        &self,
        bytes: &Bytes,
        want: Want,
        admitted: limits::Admitted,
        ctx: &mut Ctx<'s>,
    ) -> Result<Response<GateBody>, GateError> {
        let mut v: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| GateError::Parse(format!("the request cannot be read again: {e}")))?;
        let reference = &v["params"]["ref"];
        let (member, own) = match (reference["type"].as_str(), reference["name"].as_str()) {
            (Some("ref/prompt"), Some(name)) => {
                let (m, own) = self.by_name(ListKind::Prompts, name, ctx).await?;
                (m, Some(own))
            }
            (Some("ref/resource"), _) => match reference["uri"].as_str() {
                Some(uri) => (self.by_uri(uri, ctx).await?, None),
                None => return Err(invalid(ctx, "ref needs a string uri".into())),
            },
            _ => {
                return Err(invalid(
                    ctx,
                    "completion/complete needs a ref/prompt with a name or a ref/resource with a uri"
                        .into(),
                ));
            }
        };
        if let Some(own) = own {
            v["params"]["ref"]["name"] = serde_json::Value::String(own);
        }
        let body = Bytes::from(serde_json::to_vec(&v).expect("a value serializes"));
        self.routed(member, body, None, want, admitted, ctx).await
    }

    /// A request (`body`, its names the member's own already) sent on to member `m`:
    /// `rename`, the member's own name for `Mcp-Name`. In a legacy session, in the
    /// member's own session, its questions' ids mapped.
    async fn routed(
        &self,
        m: usize,
        body: Bytes,
        rename: Option<&str>,
        want: Want,
        admitted: limits::Admitted,
        ctx: &mut Ctx<'s>,
    ) -> Result<Response<GateBody>, GateError> {
        let member = &self.fed.members[m];
        ctx.member = Some(&member.name);
        let session = match self.session {
            Some(s) => Some(
                self.member_session(s, m, ctx)
                    .await
                    .map_err(|why| unreachable(member, &why))?,
            ),
            None => None,
        };
        let sub = sub_request(self.req, &body, None, rename, session.as_deref());
        let payload = jsonrpc::parse(&body)?;
        let answer =
            back::forward(self.to_member(m, &sub), &body, payload, want, admitted, ctx).await?;
        if let (Some(s), true) = (self.session, answer.status() == StatusCode::NOT_FOUND) {
            self.gw.fed_sessions.forget(&s.key, m);
        }
        Ok(match self.session {
            Some(_) => streams::with_questions_mapped(m, in_session(answer)),
            None => answer,
        })
    }

    /// `subscriptions/listen`: one listen at every member, each with what the profile
    /// lets the client listen to; the client's stream opens once every member has
    /// acknowledged its own (or failed, or passed `fanout_timeout`), so nothing that
    /// happens after the acknowledgement is missed, and then carries what any member
    /// sends. A member's list change also makes the federation read its names anew.
    async fn listen(&self, bytes: &Bytes, ctx: &Ctx<'s>) -> Result<Response<GateBody>, GateError> {
        let (narrowed, listening, _) = crate::mcp::listen::prepare(bytes, self.profile, &|_| None)
            .map_err(GateError::InvalidRequest)?;
        let body = narrowed.map_or_else(|| bytes.clone(), Bytes::from);
        let ack = crate::mcp::to_legacy::Listen::of(&body)
            .map_err(GateError::InvalidRequest)?
            .acknowledged();
        let opens = self.fed.members.iter().enumerate().map(|(m, member)| {
            let body = body.clone();
            async move {
                let mut sub_ctx = ctx.for_member(member);
                sub_ctx.want = Ok(Want::Sse);
                let sub = sub_request(self.req, &body, None, None, None);
                let opened = async {
                    let payload = jsonrpc::parse(&body).map_err(|e| e.to_string())?;
                    sub_ctx.note(&payload);
                    let admitted = limits::Admitted {
                        permits: Vec::new(),
                        timeout: member.profile.upstream.timeout,
                    };
                    let x = self.to_member(m, &sub);
                    let answer =
                        back::forward(x, &body, payload, Want::Sse, admitted, &mut sub_ctx)
                            .await
                            .map_err(|e| e.to_string())?;
                    if answer.status() != StatusCode::OK {
                        return Err(format!("the listen was answered {}", answer.status()));
                    }
                    let mut stream = streams::MemberStream {
                        member: m,
                        body: answer.into_body(),
                        decoder: crate::mcp::transport::sse::Decoder::new(),
                        early: Vec::new(),
                    };
                    stream.until_acknowledged().await?;
                    Ok(stream)
                };
                match tokio::time::timeout(self.live.config.fanout_timeout, opened).await {
                    Ok(r) => r,
                    Err(_) => Err("no acknowledgement within fanout_timeout".into()),
                }
            }
        });
        let opened = futures_util::future::join_all(opens).await;
        let mut streams = Vec::new();
        for (member, o) in self.fed.members.iter().zip(opened) {
            match o {
                Ok(s) => streams.push(s),
                Err(why) => self.unavailable(&member.name, &why),
            }
        }
        if streams.is_empty() {
            return Err(GateError::UpstreamUnreachable(
                "no member of the federated profile opened a listen".into(),
            ));
        }
        let merged = streams::Merged {
            ack: Some(crate::mcp::transport::sse::encode_json(&ack, None)),
            streams,
            dir: self.gw.directories.shared(&self.profile.name, self.fed),
            questions: false,
        };
        let mut shaping =
            respond::Shaping::plain(Want::Sse, self.live, &self.profile.upstream, ctx.token);
        shaping.notices = Some(self.profile.name.clone());
        shaping.listening = Some(listening);
        Ok(respond::event_stream(
            self.gw,
            GateBody::Boxed(http_body_util::BodyExt::boxed_unsync(merged)),
            shaping,
            &ctx.request_id,
        ))
    }

    /// `server/discover` of every member, merged: what any member can do, the profile
    /// named as the server, each member's instructions under its name. The profile's
    /// own rules then narrow it, as for one upstream.
    async fn discover(&self, id: &str, bytes: &Bytes, ctx: &Ctx<'s>) -> Result<String, GateError> {
        let asks =
            (0..self.fed.members.len()).map(|m| self.ask(m, "server/discover", bytes.clone(), ctx));
        let answers = futures_util::future::join_all(asks).await;
        let mut results: Vec<(&str, serde_json::Value)> = Vec::new();
        let mut unavailable: Vec<&str> = Vec::new();
        for (member, answer) in self.fed.members.iter().zip(answers) {
            let result = answer.and_then(|t| {
                let v: serde_json::Value = serde_json::from_slice(&t).map_err(|e| e.to_string())?;
                match v.get("result") {
                    Some(r) if r.is_object() => Ok(r.clone()),
                    _ => Err(format!("no discover result: {}", v["error"])),
                }
            });
            match result {
                Ok(r) => results.push((&member.name, r)),
                Err(why) => {
                    self.unavailable(&member.name, &why);
                    unavailable.push(&member.name);
                }
            }
        }
        if results.is_empty() {
            return Err(GateError::UpstreamUnreachable(
                "no member of the federated profile answered".into(),
            ));
        }
        let merged = merge_discover(self.profile, id, &results, &unavailable);
        let filter = crate::mcp::tools_list::ListRewrite {
            ids: Vec::new(),
            discover: Some(id.into()),
            rounds: None,
            tasks: None,
            completes: None,
            filter: crate::mcp::tools_list::ToolFilter::new(
                self.live.config.clone(),
                self.profile.clone(),
            ),
        };
        match filter.apply(&merged) {
            Ok(out) => Ok(out.unwrap_or(merged)),
            Err(e) => Err(GateError::UpstreamBadResponse(format!(
                "cannot narrow the merged discover answer: {e}"
            ))),
        }
    }
}

/// Joins the capabilities `from` into `into`: an object's members joined, `true` where
/// either says `true`, the first member's value for anything else.
fn join(
    into: &mut serde_json::Map<String, serde_json::Value>,
    from: &serde_json::Map<String, serde_json::Value>,
) {
    use serde_json::Value;
    for (k, v) in from {
        match (into.get_mut(k), v) {
            (Some(Value::Object(a)), Value::Object(b)) => join(a, b),
            (Some(Value::Bool(a)), Value::Bool(b)) => *a |= *b,
            (Some(_), _) => {}
            (None, v) => {
                into.insert(k.clone(), v.clone());
            }
        }
    }
}

/// The merged `server/discover` answer: the versions every member supports, the
/// capabilities of all (an object's members joined, `true` where any says `true`), the
/// profile as the server, the members' instructions each under its name.
fn merge_discover(
    profile: &Profile,
    id: &str,
    results: &[(&str, serde_json::Value)],
    unavailable: &[&str],
) -> String {
    use serde_json::{Map, Value};
    let mut versions: Option<Vec<Value>> = None;
    let mut capabilities = Map::new();
    let mut instructions = Vec::new();
    let mut ttl: Option<u64> = None;
    for (member, r) in results {
        if let Some(Value::Array(v)) = r.get("supportedVersions") {
            versions = Some(match versions {
                None => v.clone(),
                Some(have) => have.into_iter().filter(|x| v.contains(x)).collect(),
            });
        }
        if let Some(Value::Object(c)) = r.get("capabilities") {
            join(&mut capabilities, c);
        }
        if let Some(Value::String(i)) = r.get("instructions") {
            instructions.push(format!("{member}: {i}"));
        }
        if let Some(t) = r.get("ttlMs").and_then(Value::as_u64) {
            ttl = Some(ttl.map_or(t, |have| have.min(t)));
        }
    }
    let mut result = Map::new();
    result.insert("resultType".into(), Value::String("complete".into()));
    result.insert(
        "supportedVersions".into(),
        Value::Array(versions.unwrap_or_else(|| vec![Value::String(MODERN.into())])),
    );
    result.insert("capabilities".into(), Value::Object(capabilities));
    result.insert(
        "serverInfo".into(),
        serde_json::json!({"name": &*profile.name, "version": env!("CARGO_PKG_VERSION")}),
    );
    if !instructions.is_empty() {
        result.insert(
            "instructions".into(),
            Value::String(instructions.join("\n\n")),
        );
    }
    if let Some(t) = ttl {
        result.insert("ttlMs".into(), Value::from(t));
    }
    if !unavailable.is_empty() {
        result.insert(
            "_meta".into(),
            serde_json::json!({ "mcpgate/unavailable": unavailable }),
        );
    }
    let result = Value::Object(result).to_string();
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#)
}

/// The method of a `kind` list.
fn kind_method(kind: ListKind) -> &'static str {
    match kind {
        ListKind::Tools => "tools/list",
        ListKind::Resources => "resources/list",
        ListKind::ResourceTemplates => "resources/templates/list",
        ListKind::Prompts => "prompts/list",
    }
}

/// A list request mcpgate makes itself, with the client's `_meta` (which says its
/// revision and capabilities, as every 2026-07-28 request must).
fn own_request(method: &str, meta: Option<&str>, cursor: Option<&str>) -> Bytes {
    let mut params = String::from("{");
    if let Some(meta) = meta {
        params.push_str("\"_meta\":");
        params.push_str(meta);
    }
    if let Some(c) = cursor {
        if params.len() > 1 {
            params.push(',');
        }
        params.push_str("\"cursor\":");
        params.push_str(&serde_json::to_string(c).expect("a string serializes"));
    }
    params.push('}');
    // Ids of their own: several may be in one member session at once.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":"mcpgate-federation-{n}","method":"{method}","params":{params}}}"#
    ))
}

/// The cursor of a list request (`params.cursor`), if it names one.
fn cursor_of(bytes: &[u8]) -> Result<Option<String>, String> {
    #[derive(serde::Deserialize)]
    struct Request {
        params: Option<Params>,
    }
    #[derive(serde::Deserialize)]
    struct Params {
        cursor: Option<serde_json::Value>,
    }
    let r: Request = serde_json::from_slice(bytes).map_err(|e| format!("Invalid params: {e}"))?;
    match r.params.and_then(|p| p.cursor) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(c)) => Ok(Some(c)),
        Some(_) => Err("Invalid cursor: not a string".into()),
    }
}

/// The client's list request with `params.cursor` made `cursor` (or taken out), every
/// other member as it was. `None` if the request cannot be read.
fn with_cursor(bytes: &[u8], cursor: Option<&str>) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let Entries(top) = serde_json::from_str(text).ok()?;
    let mut out = String::with_capacity(text.len() + 64);
    out.push('{');
    let mut wrote_params = false;
    for (key, value) in &top {
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(&**key).ok()?);
        out.push(':');
        if key != "params" {
            out.push_str(value.get());
            continue;
        }
        wrote_params = true;
        let Entries(params) = serde_json::from_str(value.get()).ok()?;
        out.push('{');
        let mut first = true;
        for (k, v) in params.iter().filter(|(k, _)| k != "cursor") {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(&serde_json::to_string(&**k).ok()?);
            out.push(':');
            out.push_str(v.get());
        }
        if let Some(c) = cursor {
            if !first {
                out.push(',');
            }
            out.push_str("\"cursor\":");
            out.push_str(&serde_json::to_string(c).ok()?);
        }
        out.push('}');
    }
    if !wrote_params && let Some(c) = cursor {
        out.push_str(",\"params\":{\"cursor\":");
        out.push_str(&serde_json::to_string(c).ok()?);
        out.push('}');
    }
    out.push('}');
    Some(out.into_bytes())
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
    let (gw, live, profile, peer, req) = (x.gw, x.live, x.profile, x.peer, x.req);
    // A 2026-07-28 client has no stream of its own, nor a session to end.
    let Some(session) = legacy::open(live, profile, fed, &req.fields, ctx)? else {
        return Err(GateError::MethodNotAllowed);
    };
    let dir = gw.directories.of(&profile.name, fed);
    let fan = Fan {
        gw,
        live,
        profile,
        fed,
        dir: &dir,
        peer,
        req,
        meta: None,
        session: Some(&session),
    };
    match req.method == http::Method::DELETE {
        true => Ok(fan.end(&session, ctx).await),
        false => fan.stream(&session, ctx).await,
    }
}

/// A member's answer in a legacy session, as the client gets it: without the member's
/// session id (the client keeps the federated one).
fn in_session(mut answer: Response<GateBody>) -> Response<GateBody> {
    answer.headers_mut().remove("mcp-session-id");
    answer
}

/// The error a request to a member gets when the member cannot be reached (its session
/// could not be opened): the upstream-unavailable error.
fn unreachable(member: &Member, why: &str) -> GateError {
    tracing::warn!(member = %member.name, why, "a federated member's session could not be opened");
    GateError::UpstreamUnreachable(format!("the member {} is unavailable", member.name))
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
            listener_at: self.listener_at,
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

/// The `_meta` of the 2026-07-28 requests mcpgate's commands send (`check --probe`,
/// `pin review`).
const OWN_META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"mcpgate-check","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}"#;

/// The client request mcpgate's commands stand in for: a 2026-07-28 JSON POST.
fn own_client_request() -> ClientRequest {
    ClientRequest {
        method: http::Method::POST,
        target: crate::http::request::Target::parse("/").expect("a plain path"),
        fields: Fields::from_map(&HeaderMap::from_iter([
            (
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (
                http::HeaderName::from_static("mcp-protocol-version"),
                HeaderValue::from_static(MODERN),
            ),
        ])),
        body: ClientBody::Read(Bytes::new()),
    }
}

/// The context of a request of mcpgate's commands: no route, token or audit.
fn own_ctx(peer: &Peer) -> Ctx<'static> {
    Ctx {
        request_id: Arc::from("mcpgate-check"),
        route: None,
        token_id: None,
        rpc_id: None,
        rpc_method: None,
        tool: None,
        want: Ok(Want::Json),
        token: None,
        caller: None,
        proto: "http",
        listener: "",
        peer: peer.clone(),
        calls: Vec::new(),
        upstream_ms: None,
        started: Instant::now(),
        audit_base: None,
        access: None,
        trace: None,
        era: Era::Modern,
        first_request: None,
        member: None,
        rename: None,
        listener_at: 0,
        approval: None,
        approved: None,
        own: true,
    }
}

/// Every tool and every prompt `upstream` lists, read page by page through the request
/// path as a 2026-07-28 client would (so a legacy, stdio or replicated upstream is read
/// as the gateway serves it), unfiltered: what `mcpgate pin review` compares with the
/// pins file. A server without prompts has none.
pub async fn own_lists(
    gw: &Gateway,
    upstream: &Arc<crate::config::Upstream>,
) -> Result<[Vec<serde_json::Value>; 2], String> {
    let here = gw.live_here();
    let live: &Arc<Live> = &here;
    let member = Profile::member(&format!("pin/{}", upstream.name), upstream.clone());
    let fed = Arc::new(Federation {
        members: vec![Member {
            name: upstream.name.clone(),
            profile: member.clone(),
        }]
        .into(),
        prefix: crate::config::federation::Prefix::Never,
        separator: "__".into(),
    });
    let (req, peer) = (
        own_client_request(),
        Peer::new(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
    );
    let ctx = own_ctx(&peer);
    let dir = crate::mcp::federation::directory::Directories::default().of(&member.name, &fed);
    let fan = Fan {
        gw,
        live,
        profile: &member,
        fed: &fed,
        dir: &dir,
        peer: &peer,
        req: &req,
        meta: Some(OWN_META),
        session: None,
    };
    let mut out: [Vec<serde_json::Value>; 2] = Default::default();
    for (at, kind) in [ListKind::Tools, ListKind::Prompts].into_iter().enumerate() {
        let method = kind_method(kind);
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let body = own_request(method, Some(OWN_META), cursor.as_deref());
            let text = fan.ask(0, method, body, &ctx).await?;
            let text = std::str::from_utf8(&text).map_err(|_| "an answer that is not UTF-8")?;
            let page = match lists::read(text, kind) {
                Answer::Page(p) => p,
                Answer::Lacks => break,
                Answer::Failed(why) => return Err(format!("{method}: {why}")),
            };
            for item in &page.items {
                let v = serde_json::from_str(item.get()).map_err(|e| e.to_string())?;
                out[at].push(v);
            }
            match page.next {
                Some(next) => cursor = Some(next.into_owned()),
                None => break,
            }
        }
    }
    Ok(out)
}

/// What `mcpgate check --probe` prints of each federated profile (docs/federation.md): the members'
/// tool lists read now as a 2026-07-28 client would, merged as the profile's clients see
/// them, the names two members would share, and the members that did not answer.
pub async fn probe(gw: &Gateway) -> String {
    use std::fmt::Write;
    let here = gw.live_here();
    let live: &Arc<Live> = &here;
    let mut out = String::new();
    let req = own_client_request();
    let peer = Peer::new(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    for profile in live.config.profiles.values() {
        let Some(fed) = &profile.federation else {
            continue;
        };
        let ctx = own_ctx(&peer);
        // A directory of its own: what the probe reads is not what the gateway serves.
        let dir = crate::mcp::federation::directory::Directories::default().of(&profile.name, fed);
        let fan = Fan {
            gw,
            live,
            profile,
            fed,
            dir: &dir,
            peer: &peer,
            req: &req,
            meta: Some(OWN_META),
            session: None,
        };
        let members: Vec<&str> = fed.members.iter().map(|m| &*m.name).collect();
        let _ = writeln!(out, "\nprofile {}: {}", profile.name, members.join(", "));
        let mut missing = Vec::new();
        for (m, member) in fed.members.iter().enumerate() {
            let mut cursor: Option<String> = None;
            let mut first = true;
            loop {
                let body = own_request("tools/list", Some(OWN_META), cursor.as_deref());
                let page = match fan.ask(m, "tools/list", body, &ctx).await {
                    Ok(text) => {
                        let text = String::from_utf8_lossy(&text).into_owned();
                        match lists::read(&text, ListKind::Tools) {
                            Answer::Page(p) => {
                                let names = lists::names(&p);
                                dir.learn(fed, ListKind::Tools, m, first, p.next.is_none(), &names);
                                p.next.map(|n| n.into_owned())
                            }
                            Answer::Lacks => None,
                            Answer::Failed(why) => {
                                missing.push(format!("{}: {why}", member.name));
                                None
                            }
                        }
                    }
                    Err(why) => {
                        missing.push(format!("{}: {why}", member.name));
                        None
                    }
                };
                first = false;
                match page {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
        let merged = dir.names(ListKind::Tools);
        let filter = crate::mcp::tools_list::ToolFilter::new(live.config.clone(), profile.clone());
        for v in &merged.visible {
            let shown = match filter.keeps_item(ListKind::Tools, &v.name) {
                true => "",
                false => "   (not shown: policy)",
            };
            let _ = writeln!(
                out,
                "  {:<40} -> {} {}{shown}",
                v.name, fed.members[v.member].name, v.original
            );
        }
        if fed.prefix == crate::config::federation::Prefix::OnConflict {
            // The names more than one member has, which is why they are prefixed.
            let mut shared: Vec<(&str, Vec<&str>)> = Vec::new();
            for v in merged.visible.iter().filter(|v| v.name != v.original) {
                let member = &*fed.members[v.member].name;
                match shared.iter_mut().find(|(n, _)| *n == v.original) {
                    Some((_, members)) => members.push(member),
                    None => shared.push((&v.original, vec![member])),
                }
            }
            for (name, members) in shared.iter().filter(|(_, m)| m.len() > 1) {
                let _ = writeln!(
                    out,
                    "  prefixed: {name} is a tool of {}",
                    members.join(", ")
                );
            }
        }
        for c in &merged.collisions {
            let claims: Vec<String> = c
                .claims
                .iter()
                .map(|(m, own)| format!("{} {own}", fed.members[*m].name))
                .collect();
            let _ = writeln!(
                out,
                "  collision: {} is claimed by {}; the first keeps it",
                c.name,
                claims.join(", ")
            );
        }
        for m in missing {
            let _ = writeln!(out, "  unavailable: {m}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_request_gets_each_members_cursor() {
        let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"a":1},"cursor":"SEALED"}}"#;
        let out = with_cursor(body, Some("m2")).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"a":1},"cursor":"m2"}}"#
        );
        let out = with_cursor(body, None).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"a":1}}}"#
        );
        let bare = br#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#;
        let out = with_cursor(bare, Some("c")).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"cursor":"c"}}"#
        );
        assert_eq!(cursor_of(body).unwrap().as_deref(), Some("SEALED"));
        assert!(cursor_of(br#"{"params":{"cursor":5}}"#).is_err());
    }

    #[test]
    fn a_call_is_renamed_in_place_or_whole() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"kb__search","arguments":{"name":"kb__search"}}}"#;
        let payload = jsonrpc::parse(body).unwrap();
        let Payload::Single(m) = &payload else {
            panic!()
        };
        let (out, splice) = renamed(body, m, "search").unwrap();
        assert!(splice.is_some());
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"name":"kb__search"}}}"#
        );
        let escaped = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"kb__se\u0061rch"}}"#;
        let payload = jsonrpc::parse(escaped).unwrap();
        let Payload::Single(m) = &payload else {
            panic!()
        };
        let out: serde_json::Value =
            serde_json::from_slice(&renamed(escaped, m, "search").unwrap().0).unwrap();
        assert_eq!(out["params"]["name"], "search");
    }
}
