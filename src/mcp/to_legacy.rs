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

pub use crate::upstream::bridged::Initialized;

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

/// A request the server sent on a call's stream: its id and method, and the message.
#[derive(Debug)]
pub struct ServerRequest {
    /// The id, as JSON text.
    pub id: String,
    pub method: String,
    /// `{"method":…,"params":…}`, as an `inputRequests` entry holds it.
    pub request: String,
}

/// The server→client request `data` (one JSON-RPC message) is, if it is one.
pub fn server_request(data: &str) -> Option<ServerRequest> {
    #[derive(Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        id: Option<&'a RawValue>,
        method: Option<String>,
        #[serde(borrow)]
        params: Option<&'a RawValue>,
    }
    let m: Message = serde_json::from_str(data).ok()?;
    let (id, method) = (m.id?, m.method?);
    let method_json = serde_json::to_string(&method).ok()?;
    let request = match m.params {
        Some(p) => format!(r#"{{"method":{method_json},"params":{}}}"#, p.get()),
        None => format!(r#"{{"method":{method_json}}}"#),
    };
    Some(ServerRequest {
        id: id.get().trim().to_string(),
        method,
        request,
    })
}

/// The `input_required` answer to request `id` (JSON text): the server's `request`
/// (`ServerRequest::request`) under `key`, and `state` ([`held_state`]).
pub fn input_required(id: &str, key: &str, request: &str, state: &str) -> String {
    let key = serde_json::to_string(key).expect("a string serializes");
    let state = serde_json::to_string(state).expect("a string serializes");
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"input_required","inputRequests":{{{key}:{request}}},"requestState":{state}}}}}"#
    )
}

/// The state naming held call number `held` for a call of digest `digest`.
pub fn held_state(held: u64, digest: &[u8; 16]) -> String {
    let mut s = format!("{HELD}{held}:");
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The digest a retry must match: the request's method and its params, without what
/// differs between rounds (`_meta`, `inputResponses`, `requestState`).
pub fn call_digest(body: &[u8]) -> Result<[u8; 16], String> {
    let mut v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let method = v["method"].as_str().unwrap_or("").to_string();
    if let Some(p) = v.get_mut("params").and_then(Value::as_object_mut) {
        for key in ["_meta", "inputResponses", "requestState"] {
            p.remove(key);
        }
    }
    let mut h = Sha256::new();
    h.update(method.as_bytes());
    h.update([0]);
    // serde_json's maps are ordered by key: the same params give the same text.
    h.update(serde_json::to_vec(&v["params"]).map_err(|e| e.to_string())?);
    Ok(h.finalize()[..16].try_into().expect("16 of 32 bytes"))
}

/// A retry of a held call: which call, and the client's answers.
#[derive(Debug)]
pub struct Retry {
    pub held: u64,
    pub digest: [u8; 16],
    /// `inputResponses`: each key with the client's result, as JSON text.
    pub responses: Vec<(String, String)>,
}

/// Reads a retry (`body`, whose `requestState` is the opened state of a held call).
/// `Ok(None)`: not a retry of a held call.
pub fn retry(body: &[u8]) -> Result<Option<Retry>, String> {
    #[derive(Deserialize)]
    struct Message {
        params: Option<Params>,
    }
    #[derive(Deserialize)]
    struct Params {
        #[serde(rename = "requestState")]
        state: Option<String>,
        #[serde(rename = "inputResponses")]
        responses: Option<serde_json::Map<String, Value>>,
    }
    // Most calls are no retry: their body is not read.
    if memchr::memmem::find(body, HELD.as_bytes()).is_none() {
        return Ok(None);
    }
    let m: Message = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let Some(p) = m.params else { return Ok(None) };
    let Some(state) = p.state.as_deref().and_then(|s| s.strip_prefix(HELD)) else {
        return Ok(None);
    };
    let (held, digest) = state
        .split_once(':')
        .ok_or("a held call's state is malformed")?;
    let held = held
        .parse()
        .map_err(|_| "a held call's state is malformed")?;
    let mut d = [0u8; 16];
    if digest.len() != 32 {
        return Err("a held call's state is malformed".into());
    }
    for (i, b) in d.iter_mut().enumerate() {
        *b = u8::from_str_radix(&digest[2 * i..2 * i + 2], 16)
            .map_err(|_| "a held call's state is malformed")?;
    }
    let responses = p
        .responses
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.to_string()))
        .collect();
    Ok(Some(Retry {
        held,
        digest: d,
        responses,
    }))
}

/// The client's answer to the server's request `id` (JSON text), as the server gets it:
/// a result object, or (anything else) an error.
pub fn answer_to_server(id: &str, response: &str) -> String {
    if response.trim_start().starts_with('{') {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{response}}}"#)
    } else {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32602,"message":"the client's input response is not an object"}}}}"#
        )
    }
}

/// `text`, an answer of the held call, as the answer of its retry `id` (JSON text).
pub fn renumbered(text: &str, id: &str) -> Result<String, String> {
    let mut v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let id: Value = serde_json::from_str(id).map_err(|e| e.to_string())?;
    v["id"] = id;
    Ok(v.to_string())
}

/// The cancel of the call `id` (JSON text) a client left.
pub fn cancelled(id: &str, reason: &str) -> String {
    let reason = serde_json::to_string(reason).expect("a string serializes");
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id},"reason":{reason}}}}}"#
    )
}

/// A `subscriptions/listen` request as a legacy session serves it.
#[derive(Debug, Clone)]
pub struct Listen {
    /// The request's id, as JSON text: the subscription id of what it carries.
    pub id: String,
    tools: bool,
    resources: bool,
    prompts: bool,
    /// The resources to subscribe to.
    pub uris: Vec<String>,
}

impl Listen {
    /// Reads the (profile-narrowed) listen request `body`.
    pub fn of(body: &[u8]) -> Result<Listen, String> {
        let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        let n = &v["params"]["notifications"];
        let on = |key: &str| n[key] == Value::Bool(true);
        let uris = match &n["resourceSubscriptions"] {
            Value::Null => Vec::new(),
            Value::Array(items) => items
                .iter()
                .map(|u| u.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or("resourceSubscriptions must be an array of strings")?,
            _ => return Err("resourceSubscriptions must be an array of strings".into()),
        };
        Ok(Listen {
            id: v.get("id").map_or_else(|| "null".into(), Value::to_string),
            tools: on("toolsListChanged"),
            resources: on("resourcesListChanged"),
            prompts: on("promptsListChanged"),
            uris,
        })
    }

    /// The acknowledgement that opens the client's stream, naming what it carries.
    pub fn acknowledged(&self) -> String {
        let mut n = serde_json::Map::new();
        for (key, on) in [
            ("toolsListChanged", self.tools),
            ("resourcesListChanged", self.resources),
            ("promptsListChanged", self.prompts),
        ] {
            if on {
                n.insert(key.into(), Value::Bool(true));
            }
        }
        if !self.uris.is_empty() {
            n.insert(
                "resourceSubscriptions".into(),
                Value::from(self.uris.clone()),
            );
        }
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{{"_meta":{{"io.modelcontextprotocol/subscriptionId":{}}},"notifications":{}}}}}"#,
            self.id,
            Value::Object(n)
        )
    }

    /// A message of the session's GET stream as this listen stream carries it: a
    /// notification the client opted in to, tagged with its subscription id; `None` for
    /// anything else.
    pub fn carry(&self, data: &str) -> Option<String> {
        let mut v: Value = serde_json::from_str(data).ok()?;
        if v.get("id").is_some() {
            return None;
        }
        let wanted = match v["method"].as_str()? {
            "notifications/tools/list_changed" => self.tools,
            "notifications/resources/list_changed" => self.resources,
            "notifications/prompts/list_changed" => self.prompts,
            "notifications/resources/updated" => v["params"]["uri"]
                .as_str()
                .is_some_and(|u| self.uris.iter().any(|s| s == u)),
            _ => false,
        };
        if !wanted {
            return None;
        }
        let id: Value = serde_json::from_str(&self.id).ok()?;
        let params = v
            .as_object_mut()?
            .entry("params")
            .or_insert_with(|| Value::Object(Default::default()))
            .as_object_mut()?;
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Default::default()))
            .as_object_mut()?;
        meta.insert("io.modelcontextprotocol/subscriptionId".into(), id);
        Some(v.to_string())
    }
}

/// The `resources/subscribe` (request number `n`) a listen stream's URI is.
pub fn subscribe_request(uri: &str, n: usize) -> String {
    let uri = serde_json::to_string(uri).expect("a string serializes");
    format!(
        r#"{{"jsonrpc":"2.0","id":"mcpgate-subscribe-{n}","method":"resources/subscribe","params":{{"uri":{uri}}}}}"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_meta_is_read_from_the_request() {
        let meta = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}}"#;
        let m = ClientMeta::of(Some(meta));
        assert_eq!(m.version.as_deref(), Some("2026-07-28"));
        assert_eq!(m.capabilities, r#"{"elicitation":{"form":{}}}"#);
        let bare = ClientMeta::of(None);
        assert_eq!(bare.capabilities, "{}");
        assert_ne!(m.digest(), bare.digest());
        let init: Value = serde_json::from_str(&initialize_request(&m)).unwrap();
        assert_eq!(init["params"]["protocolVersion"], LEGACY_VERSION);
        assert_eq!(init["params"]["clientInfo"]["name"], "c");
    }

    #[test]
    fn discover_is_made_of_the_initialize_result() {
        let init = initialized(r#"{"jsonrpc":"2.0","id":"x","result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true},"logging":{}},"serverInfo":{"name":"old","version":"1"},"instructions":"be kind"}}"#).unwrap();
        assert_eq!(init.version, "2025-06-18");
        let d: Value = serde_json::from_str(&discover_answer("7", &init, 60_000).unwrap()).unwrap();
        let r = &d["result"];
        assert_eq!(d["id"], 7);
        assert_eq!(r["resultType"], "complete");
        assert_eq!(r["supportedVersions"][0], "2026-07-28");
        assert_eq!(r["capabilities"]["tools"]["listChanged"], true);
        assert_eq!(r["instructions"], "be kind");
        assert_eq!(
            r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
            "old"
        );
        assert_eq!(r["ttlMs"], 60_000);
        assert!(
            initialized(r#"{"jsonrpc":"2.0","id":"x","error":{"code":-32600,"message":"no"}}"#)
                .is_err()
        );
        assert!(initialized(r#"{"jsonrpc":"2.0","id":"x","result":{"protocolVersion":"2026-07-28","capabilities":{}}}"#).is_err());
    }

    #[test]
    fn results_are_completed_in_place() {
        let c = Completes {
            learn: None,
            id: "3".into(),
            ttl_ms: None,
        };
        assert_eq!(
            c.apply(r#"{"jsonrpc":"2.0","id":3,"result":{"content":[]}}"#)
                .unwrap()
                .unwrap(),
            r#"{"jsonrpc":"2.0","id":3,"result":{"resultType":"complete","content":[]}}"#
        );
        assert_eq!(
            c.apply(r#"{"jsonrpc":"2.0","id":3,"result":{ }}"#)
                .unwrap()
                .unwrap(),
            r#"{"jsonrpc":"2.0","id":3,"result":{"resultType":"complete" }}"#
        );
        // Another id, an error, a notification: untouched.
        assert!(
            c.apply(r#"{"jsonrpc":"2.0","id":4,"result":{}}"#)
                .unwrap()
                .is_none()
        );
        assert!(
            c.apply(r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"m"}}"#)
                .unwrap()
                .is_none()
        );
        assert!(
            c.apply(r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#)
                .unwrap()
                .is_none()
        );
        let list = Completes {
            learn: None,
            id: "\"a\"".into(),
            ttl_ms: Some(5000),
        };
        let out = list
            .apply(r#"{"id":"a","jsonrpc":"2.0","result":{"tools":[],"cacheScope":"public"}}"#)
            .unwrap()
            .unwrap();
        assert_eq!(
            out,
            r#"{"id":"a","jsonrpc":"2.0","result":{"resultType":"complete","ttlMs":5000,"tools":[],"cacheScope":"public"}}"#
        );
        // Nothing to add: nothing changed.
        assert!(list.apply(&out).unwrap().is_none());
    }

    #[test]
    fn a_server_request_becomes_an_input_request() {
        let asked = server_request(r#"{"jsonrpc":"2.0","id":0,"method":"elicitation/create","params":{"message":"Sure?"}}"#).unwrap();
        assert_eq!(asked.id, "0");
        assert_eq!(asked.method, "elicitation/create");
        let state = held_state(42, &[0xab; 16]);
        let v: Value =
            serde_json::from_str(&input_required("\"c1\"", "k0", &asked.request, &state)).unwrap();
        assert_eq!(v["result"]["resultType"], "input_required");
        assert_eq!(
            v["result"]["inputRequests"]["k0"]["params"]["message"],
            "Sure?"
        );
        assert!(server_request(r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#).is_none());
        assert!(server_request(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#).is_none());
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"t","requestState":"{state}","inputResponses":{{"k0":{{"action":"accept"}}}}}}}}"#
        );
        let r = retry(body.as_bytes()).unwrap().unwrap();
        assert_eq!((r.held, r.digest), (42, [0xab; 16]));
        assert_eq!(
            r.responses,
            vec![("k0".into(), r#"{"action":"accept"}"#.into())]
        );
        assert!(
            retry(br#"{"params":{"requestState":"upstream's own"}}"#)
                .unwrap()
                .is_none()
        );
        assert!(retry(br#"{"params":{"requestState":"mcpgate-held:x:y"}}"#).is_err());
        assert_eq!(
            answer_to_server("0", r#"{"action":"accept"}"#),
            r#"{"jsonrpc":"2.0","id":0,"result":{"action":"accept"}}"#
        );
        assert!(answer_to_server("0", "7").contains("error"));
        assert_eq!(
            renumbered(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, "\"r2\"").unwrap(),
            r#"{"id":"r2","jsonrpc":"2.0","result":{}}"#
        );
    }

    #[test]
    fn the_digest_ignores_what_changes_between_rounds() {
        let a = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"d","arguments":{"id":"n1","x":1}}}"#;
        let b = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"arguments":{"x":1,"id":"n1"},"name":"d","requestState":"s","inputResponses":{},"_meta":{"progressToken":3}}}"#;
        let c = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"d","arguments":{"id":"n2","x":1}}}"#;
        assert_eq!(call_digest(a).unwrap(), call_digest(b).unwrap());
        assert_ne!(call_digest(a).unwrap(), call_digest(c).unwrap());
    }

    #[test]
    fn a_listen_stream_carries_what_it_asked_for() {
        let l = Listen::of(br#"{"jsonrpc":"2.0","id":"L","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true,"resourceSubscriptions":["file:///a"]}}}"#).unwrap();
        let ack: Value = serde_json::from_str(&l.acknowledged()).unwrap();
        assert_eq!(
            ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            "L"
        );
        assert_eq!(ack["params"]["notifications"]["toolsListChanged"], true);
        assert_eq!(
            ack["params"]["notifications"]["resourceSubscriptions"][0],
            "file:///a"
        );
        let tools: Value = serde_json::from_str(
            &l.carry(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            tools["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            "L"
        );
        assert!(
            l.carry(r#"{"jsonrpc":"2.0","method":"notifications/prompts/list_changed"}"#)
                .is_none()
        );
        assert!(l.carry(r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///a"}}"#).is_some());
        assert!(l.carry(r#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///b"}}"#).is_none());
        assert!(
            l.carry(r#"{"jsonrpc":"2.0","id":5,"method":"roots/list"}"#)
                .is_none()
        );
        assert!(
            Listen::of(br#"{"id":1,"params":{"notifications":{"resourceSubscriptions":"x"}}}"#)
                .is_err()
        );
    }

    #[test]
    fn what_a_client_declared_and_the_level_it_asked_for() {
        let m = ClientMeta::of(Some(
            r#"{"io.modelcontextprotocol/clientCapabilities":{"sampling":{},"roots":true},"io.modelcontextprotocol/logLevel":"warn\u0069ng"}"#,
        ));
        assert!(m.declares("sampling"));
        assert!(!m.declares("roots"), "a capability is an object");
        assert!(!m.declares("elicitation"));
        assert_eq!(m.level, Some(3));
        let loud = ClientMeta::of(Some(r#"{"io.modelcontextprotocol/logLevel":"shouting"}"#));
        assert_eq!(
            loud.level, None,
            "a level MCP does not have asks for nothing"
        );
    }

    #[test]
    fn log_messages_pass_from_the_level_asked_up() {
        let log = |level: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"{level}","data":"x"}}}}"#
            )
        };
        let progress = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#;
        let warning = LogFloor(Some(3));
        assert!(!warning.passes(&log("info")));
        assert!(warning.passes(&log("warning")));
        assert!(warning.passes(&log("emergency")));
        assert!(warning.passes(progress));
        let none = LogFloor(None);
        assert!(!none.passes(&log("emergency")));
        assert!(none.passes(progress));
        // A method name inside a log's data is not a log message.
        assert!(
            none.passes(r#"{"jsonrpc":"2.0","id":1,"result":{"text":"notifications/message"}}"#)
        );
        assert!(declares_logging(r#"{"capabilities":{"logging":{}}}"#));
        assert!(!declares_logging(r#"{"capabilities":{}}"#));
    }

    #[test]
    fn methods_2026_07_28_has_not() {
        for m in [
            "initialize",
            "ping",
            "logging/setLevel",
            "resources/subscribe",
        ] {
            assert!(removed(m) && !defined(m), "{m}");
        }
        for m in [
            "server/discover",
            "tools/call",
            "tasks/get",
            "completion/complete",
        ] {
            assert!(defined(m) && !removed(m), "{m}");
        }
        assert!(!defined("vendor/thing"));
        assert_eq!(
            method_not_found(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#)
                .as_deref(),
            Some("no")
        );
        assert_eq!(
            method_not_found(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no"}}"#),
            None
        );
        assert_eq!(
            method_not_found(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            None
        );
    }

    #[test]
    fn the_envelope_stays_at_the_bridge_the_rest_of_meta_goes_on() {
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":7,"io.modelcontextprotocol/clientCapabilities":{"x":{}},"traceparent":"00-ab"},"arguments":{"q":"io.modelcontextprotocol/clientInfo"}}}"#;
        let out = without_envelope(body);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v["params"]["_meta"],
            serde_json::json!({"progressToken": 7, "traceparent": "00-ab"})
        );
        assert_eq!(
            v["params"]["arguments"]["q"],
            "io.modelcontextprotocol/clientInfo"
        );
        assert_eq!(v["params"]["name"], "t");
        // Nothing to take out: the same text.
        let plain = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"progressToken":1}}}"#;
        assert!(matches!(
            without_envelope(plain),
            std::borrow::Cow::Borrowed(_)
        ));
        let only = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let v: Value = serde_json::from_str(&without_envelope(only)).unwrap();
        assert_eq!(v["params"]["_meta"], serde_json::json!({}));
        // Not an object this can read: left as it is.
        assert_eq!(
            without_envelope("[1, \"io.modelcontextprotocol/x\"]"),
            "[1, \"io.modelcontextprotocol/x\"]"
        );
    }
}
