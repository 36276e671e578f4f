//! A call held at a legacy server for a 2026-07-28 client's retry: the server's own request
//! read from its stream, the client's `input_required` answer and the state it carries,
//! the retry read, and what the server is told (the client's answer, a cancel).

use super::*;

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
