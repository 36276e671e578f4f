//! Multi round-trip requests (MCP 2026-07-28, docs/protocol.md). An upstream that needs input
//! answers `tools/call`, `prompts/get` or `resources/read` with `resultType:
//! "input_required"` and perhaps a `requestState`, which the client echoes on its retry.
//! The client never sees the upstream's state: it gets mcpgate's seal of it (the
//! request-state keys of `upstream::session`), which binds
//!
//! - the endpoint that asked, so the retry goes back to it;
//! - the caller (its credential's key, or the route on an open one), so another caller's
//!   retry with it is refused;
//! - the request: its method and what it names (tool, prompt, URI);
//! - an expiry, `[transport] input_timeout` after the answer;
//! - the first request's id, which the audit records of every round carry.
//!
//! A retry's state is opened before anything else looks at it and replaced by the
//! upstream's own (or removed, when the upstream gave none); one that does not open is
//! refused and never forwarded. The same answer may instead make a task (`resultType:
//! "task"`), whose id is sealed likewise (`mcp::task_ids`).

use crate::upstream::session::{EndpointId, Sealer};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The methods whose answers may ask for input.
pub fn may_ask(method: &str) -> bool {
    matches!(method, "tools/call" | "prompts/get" | "resources/read")
}

pub use crate::upstream::session::CallerKey;

/// The caller key of a credential's key (a token's SHA-256, an OAuth caller's key) or,
/// on a route without authentication, of the route's path.
pub fn caller_key(credential: Option<&[u8; 32]>, route: &str) -> CallerKey {
    let mut h = Sha256::new();
    match credential {
        Some(k) => {
            h.update(b"credential\0");
            h.update(k);
        }
        None => {
            h.update(b"route\0");
            h.update(route.as_bytes());
        }
    }
    h.finalize()[..16]
        .try_into()
        .expect("a SHA-256 has 16 bytes")
}

/// What a retry must be to use a state: its method and what it names, and for a call that
/// needed approval (docs/approvals.md), the call approved (its tool and arguments' digest), so that
/// the upstream's later rounds of an approved call cannot carry other arguments.
fn binding(method: &str, name: Option<&str>, approved: Option<&[u8; 32]>) -> [u8; 8] {
    let mut h = Sha256::new();
    h.update(method.as_bytes());
    h.update([0]);
    h.update(name.unwrap_or("").as_bytes());
    if let Some(call) = approved {
        h.update([0]);
        h.update(call);
    }
    h.finalize()[..8].try_into().expect("a SHA-256 has 8 bytes")
}

/// A request that may be answered `input_required`: what its answer's state is sealed
/// with. The endpoint is known once the upstream has answered.
#[derive(Clone)]
pub struct Issue {
    pub sealer: Arc<Sealer>,
    /// Seals the id of a task the answer makes.
    pub tasks: Arc<Sealer>,
    /// The request's JSON-RPC id, as JSON text: its answer is the one sealed.
    pub id: Box<str>,
    pub endpoint: EndpointId,
    caller: Caller,
    /// What the retry must be: its method and what it names (hashed when sealing).
    method: Box<str>,
    name: Option<Box<str>>,
    /// The first round's request id (this one's, unless it is a retry).
    first: Box<str>,
    life: Duration,
    /// The approved call, when the request needed approval.
    approved: Option<[u8; 32]>,
}

/// Who a state is for: known already (a retry's, whose state was opened), or what it is
/// made from, hashed only when a state is sealed (most answers ask for nothing).
#[derive(Clone)]
pub enum Caller {
    Key(CallerKey),
    Unhashed {
        credential: Option<[u8; 32]>,
        route: Box<str>,
    },
}

impl Caller {
    fn key(&self) -> CallerKey {
        match self {
            Caller::Key(k) => *k,
            Caller::Unhashed { credential, route } => caller_key(credential.as_ref(), route),
        }
    }
}

/// The request whose answer an [`Issue`] seals states for.
pub struct Asking<'a> {
    /// Its JSON-RPC id, as JSON text.
    pub id: &'a str,
    pub method: &'a str,
    /// The tool, prompt or resource it names.
    pub name: Option<&'a str>,
    /// The first round's request id (this one's, unless it is a retry).
    pub first: &'a str,
}

impl Issue {
    /// States for `request`'s answer, sealed with `sealer` (a task id with `tasks`) for
    /// `caller`, open for `life`.
    pub fn new(
        sealer: Arc<Sealer>,
        tasks: Arc<Sealer>,
        request: Asking<'_>,
        caller: Caller,
        life: Duration,
    ) -> Issue {
        Issue {
            sealer,
            tasks,
            id: request.id.into(),
            endpoint: [0; 8],
            caller,
            method: request.method.into(),
            name: request.name.map(Into::into),
            first: request.first.into(),
            life,
            approved: None,
        }
    }

    /// Binds the states sealed for this request to the approved call `call` (docs/approvals.md).
    pub fn approved(mut self, call: Option<[u8; 32]>) -> Issue {
        self.approved = call;
        self
    }

    /// Seals the state of the `input_required` answer to this request in `text` (one
    /// message or a batch), or the id of the task it made. `Ok(None)`: no such answer,
    /// nothing to change.
    pub fn seal_answer(&self, text: &str) -> Result<Option<String>, String> {
        if !text.contains("input_required") && !text.contains("\"task\"") {
            return Ok(None);
        }
        let mut v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let mut changed = false;
        match &mut v {
            Value::Array(items) => {
                for m in items {
                    changed |= self.seal_message(m)?;
                }
            }
            m => changed = self.seal_message(m)?,
        }
        Ok(changed.then(|| v.to_string()))
    }

    fn seal_message(&self, m: &mut Value) -> Result<bool, String> {
        let answers = m.get("id").is_some_and(|id| id_text_eq(id, &self.id));
        let Some(result) = m.get_mut("result").filter(|_| answers) else {
            return Ok(false);
        };
        if result.get("resultType") == Some(&Value::from("task")) {
            return self.seal_task(result).map(|()| true);
        }
        if result.get("resultType") != Some(&Value::from("input_required")) {
            return Ok(false);
        }
        let original = match result.get("requestState") {
            None => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(_) => return Err("the upstream's requestState is not a string".into()),
        };
        let sealed = self.seal(original)?;
        result
            .as_object_mut()
            .ok_or("an input_required result that is not an object")?
            .insert("requestState".into(), Value::String(sealed));
        Ok(true)
    }

    /// Replaces the `taskId` of a task answer by the client's sealed id.
    fn seal_task(&self, result: &mut Value) -> Result<(), String> {
        let Some(Value::String(original)) = result.get("taskId") else {
            return Err("the upstream's task has no taskId string".into());
        };
        let sealed = super::task_ids::seal(
            &self.tasks,
            &self.endpoint,
            &self.caller.key(),
            super::task_ids::Maker {
                first: &self.first,
                tool: self.name.as_deref().unwrap_or(""),
            },
            super::task_ids::life(result.get("ttlMs")),
            original,
        )
        .ok_or("the upstream's taskId is too long to seal")?;
        result["taskId"] = Value::String(sealed);
        Ok(())
    }

    fn seal(&self, original: Option<&str>) -> Result<String, String> {
        let expires = (SystemTime::now() + self.life)
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let first = &self.first.as_bytes()[..self.first.len().min(255)];
        let mut inner = Vec::with_capacity(8 + 16 + 8 + 2 + first.len() + 64);
        inner.extend_from_slice(&expires.to_be_bytes());
        inner.extend_from_slice(&self.caller.key());
        inner.extend_from_slice(&binding(
            &self.method,
            self.name.as_deref(),
            self.approved.as_ref(),
        ));
        inner.push(first.len() as u8);
        inner.extend_from_slice(first);
        match original {
            Some(s) => {
                inner.push(1);
                inner.extend_from_slice(s.as_bytes());
            }
            None => inner.push(0),
        }
        self.sealer
            .seal(&self.endpoint, &inner)
            .ok_or_else(|| "the upstream's requestState is too long to seal".into())
    }
}

/// Two ids are the same JSON value (an id's text as the request wrote it vs. as the
/// answer is re-written).
fn id_text_eq(id: &Value, text: &str) -> bool {
    serde_json::from_str::<Value>(text).is_ok_and(|v| v == *id)
}

/// An opened retry: where it goes and what the upstream gets back.
#[derive(Debug, PartialEq, Eq)]
pub struct Opened {
    pub endpoint: EndpointId,
    /// The upstream's own state; `None` when it gave none.
    pub original: Option<String>,
    /// The first round's request id.
    pub first: String,
}

/// Why a retry's state is refused; the client is told only that it is not valid here.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Not sealed here (forged, another key, another upstream) or not a string.
    Unreadable,
    Expired,
    OtherCaller,
    OtherRequest,
}

/// Opens the `requestState` of a retry (its JSON text, `state`) by `caller`, of `method`
/// naming `name` (and, for a call that needs approval, of the call `approved`).
pub fn open(
    sealer: &Sealer,
    state: &str,
    caller: &CallerKey,
    method: &str,
    name: Option<&str>,
    approved: Option<&[u8; 32]>,
) -> Result<Opened, Refused> {
    let Ok(Value::String(sealed)) = serde_json::from_str::<Value>(state) else {
        return Err(Refused::Unreadable);
    };
    let (endpoint, inner) = sealer.open(sealed.as_bytes()).ok_or(Refused::Unreadable)?;
    let take = |inner: &[u8], at: usize, n: usize| inner.get(at..at + n).map(<[u8]>::to_vec);
    let expires = take(&inner, 0, 8).ok_or(Refused::Unreadable)?;
    let expires = u64::from_be_bytes(expires.try_into().map_err(|_| Refused::Unreadable)?);
    let sealed_caller = take(&inner, 8, 16).ok_or(Refused::Unreadable)?;
    let sealed_binding = take(&inner, 24, 8).ok_or(Refused::Unreadable)?;
    let first_len = *inner.get(32).ok_or(Refused::Unreadable)? as usize;
    let first = take(&inner, 33, first_len).ok_or(Refused::Unreadable)?;
    let rest = inner.get(33 + first_len..).ok_or(Refused::Unreadable)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    if now > expires {
        return Err(Refused::Expired);
    }
    if sealed_caller != caller {
        return Err(Refused::OtherCaller);
    }
    if sealed_binding != binding(method, name, approved) {
        return Err(Refused::OtherRequest);
    }
    let original = match rest.split_first() {
        Some((0, [])) => None,
        Some((1, s)) => Some(String::from_utf8(s.to_vec()).map_err(|_| Refused::Unreadable)?),
        _ => return Err(Refused::Unreadable),
    };
    Ok(Opened {
        endpoint,
        original,
        first: String::from_utf8(first).map_err(|_| Refused::Unreadable)?,
    })
}

/// The request `body` with its `params.requestState` replaced by the upstream's own, or
/// removed when there was none.
pub fn restore(body: &[u8], original: Option<&str>) -> Result<Vec<u8>, String> {
    let mut v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let params = v
        .get_mut("params")
        .and_then(Value::as_object_mut)
        .ok_or("a retry without params")?;
    match original {
        Some(s) => params.insert("requestState".into(), Value::from(s)),
        None => params.remove("requestState"),
    };
    Ok(serde_json::to_vec(&v).expect("a JSON value serialises"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SessionKey;
    use crate::upstream::session::Purpose;

    fn sealer(key: u8) -> Arc<Sealer> {
        Arc::new(Sealer::for_purpose(
            "u",
            &[SessionKey([key; 32])],
            Purpose::RequestState,
        ))
    }

    fn issue(s: &Arc<Sealer>, caller: CallerKey, life: Duration) -> Issue {
        let mut i = Issue::new(
            s.clone(),
            Arc::new(Sealer::for_purpose(
                "u",
                &[SessionKey([1; 32])],
                Purpose::TaskId,
            )),
            Asking {
                id: "7",
                method: "tools/call",
                name: Some("delete_note"),
                first: "rid-1",
            },
            Caller::Key(caller),
            life,
        );
        i.endpoint = [9; 8];
        i
    }

    const ASKS: &str = r#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"input_required","inputRequests":{"c":{"method":"elicitation/create","params":{}}},"requestState":"upstream-secret"}}"#;

    fn state_of(text: &str) -> String {
        let v: Value = serde_json::from_str(text).unwrap();
        v["result"]["requestState"].to_string()
    }

    #[test]
    fn a_sealed_state_opens_for_its_caller_and_request_only() {
        let s = sealer(1);
        let alice = caller_key(Some(&[1; 32]), "/r");
        let out = issue(&s, alice, Duration::from_secs(60))
            .seal_answer(ASKS)
            .unwrap()
            .unwrap();
        assert!(!out.contains("upstream-secret"));
        let state = state_of(&out);
        let opened = open(&s, &state, &alice, "tools/call", Some("delete_note"), None).unwrap();
        assert_eq!(
            opened,
            Opened {
                endpoint: [9; 8],
                original: Some("upstream-secret".into()),
                first: "rid-1".into()
            }
        );
        let bob = caller_key(Some(&[2; 32]), "/r");
        assert_eq!(
            open(&s, &state, &bob, "tools/call", Some("delete_note"), None),
            Err(Refused::OtherCaller)
        );
        assert_eq!(
            open(&s, &state, &alice, "tools/call", Some("echo"), None),
            Err(Refused::OtherRequest)
        );
        assert_eq!(
            open(
                &sealer(2),
                &state,
                &alice,
                "tools/call",
                Some("delete_note"),
                None
            ),
            Err(Refused::Unreadable)
        );
        // The same key's session ids are another purpose: they do not open as states.
        let sessions = Sealer::new("u", &[SessionKey([1; 32])]);
        let id = sessions.seal(&[9; 8], b"x").unwrap();
        assert_eq!(
            open(
                &s,
                &format!("\"{id}\""),
                &alice,
                "tools/call",
                Some("delete_note"),
                None
            ),
            Err(Refused::Unreadable)
        );
        for junk in ["7", "null", "\"\"", "\"upstream-secret\"", "{}"] {
            assert_eq!(
                open(&s, junk, &alice, "tools/call", Some("delete_note"), None),
                Err(Refused::Unreadable)
            );
        }
    }

    #[test]
    fn a_state_of_an_approved_call_opens_for_that_call_only() {
        let s = sealer(1);
        let c = caller_key(None, "/open");
        let out = issue(&s, c, Duration::from_secs(60))
            .approved(Some([5; 32]))
            .seal_answer(ASKS)
            .unwrap()
            .unwrap();
        let state = state_of(&out);
        let name = Some("delete_note");
        assert!(open(&s, &state, &c, "tools/call", name, Some(&[5; 32])).is_ok());
        for other in [None, Some(&[6; 32])] {
            assert_eq!(
                open(&s, &state, &c, "tools/call", name, other),
                Err(Refused::OtherRequest)
            );
        }
    }

    #[test]
    fn an_expired_state_is_refused() {
        let s = sealer(1);
        let c = caller_key(None, "/open");
        let out = issue(&s, c, Duration::ZERO)
            .seal_answer(ASKS)
            .unwrap()
            .unwrap();
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(
            open(
                &s,
                &state_of(&out),
                &c,
                "tools/call",
                Some("delete_note"),
                None
            ),
            Err(Refused::Expired)
        );
    }

    #[test]
    fn a_state_is_added_when_the_upstream_gave_none_and_removed_on_the_retry() {
        let s = sealer(1);
        let c = caller_key(None, "/open");
        let asks = r#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"input_required","inputRequests":{}}}"#;
        let out = issue(&s, c, Duration::from_secs(60))
            .seal_answer(asks)
            .unwrap()
            .unwrap();
        let opened = open(
            &s,
            &state_of(&out),
            &c,
            "tools/call",
            Some("delete_note"),
            None,
        )
        .unwrap();
        assert_eq!(opened.original, None);
        let retry = br#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"delete_note","requestState":"x","inputResponses":{}}}"#;
        let body: Value = serde_json::from_slice(&restore(retry, None).unwrap()).unwrap();
        assert_eq!(body["params"].get("requestState"), None);
        let body: Value = serde_json::from_slice(&restore(retry, Some("mine")).unwrap()).unwrap();
        assert_eq!(body["params"]["requestState"], "mine");
    }

    #[test]
    fn other_answers_are_left_alone() {
        let s = sealer(1);
        let i = issue(&s, caller_key(None, "/"), Duration::from_secs(60));
        let done = r#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"complete","content":[]}}"#;
        assert_eq!(i.seal_answer(done).unwrap(), None);
        let other = ASKS.replace("\"id\":7", "\"id\":8");
        assert_eq!(i.seal_answer(&other).unwrap(), None);
        let bad = ASKS.replace("\"upstream-secret\"", "42");
        assert!(i.seal_answer(&bad).is_err());
    }

    #[test]
    fn a_task_answer_gets_a_sealed_task_id() {
        let s = sealer(1);
        let c = caller_key(None, "/open");
        let i = issue(&s, c, Duration::from_secs(60));
        let made = r#"{"jsonrpc":"2.0","id":7,"result":{"resultType":"task","taskId":"srv-9","status":"working","ttlMs":60000}}"#;
        let out = i.seal_answer(made).unwrap().unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        let sealed = v["result"]["taskId"].as_str().unwrap();
        assert_ne!(sealed, "srv-9");
        let opened = crate::mcp::task_ids::open(&i.tasks, sealed, &c).unwrap();
        assert_eq!(
            (opened.original.as_str(), opened.first.as_str()),
            ("srv-9", "rid-1")
        );
        assert_eq!(opened.endpoint, [9; 8]);
        // Not a requestState of the same key.
        assert!(
            open(
                &s,
                &format!("\"{sealed}\""),
                &c,
                "tools/call",
                Some("delete_note"),
                None
            )
            .is_err()
        );
        let bad = made.replace("\"srv-9\"", "9");
        assert!(i.seal_answer(&bad).is_err());
    }
}
