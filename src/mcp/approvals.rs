//! The messages of an approval (docs/approvals.md): the form a person answers, the sealed state a
//! 2026-07-28 client echoes on its retry, and the reading of the answer.
//!
//! The state binds, under the upstream's approval key (any replica with the key opens it):
//! the expiry, the caller, a digest of the tool and its arguments (their JSON with keys
//! sorted: what was shown), the rule that asked and a one-time nonce, which the gateway
//! lets open once (`runtime::approvals`).

use crate::config::message;
use crate::mcp::rounds::CallerKey;
use crate::upstream::session::Sealer;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The key of the one input request an approval makes, in `inputRequests` and
/// `inputResponses`.
pub const KEY: &str = "mcpgate_approval";

/// What a person approves: the tool and its arguments.
pub type CallDigest = [u8; 32];

/// The digest of a call of `tool` with `arguments` (JSON text, absent: none): of their
/// [`canonical`] text, so the same call written in another key order or spacing is the
/// same call, and two numbers that differ in any digit are not. `None` when the arguments
/// are not JSON (the request is refused before this).
pub fn digest(tool: &str, arguments: Option<&str>) -> Option<CallDigest> {
    let args = match arguments {
        Some(text) => canonical(text).ok()?,
        None => "null".into(),
    };
    let mut h = Sha256::new();
    h.update(tool.as_bytes());
    h.update([0]);
    h.update(args.as_bytes());
    Some(h.finalize().into())
}

/// `text` (one JSON value) with its objects' keys sorted and no space between tokens;
/// strings written as serde_json writes them, numbers as the text wrote them.
pub fn canonical(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    canonical_into(text.trim(), &mut out)?;
    Ok(out)
}

fn canonical_into(text: &str, out: &mut String) -> Result<(), String> {
    match text.as_bytes().first() {
        Some(b'{') => {
            let mut m = members(text)?;
            m.sort_by(|a, b| a.0.cmp(&b.0));
            out.push('{');
            for (i, (k, v)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).expect("a key"));
                out.push(':');
                canonical_into(v.get().trim(), out)?;
            }
            out.push('}');
        }
        Some(b'[') => {
            let items: Vec<&RawValue> = serde_json::from_str(text).map_err(|e| e.to_string())?;
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_into(v.get().trim(), out)?;
            }
            out.push(']');
        }
        Some(b'"') => {
            let s: String = serde_json::from_str(text).map_err(|e| e.to_string())?;
            out.push_str(&serde_json::to_string(&s).expect("a string"));
        }
        _ => {
            // A number, true, false or null: checked, then kept as written.
            serde_json::from_str::<&RawValue>(text).map_err(|e| e.to_string())?;
            out.push_str(text);
        }
    }
    Ok(())
}

/// What the person is shown: the rule's message, then the tool and its arguments.
pub fn question(rendered: &str, tool: &str, arguments: Option<&str>) -> String {
    let args = arguments
        .and_then(|a| canonical(a).ok())
        .unwrap_or_else(|| "{}".into());
    format!(
        "{rendered}\n\nTool: {}\nArguments: {}",
        message::escape(tool),
        message::escape(&message::cut(&args, message::MOST_CHARS))
    )
}

/// The `elicitation/create` params of an approval: a form of one boolean, `approve`.
pub fn form(question: &str) -> Value {
    json!({
        "mode": "form",
        "message": question,
        "requestedSchema": {
            "type": "object",
            "properties": {
                "approve": {
                    "type": "boolean",
                    "title": "Approve",
                    "description": "Run this call as shown",
                }
            },
            "required": ["approve"],
        },
    })
}

/// The `input_required` answer of a 2026-07-28 call `id` (its JSON text) that needs an
/// approval: the form, and the sealed `state`.
pub fn input_required(id: &str, question: &str, state: &str) -> String {
    let result = json!({
        "resultType": "input_required",
        "inputRequests": { KEY: { "method": "elicitation/create", "params": form(question) } },
        "requestState": state,
    });
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#)
}

/// The `elicitation/create` request a legacy client is sent on its call's stream, with
/// the id `qid` (JSON text).
pub fn elicitation_request(qid: &str, question: &str) -> String {
    let params = form(question);
    format!(r#"{{"jsonrpc":"2.0","id":{qid},"method":"elicitation/create","params":{params}}}"#)
}

/// What is sealed in an approval's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub caller: CallerKey,
    pub call: CallDigest,
    pub nonce: [u8; 16],
    /// The rule's number.
    pub rule: u16,
    /// Seconds since 1970.
    pub expires: u64,
}

impl Asked {
    /// A new approval of `call` by `caller` under rule `rule`, for `life`.
    pub fn new(caller: CallerKey, call: CallDigest, rule: usize, life: Duration) -> Asked {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).expect("the system has a source of randomness");
        Asked {
            caller,
            call,
            nonce,
            rule: rule.min(u16::MAX as usize) as u16,
            expires: (SystemTime::now() + life)
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
        }
    }

    pub fn seal(&self, sealer: &Sealer) -> String {
        let mut inner = Vec::with_capacity(8 + 16 + 32 + 16 + 2);
        inner.extend_from_slice(&self.expires.to_be_bytes());
        inner.extend_from_slice(&self.caller);
        inner.extend_from_slice(&self.call);
        inner.extend_from_slice(&self.nonce);
        inner.extend_from_slice(&self.rule.to_be_bytes());
        sealer
            .seal(&[0; 8], &inner)
            .expect("an approval state is shorter than its sealer's bound")
    }

    /// The nonce as text, the key of its single use.
    pub fn nonce_hex(&self) -> String {
        crate::config::pins::hex(&self.nonce)
    }
}

/// Why a state was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Not an approval state of this key (perhaps the upstream's own state).
    NotOurs,
    Expired,
    OtherCaller,
    /// The tool or its arguments differ from those shown.
    OtherCall,
}

/// Opens the approval state `state` (its JSON text) of a retry by `caller` of `call`.
pub fn open(
    sealer: &Sealer,
    state: &str,
    caller: &CallerKey,
    call: &CallDigest,
) -> Result<Asked, Refused> {
    let Ok(Value::String(sealed)) = serde_json::from_str::<Value>(state) else {
        return Err(Refused::NotOurs);
    };
    let (_, inner) = sealer.open(sealed.as_bytes()).ok_or(Refused::NotOurs)?;
    if inner.len() != 8 + 16 + 32 + 16 + 2 {
        return Err(Refused::NotOurs);
    }
    let asked = Asked {
        expires: u64::from_be_bytes(inner[0..8].try_into().expect("8 bytes")),
        caller: inner[8..24].try_into().expect("16 bytes"),
        call: inner[24..56].try_into().expect("32 bytes"),
        nonce: inner[56..72].try_into().expect("16 bytes"),
        rule: u16::from_be_bytes(inner[72..74].try_into().expect("2 bytes")),
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    if now > asked.expires {
        return Err(Refused::Expired);
    }
    if asked.caller != *caller {
        return Err(Refused::OtherCaller);
    }
    if asked.call != *call {
        return Err(Refused::OtherCall);
    }
    Ok(asked)
}

/// The person's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Approved,
    /// Declined in the form (`approve: false`) or by the client's decline button.
    Declined,
    Cancelled,
}

impl Answer {
    /// The `data.reason` of a refused call, and the audit record's decision.
    pub fn reason(self) -> &'static str {
        match self {
            Answer::Approved => "approved",
            Answer::Declined => "declined",
            Answer::Cancelled => "cancelled",
        }
    }
}

/// Reads an elicitation result (`{action, content}`) answering the approval form. Anything
/// but the form's one boolean is refused: a client answers what was asked.
pub fn answer_of(result: &Value) -> Result<Answer, String> {
    let Some(object) = result.as_object() else {
        return Err("the approval's answer is not an object".into());
    };
    if let Some(extra) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "action" | "content" | "_meta"))
    {
        return Err(format!(
            "the approval's answer has a field {extra:?} it was not asked for"
        ));
    }
    match object.get("action").and_then(Value::as_str) {
        Some("decline") => return Ok(Answer::Declined),
        Some("cancel") => return Ok(Answer::Cancelled),
        Some("accept") => {}
        _ => return Err("the approval's answer has no action accept, decline or cancel".into()),
    }
    let Some(content) = object.get("content").and_then(Value::as_object) else {
        return Err("an accepted approval has no content object".into());
    };
    if let Some(extra) = content.keys().find(|k| *k != "approve") {
        return Err(format!(
            "the approval form has no field {extra:?}: it asks only `approve`"
        ));
    }
    match content.get("approve") {
        Some(Value::Bool(true)) => Ok(Answer::Approved),
        Some(Value::Bool(false)) => Ok(Answer::Declined),
        Some(_) => Err("`approve` is a boolean".into()),
        None => Err("the approval form's `approve` is missing".into()),
    }
}

/// Reads the `inputResponses` of a 2026-07-28 retry that carries an approval state: its
/// one answer, to the approval.
pub fn retry_answer(body: &[u8]) -> Result<Answer, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let Some(responses) = v
        .pointer("/params/inputResponses")
        .and_then(Value::as_object)
    else {
        return Err("a retry with an approval's requestState needs its inputResponses".into());
    };
    if let Some(other) = responses.keys().find(|k| *k != KEY) {
        return Err(format!(
            "inputResponses answers {other:?}, which was not asked"
        ));
    }
    let Some(answer) = responses.get(KEY) else {
        return Err(format!("inputResponses has no answer to {KEY:?}"));
    };
    answer_of(answer)
}

/// Reads a legacy client's JSON-RPC response to the approval's `elicitation/create`: its
/// result, or the error it answered with.
pub fn legacy_answer(body: &[u8]) -> Result<Answer, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if let Some(result) = v.get("result") {
        return answer_of(result);
    }
    let why = v
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or("no result");
    Err(format!(
        "the client answered the approval with an error: {why}"
    ))
}

/// A retry's body as the upstream gets it: without the approval's `requestState` and
/// `inputResponses`. Every other member keeps its place and its value's text, byte for
/// byte (the arguments as shown, numbers of any size as written).
pub fn strip(body: &[u8]) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(body).map_err(|e| e.to_string())?;
    let top = members(text)?;
    let mut out = Vec::with_capacity(body.len());
    out.push(b'{');
    for (i, (key, value)) in top.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(serde_json::to_string(key).expect("a key").as_bytes());
        out.push(b':');
        if key == "params" && value.get().trim_start().starts_with('{') {
            let params = members(value.get())?;
            out.push(b'{');
            let kept = params
                .iter()
                .filter(|(k, _)| k != "requestState" && k != "inputResponses");
            for (j, (k, v)) in kept.enumerate() {
                if j > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(serde_json::to_string(k).expect("a key").as_bytes());
                out.push(b':');
                out.extend_from_slice(v.get().as_bytes());
            }
            out.push(b'}');
        } else {
            out.extend_from_slice(value.get().as_bytes());
        }
    }
    out.push(b'}');
    Ok(out)
}

/// An object's members in their order, each value as its text.
fn members(text: &str) -> Result<Vec<(String, &RawValue)>, String> {
    struct Ordered<'a>(Vec<(String, &'a RawValue)>);
    impl<'de> serde::Deserialize<'de> for Ordered<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Ordered<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Self::Value, A::Error> {
                    let mut out = Vec::new();
                    while let Some((k, v)) = map.next_entry::<String, &'de RawValue>()? {
                        out.push((k, v));
                    }
                    Ok(Ordered(out))
                }
            }
            d.deserialize_map(Visit)
        }
    }
    serde_json::from_str::<Ordered<'_>>(text)
        .map(|o| o.0)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SessionKey;
    use crate::upstream::session::Purpose;

    fn sealer(key: u8) -> Sealer {
        Sealer::for_purpose("u", &[SessionKey([key; 32])], Purpose::Approval)
    }

    #[test]
    fn a_state_opens_for_its_caller_and_call_only() {
        let s = sealer(1);
        let call = digest("delete", Some(r#"{"path":"a","force":true}"#)).unwrap();
        // Numbers differing past a double's precision are other calls.
        assert_ne!(
            digest("d", Some(r#"{"n":123456789012345678901}"#)),
            digest("d", Some(r#"{"n":123456789012345678902}"#))
        );
        assert_eq!(
            canonical(r#" { "b" : [ 1 , {"y":2.50,"x":"\u0041"} ], "a" : null } "#).unwrap(),
            r#"{"a":null,"b":[1,{"x":"A","y":2.50}]}"#
        );
        let asked = Asked::new([1; 16], call, 2, Duration::from_secs(60));
        let state = format!("\"{}\"", asked.seal(&s));
        assert_eq!(open(&s, &state, &[1; 16], &call), Ok(asked.clone()));
        // The same arguments in another order and spacing are the same call.
        let same = digest("delete", Some(r#"{ "force": true, "path": "a" }"#)).unwrap();
        assert_eq!(open(&s, &state, &[1; 16], &same), Ok(asked));
        let other = digest("delete", Some(r#"{"path":"b","force":true}"#)).unwrap();
        assert_eq!(open(&s, &state, &[1; 16], &other), Err(Refused::OtherCall));
        let other_tool = digest("erase", Some(r#"{"path":"a","force":true}"#)).unwrap();
        assert_eq!(
            open(&s, &state, &[1; 16], &other_tool),
            Err(Refused::OtherCall)
        );
        assert_eq!(open(&s, &state, &[2; 16], &call), Err(Refused::OtherCaller));
        assert_eq!(
            open(&sealer(2), &state, &[1; 16], &call),
            Err(Refused::NotOurs)
        );
        // A request state of the same key is not an approval.
        let states = Sealer::for_purpose("u", &[SessionKey([1; 32])], Purpose::RequestState);
        let theirs = format!("\"{}\"", states.seal(&[0; 8], &[0; 74]).unwrap());
        assert_eq!(open(&s, &theirs, &[1; 16], &call), Err(Refused::NotOurs));
        for junk in ["1", "null", "\"\"", "{}", "\"x\""] {
            assert_eq!(open(&s, junk, &[1; 16], &call), Err(Refused::NotOurs));
        }
        let old = Asked::new([1; 16], call, 1, Duration::ZERO);
        let old = format!("\"{}\"", old.seal(&s));
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(open(&s, &old, &[1; 16], &call), Err(Refused::Expired));
    }

    #[test]
    fn only_the_forms_one_boolean_is_an_answer() {
        let ok = |v: Value| answer_of(&v);
        assert_eq!(
            ok(json!({"action":"accept","content":{"approve":true}})),
            Ok(Answer::Approved)
        );
        assert_eq!(
            ok(json!({"action":"accept","content":{"approve":false}})),
            Ok(Answer::Declined)
        );
        assert_eq!(ok(json!({"action":"decline"})), Ok(Answer::Declined));
        assert_eq!(ok(json!({"action":"cancel"})), Ok(Answer::Cancelled));
        for bad in [
            json!({"action":"accept","content":{"approve":"yes"}}),
            json!({"action":"accept","content":{"approve":1}}),
            json!({"action":"accept","content":{"approve":true,"path":"/etc"}}),
            json!({"action":"accept","content":{}}),
            json!({"action":"accept"}),
            json!({"action":"accept","content":{"approve":true},"extra":1}),
            json!({"action":"maybe"}),
            json!([true]),
        ] {
            assert!(ok(bad.clone()).is_err(), "{bad}");
        }
        let retry = |responses: Value| {
            retry_answer(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"d","inputResponses":responses}}).to_string().as_bytes())
        };
        assert_eq!(
            retry(json!({KEY: {"action":"accept","content":{"approve":true}}})),
            Ok(Answer::Approved)
        );
        assert!(retry(json!({})).is_err());
        assert!(
            retry(json!({KEY: {"action":"accept","content":{"approve":true}}, "other": {}}))
                .is_err()
        );
        assert!(legacy_answer(br#"{"jsonrpc":"2.0","id":"q","error":{"code":-32601,"message":"Method not found"}}"#)
            .unwrap_err()
            .contains("Method not found"));
    }

    #[test]
    fn the_retry_goes_on_without_the_approvals_fields_and_in_its_order() {
        let body = br#"{"jsonrpc":"2.0", "id":9,"method":"tools/call","params":{"name":"delete","requestState":"s","arguments":{ "z": 123456789012345678901234567890, "a":1.50 },"inputResponses":{"k":{}}, "_meta":{}}}"#;
        let out = String::from_utf8(strip(body).unwrap()).unwrap();
        assert_eq!(
            out,
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"delete","arguments":{ "z": 123456789012345678901234567890, "a":1.50 },"_meta":{}}}"#
        );
        assert!(strip(b"[1]").is_err());
        assert!(strip(b"{\"params\":").is_err());
    }

    #[test]
    fn the_form_shows_the_call_inert() {
        let q = question("Delete?", "delete<x>", Some(r#"{"path":"<script>"}"#));
        assert!(
            q.starts_with("Delete?\n\nTool: delete\\u003cx\\u003e\nArguments: "),
            "{q}"
        );
        assert!(!q.contains("<script>"));
        let text = input_required("7", &q, "S");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["result"]["requestState"], "S");
        assert_eq!(v["result"]["inputRequests"][KEY]["params"]["message"], q);
        assert_eq!(
            v["result"]["inputRequests"][KEY]["params"]["requestedSchema"]["required"],
            json!(["approve"])
        );
    }
}
