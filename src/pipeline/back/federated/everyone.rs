//! What goes to every member of a federated profile at once and is joined: a
//! `subscriptions/listen` (the members' streams merged) and `server/discover` (what any
//! member can do, the profile named as the server).

use super::fan::sub_request;
use super::{Fan, streams};
use crate::config::Profile;
use crate::config::generation::MODERN;
use crate::error::GateError;
use crate::http::body::GateBody;
use crate::mcp::jsonrpc;
use crate::mcp::transport::accept::Want;
use crate::pipeline::{Ctx, back, limits, respond};
use bytes::Bytes;
use http::{Response, StatusCode};

impl<'s> Fan<'_, 's> {
    /// `subscriptions/listen`: one listen at every member, each with what the profile
    /// lets the client listen to; the client's stream opens once every member has
    /// acknowledged its own (or failed, or passed `fanout_timeout`), so nothing that
    /// happens after the acknowledgement is missed, and then carries what any member
    /// sends. A member's list change also makes the federation read its names anew.
    pub(super) async fn listen(
        &self,
        bytes: &Bytes,
        ctx: &Ctx<'s>,
    ) -> Result<Response<GateBody>, GateError> {
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
        let merged = streams::merged(
            Some(crate::mcp::transport::sse::encode_json(&ack, None)),
            streams,
            self.gw
                .federation
                .directories
                .shared(&self.profile.name, self.fed),
            false,
        );
        let mut shaping =
            respond::Shaping::plain(Want::Sse, self.live, &self.profile.upstream, ctx.token);
        shaping.notices = Some(self.profile.name.clone());
        shaping.listening = Some(listening);
        Ok(respond::event_stream(
            self.gw,
            merged,
            shaping,
            &ctx.request_id,
        ))
    }

    /// `server/discover` of every member, merged: what any member can do, the profile
    /// named as the server, each member's instructions under its name. The profile's
    /// own rules then narrow it, as for one upstream.
    pub(super) async fn discover(
        &self,
        id: &str,
        bytes: &Bytes,
        ctx: &Ctx<'s>,
    ) -> Result<String, GateError> {
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
pub(super) fn join(
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
pub(super) fn merge_discover(
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
