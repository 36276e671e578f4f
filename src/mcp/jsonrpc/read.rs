//! The two readers of one message's envelope: a one-pass reader over the wire crate's
//! JSON reader for the usual message ([`read_message`]), and serde_json for anything it is
//! not sure of ([`message_by_serde`]), which then also says what is wrong. Where both read
//! a message, they read the same one (`fast_and_serde_agree` in the tests).

use super::*;

/// The keys of one JSON object that mcpgate looks at, as raw slices; every other key is
/// skipped. Refuses an object that repeats any key.
pub(super) struct Fields<'a, const N: usize> {
    found: [Option<&'a RawValue>; N],
    /// Whether a key outside `wanted` appeared that the caller asked to note.
    noted: bool,
}

pub(super) struct FieldsSeed<const N: usize> {
    wanted: [&'static str; N],
    note: &'static [&'static str],
}

impl<'de, const N: usize> de::DeserializeSeed<'de> for FieldsSeed<N> {
    type Value = Fields<'de, N>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, const N: usize> Visitor<'de> for FieldsSeed<N> {
    type Value = Fields<'de, N>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Fields {
            found: [None; N],
            noted: false,
        };
        // Most envelopes have 3–4 keys: a linear scan beats hashing.
        let mut seen: Vec<Cow<'de, str>> = Vec::with_capacity(6);
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            if seen.contains(&key) {
                return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
            }
            match self.wanted.iter().position(|w| *w == key) {
                Some(i) => out.found[i] = Some(map.next_value::<&'de RawValue>()?),
                None => {
                    out.noted |= self.note.contains(&&*key);
                    map.next_value::<IgnoredAny>()?;
                }
            }
            seen.push(key);
        }
        Ok(out)
    }
}

pub(super) fn object_fields<'a, const N: usize>(
    json: &'a str,
    wanted: [&'static str; N],
    note: &'static [&'static str],
) -> Result<Fields<'a, N>, serde_json::Error> {
    let mut d = serde_json::Deserializer::from_str(json);
    let f = de::DeserializeSeed::deserialize(FieldsSeed { wanted, note }, &mut d)?;
    d.end()?;
    Ok(f)
}

/// Reads a well-formed message in one pass with [`jsonread`]. `None` for anything it is
/// not sure of (malformed or invalid, an escaped key or name, a repeated key, deep
/// nesting): [`message_by_serde`] decides those. Where both read a message, they read
/// the same one (`fast_and_serde_agree` below).
pub(super) fn read_message<'a>(json: &'a str) -> Option<Message<'a>> {
    let Top {
        id,
        method,
        noted,
        params,
    } = top(json)?;
    let id = match id {
        Some(text) if matches!(text.as_bytes()[0], b'"' | b'-' | b'0'..=b'9' | b'n') => {
            Some(serde_json::from_str::<&RawValue>(text).ok()?)
        }
        Some(_) => return None,
        None => None,
    };
    let Some(method) = method else {
        if !noted || id.is_none() {
            return None;
        }
        return Some(Message::response(id));
    };
    let method = Reader::new(method).plain_string()?;
    let kind = if id.is_some() {
        MessageKind::Request
    } else {
        MessageKind::Notification
    };
    let (mut tool, mut mcp_name, mut arguments) = (None, None, None);
    let (mut meta, mut request_state) = (None, None);
    let target;
    // A field's text if it is a string, `Some(None)` if absent or not a string, `None`
    // to give up (an escaped string).
    let text = |v: Option<&'a str>| match v {
        Some(v) if v.starts_with('"') => Reader::new(v).plain_string().map(Some),
        _ => Some(None),
    };
    match params {
        Some(Some([name, uri, args, task, meta_text, state])) => {
            arguments = args;
            meta = meta_text;
            request_state = state;
            let name_text = text(name)?;
            if method == "tools/call" {
                tool = Some(match (name_text, name) {
                    (Some(n), _) => ToolName::Name(Cow::Borrowed(n)),
                    (None, Some(_)) => ToolName::NotString,
                    (None, None) => ToolName::Missing,
                });
            }
            let uri_text = text(uri)?;
            target = match target_field(method) {
                Some(Field::Name) => Some(named(name_text.map(Cow::Borrowed), name.is_some())),
                Some(Field::Uri) => Some(named(uri_text.map(Cow::Borrowed), uri.is_some())),
                None => None,
            };
            // What `Mcp-Name` mirrors: the URI for resources methods, the task id for
            // tasks methods, else the name.
            mcp_name = match target_field(method) {
                Some(Field::Uri) => uri_text,
                _ if is_task_method(method) => text(task)?,
                _ => name_text.or(uri_text),
            }
            .map(Cow::Borrowed);
        }
        _ => {
            if method == "tools/call" {
                tool = Some(ToolName::Missing);
            }
            target = target_field(method).map(|_| ToolName::Missing);
        }
    }
    Some(Message {
        kind,
        id,
        method: Some(Cow::Borrowed(method)),
        tool,
        target,
        mcp_name,
        arguments,
        meta,
        request_state,
    })
}

/// A message's members as its text has them: `id` and `method` as JSON, whether it has a
/// `result` or an `error`, and `params`: `None` if absent, `Some(None)` if not an object,
/// else the fields of [`PARAMS`].
struct Top<'a> {
    id: Option<&'a str>,
    method: Option<&'a str>,
    noted: bool,
    params: Option<Option<[Option<&'a str>; PARAMS.len()]>>,
}

/// Reads a message's top level: `None` when it is not one object of unique keys with
/// `"jsonrpc": "2.0"`, or its reading gives up.
fn top(json: &str) -> Option<Top<'_>> {
    let mut r = Reader::new(json);
    r.skip_ws();
    let mut seen = Seen::new();
    let (mut jsonrpc, mut id, mut method, mut noted) = (None, None, None, false);
    let mut params = None;
    r.object(0, |r, key| {
        let key = key.plain()?;
        seen.first(key)?;
        match key {
            "jsonrpc" => jsonrpc = Some(r.value(1)?),
            "id" => id = Some(r.value(1)?),
            "method" => method = Some(r.value(1)?),
            "params" if r.peek() == Some(b'{') => {
                let mut inner = Seen::new();
                let mut found = [None; PARAMS.len()];
                r.object(1, |r, key| {
                    let key = key.plain()?;
                    inner.first(key)?;
                    match PARAMS.iter().position(|w| *w == key) {
                        Some(i) => found[i] = Some(r.value(2)?),
                        None => r.skip(2)?,
                    }
                    Some(())
                })?;
                params = Some(Some(found));
            }
            _ => {
                noted |= matches!(key, "result" | "error");
                if key == "params" {
                    params = Some(None);
                }
                r.skip(1)?;
            }
        }
        Some(())
    })?;
    if !r.at_end() || jsonrpc != Some("\"2.0\"") {
        return None;
    }
    Some(Top {
        id,
        method,
        noted,
        params,
    })
}

/// The fields of `params` a request is read for, in the order the readers keep them.
pub(super) const PARAMS: [&str; 6] = [
    "name",
    "uri",
    "arguments",
    "taskId",
    "_meta",
    "requestState",
];

pub(super) fn message_by_serde(json: &str) -> Result<Message<'_>, GateError> {
    let f = object_fields(
        json,
        ["jsonrpc", "id", "method", "params"],
        &["result", "error"],
    )
    .map_err(classify)?;
    let [jsonrpc, id, method, params] = f.found;
    let invalid = |m: &str| GateError::InvalidRequest(m.to_string());

    match jsonrpc.map(|v| serde_json::from_str::<Text>(v.get())) {
        Some(Ok(Text(v))) if v == "2.0" => {}
        _ => return Err(invalid("\"jsonrpc\" must be \"2.0\"")),
    }
    if let Some(id) = id {
        match id.get().trim().as_bytes().first() {
            Some(b'"' | b'-' | b'0'..=b'9' | b'n') => {}
            _ => return Err(invalid("\"id\" must be a string, a number or null")),
        }
    }
    let Some(method) = method else {
        if !f.noted || id.is_none() {
            return Err(invalid(
                "a message needs \"method\", or \"id\" with \"result\" or \"error\"",
            ));
        }
        return Ok(Message::response(id));
    };
    let Text(method) = serde_json::from_str::<Text>(method.get())
        .map_err(|_| invalid("\"method\" must be a string"))?;
    let kind = if id.is_some() {
        MessageKind::Request
    } else {
        MessageKind::Notification
    };

    let (mut tool, mut mcp_name, mut arguments) = (None, None, None);
    let (mut meta, mut request_state) = (None, None);
    let target;
    if let Some(params) = params.filter(|p| p.get().trim_start().starts_with('{')) {
        let p = object_fields(params.get(), PARAMS, &[])
            .map_err(|e| invalid(&format!("params: {e}")))?;
        let [name, uri, args, task, meta_text, state] = p.found;
        arguments = args.map(RawValue::get);
        meta = meta_text.map(RawValue::get);
        request_state = state.map(RawValue::get);
        let name_text = as_text(name);
        if method == "tools/call" {
            tool = Some(match (&name_text, name) {
                (Some(Text(n)), _) => ToolName::Name(n.clone()),
                (None, Some(_)) => ToolName::NotString,
                (None, None) => ToolName::Missing,
            });
        }
        let uri_text = as_text(uri);
        target = match target_field(&method) {
            Some(Field::Name) => Some(named(name_text.clone().map(|t| t.0), name.is_some())),
            Some(Field::Uri) => Some(named(uri_text.clone().map(|t| t.0), uri.is_some())),
            None => None,
        };
        mcp_name = match target_field(&method) {
            Some(Field::Uri) => uri_text,
            _ if is_task_method(&method) => as_text(task),
            _ => name_text.or(uri_text),
        }
        .map(|t| t.0);
    } else {
        if method == "tools/call" {
            tool = Some(ToolName::Missing);
        }
        target = target_field(&method).map(|_| ToolName::Missing);
    }
    Ok(Message {
        kind,
        id,
        method: Some(method),
        tool,
        target,
        mcp_name,
        arguments,
        meta,
        request_state,
    })
}

/// Which field of `params` names what a method acts on, for the methods policy checks
/// besides tools/call.
pub(super) enum Field {
    Name,
    Uri,
}

pub(super) fn target_field(method: &str) -> Option<Field> {
    match method {
        "prompts/get" => Some(Field::Name),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => Some(Field::Uri),
        _ => None,
    }
}

/// A field's reading: its text, or whether it was there but not a string.
pub(super) fn named(text: Option<Cow<'_, str>>, present: bool) -> ToolName<'_> {
    match (text, present) {
        (Some(t), _) => ToolName::Name(t),
        (None, true) => ToolName::NotString,
        (None, false) => ToolName::Missing,
    }
}

/// The decoded string, if `v` is a JSON string.
pub(super) fn as_text(v: Option<&RawValue>) -> Option<Text<'_>> {
    v.and_then(|v| serde_json::from_str::<Text>(v.get()).ok())
}
