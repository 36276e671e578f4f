//! Sending to one member of a federated profile: the member's request made of the
//! client's (its own name for the called tool or prompt, its own session), sent through
//! the back for the member's profile, and which member a name, a URI or a task goes to.

use super::{Fan, invalid, shown, streams, unknown};
use crate::config::federation::Member;
use crate::config::generation::encode_header;
use crate::error::GateError;
use crate::http::body::GateBody;
use crate::http::request::{ClientBody, ClientRequest};
use crate::mcp::jsonrpc::{self, ListKind, Splice, ToolName};
use crate::mcp::task_ids;
use crate::mcp::transport::accept::Want;
use crate::mcp::transport::relay;
use crate::pipeline::{Ctx, Exchange, back, limits, rounds};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use std::borrow::Cow;
use wire::fields::{FieldKind, Fields};

impl<'s> Fan<'_, 's> {
    /// The exchange as it goes on to member `m`: `req` as the member is sent it.
    pub(super) fn to_member<'b>(&'b self, m: usize, req: &'b ClientRequest) -> Exchange<'b, 's> {
        Exchange {
            gw: self.gw,
            live: self.live,
            profile: &self.fed.members[m].profile,
            peer: self.peer,
            req,
        }
    }

    /// Sends `body` to member `m` through the rest of the request path, in the member's
    /// own session when the client is in a legacy one (opened now if this replica has
    /// none for it). `method`: a request mcpgate makes itself (its answer is JSON).
    pub(super) async fn send(
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
            self.gw.federation.sessions.forget(&s.key, m);
        }
        Ok(answer)
    }

    /// [`Fan::send`] in the member session `session`, or in none.
    pub(super) async fn send_with(
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
    pub(super) async fn ask(&self, m: usize, method: &str, body: Bytes, ctx: &Ctx<'s>) -> Asked {
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

    /// The member and its own name for the name a client sent; when no member is known
    /// to show it, the members' lists are read first (at most once per [`REREAD_AFTER`]).
    pub(super) async fn by_name(
        &self,
        kind: ListKind,
        name: &str,
        ctx: &Ctx<'s>,
    ) -> Result<(usize, String), GateError> {
        if let Some((m, own)) = self.dir.names(kind).route(name) {
            return Ok((m, own.to_string()));
        }
        // Boxed: a call whose name is known carries no room for the read.
        Box::pin(self.read_lists(&[kind], ctx)).await;
        match self.dir.names(kind).route(name) {
            Some((m, own)) => Ok((m, own.to_string())),
            None => Err(unknown(ctx, kind, name)),
        }
    }

    /// The member whose task a `tasks/get|update|cancel` names: the one whose upstream
    /// sealed its id for this caller. Refused as for one upstream otherwise.
    pub(super) fn by_task(
        &self,
        m: &jsonrpc::Message<'_>,
        ctx: &Ctx<'s>,
    ) -> Result<usize, GateError> {
        if !m.meta.is_some_and(task_ids::declares_tasks) {
            return Err(GateError::MissingTasksCapability);
        }
        let sealed = m.mcp_name.as_deref().ok_or(GateError::UnknownTask)?;
        let caller = rounds::caller(ctx);
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
    pub(super) async fn by_uri(&self, uri: &str, ctx: &Ctx<'s>) -> Result<usize, GateError> {
        if let Some(m) = self.dir.resource_member(uri) {
            return Ok(m);
        }
        Box::pin(self.read_lists(&[ListKind::Resources, ListKind::ResourceTemplates], ctx)).await;
        self.dir
            .resource_member(uri)
            .ok_or_else(|| invalid(ctx, format!("Resource not found: {}", shown(uri))))
    }

    /// `completion/complete`: to the member of the prompt or resource its `ref` names.
    pub(super) async fn complete(
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
    pub(super) async fn routed(
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
            self.gw.federation.sessions.forget(&s.key, m);
        }
        Ok(match self.session {
            Some(_) => streams::with_questions_mapped(m, in_session(answer)),
            None => answer,
        })
    }
}

/// The body with the call's name (`params.name`) made the member's own `own`, and where it
/// changed when that was in place.
pub(super) fn renamed(
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
pub(super) fn sub_request(
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

/// A request to one member of a fan-out: its JSON answer, or why there is none.
pub(super) type Asked = Result<Bytes, String>;

/// A member's answer in a legacy session, as the client gets it: without the member's
/// session id (the client keeps the federated one).
pub(super) fn in_session(mut answer: Response<GateBody>) -> Response<GateBody> {
    answer.headers_mut().remove("mcp-session-id");
    answer
}

/// The error a request to a member gets when the member cannot be reached (its session
/// could not be opened): the upstream-unavailable error.
pub(super) fn unreachable(member: &Member, why: &str) -> GateError {
    tracing::warn!(member = %member.name, why, "a federated member's session could not be opened");
    GateError::UpstreamUnreachable(format!("the member {} is unavailable", member.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::jsonrpc::Payload;

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
