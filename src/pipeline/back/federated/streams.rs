//! The streams of a federated profile (docs/federation.md): one made of every member's (a listen,
//! a legacy session's GET stream), and a member's call stream with the ids of its
//! questions made the client's.
//!
//! A member's question (a server→client request) gets an id that names the member:
//! `"mcpgate-fed:<member>:<its id as JSON>"`. The client's answer with that id goes back
//! to that member with the member's own id ([`member_of_answer`]); no other member can
//! be answered by it.

use super::Directory;
use crate::http::body::GateBody;
use crate::mcp::jsonrpc::ListKind;
use crate::mcp::transport::events::{Carry, Input, SseRelay};
use crate::mcp::transport::sse;
use bytes::Bytes;
use std::borrow::Cow;
use std::sync::Arc;

/// One member's listen stream.
pub(super) struct MemberStream {
    pub(super) member: usize,
    pub(super) body: GateBody,
    pub(super) decoder: sse::Decoder,
    /// What came before its acknowledgement, to pass on after the client's.
    pub(super) early: Vec<String>,
}

impl MemberStream {
    /// Reads the stream until the member acknowledges the listen.
    pub(super) async fn until_acknowledged(&mut self) -> Result<(), String> {
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

/// One stream made of every member's: for a listen, mcpgate's acknowledgement first
/// (`ack`), then what the members' streams carry for the client (not their own
/// acknowledgements, nor the answers that end them; for a legacy GET stream, the members'
/// questions with their ids made the client's), until the last one ends. With no member
/// stream it stays open, for mcpgate's own notices.
pub(super) fn merged(
    ack: Option<Bytes>,
    streams: Vec<MemberStream>,
    dir: Arc<Directory>,
    questions: bool,
) -> Input {
    let mut members = Members { dir, questions };
    let mut first: Vec<Bytes> = ack.into_iter().collect();
    let mut bodies = Vec::with_capacity(streams.len());
    for mut s in streams {
        // What each member sent with or before its acknowledgement goes first.
        for data in std::mem::take(&mut s.early) {
            first.extend(
                members
                    .carried(s.member, data)
                    .map(|j| sse::encode_json(&j, None)),
            );
        }
        while let Some(ev) = s.decoder.next_event() {
            first.extend(members.carry(s.member, ev).map(|ev| ev.raw));
        }
        bodies.push((s.member, s.body, s.decoder));
    }
    first
        .into_iter()
        .fold(Input::merged(bodies), Input::first)
        .carried(members)
}

/// What a merged stream carries of its members' messages.
struct Members {
    dir: Arc<Directory>,
    /// Whether the members' questions pass (a legacy GET stream), their ids mapped.
    questions: bool,
}

impl Members {
    /// What a member's message becomes on the client's stream, if anything.
    fn carried(&self, member: usize, data: String) -> Option<String> {
        #[derive(serde::Deserialize)]
        struct Head<'a> {
            #[serde(borrow)]
            method: Option<Cow<'a, str>>,
            id: Option<serde::de::IgnoredAny>,
        }
        let head: Head = serde_json::from_str(&data).ok()?;
        let method = head.method.as_deref()?;
        if method == "notifications/subscriptions/acknowledged" {
            return None;
        }
        if head.id.is_some() {
            // A question: passed with the member in its id, on a legacy GET stream only.
            return match self.questions {
                true => question_of(member, &data),
                false => None,
            };
        }
        let changed = match method {
            "notifications/tools/list_changed" => Some(ListKind::Tools),
            "notifications/prompts/list_changed" => Some(ListKind::Prompts),
            "notifications/resources/list_changed" => Some(ListKind::Resources),
            _ => None,
        };
        if let Some(kind) = changed {
            self.dir.forget(member, kind);
        }
        Some(data)
    }
}

impl Carry for Members {
    fn carry(&mut self, member: usize, ev: sse::Event) -> Option<sse::Event> {
        let data = ev.data?;
        self.carried(member, data).map(sse::Event::json)
    }
}

/// The prefix of the ids mcpgate gives members' questions.
const QUESTION: &str = "mcpgate-fed:";

/// A member's question (`data`, a JSON-RPC request) with the id the client sees.
fn question_of(member: usize, data: &str) -> Option<String> {
    let mut v: serde_json::Value = serde_json::from_str(data).ok()?;
    let own = v.get("id")?.to_string();
    v["id"] = serde_json::Value::String(format!("{QUESTION}{member}:{own}"));
    Some(v.to_string())
}

/// The member and its own id (JSON text) of an answer whose id mcpgate gave (`id`, the
/// JSON text of the client's answer's id); `None` for any other id.
pub(super) fn member_of_answer(id: &str) -> Option<(usize, String)> {
    let id: String = serde_json::from_str(id).ok()?;
    let rest = id.strip_prefix(QUESTION)?;
    let (member, own) = rest.split_once(':')?;
    let own: serde_json::Value = serde_json::from_str(own).ok()?;
    if !(own.is_string() || own.is_number()) {
        return None;
    }
    Some((member.parse().ok()?, own.to_string()))
}

/// A member's answer to a call, as the client gets it: when it is an event stream, the
/// member's questions on it carry ids that name the member.
pub(super) fn with_questions_mapped(
    member: usize,
    answer: http::Response<GateBody>,
) -> http::Response<GateBody> {
    let sse = answer
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !sse {
        return answer;
    }
    let (parts, body) = answer.into_parts();
    let mapped = Input::body(body).carried(Questions { member });
    http::Response::from_parts(parts, SseRelay::passing(mapped).boxed())
}

/// What a member's call stream carries: its questions with their ids mapped, every other
/// event as it was.
struct Questions {
    member: usize,
}

impl Carry for Questions {
    fn carry(&mut self, _: usize, ev: sse::Event) -> Option<sse::Event> {
        let question = ev.data.as_deref().and_then(|d| {
            let is_question = serde_json::from_str::<serde_json::Value>(d)
                .is_ok_and(|v| v.get("id").is_some() && v.get("method").is_some());
            is_question.then(|| question_of(self.member, d)).flatten()
        });
        match question {
            Some(q) => Some(ev.with_data(q)),
            None => Some(ev),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_questions_id_names_its_member_and_nothing_else_opens() {
        let q = question_of(
            2,
            r#"{"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":{}}"#,
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&q).unwrap();
        let id = v["id"].to_string();
        assert_eq!(member_of_answer(&id), Some((2, "7".to_string())));
        let q = question_of(0, r#"{"jsonrpc":"2.0","id":"a:b\"c","method":"x"}"#).unwrap();
        let v: serde_json::Value = serde_json::from_str(&q).unwrap();
        assert_eq!(
            member_of_answer(&v["id"].to_string()),
            Some((0, r#""a:b\"c""#.to_string()))
        );
        for other in [
            "7",
            r#""7""#,
            r#""mcpgate-fed:x:1""#,
            r#""mcpgate-fed:1:{}""#,
            r#""mcpgate-fed:1""#,
        ] {
            assert_eq!(member_of_answer(other), None, "{other}");
        }
    }
}
