//! The federation stage (SPEC §16): a profile with `upstreams = [...]` serves its members
//! as one server. Its request has been routed, authenticated, read and its headers
//! checked; here it is judged by the profile's policy and limits under the names the
//! client sees, then
//!
//! - a list (`tools/list`, `prompts/list`, `resources/list`,
//!   `resources/templates/list`) goes to every member at once, each with its own cursor,
//!   and the answers are merged (`mcp::federation::lists`) under a sealed cursor; a member
//!   that fails or passes `[transport] fanout_timeout` is named in
//!   `_meta["mcpgate/unavailable"]`;
//! - `server/discover` goes to every member, and the answers are merged;
//! - a call (`tools/call`, `prompts/get`, `completion/complete`) goes to the member whose
//!   name it is, with the member's own name (and `Mcp-Name`); a `resources/read` to the
//!   member whose list or template holds its URI;
//! - a name no member is known to show makes mcpgate read the members' lists itself, at
//!   most once a second ([`REREAD_AFTER`]), before it is refused as unknown.
//!
//! What goes to a member goes through the rest of the request path (`checked`) with the
//! member's profile: the member's transport, its replicas, the bridge to a legacy member,
//! the seals of its `requestState` and task ids (which name the member's profile, so they
//! open for no other).

use super::{Ctx, checked, judge, limits, respond};
use crate::config::Profile;
use crate::config::federation::{Federation, Member};
use crate::config::generation::{MODERN, encode_header};
use crate::error::{GateError, Refusal, code};
use crate::gateway::{Gateway, Live};
use crate::http::body::GateBody;
use crate::http::request::{ClientBody, ClientRequest, Peer};
use crate::mcp::era::Era;
use crate::mcp::federation::directory::{Directory, REREAD_AFTER};
use crate::mcp::federation::lists::{self, Answer, Page};
use crate::mcp::jsonrpc::{self, ListKind, MessageKind, Payload, ToolName};
use crate::mcp::pointer::Entries;
use crate::mcp::transport::accept::Want;
use crate::mcp::transport::relay;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;
use wire::fields::{FieldKind, Fields};

/// The most pages of one member's list mcpgate reads when it reads the lists itself.
const MAX_PAGES: usize = 16;

#[allow(clippy::too_many_arguments)]
pub(super) async fn post<'s>(
    gw: &Gateway,
    live: &'s Arc<Live>,
    profile: &'s Arc<Profile>,
    fed: &'s Arc<Federation>,
    peer: &Peer,
    req: &ClientRequest,
    bytes: &Bytes,
    payload: Payload<'_>,
    want: Want,
    ctx: &mut Ctx<'s>,
) -> Result<Response<GateBody>, GateError> {
    let Payload::Single(m) = &payload else {
        return Err(GateError::InvalidRequest(
            "a batch cannot be sent to a federated profile: send its messages one by one".into(),
        ));
    };
    if ctx.era == Era::Legacy {
        // As a server of 2026-07-28 only answers a legacy client (docs/federation.md).
        return Err(GateError::UnsupportedVersion {
            requested: legacy_version(req, m.meta),
            supported: &[MODERN],
        });
    }
    super::audit::note_calls(gw, &payload, ctx);
    let Some(admitted) = judge(gw, live, profile, peer, &payload, ctx).await? else {
        return Ok(respond::empty(StatusCode::ACCEPTED, &ctx.request_id));
    };
    if m.kind != MessageKind::Request {
        // A 2026-07-28 server has no session to tell of a notification.
        return Ok(respond::empty(StatusCode::ACCEPTED, &ctx.request_id));
    }
    let method = m.method().unwrap_or("");
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
    };
    if let Some(kind) = ListKind::of(method) {
        let id = m.id_text().unwrap_or("null");
        let json = fan.list(kind, id, bytes, ctx).await?;
        return Ok(respond::own(json, want, &ctx.request_id));
    }
    if method == "subscriptions/listen" {
        return fan.listen(bytes, ctx).await;
    }
    if method == "server/discover" {
        let id = m.id_text().unwrap_or("null");
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
        ("resources/read", _, Some(ToolName::Name(uri))) => (fan.by_uri(uri, ctx).await?, None),
        ("completion/complete", _, _) => return fan.complete(bytes, want, admitted, ctx).await,
        ("tools/call" | "prompts/get" | "resources/read", _, _) => {
            let what = if method == "resources/read" {
                "uri"
            } else {
                "name"
            };
            return Err(invalid(ctx, format!("{method} needs a string {what}")));
        }
        _ => return Err(GateError::MethodNotFound(method.to_string())),
    };
    let member = &fed.members[member];
    ctx.member = Some(member.name.clone());
    let Some(own) = rename else {
        return checked(
            gw,
            live,
            &member.profile,
            peer,
            req,
            bytes,
            payload,
            want,
            Some(admitted),
            ctx,
        )
        .await;
    };
    // The member's own name, in the body and in `Mcp-Name`.
    let body = Bytes::from(renamed(bytes, m, &own)?);
    drop(payload);
    let sub = sub_request(req, &body, None, Some(&own));
    let payload = jsonrpc::parse(&body)?;
    checked(
        gw,
        live,
        &member.profile,
        peer,
        &sub,
        &body,
        payload,
        want,
        Some(admitted),
        ctx,
    )
    .await
}

/// The revision a legacy request names: its `initialize`'s, else its header's.
fn legacy_version(req: &ClientRequest, meta: Option<&str>) -> String {
    let _ = meta;
    req.fields
        .get_str(FieldKind::McpProtocolVersion)
        .unwrap_or("2025-11-25")
        .to_string()
}

/// The body with the call's name (`params.name`) made the member's own `own`.
fn renamed(bytes: &[u8], m: &jsonrpc::Message<'_>, own: &str) -> Result<Vec<u8>, GateError> {
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
            return Ok(out);
        }
    }
    // A name written with escapes: the message is read and written whole (rare).
    let mut v: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| GateError::Parse(format!("the request cannot be read again: {e}")))?;
    v["params"]["name"] = serde_json::Value::String(own.to_string());
    Ok(serde_json::to_vec(&v).expect("a value serializes"))
}

/// The client's request with `body`, as it goes to a member: `method` (for a request
/// mcpgate makes, which then wants JSON) and `name` replace `Mcp-Method` and `Mcp-Name`.
fn sub_request(
    req: &ClientRequest,
    body: &Bytes,
    method: Option<&str>,
    name: Option<&str>,
) -> ClientRequest {
    let mut map = HeaderMap::with_capacity(req.fields.len() + 2);
    for (kind, n, v) in req.fields.iter() {
        let replaced = match kind {
            FieldKind::ContentLength => true,
            FieldKind::McpMethod | FieldKind::Accept => method.is_some(),
            FieldKind::McpName => method.is_some() || name.is_some(),
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
}

/// A request to one member of a fan-out: its JSON answer, or why there is none.
type Asked = Result<Bytes, String>;

impl<'s> Fan<'_, 's> {
    /// Sends `body` (a request of `method`) to `member` through the rest of the request
    /// path, and reads its answer as JSON, within `[transport] fanout_timeout`.
    async fn ask(&self, member: &'s Member, method: &str, body: Bytes, ctx: &Ctx<'s>) -> Asked {
        let mut sub_ctx = ctx.for_member(member);
        let sub = sub_request(self.req, &body, Some(method), None);
        let asked = async {
            let payload = jsonrpc::parse(&body).map_err(|e| e.to_string())?;
            let admitted = limits::Admitted {
                permits: Vec::new(),
                timeout: member.profile.upstream.timeout,
            };
            let answer = checked(
                self.gw,
                self.live,
                &member.profile,
                self.peer,
                &sub,
                &body,
                payload,
                Want::Json,
                Some(admitted),
                &mut sub_ctx,
            )
            .await
            .map_err(|e| e.to_string())?;
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
            let body = with_cursor(bytes, cursor.as_deref());
            let member = &self.fed.members[*m];
            async move {
                match body {
                    Some(b) => self.ask(member, method, Bytes::from(b), ctx).await,
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
            let last = page.next.is_none();
            self.dir.learn(
                self.fed,
                kind,
                *m,
                cursor.is_none(),
                last,
                &lists::names(&page, kind),
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
            ListKind::Tools | ListKind::Prompts => Some(self.dir.names(kind)),
            _ => None,
        };
        let merged = lists::merge(
            ctx.era == Era::Modern,
            kind,
            id,
            &pages,
            names.as_deref(),
            cursor.as_deref(),
            &unavailable,
        );
        // The profile's own rules, by the names the client sees.
        let filter = crate::mcp::tools_list::ListRewrite {
            ids: vec![(id.into(), kind)],
            discover: None,
            rounds: None,
            tasks: None,
            completes: None,
            filter: crate::mcp::tools_list::ToolFilter::new(
                self.live.config.clone(),
                self.profile.clone(),
            ),
        };
        match filter.apply(&merged) {
            Ok(Some(filtered)) => Ok(filtered),
            Ok(None) => Ok(merged),
            Err(e) => Err(GateError::UpstreamBadResponse(format!(
                "cannot filter the merged list: {e}"
            ))),
        }
    }

    /// Logs and counts a member that did not answer a fan-out.
    fn unavailable(&self, member: &Arc<str>, why: &str) {
        tracing::warn!(%member, why, "a federated member did not answer; listed as unavailable");
        self.gw
            .metrics
            .federation_member(&self.profile.name, member, false);
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
            .cursor_sealer
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
        let mut read_at = self.dir.read_at.lock().await;
        if read_at.is_some_and(|t| t.elapsed() < REREAD_AFTER) {
            return;
        }
        let reads = self.fed.members.iter().enumerate().flat_map(|(m, member)| {
            kinds.iter().map(move |&kind| async move {
                let mut cursor: Option<String> = None;
                for _ in 0..MAX_PAGES {
                    let body = own_request(kind_method(kind), self.meta, cursor.as_deref());
                    let text = match self.ask(member, kind_method(kind), body, ctx).await {
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
                        &lists::names(&page, kind),
                    );
                    match page.next {
                        Some(n) => cursor = Some(n.into_owned()),
                        None => return,
                    }
                }
            })
        });
        futures_util::future::join_all(reads).await;
        *read_at = Some(Instant::now());
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
        let member = &self.fed.members[member];
        ctx.member = Some(member.name.clone());
        let sub = sub_request(self.req, &body, None, None);
        let payload = jsonrpc::parse(&body)?;
        checked(
            self.gw,
            self.live,
            &member.profile,
            self.peer,
            &sub,
            &body,
            payload,
            want,
            Some(admitted),
            ctx,
        )
        .await
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
                let sub = sub_request(self.req, &body, None, None);
                let opened = async {
                    let payload = jsonrpc::parse(&body).map_err(|e| e.to_string())?;
                    let admitted = limits::Admitted {
                        permits: Vec::new(),
                        timeout: member.profile.upstream.timeout,
                    };
                    let answer = checked(
                        self.gw,
                        self.live,
                        &member.profile,
                        self.peer,
                        &sub,
                        &body,
                        payload,
                        Want::Sse,
                        Some(admitted),
                        &mut sub_ctx,
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                    if answer.status() != StatusCode::OK {
                        return Err(format!("the listen was answered {}", answer.status()));
                    }
                    let mut stream = MemberStream {
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
        let merged = MergedListen {
            ack: Some(crate::mcp::transport::sse::encode_json(&ack, None)),
            streams,
            fed: self.fed.clone(),
            dir: self.gw.directories.of(&self.profile.name, self.fed),
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
        let asks = self
            .fed
            .members
            .iter()
            .map(|member| self.ask(member, "server/discover", bytes.clone(), ctx));
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

/// One member's listen stream.
struct MemberStream {
    member: usize,
    body: GateBody,
    decoder: crate::mcp::transport::sse::Decoder,
    /// What came before its acknowledgement, to pass on after the client's.
    early: Vec<String>,
}

impl MemberStream {
    /// Reads the stream until the member acknowledges the listen.
    async fn until_acknowledged(&mut self) -> Result<(), String> {
        use http_body_util::BodyExt;
        loop {
            while let Some(ev) = self.decoder.next_event() {
                let Some(data) = ev.data else { continue };
                if crate::mcp::bridge::is_acknowledgement(&data) {
                    return Ok(());
                }
                self.early.push(data);
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.decoder.feed(&data);
                    }
                }
                Some(Err(e)) => return Err(format!("the listen stream failed: {e}")),
                None => return Err("the listen stream ended before its acknowledgement".into()),
            }
        }
    }
}

/// The client's listen stream: mcpgate's acknowledgement, then what every member's
/// stream carries for the client (not their own acknowledgements, nor the answers that
/// end them), until the last one ends.
struct MergedListen {
    ack: Option<Bytes>,
    streams: Vec<MemberStream>,
    fed: Arc<Federation>,
    dir: Arc<Directory>,
}

impl MergedListen {
    /// What a member's message becomes on the client's stream, if anything.
    fn carry(&self, member: usize, data: String) -> Option<Bytes> {
        #[derive(serde::Deserialize)]
        struct Head<'a> {
            #[serde(borrow)]
            method: Option<Cow<'a, str>>,
            id: Option<serde::de::IgnoredAny>,
        }
        let head: Head = serde_json::from_str(&data).ok()?;
        let method = head.method.as_deref()?;
        if head.id.is_some() || method == "notifications/subscriptions/acknowledged" {
            return None;
        }
        if matches!(
            method,
            "notifications/tools/list_changed"
                | "notifications/prompts/list_changed"
                | "notifications/resources/list_changed"
        ) {
            self.dir.forget(&self.fed, member);
        }
        Some(crate::mcp::transport::sse::encode_json(&data, None))
    }
}

impl http_body::Body for MergedListen {
    type Data = Bytes;
    type Error = crate::http::body::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        use std::task::Poll;
        let this = &mut *self;
        if let Some(ack) = this.ack.take() {
            return Poll::Ready(Some(Ok(http_body::Frame::data(ack))));
        }
        let mut i = 0;
        while i < this.streams.len() {
            let member = this.streams[i].member;
            if !this.streams[i].early.is_empty() {
                let data = this.streams[i].early.remove(0);
                if let Some(out) = this.carry(member, data) {
                    return Poll::Ready(Some(Ok(http_body::Frame::data(out))));
                }
                continue;
            }
            if let Some(ev) = this.streams[i].decoder.next_event() {
                if let Some(out) = ev.data.and_then(|d| this.carry(member, d)) {
                    return Poll::Ready(Some(Ok(http_body::Frame::data(out))));
                }
                continue;
            }
            match std::pin::Pin::new(&mut this.streams[i].body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        this.streams[i].decoder.feed(&data);
                    }
                }
                Poll::Ready(Some(Err(_)) | None) => {
                    // This member's stream is over; the others go on.
                    this.streams.remove(i);
                }
                Poll::Pending => i += 1,
            }
        }
        match this.streams.is_empty() {
            true => Poll::Ready(None),
            false => Poll::Pending,
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
    fn join(into: &mut Map<String, Value>, from: &Map<String, Value>) {
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
    Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":"mcpgate-federation","method":"{method}","params":{params}}}"#
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
    fn for_member(&self, member: &Member) -> Ctx<'s> {
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
            member: Some(member.name.clone()),
        }
    }
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
        let out = renamed(body, m, "search").unwrap();
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
            serde_json::from_slice(&renamed(escaped, m, "search").unwrap()).unwrap();
        assert_eq!(out["params"]["name"], "search");
    }
}
