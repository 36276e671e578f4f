//! The bridge between MCP's generations, modern client → legacy server (docs/protocol.md): what
//! mcpgate writes and reads so that a 2026-07-28 client, which has no session, is served
//! by a 2025-11-25 server, which needs one.
//!
//! - The server is initialized by mcpgate, once per caller and client capabilities, with
//!   the capabilities and info the client's `_meta` names ([`ClientMeta`],
//!   [`initialize_request`]); `server/discover` is answered from that `initialize`'s result
//!   ([`discover_answer`]).
//! - Each result the client gets is a 2026-07-28 one: `resultType`, and on lists and reads
//!   `ttlMs` and `cacheScope` ([`Completes`]).
//! - A request the server sends during a call (elicitation, sampling, roots) ends the
//!   client's answer with an `input_required` result ([`input_required`]); the call waits
//!   upstream, and the client's retry ([`Retry`]) answers the server's request for it.
//! - `subscriptions/listen` is the session's GET stream and `resources/subscribe` for each
//!   URI ([`Listen`]).

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use wire::json::read::Reader;

mod held;
mod listen;

pub use crate::upstream::bridged::Initialized;
pub use held::{
    Retry, ServerRequest, answer_to_server, call_digest, cancelled, held_state, input_required,
    renumbered, retry, server_request,
};
pub use listen::{Listen, subscribe_request};

/// The revision mcpgate initializes a legacy server in: the newest legacy one.
pub const LEGACY_VERSION: &str = "2025-11-25";

/// The prefix of the state mcpgate puts in an `input_required` it makes (sealed before the
/// client sees it, `mcp::rounds`): the held call's number and the digest of the call.
const HELD: &str = "mcpgate-held:";

/// What a modern request says of its client, for the legacy session it is served in.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientMeta {
    /// `clientCapabilities`, as JSON text (`{}` when it names none).
    pub capabilities: String,
    /// `clientInfo`, as JSON text.
    pub info: String,
    /// The log level the request asked for (`logLevel`), as its rank in
    /// [`LEVELS`](crate::runtime::legacy_sessions::LEVELS): `None`, no log messages.
    pub level: Option<usize>,
    /// The protocol version it names, if any.
    pub version: Option<String>,
}

impl ClientMeta {
    /// Reads a request's `params._meta` (its JSON text, `None` when it has none).
    pub fn of(meta: Option<&str>) -> ClientMeta {
        #[derive(Deserialize)]
        struct Meta<'a> {
            #[serde(rename = "io.modelcontextprotocol/clientCapabilities", borrow)]
            capabilities: Option<&'a RawValue>,
            #[serde(rename = "io.modelcontextprotocol/clientInfo", borrow)]
            info: Option<&'a RawValue>,
            #[serde(rename = "io.modelcontextprotocol/logLevel", borrow)]
            level: Option<std::borrow::Cow<'a, str>>,
            #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow)]
            version: Option<std::borrow::Cow<'a, str>>,
        }
        let meta = meta.and_then(|m| serde_json::from_str::<Meta>(m).ok());
        let object = |v: Option<&RawValue>| {
            v.map(|v| v.get().trim())
                .filter(|t| t.starts_with('{'))
                .map(str::to_string)
        };
        ClientMeta {
            capabilities: object(meta.as_ref().and_then(|m| m.capabilities))
                .unwrap_or_else(|| "{}".into()),
            info: object(meta.as_ref().and_then(|m| m.info))
                .unwrap_or_else(|| r#"{"name":"mcpgate-bridged-client","version":"0"}"#.into()),
            version: meta
                .as_ref()
                .and_then(|m| m.version.as_deref())
                .map(str::to_string),
            level: meta.and_then(|m| m.level).and_then(|l| rank(&l)),
        }
    }

    /// Whether the client declared `capability` (`elicitation`, `sampling`, `roots`).
    pub fn declares(&self, capability: &str) -> bool {
        serde_json::from_str::<serde_json::Map<String, Value>>(&self.capabilities)
            .is_ok_and(|m| m.get(capability).is_some_and(Value::is_object))
    }

    /// What tells apart the legacy sessions of one caller: its capabilities and info.
    pub fn digest(&self) -> [u8; 16] {
        let mut h = Sha256::new();
        h.update(self.capabilities.as_bytes());
        h.update([0]);
        h.update(self.info.as_bytes());
        h.finalize()[..16].try_into().expect("16 of 32 bytes")
    }
}

/// The `initialize` mcpgate sends a legacy server for a modern client.
pub fn initialize_request(meta: &ClientMeta) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":"mcpgate-bridge-init","method":"initialize","params":{{"protocolVersion":"{LEGACY_VERSION}","capabilities":{},"clientInfo":{}}}}}"#,
        meta.capabilities, meta.info
    )
}

/// The `notifications/initialized` that follows it.
pub const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// Reads the answer to [`initialize_request`] (one JSON-RPC message).
pub fn initialized(text: &str) -> Result<Initialized, String> {
    #[derive(Deserialize)]
    struct Answer<'a> {
        #[serde(borrow)]
        result: Option<&'a RawValue>,
        error: Option<Value>,
    }
    #[derive(Deserialize)]
    struct Init {
        #[serde(rename = "protocolVersion")]
        version: String,
    }
    let answer: Answer = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if let Some(e) = answer.error {
        return Err(format!(
            "the server refused mcpgate's initialize: {}",
            e["message"].as_str().unwrap_or("no message")
        ));
    }
    let result = answer
        .result
        .ok_or("an initialize answer without a result")?;
    let init: Init =
        serde_json::from_str(result.get()).map_err(|e| format!("the initialize result: {e}"))?;
    if crate::config::generation::is_modern(&init.version) {
        return Err("the server chose a 2026-07-28 revision in a legacy initialize".into());
    }
    Ok(Initialized {
        version: init.version,
        result: result.get().to_string(),
    })
}

/// The `server/discover` answer (to request `id`, JSON text) made of a legacy server's
/// `initialize` result: its capabilities, instructions and server info. Not yet narrowed
/// to a profile (`mcp::discover::narrow` does that); `ttlMs` is `ttl_ms`, the most mcpgate
/// lets a client keep it.
pub fn discover_answer(id: &str, init: &Initialized, ttl_ms: u64) -> Result<String, String> {
    let result: serde_json::Map<String, Value> =
        serde_json::from_str(&init.result).map_err(|e| e.to_string())?;
    let mut out = serde_json::Map::new();
    out.insert("resultType".into(), "complete".into());
    out.insert(
        "supportedVersions".into(),
        Value::from(vec![crate::config::generation::MODERN]),
    );
    let capabilities = match result.get("capabilities") {
        Some(Value::Object(c)) => c.clone(),
        _ => return Err("the initialize result has no capabilities object".into()),
    };
    out.insert("capabilities".into(), Value::Object(capabilities));
    if let Some(Value::String(i)) = result.get("instructions") {
        out.insert("instructions".into(), Value::from(i.as_str()));
    }
    if let Some(info) = result.get("serverInfo") {
        out.insert(
            "_meta".into(),
            serde_json::json!({ "io.modelcontextprotocol/serverInfo": info }),
        );
    }
    out.insert("ttlMs".into(), Value::from(ttl_ms));
    out.insert("cacheScope".into(), "private".into());
    Ok(format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{}}}"#,
        Value::Object(out)
    ))
}

/// The `_meta` members of the 2026-07-28 envelope, which a legacy session already says.
const ENVELOPE: [&str; 4] = [
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/clientInfo",
    "io.modelcontextprotocol/logLevel",
];

/// `body` (one JSON-RPC message) without the 2026-07-28 envelope in its `params._meta`
/// (the rest of `_meta`, a progress token, a trace context, stays): what a legacy session
/// carries already, and what a server that knows both generations refuses inside one.
/// Borrowed when there is nothing to take out, or the body is not one this can edit.
pub fn without_envelope(body: &str) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    if !body.contains("\"io.modelcontextprotocol/") {
        return Cow::Borrowed(body);
    }
    /// The members of the object `text`, keys without escapes.
    fn members(text: &str) -> Option<Vec<(&str, &str)>> {
        let mut found = Vec::new();
        let mut r = Reader::new(text);
        r.skip_ws();
        r.object(0, |r, key| {
            let value = r.value(1)?;
            found.push((key.plain()?, value));
            Some(())
        })?;
        Some(found)
    }
    let Some(meta) = members(body)
        .and_then(|m| m.into_iter().find(|(k, _)| *k == "params"))
        .and_then(|(_, params)| members(params))
        .and_then(|m| m.into_iter().find(|(k, _)| *k == "_meta"))
        .map(|(_, meta)| meta)
    else {
        return Cow::Borrowed(body);
    };
    let Some(kept) = members(meta) else {
        return Cow::Borrowed(body);
    };
    if kept.iter().all(|(k, _)| !ENVELOPE.contains(k)) {
        return Cow::Borrowed(body);
    }
    let mut out = String::with_capacity(body.len());
    let at = meta.as_ptr() as usize - body.as_ptr() as usize;
    out.push_str(&body[..at]);
    out.push('{');
    let mut first = true;
    for (key, value) in kept.iter().filter(|(k, _)| !ENVELOPE.contains(k)) {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(&serde_json::to_string(key).expect("a string serializes"));
        out.push(':');
        out.push_str(value);
    }
    out.push('}');
    out.push_str(&body[at + meta.len()..]);
    Cow::Owned(out)
}

/// The rank of the log level `level` among MCP's eight, least severe first.
fn rank(level: &str) -> Option<usize> {
    crate::runtime::legacy_sessions::LEVELS
        .iter()
        .position(|l| *l == level)
}

/// The rank of the level of `data` (one message) when it is a log message
/// (`notifications/message`); one of no level mcpgate knows ranks as `debug`.
pub fn log_message(data: &str) -> Option<usize> {
    #[derive(Deserialize)]
    struct Message<'a> {
        method: Option<&'a str>,
        #[serde(borrow)]
        params: Option<Params<'a>>,
    }
    #[derive(Deserialize)]
    struct Params<'a> {
        level: Option<&'a str>,
    }
    if !data.contains("notifications/message") {
        return None;
    }
    let m = serde_json::from_str::<Message>(data).ok()?;
    (m.method == Some("notifications/message"))
        .then(|| m.params.and_then(|p| p.level).and_then(rank).unwrap_or(0))
}

/// What a 2026-07-28 request's answer may carry of a legacy server's log messages: those at
/// or above the level it asked for (the rank of its `logLevel`); none when it asked none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogFloor(pub Option<usize>);

impl LogFloor {
    /// Whether `data` (one message) goes on: it is no log message, or one above the floor.
    pub fn passes(self, data: &str) -> bool {
        log_message(data).is_none_or(|rank| self.0.is_some_and(|floor| rank >= floor))
    }
}

/// Whether an `initialize` result (JSON text) declares the `logging` capability.
pub fn declares_logging(result: &str) -> bool {
    serde_json::from_str::<Value>(result).is_ok_and(|r| r["capabilities"]["logging"].is_object())
}

/// What mcpgate sets a legacy session's log level to when its server logs: everything,
/// as each 2026-07-28 request asks its own level, which mcpgate applies to what comes.
pub const SET_LEVEL: &str = r#"{"jsonrpc":"2.0","id":"mcpgate-bridge-level","method":"logging/setLevel","params":{"level":"debug"}}"#;

/// Whether 2026-07-28 removed `method` (the session's handshake and what a session held):
/// a server of that revision answers it 404 -32601, and so does mcpgate across the bridge.
pub fn removed(method: &str) -> bool {
    matches!(
        method,
        "initialize"
            | "ping"
            | "logging/setLevel"
            | "resources/subscribe"
            | "resources/unsubscribe"
    )
}

/// Whether 2026-07-28 defines the request `method` (its own and the tasks extension's).
/// Another one is the legacy server's to know; its -32601 is then answered 404.
pub fn defined(method: &str) -> bool {
    matches!(
        method,
        "server/discover"
            | "subscriptions/listen"
            | "tools/list"
            | "tools/call"
            | "prompts/list"
            | "prompts/get"
            | "resources/list"
            | "resources/read"
            | "resources/templates/list"
            | "completion/complete"
    ) || method.starts_with("tasks/")
}

/// The message of `text` (one JSON-RPC message) when it is a -32601 error answer.
pub fn method_not_found(text: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Answer {
        error: Option<Error>,
    }
    #[derive(Deserialize)]
    struct Error {
        code: i64,
        #[serde(default)]
        message: String,
    }
    let error = serde_json::from_str::<Answer>(text).ok()?.error?;
    (error.code == crate::error::code::METHOD_NOT_FOUND).then_some(error.message)
}

/// Whether the answer to `method` carries the caching hints of 2026-07-28.
pub fn cacheable(method: &str) -> bool {
    matches!(
        method,
        "tools/list"
            | "resources/list"
            | "resources/templates/list"
            | "prompts/list"
            | "resources/read"
    )
}

/// Makes the answer to one request a 2026-07-28 result: `resultType: "complete"`, and
/// (`cacheable`) `ttlMs` and `cacheScope` when the server gave none.
#[derive(Debug, Clone)]
pub struct Completes {
    /// The request's id, as JSON text.
    pub id: Box<str>,
    /// `ttlMs` for a cacheable answer; `None` for another.
    pub ttl_ms: Option<u64>,
    /// For a `tools/list`: where the `x-mcp-header` marks of its tools are learnt.
    pub learn: Option<std::sync::Arc<crate::upstream::stdio::params::ParamHeaders>>,
}

impl Completes {
    /// `text` (one message; a batch is not bridged) with the fields added, when it is a
    /// result answering the request. `Ok(None)`: nothing to change.
    pub fn apply(&self, text: &str) -> Result<Option<String>, String> {
        #[derive(Deserialize)]
        struct Answer<'a> {
            #[serde(borrow)]
            id: Option<&'a RawValue>,
            #[serde(borrow)]
            result: Option<&'a RawValue>,
        }
        #[derive(Deserialize)]
        struct Keys<'a> {
            #[serde(rename = "resultType", borrow)]
            kind: Option<&'a RawValue>,
            #[serde(rename = "ttlMs", borrow)]
            ttl: Option<&'a RawValue>,
            #[serde(rename = "cacheScope", borrow)]
            scope: Option<&'a RawValue>,
        }
        if !text.trim_start().starts_with('{') {
            return Ok(None);
        }
        let Ok(answer) = serde_json::from_str::<Answer>(text) else {
            return Ok(None);
        };
        let (Some(id), Some(result)) = (answer.id, answer.result) else {
            return Ok(None);
        };
        if id.get().trim() != &*self.id || !result.get().starts_with('{') {
            return Ok(None);
        }
        if let Some(marks) = &self.learn
            && let Ok(list) = serde_json::from_str::<Value>(result.get())
        {
            marks.learn(&list);
        }
        let keys: Keys = serde_json::from_str(result.get()).map_err(|e| e.to_string())?;
        let mut added = String::new();
        if keys.kind.is_none() {
            added.push_str(r#""resultType":"complete","#);
        }
        if let Some(ttl) = self.ttl_ms {
            if keys.ttl.is_none() {
                added.push_str(&format!(r#""ttlMs":{ttl},"#));
            }
            if keys.scope.is_none() {
                added.push_str(r#""cacheScope":"private","#);
            }
        }
        if added.is_empty() {
            return Ok(None);
        }
        let at = result.get().as_ptr() as usize - text.as_ptr() as usize + 1;
        if text[at..].trim_start().starts_with('}') {
            added.pop();
        }
        let mut out = String::with_capacity(text.len() + added.len());
        out.push_str(&text[..at]);
        out.push_str(&added);
        out.push_str(&text[at..]);
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests;
