//! The bridge between MCP's generations, legacy client → modern server (docs/protocol.md): what
//! mcpgate writes and reads so that a 2025-11-25 client, with its session, is served by a
//! 2026-07-28 server, which has none.
//!
//! - The client's `initialize` is answered from the server's `server/discover`; its session
//!   id is a seal of what the server must be told on every request (the client's
//!   capabilities and info) and of the caller, so no replica keeps anything.
//! - Each request it forwards gets the 2026-07-28 `_meta` fields, spliced into its text.
//! - The legacy GET stream is a `subscriptions/listen` to all list changes.
//! - An `input_required` answer is played to the client as the server→client requests it
//!   holds; their results go back in the call's retry, with the server's `requestState`.

use crate::config::generation::MODERN;
use crate::mcp::rounds::CallerKey;
use serde_json::value::RawValue;
use wire::json::read::Reader;

/// The revisions a legacy client may be answered in, oldest first.
const LEGACY: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The longest inner text of a bridged session id: the client's capabilities and info.
pub const MAX_SESSION: usize = 2_048;

/// What a bridged session id holds.
#[derive(Debug, PartialEq)]
pub struct Session {
    /// The caller the session was opened for; another caller's request with it is refused.
    pub caller: CallerKey,
    /// The revision the client was answered in.
    pub version: String,
    /// The `_meta` members each forwarded request gets, as JSON text without braces.
    pub meta: String,
}

impl Session {
    /// The session of an `initialize` request whose `params` is `params` (JSON text), for
    /// `caller`. The client's capabilities and info are carried as it sent them; a revision
    /// mcpgate does not know is answered with the newest legacy one, as a server would.
    pub fn of_initialize(params: Option<&str>, caller: CallerKey) -> Result<Session, String> {
        #[derive(serde::Deserialize)]
        struct Init<'a> {
            #[serde(rename = "protocolVersion")]
            version: Option<String>,
            #[serde(borrow)]
            capabilities: Option<&'a RawValue>,
            #[serde(rename = "clientInfo", borrow)]
            info: Option<&'a RawValue>,
        }
        let init: Init = match params {
            Some(p) => serde_json::from_str(p).map_err(|e| format!("initialize params: {e}"))?,
            None => return Err("initialize without params".into()),
        };
        let capabilities = match init.capabilities {
            Some(c) if c.get().starts_with('{') => c.get(),
            _ => return Err("initialize params: capabilities must be an object".into()),
        };
        let version = match init.version {
            Some(v) if LEGACY.contains(&v.as_str()) => v,
            _ => LEGACY[LEGACY.len() - 1].to_string(),
        };
        let mut meta = format!(
            r#""io.modelcontextprotocol/protocolVersion":"{MODERN}","io.modelcontextprotocol/clientCapabilities":{}"#,
            compact(capabilities)?
        );
        if let Some(info) = init.info.filter(|i| i.get().starts_with('{')) {
            meta.push_str(r#","io.modelcontextprotocol/clientInfo":"#);
            meta.push_str(&compact(info.get())?);
        }
        Ok(Session {
            caller,
            version,
            meta,
        })
    }

    /// The session of a legacy request that came without one (a stateless legacy client):
    /// no capabilities, the newest legacy revision.
    pub fn sessionless(caller: CallerKey) -> Session {
        Session {
            caller,
            version: LEGACY[LEGACY.len() - 1].to_string(),
            meta: format!(
                r#""io.modelcontextprotocol/protocolVersion":"{MODERN}","io.modelcontextprotocol/clientCapabilities":{{}}"#
            ),
        }
    }

    /// The bytes sealed into the session id: caller, 16 random bytes (two clients alike
    /// still get ids of their own), the revision, the `_meta` members.
    pub fn inner(&self) -> Vec<u8> {
        let mut inner = Vec::with_capacity(33 + self.version.len() + self.meta.len());
        inner.extend_from_slice(&self.caller);
        let mut salt = [0u8; 16];
        getrandom::fill(&mut salt).expect("the system has a source of randomness");
        inner.extend_from_slice(&salt);
        inner.push(self.version.len() as u8);
        inner.extend_from_slice(self.version.as_bytes());
        inner.extend_from_slice(self.meta.as_bytes());
        inner
    }

    /// The session an opened id holds.
    pub fn from_inner(inner: &[u8]) -> Option<Session> {
        let caller: CallerKey = inner.get(..16)?.try_into().ok()?;
        let n = usize::from(*inner.get(32)?);
        let version = std::str::from_utf8(inner.get(33..33 + n)?).ok()?;
        let meta = std::str::from_utf8(inner.get(33 + n..)?).ok()?;
        Some(Session {
            caller,
            version: version.to_string(),
            meta: meta.to_string(),
        })
    }

    /// Whether the client declared `capability` (`elicitation`, `sampling`, `roots`).
    pub fn declares(&self, capability: &str) -> bool {
        let Some(at) = self
            .meta
            .find(r#""io.modelcontextprotocol/clientCapabilities":"#)
        else {
            return false;
        };
        let text = &self.meta[at + r#""io.modelcontextprotocol/clientCapabilities":"#.len()..];
        let mut r = Reader::new(text);
        let Some(caps) = r.value(1) else {
            return false;
        };
        serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(caps)
            .is_ok_and(|m| m.get(capability).is_some_and(|v| v.is_object()))
    }
}

/// `text` (one JSON value) without insignificant whitespace.
fn compact(text: &str) -> Result<String, String> {
    let v: &RawValue = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if !v.get().bytes().any(|b| b.is_ascii_whitespace()) {
        return Ok(v.get().to_string());
    }
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    serde_json::to_string(&value).map_err(|e| e.to_string())
}

/// The `server/discover` mcpgate asks a modern server to answer a bridged `initialize`.
pub fn discover_request(session: &Session) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":"mcpgate-initialize","method":"server/discover","params":{{"_meta":{{{}}}}}}}"#,
        session.meta
    )
}

/// The `subscriptions/listen` a bridged GET stream is: every list change, and the
/// resources the session's client subscribed to; `meta` is the `_meta` members' text.
pub fn listen_request(meta: &str, resources: &[Box<str>]) -> String {
    let uris = serde_json::to_string(resources).expect("strings serialize");
    format!(
        r#"{{"jsonrpc":"2.0","id":"mcpgate-get","method":"subscriptions/listen","params":{{"_meta":{{{meta}}},"notifications":{{"toolsListChanged":true,"promptsListChanged":true,"resourcesListChanged":true,"resourceSubscriptions":{uris}}}}}}}"#
    )
}

/// The `initialize` answer (to request `id`) made of a modern server's `server/discover`
/// answer `discover` (one JSON-RPC message, already narrowed to the profile). An error
/// answer is passed on as the initialize's error.
pub fn initialize_answer(id: &str, session: &Session, discover: &str) -> Result<String, String> {
    #[derive(serde::Deserialize)]
    struct Answer<'a> {
        #[serde(borrow)]
        result: Option<Discovered<'a>>,
        #[serde(borrow)]
        error: Option<&'a RawValue>,
    }
    #[derive(serde::Deserialize)]
    struct Discovered<'a> {
        #[serde(borrow)]
        capabilities: Option<&'a RawValue>,
        #[serde(borrow)]
        instructions: Option<&'a RawValue>,
        #[serde(rename = "_meta")]
        meta: Option<serde_json::Map<String, serde_json::Value>>,
    }
    let answer: Answer =
        serde_json::from_str(discover).map_err(|e| format!("server/discover answer: {e}"))?;
    if let Some(error) = answer.error {
        return Ok(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{}}}"#,
            error.get()
        ));
    }
    let result = answer
        .result
        .ok_or("server/discover answer holds neither result nor error")?;
    let mut capabilities: serde_json::Map<String, serde_json::Value> = match result.capabilities {
        Some(c) => serde_json::from_str(c.get()).map_err(|e| format!("capabilities: {e}"))?,
        None => Default::default(),
    };
    // What a 2025-11-25 client may be told: the server's kinds, not its extensions (which
    // name 2026-07-28 methods).
    capabilities.remove("extensions");
    let info = result
        .meta
        .and_then(|mut m| m.remove("io.modelcontextprotocol/serverInfo"))
        .filter(|i| i.is_object())
        .unwrap_or_else(
            || serde_json::json!({"name": "mcpgate", "version": env!("CARGO_PKG_VERSION")}),
        );
    let mut out = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"protocolVersion":"{}","capabilities":{},"serverInfo":{}"#,
        session.version,
        serde_json::to_string(&capabilities).map_err(|e| e.to_string())?,
        info
    );
    if let Some(i) = result.instructions.filter(|i| i.get().starts_with('"')) {
        out.push_str(r#","instructions":"#);
        out.push_str(i.get());
    }
    out.push_str("}}");
    Ok(out)
}

/// `body`, one JSON-RPC request, with `meta` (members' text) added to its `params._meta`,
/// made when absent. `None` when it is not an object this can edit (a batch, `params` that
/// is not an object): those are refused rather than forwarded without the fields.
pub fn modernize(body: &str, meta: &str) -> Option<String> {
    let start = body.as_ptr() as usize;
    let mut r = Reader::new(body);
    r.skip_ws();
    let mut params = None;
    let mut last = 0;
    r.object(0, |r, key| {
        if key.raw == "params" {
            params = Some(r.value(1)?);
        } else {
            r.skip(1)?;
        }
        Some(())
    })?;
    if !r.at_end() {
        return None;
    }
    let mut out = String::with_capacity(body.len() + meta.len() + 32);
    let Some(params) = params else {
        // No params: they are added before the object's closing brace.
        let close = body.rfind('}')?;
        let empty = body[..close].trim_end().ends_with('{');
        out.push_str(&body[..close]);
        if !empty {
            out.push(',');
        }
        out.push_str(r#""params":{"_meta":{"#);
        out.push_str(meta);
        out.push_str("}}");
        out.push_str(&body[close..]);
        return Some(out);
    };
    if !params.starts_with('{') {
        return None;
    }
    let params_at = params.as_ptr() as usize - start;
    let mut existing = None;
    let mut p = Reader::new(params);
    p.object(1, |r, key| {
        if key.raw == "_meta" {
            existing = Some(r.value(2)?);
        } else {
            r.skip(2)?;
        }
        last += 1;
        Some(())
    })?;
    match existing {
        Some(m) if m.starts_with('{') => {
            // Members a legacy client put there under 2026-07-28's names give way to the
            // session's (a key must not come twice).
            if m.contains("\"io.modelcontextprotocol/") {
                let mut map: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_str(m).ok()?;
                let ours: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_str(&format!("{{{meta}}}")).ok()?;
                map.extend(ours);
                let at = m.as_ptr() as usize - start;
                out.push_str(&body[..at]);
                out.push_str(&serde_json::to_string(&map).ok()?);
                out.push_str(&body[at + m.len()..]);
                return Some(out);
            }
            let at = m.as_ptr() as usize - start + 1;
            let empty = m[1..].trim_start().starts_with('}');
            out.push_str(&body[..at]);
            out.push_str(meta);
            if !empty {
                out.push(',');
            }
            out.push_str(&body[at..]);
        }
        Some(_) => return None,
        None => {
            let at = params_at + 1;
            out.push_str(&body[..at]);
            out.push_str(r#""_meta":{"#);
            out.push_str(meta);
            out.push('}');
            if last > 0 {
                out.push(',');
            }
            out.push_str(&body[at..]);
        }
    }
    Some(out)
}

/// What an `input_required` answer asks of the client.
#[derive(Debug)]
pub struct Asks {
    /// Each input request: its key, its method, and the request (`method`, `params`) as
    /// JSON text.
    pub requests: Vec<(String, String, Box<RawValue>)>,
    /// The server's state, as JSON text (a string), to send back with the answers.
    pub state: Option<Box<RawValue>>,
}

/// Whether `text`, one JSON-RPC message answering `id`, is an `input_required` result,
/// and what it asks. Cheap for the usual answer: a text without the word is not read.
pub fn asks(text: &str, id: &str) -> Result<Option<Asks>, String> {
    if !text.contains("input_required") {
        return Ok(None);
    }
    #[derive(serde::Deserialize)]
    struct Answer<'a> {
        #[serde(borrow)]
        id: Option<&'a RawValue>,
        result: Option<Round>,
    }
    #[derive(serde::Deserialize)]
    struct Round {
        #[serde(rename = "resultType")]
        kind: Option<String>,
        #[serde(rename = "inputRequests")]
        requests: Option<serde_json::Map<String, serde_json::Value>>,
        #[serde(rename = "requestState")]
        state: Option<Box<RawValue>>,
    }
    let Ok(answer) = serde_json::from_str::<Answer>(text) else {
        return Ok(None);
    };
    if answer.id.map(|i| i.get().trim()) != Some(id) {
        return Ok(None);
    }
    let Some(round) = answer
        .result
        .filter(|r| r.kind.as_deref() == Some("input_required"))
    else {
        return Ok(None);
    };
    let mut requests = Vec::new();
    for (key, request) in round.requests.unwrap_or_default() {
        let method = request["method"].as_str().unwrap_or("").to_string();
        if !matches!(
            method.as_str(),
            "elicitation/create" | "sampling/createMessage" | "roots/list"
        ) {
            return Err(format!(
                "the server asked for `{method}`, which is no input request"
            ));
        }
        let text = serde_json::to_string(&request).map_err(|e| e.to_string())?;
        requests.push((
            key,
            method,
            RawValue::from_string(text).map_err(|e| e.to_string())?,
        ));
    }
    if requests.is_empty() && round.state.is_none() {
        return Err("an input_required answer with neither inputRequests nor requestState".into());
    }
    Ok(Some(Asks {
        requests,
        state: round.state,
    }))
}

/// The capability a client must have declared to be asked `method`.
pub fn capability_of(method: &str) -> &'static str {
    match method {
        "elicitation/create" => "elicitation",
        "sampling/createMessage" => "sampling",
        _ => "roots",
    }
}

/// A server→client request as the legacy client gets it: `request` (`method`, `params`)
/// with the JSON-RPC version and id `id` (JSON text).
pub fn client_request(id: &str, request: &RawValue) -> String {
    let inner = request.get().trim();
    let rest = inner.strip_prefix('{').unwrap_or(inner).trim_start();
    let sep = if rest.starts_with('}') { "" } else { "," };
    format!(r#"{{"jsonrpc":"2.0","id":{id}{sep}{rest}"#)
}

/// The retry of `body` (the modernized request) with the client's `answers` (key, result
/// JSON text) as `inputResponses` and the server's `state` as `requestState`. Any the
/// body carried are replaced.
pub fn retry(
    body: &str,
    answers: &[(String, Box<RawValue>)],
    state: Option<&RawValue>,
) -> Result<String, String> {
    let mut message: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(body).map_err(|e| e.to_string())?;
    let params = message
        .entry("params")
        .or_insert_with(|| serde_json::Value::Object(Default::default()));
    let params = params.as_object_mut().ok_or("params is not an object")?;
    let mut responses = serde_json::Map::new();
    for (key, result) in answers {
        let v: serde_json::Value = serde_json::from_str(result.get()).map_err(|e| e.to_string())?;
        responses.insert(key.clone(), v);
    }
    params.insert(
        "inputResponses".into(),
        serde_json::Value::Object(responses),
    );
    match state {
        Some(s) => {
            let v: serde_json::Value = serde_json::from_str(s.get()).map_err(|e| e.to_string())?;
            params.insert("requestState".into(), v);
        }
        None => {
            params.remove("requestState");
        }
    }
    serde_json::to_string(&message).map_err(|e| e.to_string())
}

/// Whether `text` (an answer to a legacy `initialize`) is a 2026-07-28 server's refusal of
/// the revision: UnsupportedProtocolVersion (-32022) naming a supported revision of
/// 2026-07-28 or later.
pub fn refuses_legacy(text: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Answer {
        error: Option<Error>,
    }
    #[derive(serde::Deserialize)]
    struct Error {
        code: i64,
        data: Option<Data>,
    }
    #[derive(serde::Deserialize)]
    struct Data {
        #[serde(default)]
        supported: Vec<serde_json::Value>,
    }
    let Ok(Answer { error: Some(e) }) = serde_json::from_slice::<Answer>(text) else {
        return false;
    };
    e.code == crate::error::code::UNSUPPORTED_VERSION
        && e.data.is_some_and(|d| {
            d.supported
                .iter()
                .any(|v| v.as_str().is_some_and(crate::config::generation::is_modern))
        })
}

/// Whether `data` (one message of a listen stream) is the server's acknowledgement of it.
pub fn is_acknowledgement(data: &str) -> bool {
    data.contains("notifications/subscriptions/acknowledged")
        && serde_json::from_str::<serde_json::Value>(data)
            .is_ok_and(|m| m["method"] == "notifications/subscriptions/acknowledged")
}

/// Whether a message of a bridged GET stream is for the legacy client: the listen
/// request's acknowledgement and its closing answer are not (it sent no such request).
pub fn for_legacy_stream(data: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        method: Option<&'a str>,
        #[serde(borrow)]
        id: Option<&'a RawValue>,
    }
    match serde_json::from_str::<Head>(data) {
        Ok(h) => h.id.is_none() && h.method != Some("notifications/subscriptions/acknowledged"),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests;
