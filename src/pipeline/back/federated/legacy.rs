//! Legacy clients of a federated profile (docs/federation.md). mcpgate answers `initialize` for the
//! profile, with a session id it seals: the client's `initialize` (its revision,
//! capabilities and info) and the caller, never a member's session. Each member gets a
//! session of its own, opened with that `initialize` when the client's does (or, on a
//! replica that has none for it, when first needed) and kept per replica
//! (`mcp::federation::sessions`). Then
//!
//! - a request goes to its member in the member's session, or to every member (lists);
//! - a notification goes to every member the session has opened, and so does
//!   `logging/setLevel`; `ping` is answered here;
//! - a member's questions reach the client with ids that name the member
//!   (`streams`), and the client's answers go back to that member only;
//! - the GET stream is every member's GET stream merged; `DELETE` ends every member's
//!   session.
//!
//! A progress token is the client's own and goes with its request to one member, whose
//! notifications come back on that request's stream: it needs no mapping.

use super::{Ctx, Fan, streams};
use crate::config::Profile;
use crate::config::federation::Federation;
use crate::error::GateError;
use crate::gateway::Live;
use crate::http::body::GateBody;
use crate::mcp::bridge;
use crate::mcp::federation::sessions::Key;
use crate::mcp::jsonrpc::Message;
use crate::mcp::transport::accept::Want;
use crate::mcp::transport::relay;
use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use wire::fields::{FieldKind, Fields};

/// A legacy client's federated session.
pub(in crate::pipeline) struct Session {
    /// The digest of its sealed id: where its member sessions are kept.
    pub(super) key: Key,
    /// What the client said at `initialize`.
    client: bridge::Session,
}

/// What the sealed ids of a federated profile's sessions start with (its cursors start
/// with `{`).
const TAG: u8 = b'S';

/// The request's federated session, if it names one. An id that does not open, was sealed
/// for another profile, or is another caller's: 404, the signal to initialize anew.
pub(super) fn open(
    live: &Live,
    profile: &Profile,
    fed: &Federation,
    fields: &Fields,
    ctx: &Ctx<'_>,
) -> Result<Option<Session>, GateError> {
    let Some(sealed) = fields.get(FieldKind::McpSessionId) else {
        return Ok(None);
    };
    let sealer = &live.upstream(&fed.members[0].profile.upstream).fed_sealer;
    let (_, inner) = sealer.open(sealed).ok_or(GateError::SessionNotFound)?;
    let client = unseal(&inner, &profile.name)
        .filter(|c| c.caller == crate::pipeline::rounds::caller(ctx))
        .ok_or(GateError::SessionNotFound)?;
    Ok(Some(Session {
        key: Sha256::digest(sealed).into(),
        client,
    }))
}

fn seal_inner(profile: &str, client: &bridge::Session) -> Vec<u8> {
    let mut inner = vec![TAG];
    inner.extend_from_slice(&(profile.len() as u16).to_be_bytes());
    inner.extend_from_slice(profile.as_bytes());
    inner.extend_from_slice(&client.inner());
    inner
}

fn unseal(inner: &[u8], profile: &str) -> Option<bridge::Session> {
    let (&tag, rest) = inner.split_first()?;
    let n = usize::from(u16::from_be_bytes(rest.get(..2)?.try_into().ok()?));
    let named = rest.get(2..2 + n)?;
    if tag != TAG || named != profile.as_bytes() {
        return None;
    }
    bridge::Session::from_inner(rest.get(2 + n..)?)
}

/// The `initialize` a member's session is opened with: the client's, as it sent it.
fn initialize_request(client: &bridge::Session) -> Bytes {
    let meta: serde_json::Map<String, Value> =
        serde_json::from_str(&format!("{{{}}}", client.meta)).unwrap_or_default();
    let capabilities = meta
        .get("io.modelcontextprotocol/clientCapabilities")
        .cloned()
        .unwrap_or_else(|| Value::Object(Default::default()));
    let info = meta
        .get("io.modelcontextprotocol/clientInfo")
        .cloned()
        .unwrap_or_else(
            || serde_json::json!({"name": "mcpgate", "version": env!("CARGO_PKG_VERSION")}),
        );
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": "mcpgate-federation",
        "method": "initialize",
        "params": {"protocolVersion": &client.version, "capabilities": capabilities, "clientInfo": info},
    });
    Bytes::from(body.to_string())
}

const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

impl<'s> Fan<'_, 's> {
    /// A legacy `initialize`: a session opened at every member at once, answered for the
    /// profile with the members' capabilities joined and their instructions each under
    /// its name.
    pub(super) async fn initialize(
        &self,
        m: &Message<'_>,
        bytes: &Bytes,
        want: Want,
        ctx: &Ctx<'s>,
    ) -> Result<Response<GateBody>, GateError> {
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|e| GateError::Parse(format!("the request cannot be read again: {e}")))?;
        let params = v.get("params").map(Value::to_string);
        let client =
            bridge::Session::of_initialize(params.as_deref(), crate::pipeline::rounds::caller(ctx))
                .map_err(GateError::InvalidRequest)?;
        let sealer = &self
            .live
            .upstream(&self.fed.members[0].profile.upstream)
            .fed_sealer;
        let sealed = sealer
            .seal(&[0; 8], &seal_inner(&self.profile.name, &client))
            .ok_or_else(|| {
                GateError::InvalidRequest("the client's capabilities and info are too long".into())
            })?;
        let key: Key = Sha256::digest(sealed.as_bytes()).into();
        let opens =
            (0..self.fed.members.len()).map(|n| self.open_member(&key, &client, n, false, ctx));
        let opened = futures_util::future::join_all(opens).await;
        let mut capabilities = serde_json::Map::new();
        let mut instructions = Vec::new();
        let mut any = false;
        for (member, o) in self.fed.members.iter().zip(opened) {
            match o {
                Ok(result) => {
                    any = true;
                    if let Some(Value::Object(c)) = result.get("capabilities") {
                        super::everyone::join(&mut capabilities, c);
                    }
                    if let Some(Value::String(i)) = result.get("instructions") {
                        instructions.push(format!("{}: {i}", member.name));
                    }
                }
                Err(why) => self.unavailable(&member.name, &why),
            }
        }
        if !any {
            return Err(GateError::UpstreamUnreachable(
                "no member of the federated profile could be opened".into(),
            ));
        }
        let mut result = serde_json::json!({
            "protocolVersion": &client.version,
            "capabilities": capabilities,
            "serverInfo": {"name": &*self.profile.name, "version": env!("CARGO_PKG_VERSION")},
        });
        if !instructions.is_empty() {
            result["instructions"] = Value::String(instructions.join("\n\n"));
        }
        let id = m.id_text().unwrap_or("null");
        let json = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#);
        let mut answer = super::respond::own(json, want, &ctx.request_id);
        answer.headers_mut().insert(
            "mcp-session-id",
            HeaderValue::try_from(sealed).expect("base64url is a valid header value"),
        );
        Ok(answer)
    }

    /// Member `m`'s session in the client's session `s`: the one this replica opened, or
    /// one opened now (and told the client is initialized).
    pub(super) async fn member_session(
        &self,
        s: &Session,
        m: usize,
        ctx: &Ctx<'s>,
    ) -> Result<Arc<str>, String> {
        if let Some(id) = self.gw.federation.sessions.get(&s.key, m) {
            return Ok(id);
        }
        self.open_member(&s.key, &s.client, m, true, ctx).await?;
        self.gw
            .federation
            .sessions
            .get(&s.key, m)
            .ok_or_else(|| "the session was forgotten as it opened".into())
    }

    /// Opens member `m`'s session with the client's `initialize`, within
    /// `[transport] fanout_timeout`, and keeps its id; `tell`: tells it the client is
    /// initialized (the client told it of those opened with its own `initialize`).
    /// Returns the member's `initialize` result.
    async fn open_member(
        &self,
        key: &Key,
        client: &bridge::Session,
        m: usize,
        tell: bool,
        ctx: &Ctx<'s>,
    ) -> Result<Value, String> {
        let opened = async {
            let answer = self
                .send_with(
                    m,
                    Some("initialize"),
                    initialize_request(client),
                    Want::Json,
                    None,
                    ctx,
                )
                .await?;
            let status = answer.status();
            let id = answer
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let text = relay::json_text(answer.into_body(), None)
                .await
                .map_err(|e| e.to_string())?;
            let v: Value = serde_json::from_slice(&text)
                .map_err(|e| format!("initialize was answered {status} without JSON: {e}"))?;
            let Some(result) = v.get("result").filter(|r| r.is_object()) else {
                return Err(format!("initialize was refused: {}", v["error"]));
            };
            if tell {
                let told = self
                    .send_with(
                        m,
                        Some("notifications/initialized"),
                        Bytes::from_static(INITIALIZED.as_bytes()),
                        Want::Json,
                        Some(&id),
                        ctx,
                    )
                    .await?;
                drop(told);
            }
            self.gw
                .federation
                .sessions
                .set(key, self.fed.members.len(), m, Arc::from(id));
            Ok(result.clone())
        };
        match tokio::time::timeout(self.live.config.fanout_timeout, opened).await {
            Ok(r) => r,
            Err(_) => Err("no answer to initialize within fanout_timeout".into()),
        }
    }

    /// The client's answer to a member's question: to that member only, with the
    /// member's own id.
    pub(super) async fn answer(
        &self,
        s: &Session,
        m: &Message<'_>,
        bytes: &Bytes,
        ctx: &Ctx<'s>,
    ) -> Result<Response<GateBody>, GateError> {
        let id = m.id_text().unwrap_or("null");
        let Some((member, own)) =
            streams::member_of_answer(id).filter(|(member, _)| *member < self.fed.members.len())
        else {
            return Err(GateError::InvalidRequest(format!(
                "no question of this session waits for an answer with id {}",
                super::shown(id)
            )));
        };
        let mut v: Value = serde_json::from_slice(bytes)
            .map_err(|e| GateError::Parse(format!("the request cannot be read again: {e}")))?;
        v["id"] = serde_json::from_str(&own).expect("checked when the id was read");
        let body = Bytes::from(v.to_string());
        let _ = s;
        self.send(member, None, body, Want::Json, ctx)
            .await
            .map(super::fan::in_session)
            .map_err(|why| super::fan::unreachable(&self.fed.members[member], &why))
    }

    /// Sends `bytes` (a notification, or `logging/setLevel`) to every member the session
    /// has opened on this replica; what they answer is not waited for past
    /// `fanout_timeout`.
    pub(super) async fn tell(&self, s: &Session, bytes: &Bytes, ctx: &Ctx<'s>) {
        let opened = self.gw.federation.sessions.opened(&s.key);
        let tells = opened.iter().map(|(m, id)| async move {
            let sent = self.send_with(*m, None, bytes.clone(), Want::Json, Some(id), ctx);
            if let Ok(Ok(answer)) =
                tokio::time::timeout(self.live.config.fanout_timeout, sent).await
            {
                let _ = relay::json_text(answer.into_body(), None).await;
            }
        });
        futures_util::future::join_all(tells).await;
    }

    /// `DELETE`: ends every member session this replica holds for `s`.
    pub(super) async fn end(&self, s: &Session, ctx: &Ctx<'s>) -> Response<GateBody> {
        let ended = self.gw.federation.sessions.end(&s.key);
        let ends = ended.iter().map(|(m, id)| async move {
            let member = &self.fed.members[*m];
            let mut sub = super::fan::sub_request(self.req, &Bytes::new(), None, None, Some(id));
            sub.method = http::Method::DELETE;
            let mut sub_ctx = ctx.for_member(member);
            let x = self.to_member(*m, &sub);
            let ended = super::back::without_body(x, true, Want::Either, &mut sub_ctx);
            let _ = tokio::time::timeout(self.live.config.fanout_timeout, ended).await;
        });
        futures_util::future::join_all(ends).await;
        super::respond::empty(StatusCode::OK, &ctx.request_id)
    }

    /// The session's GET stream: every member's, merged.
    pub(super) async fn stream(
        &self,
        s: &Session,
        ctx: &Ctx<'s>,
    ) -> Result<Response<GateBody>, GateError> {
        let opens = (0..self.fed.members.len()).map(|m| async move {
            let member = &self.fed.members[m];
            let opened = async {
                let id = self.member_session(s, m, ctx).await?;
                let mut sub =
                    super::fan::sub_request(self.req, &Bytes::new(), None, None, Some(&id));
                sub.method = http::Method::GET;
                let mut sub_ctx = ctx.for_member(member);
                sub_ctx.want = Ok(Want::Sse);
                let x = self.to_member(m, &sub);
                let answer = super::back::without_body(x, false, Want::Sse, &mut sub_ctx)
                    .await
                    .map_err(|e| e.to_string())?;
                if answer.status() != StatusCode::OK {
                    // A member without a GET stream (405) sends nothing of its own.
                    return Err(format!("its GET stream was answered {}", answer.status()));
                }
                Ok(streams::MemberStream {
                    member: m,
                    body: answer.into_body(),
                    decoder: crate::mcp::transport::sse::Decoder::new(),
                    early: Vec::new(),
                })
            };
            match tokio::time::timeout(self.live.config.fanout_timeout, opened).await {
                Ok(r) => r,
                Err(_) => Err("no GET stream within fanout_timeout".to_string()),
            }
        });
        let opened = futures_util::future::join_all(opens).await;
        let mut members = Vec::new();
        for (member, o) in self.fed.members.iter().zip(opened) {
            match o {
                Ok(stream) => members.push(stream),
                Err(why) => {
                    tracing::info!(member = %member.name, why, "a member's GET stream is not part of the session's")
                }
            }
        }
        // A session whose members have no streams still gets mcpgate's own notices.
        let merged = streams::merged(
            None,
            members,
            self.gw
                .federation
                .directories
                .shared(&self.profile.name, self.fed),
            true,
        );
        let mut shaping =
            super::respond::Shaping::plain(Want::Sse, self.live, &self.profile.upstream, ctx.token);
        shaping.notices = Some(self.profile.name.clone());
        Ok(super::respond::event_stream(
            self.gw,
            merged,
            shaping,
            &ctx.request_id,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_session_opens_only_for_its_profile() {
        let client = bridge::Session::of_initialize(
            Some(r#"{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"c","version":"1"}}"#),
            [7; 16],
        )
        .unwrap();
        let inner = seal_inner("assistant", &client);
        assert_eq!(unseal(&inner, "assistant"), Some(client));
        assert_eq!(unseal(&inner, "other"), None);
        assert_eq!(unseal(b"{\"p\":1}", "assistant"), None);
        assert_eq!(unseal(&inner[..5], "assistant"), None);
        let again = unseal(&inner, "assistant").unwrap();
        let body: Value = serde_json::from_slice(&initialize_request(&again)).unwrap();
        assert_eq!(body["params"]["protocolVersion"], "2025-06-18");
        assert_eq!(
            body["params"]["capabilities"],
            serde_json::json!({"elicitation": {}})
        );
        assert_eq!(body["params"]["clientInfo"]["name"], "c");
    }
}
