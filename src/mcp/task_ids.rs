//! Task ids of the tasks extension (MCP 2026-07-28, docs/protocol.md). A server that runs a call
//! as a task answers `resultType: "task"` with a `taskId`, which the client then names in
//! `tasks/get`, `tasks/update`, `tasks/cancel` (`params.taskId` and `Mcp-Name`) and in a
//! `subscriptions/listen` (`notifications.taskIds`). The client never sees the server's
//! id: it gets mcpgate's seal of it (the task keys of `upstream::session`), which binds
//!
//! - the endpoint that made the task, so every later request goes back to it;
//! - the caller, so another caller's request naming it is refused;
//! - the call that made it: its request id and its tool, which the audit records of the
//!   task's requests carry;
//! - an expiry: an hour past the time the server's `ttlMs` lets it drop the task (servers
//!   may lengthen `ttlMs` while the task runs), or 30 days for a task without one.
//!
//! A request's sealed id is opened before it goes on and replaced by the server's, in the
//! body and in `Mcp-Name`; the answers name the client's id again.

use crate::upstream::session::{EndpointId, Sealer};
use serde_json::Value;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The extension's name, which a client declares in its capabilities to use tasks.
pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Who holds a task id.
pub use crate::upstream::session::CallerKey;

/// Why a task id is refused; the client is told only that it is not known here.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Not sealed here (forged, another key, another upstream).
    Unreadable,
    Expired,
    OtherCaller,
}

/// How long past the server's `ttlMs` a sealed id still opens.
const GRACE: Duration = Duration::from_secs(3600);
/// How long the id of a task the server keeps until it is deleted (`ttlMs: null`) opens.
const UNBOUNDED: Duration = Duration::from_secs(30 * 24 * 3600);

/// Whether a request's `params._meta` (its JSON text) declares the tasks extension in its
/// client capabilities.
pub fn declares_tasks(meta: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Meta<'a> {
        #[serde(rename = "io.modelcontextprotocol/clientCapabilities", borrow)]
        capabilities: Option<Capabilities<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Capabilities<'a> {
        #[serde(borrow)]
        extensions: Option<std::collections::HashMap<&'a str, &'a serde_json::value::RawValue>>,
    }
    serde_json::from_str::<Meta>(meta).is_ok_and(|m| {
        m.capabilities
            .and_then(|c| c.extensions)
            .and_then(|e| e.get(EXTENSION).map(|v| v.get().starts_with('{')))
            .unwrap_or(false)
    })
}

/// How long a sealed id opens, from the `ttlMs` of the answer that made the task.
pub fn life(ttl_ms: Option<&Value>) -> Duration {
    match ttl_ms.and_then(Value::as_u64) {
        Some(ms) => Duration::from_millis(ms).saturating_add(GRACE),
        None => UNBOUNDED,
    }
}

/// The call that made a task: its request id and what it named (a tool).
pub struct Maker<'a> {
    pub first: &'a str,
    pub tool: &'a str,
}

/// The id a client is given for the server's task `original`, made on `endpoint` for
/// `caller` by `maker`. `None` when `original` is too long.
pub fn seal(
    sealer: &Sealer,
    endpoint: &EndpointId,
    caller: &CallerKey,
    maker: Maker<'_>,
    life: Duration,
    original: &str,
) -> Option<String> {
    let expires = (SystemTime::now() + life)
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let (first, tool) = (short(maker.first), short(maker.tool));
    let mut inner = Vec::with_capacity(8 + 16 + 2 + first.len() + tool.len() + original.len());
    inner.extend_from_slice(&expires.to_be_bytes());
    inner.extend_from_slice(caller);
    for part in [first, tool] {
        inner.push(part.len() as u8);
        inner.extend_from_slice(part);
    }
    inner.extend_from_slice(original.as_bytes());
    sealer.seal(endpoint, &inner)
}

/// At most 255 bytes of `s`, cut at a character's start.
fn short(s: &str) -> &[u8] {
    let mut end = s.len().min(255);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s.as_bytes()[..end]
}

/// An opened task id: where the task lives and what the server calls it.
#[derive(Debug, PartialEq, Eq)]
pub struct Opened {
    pub endpoint: EndpointId,
    pub original: String,
    /// The request id of the call that made the task.
    pub first: String,
    /// The tool it called.
    pub tool: String,
}

/// Opens the task id `sealed` for `caller`.
pub fn open(sealer: &Sealer, sealed: &str, caller: &CallerKey) -> Result<Opened, Refused> {
    let (endpoint, inner) = sealer.open(sealed.as_bytes()).ok_or(Refused::Unreadable)?;
    let expires: [u8; 8] = inner
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or(Refused::Unreadable)?;
    let sealed_caller = inner.get(8..24).ok_or(Refused::Unreadable)?;
    // Two parts, each its length then its bytes; the rest is the server's id.
    let mut at = 24;
    let mut part = || -> Result<String, Refused> {
        let len = *inner.get(at).ok_or(Refused::Unreadable)? as usize;
        let bytes = inner.get(at + 1..at + 1 + len).ok_or(Refused::Unreadable)?;
        at += 1 + len;
        String::from_utf8(bytes.to_vec()).map_err(|_| Refused::Unreadable)
    };
    let (first, tool) = (part()?, part()?);
    let original = inner.get(at..).ok_or(Refused::Unreadable)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    if now > u64::from_be_bytes(expires) {
        return Err(Refused::Expired);
    }
    if sealed_caller != caller {
        return Err(Refused::OtherCaller);
    }
    Ok(Opened {
        endpoint,
        original: String::from_utf8(original.to_vec()).map_err(|_| Refused::Unreadable)?,
        first,
        tool,
    })
}

/// The request `body` with its `params.taskId` replaced by the server's own.
pub fn restore(body: &[u8], original: &str) -> Result<Vec<u8>, String> {
    let mut v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let params = v
        .get_mut("params")
        .and_then(Value::as_object_mut)
        .ok_or("a task request without params")?;
    params.insert("taskId".into(), Value::from(original));
    Ok(serde_json::to_vec(&v).expect("a JSON value serialises"))
}

/// How the task ids in a request's answers are shown to the client: the server's ids
/// replaced by the client's sealed ones.
#[derive(Clone, Debug)]
pub enum Shown {
    /// A `tasks/get|update|cancel` (its id as JSON text): its answer's `result.taskId`.
    Named {
        id: Box<str>,
        original: String,
        sealed: String,
    },
    /// A `subscriptions/listen` stream: the acknowledgement's `notifications.taskIds` and
    /// each `notifications/tasks`' `params.taskId` (server id, client id).
    Listen(Vec<(String, String)>),
}

impl Shown {
    /// `text` (one message or a batch) with the server's task ids shown as the client's.
    /// `Ok(None)`: nothing to change.
    pub fn apply(&self, text: &str) -> Result<Option<String>, String> {
        let cheap = match self {
            Shown::Named { original, .. } => text.contains(original.as_str()),
            Shown::Listen(pairs) => pairs.iter().any(|(o, _)| text.contains(o.as_str())),
        };
        if !cheap {
            return Ok(None);
        }
        let mut v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let changed = match &mut v {
            Value::Array(items) => items
                .iter_mut()
                .fold(false, |c, m| self.apply_message(m) | c),
            m => self.apply_message(m),
        };
        Ok(changed.then(|| v.to_string()))
    }

    fn apply_message(&self, m: &mut Value) -> bool {
        let swap = |slot: Option<&mut Value>, pairs: &[(&str, &str)]| -> bool {
            let Some(slot) = slot else { return false };
            match pairs.iter().find(|(o, _)| slot.as_str() == Some(o)) {
                Some((_, sealed)) => {
                    *slot = Value::from(*sealed);
                    true
                }
                None => false,
            }
        };
        match self {
            Shown::Named {
                id,
                original,
                sealed,
            } => {
                let answers = m
                    .get("id")
                    .is_some_and(|i| serde_json::from_str::<Value>(id).is_ok_and(|v| v == *i));
                answers
                    && swap(
                        m.pointer_mut("/result/taskId"),
                        &[(original.as_str(), sealed.as_str())],
                    )
            }
            Shown::Listen(pairs) => {
                let pairs: Vec<(&str, &str)> = pairs
                    .iter()
                    .map(|(o, s)| (o.as_str(), s.as_str()))
                    .collect();
                match m.get("method").and_then(Value::as_str) {
                    Some("notifications/tasks") => swap(m.pointer_mut("/params/taskId"), &pairs),
                    Some("notifications/subscriptions/acknowledged") => {
                        match m.pointer_mut("/params/notifications/taskIds") {
                            Some(Value::Array(ids)) => ids
                                .iter_mut()
                                .fold(false, |c, slot| swap(Some(slot), &pairs) | c),
                            _ => false,
                        }
                    }
                    _ => false,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SessionKey;
    use crate::upstream::session::Purpose;

    fn sealer(key: u8) -> Sealer {
        Sealer::for_purpose("u", &[SessionKey([key; 32])], Purpose::TaskId)
    }

    #[test]
    fn a_task_id_opens_for_its_caller_only_and_not_as_another_kind_of_seal() {
        let s = sealer(1);
        let alice = [1; 16];
        let maker = Maker {
            first: "rid-1",
            tool: "delete_file",
        };
        let id = seal(&s, &[7; 8], &alice, maker, life(None), "786512e2").unwrap();
        assert!(!id.contains("786512e2"));
        assert_eq!(
            open(&s, &id, &alice),
            Ok(Opened {
                endpoint: [7; 8],
                original: "786512e2".into(),
                first: "rid-1".into(),
                tool: "delete_file".into(),
            })
        );
        let bob = [2; 16];
        assert_eq!(open(&s, &id, &bob), Err(Refused::OtherCaller));
        assert_eq!(open(&sealer(2), &id, &alice), Err(Refused::Unreadable));
        // A requestState sealed with the same key is not a task id.
        let states = Sealer::for_purpose("u", &[SessionKey([1; 32])], Purpose::RequestState);
        let state = states.seal(&[7; 8], b"whatever").unwrap();
        assert_eq!(open(&s, &state, &alice), Err(Refused::Unreadable));
        for junk in ["", "786512e2", "gate-test", "====", &"A".repeat(10_000)] {
            assert_eq!(open(&s, junk, &alice), Err(Refused::Unreadable));
        }
    }

    #[test]
    fn an_expired_task_id_is_refused() {
        let s = sealer(1);
        let c = [3; 16];
        let maker = Maker {
            first: "r",
            tool: "t",
        };
        let id = seal(&s, &[7; 8], &c, maker, Duration::ZERO, "t").unwrap();
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(open(&s, &id, &c), Err(Refused::Expired));
    }

    #[test]
    fn a_handle_lives_past_the_servers_ttl() {
        assert_eq!(life(Some(&Value::from(60_000))), Duration::from_secs(3660));
        assert_eq!(life(Some(&Value::Null)), UNBOUNDED);
        assert_eq!(life(Some(&Value::from(-5))), UNBOUNDED);
        assert_eq!(life(None), UNBOUNDED);
    }

    #[test]
    fn the_extension_is_found_in_the_capabilities() {
        let with = r#"{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#;
        assert!(declares_tasks(with));
        for without in [
            r#"{"io.modelcontextprotocol/clientCapabilities":{}}"#,
            r#"{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":true}}}"#,
            r#"{"io.modelcontextprotocol/clientCapabilities":{"extensions":[]}}"#,
            r#"{"extensions":{"io.modelcontextprotocol/tasks":{}}}"#,
            "[]",
        ] {
            assert!(!declares_tasks(without), "{without}");
        }
    }

    #[test]
    fn answers_name_the_clients_id() {
        let named = Shown::Named {
            id: "4".into(),
            original: "srv-1".into(),
            sealed: "sealed-1".into(),
        };
        let answer = r#"{"jsonrpc":"2.0","id":4,"result":{"resultType":"complete","taskId":"srv-1","status":"working"}}"#;
        let out = named.apply(answer).unwrap().unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["result"]["taskId"], "sealed-1");
        // Another request's answer, or one naming another task, is left alone.
        assert_eq!(
            named
                .apply(&answer.replace("\"id\":4", "\"id\":5"))
                .unwrap(),
            None
        );
        assert_eq!(
            named.apply(&answer.replace("srv-1", "srv-2")).unwrap(),
            None
        );

        let listen = Shown::Listen(vec![("srv-1".into(), "sealed-1".into())]);
        let ack = r#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"notifications":{"taskIds":["srv-1"]}}}"#;
        let v: Value = serde_json::from_str(&listen.apply(ack).unwrap().unwrap()).unwrap();
        assert_eq!(v["params"]["notifications"]["taskIds"][0], "sealed-1");
        let note = r#"{"jsonrpc":"2.0","method":"notifications/tasks","params":{"taskId":"srv-1","status":"completed"}}"#;
        let v: Value = serde_json::from_str(&listen.apply(note).unwrap().unwrap()).unwrap();
        assert_eq!(v["params"]["taskId"], "sealed-1");
        let other =
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"srv-1"}}"#;
        assert_eq!(listen.apply(other).unwrap(), None);
    }

    #[test]
    fn a_request_gets_the_servers_id() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"sealed","_meta":{}}}"#;
        let v: Value = serde_json::from_slice(&restore(body, "srv-1").unwrap()).unwrap();
        assert_eq!(v["params"]["taskId"], "srv-1");
        assert!(restore(br#"{"jsonrpc":"2.0","id":1,"method":"tasks/get"}"#, "x").is_err());
    }
}
