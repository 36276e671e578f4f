//! Reads a POST body as JSON-RPC without building a value tree: the envelope of each
//! message is parsed into borrowed slices of the original bytes (the bytes that will be
//! forwarded), strings are decoded once (so `"n\u0061me"` is compared as `name`), and a
//! repeated key in an envelope or in a request's params is refused, because two parsers
//! can disagree on which copy wins and the upstream must run exactly what was checked.

use crate::error::GateError;
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;
use wire::json::read::{Reader, Seen};

/// A JSON string, borrowed from the body when it has no escapes, decoded otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

/// The keys of one JSON object that mcpgate looks at, as raw slices; every other key is
/// skipped. Refuses an object that repeats any key.
struct Fields<'a, const N: usize> {
    found: [Option<&'a RawValue>; N],
    /// Whether a key outside `wanted` appeared that the caller asked to note.
    noted: bool,
}

struct FieldsSeed<const N: usize> {
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

fn object_fields<'a, const N: usize>(
    json: &'a str,
    wanted: [&'static str; N],
    note: &'static [&'static str],
) -> Result<Fields<'a, N>, serde_json::Error> {
    let mut d = serde_json::Deserializer::from_str(json);
    let f = de::DeserializeSeed::deserialize(FieldsSeed { wanted, note }, &mut d)?;
    d.end()?;
    Ok(f)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    Request,
    Notification,
    /// A response (or error) from the client to a server-initiated request.
    Response,
}

/// What a list request lists: the array its result holds and the field that names each
/// item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Tools,
    Resources,
    ResourceTemplates,
    Prompts,
}

impl ListKind {
    pub const ALL: [ListKind; 4] = [
        ListKind::Tools,
        ListKind::Resources,
        ListKind::ResourceTemplates,
        ListKind::Prompts,
    ];

    pub fn of(method: &str) -> Option<ListKind> {
        match method {
            "tools/list" => Some(ListKind::Tools),
            "resources/list" => Some(ListKind::Resources),
            "resources/templates/list" => Some(ListKind::ResourceTemplates),
            "prompts/list" => Some(ListKind::Prompts),
            _ => None,
        }
    }

    /// The result's array.
    pub fn array(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Resources => "resources",
            ListKind::ResourceTemplates => "resourceTemplates",
            ListKind::Prompts => "prompts",
        }
    }

    /// The field of an item that names it.
    pub fn key(self) -> &'static str {
        match self {
            ListKind::Tools | ListKind::Prompts => "name",
            ListKind::Resources => "uri",
            ListKind::ResourceTemplates => "uriTemplate",
        }
    }
}

/// `params.name` of a tools/call, as the policy needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolName<'a> {
    Missing,
    NotString,
    Name(Cow<'a, str>),
}

/// A change to a message's text: the bytes `cut` replaced by `put` bytes.
#[derive(Debug, Clone)]
pub struct Splice {
    pub cut: std::ops::Range<usize>,
    pub put: usize,
}

#[derive(Debug)]
pub struct Message<'a> {
    pub kind: MessageKind,
    pub id: Option<&'a RawValue>,
    pub method: Option<Cow<'a, str>>,
    /// Set for tools/call requests.
    pub tool: Option<ToolName<'a>>,
    /// What a prompts/get (`params.name`) or a resources/read, subscribe or unsubscribe
    /// (`params.uri`) names: set for those methods only, read from the one field the
    /// server reads, never from the other.
    pub target: Option<ToolName<'a>>,
    /// What an `Mcp-Name` header mirrors, when a string: `params.uri` for resources/read,
    /// subscribe and unsubscribe, else `params.name`, else `params.uri`.
    pub mcp_name: Option<Cow<'a, str>>,
    /// `params.arguments` of a request, as its JSON text: for the audit trail.
    pub arguments: Option<&'a str>,
    /// `params._meta` as its JSON text: where a 2026-07-28 request says its version.
    pub meta: Option<&'a str>,
    /// `params.requestState` as its JSON text: a multi round-trip retry's state.
    pub request_state: Option<&'a str>,
}

impl<'a> Message<'a> {
    /// A response (or error) from the client, known by its id.
    fn response(id: Option<&'a RawValue>) -> Self {
        Message {
            kind: MessageKind::Response,
            id,
            method: None,
            tool: None,
            target: None,
            mcp_name: None,
            arguments: None,
            meta: None,
            request_state: None,
        }
    }

    pub fn method(&self) -> Option<&str> {
        self.method.as_deref()
    }

    /// This message, read from `old`, as it reads from `new`: `old` with its bytes
    /// `splice.cut` (a string value, quotes included) replaced by `splice.put` bytes (the
    /// new string, quoted, with no escape). Every field moves with the text; one that was
    /// the cut string's content is the new string's. `None` when a field straddles the cut
    /// any other way: the text must then be read again.
    pub fn moved<'n>(&self, old: &[u8], new: &'n [u8], splice: &Splice) -> Option<Message<'n>> {
        let (base, cut) = (old.as_ptr() as usize, &splice.cut);
        if splice.put < 2 || cut.len() < 2 || cut.end > old.len() {
            return None;
        }
        let text = |s: &str| -> Option<Cow<'n, str>> {
            let at = (s.as_ptr() as usize).wrapping_sub(base);
            if at > old.len() || at + s.len() > old.len() {
                // Not a slice of the text: the message owns it.
                return Some(Cow::Owned(s.to_owned()));
            }
            let end = at + s.len();
            let range = if end <= cut.start {
                at..end
            } else if at >= cut.end {
                at + splice.put - cut.len()..end + splice.put - cut.len()
            } else if at == cut.start + 1 && end + 1 == cut.end {
                cut.start + 1..cut.start + splice.put - 1
            } else {
                return None;
            };
            std::str::from_utf8(new.get(range)?).ok().map(Cow::Borrowed)
        };
        let borrowed = |s: Option<&str>| -> Option<Option<&'n str>> {
            match s.map(text) {
                None => Some(None),
                Some(Some(Cow::Borrowed(t))) => Some(Some(t)),
                Some(_) => None,
            }
        };
        let cow = |c: &Option<Cow<'_, str>>| -> Option<Option<Cow<'n, str>>> {
            match c {
                None => Some(None),
                Some(c) => text(c).map(Some),
            }
        };
        let name = |n: &Option<ToolName<'_>>| -> Option<Option<ToolName<'n>>> {
            Some(match n {
                None => None,
                Some(ToolName::Missing) => Some(ToolName::Missing),
                Some(ToolName::NotString) => Some(ToolName::NotString),
                Some(ToolName::Name(c)) => Some(ToolName::Name(text(c)?)),
            })
        };
        let id = match self.id {
            None => None,
            Some(id) => Some(serde_json::from_str::<&RawValue>(borrowed(Some(id.get()))??).ok()?),
        };
        Some(Message {
            kind: self.kind,
            id,
            method: cow(&self.method)?,
            tool: name(&self.tool)?,
            target: name(&self.target)?,
            mcp_name: cow(&self.mcp_name)?,
            arguments: borrowed(self.arguments)?,
            meta: borrowed(self.meta)?,
            request_state: borrowed(self.request_state)?,
        })
    }

    /// The id as raw JSON text, for matching responses and for error envelopes.
    pub fn id_text(&self) -> Option<&str> {
        self.id.map(|v| v.get().trim())
    }
}

#[derive(Debug)]
pub enum Payload<'a> {
    Single(Message<'a>),
    Batch(Vec<Message<'a>>),
}

impl<'a> Payload<'a> {
    pub fn messages(&self) -> &[Message<'a>] {
        match self {
            Payload::Single(m) => std::slice::from_ref(m),
            Payload::Batch(v) => v,
        }
    }

    pub fn is_batch(&self) -> bool {
        matches!(self, Payload::Batch(_))
    }

    /// Whether the upstream owes an answer with a body (some element is a request).
    pub fn has_requests(&self) -> bool {
        self.messages()
            .iter()
            .any(|m| m.kind == MessageKind::Request)
    }

    /// The id of the `server/discover` request among the payload's, if there is one.
    pub fn discover_id(&self) -> Option<Box<str>> {
        self.messages()
            .iter()
            .filter(|m| m.kind == MessageKind::Request && m.method() == Some("server/discover"))
            .find_map(|m| m.id_text().map(Into::into))
    }

    /// The ids of list requests (tools, resources, resource templates, prompts), whose
    /// responses must be filtered, each with what it lists.
    pub fn list_ids(&self) -> Vec<(Box<str>, ListKind)> {
        self.messages()
            .iter()
            .filter(|m| m.kind == MessageKind::Request)
            .filter_map(|m| Some((m.id_text()?.into(), ListKind::of(m.method()?)?)))
            .collect()
    }
}

fn classify(e: serde_json::Error) -> GateError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof | Category::Io => GateError::Parse(e.to_string()),
        Category::Data => GateError::InvalidRequest(e.to_string()),
    }
}

/// Parses a request body. Malformed JSON → `Parse` (-32700); well-formed JSON that is not
/// a JSON-RPC message or batch → `InvalidRequest` (-32600).
pub fn parse(body: &[u8]) -> Result<Payload<'_>, GateError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| GateError::Parse(format!("body is not UTF-8: {e}")))?;
    match text.trim_start().as_bytes().first() {
        Some(b'{') => Ok(Payload::Single(message(text)?)),
        Some(b'[') => {
            let items: Vec<&RawValue> = serde_json::from_str(text).map_err(classify)?;
            if items.is_empty() {
                return Err(GateError::InvalidRequest("empty batch".into()));
            }
            let messages = items
                .into_iter()
                .enumerate()
                .map(|(i, raw)| {
                    message(raw.get()).map_err(|e| match e {
                        GateError::InvalidRequest(m) => {
                            GateError::InvalidRequest(format!("batch element {i}: {m}"))
                        }
                        other => other,
                    })
                })
                .collect::<Result<_, _>>()?;
            Ok(Payload::Batch(messages))
        }
        _ => {
            // Tell "not JSON" from "JSON, but not an object or array".
            serde_json::from_str::<IgnoredAny>(text).map_err(classify)?;
            Err(GateError::InvalidRequest(
                "expected a JSON-RPC object or batch array".into(),
            ))
        }
    }
}

/// One message: read by [`read_message`] when it can, else by serde_json, which then also
/// says what is wrong with it.
fn message(json: &str) -> Result<Message<'_>, GateError> {
    match read_message(json) {
        Some(m) => Ok(m),
        None => message_by_serde(json),
    }
}

/// Reads a well-formed message in one pass with [`jsonread`]. `None` for anything it is
/// not sure of (malformed or invalid, an escaped key or name, a repeated key, deep
/// nesting): [`message_by_serde`] decides those. Where both read a message, they read
/// the same one (`fast_and_serde_agree` below).
fn read_message<'a>(json: &'a str) -> Option<Message<'a>> {
    let mut r = Reader::new(json);
    r.skip_ws();
    let mut seen = Seen::new();
    let (mut jsonrpc, mut id, mut method, mut noted) = (None, None, None, false);
    // `params`: `None` if absent, `Some(None)` if not an object, else the fields of
    // [`PARAMS`].
    let mut params: Option<Option<[Option<&str>; PARAMS.len()]>> = None;
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

/// The fields of `params` a request is read for, in the order the readers keep them.
const PARAMS: [&str; 6] = [
    "name",
    "uri",
    "arguments",
    "taskId",
    "_meta",
    "requestState",
];

/// The tasks extension's methods that name one task (`params.taskId`, which `Mcp-Name`
/// mirrors).
pub fn is_task_method(method: &str) -> bool {
    matches!(method, "tasks/get" | "tasks/update" | "tasks/cancel")
}

fn message_by_serde(json: &str) -> Result<Message<'_>, GateError> {
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

/// Parses a JSON text that is one message or a batch of them into its elements, each as
/// `T`; anything unparseable gives no element. For reading answers, where a bad one is
/// the client's to see, not mcpgate's to refuse.
pub fn one_or_many<'a, T: serde::Deserialize<'a>>(text: &'a str) -> Vec<T> {
    if text.trim_start().starts_with('[') {
        serde_json::from_str(text).unwrap_or_default()
    } else {
        serde_json::from_str(text)
            .map(|one| vec![one])
            .unwrap_or_default()
    }
}

/// Which field of `params` names what a method acts on, for the methods policy checks
/// besides tools/call.
enum Field {
    Name,
    Uri,
}

fn target_field(method: &str) -> Option<Field> {
    match method {
        "prompts/get" => Some(Field::Name),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => Some(Field::Uri),
        _ => None,
    }
}

/// A field's reading: its text, or whether it was there but not a string.
fn named(text: Option<Cow<'_, str>>, present: bool) -> ToolName<'_> {
    match (text, present) {
        (Some(t), _) => ToolName::Name(t),
        (None, true) => ToolName::NotString,
        (None, false) => ToolName::Missing,
    }
}

/// The decoded string, if `v` is a JSON string.
fn as_text(v: Option<&RawValue>) -> Option<Text<'_>> {
    v.and_then(|v| serde_json::from_str::<Text>(v.get()).ok())
}

#[cfg(test)]
mod tests {

    /// A message moved with a name's splice reads as the new text read whole, wherever
    /// the name sits among the other fields, whatever their lengths.
    #[test]
    fn a_moved_message_is_the_new_text_read_again() {
        // Every order of the fields, at the top and in `params`, and a few hand-made ones.
        fn orders(items: &[String]) -> Vec<Vec<String>> {
            if items.len() <= 1 {
                return vec![items.to_vec()];
            }
            (0..items.len())
                .flat_map(|i| {
                    let mut rest = items.to_vec();
                    let first = rest.remove(i);
                    orders(&rest).into_iter().map(move |mut o| {
                        o.insert(0, first.clone());
                        o
                    })
                })
                .collect()
        }
        let params: Vec<String> = [
            r#""name":"a__x""#,
            r#""arguments":{"name":"a__x","n":[1,2.5,null]}"#,
            r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#,
            r#""requestState":"c3RhdGU""#,
        ]
        .map(String::from)
        .to_vec();
        let mut generated = Vec::new();
        for p in orders(&params) {
            let top = [
                r#""jsonrpc":"2.0""#.to_string(),
                r#""id":"req-1""#.to_string(),
                r#""method":"tools/call""#.to_string(),
                format!(r#""params":{{{}}}"#, p.join(",")),
            ];
            for t in orders(&top) {
                generated.push(format!("{{{}}}", t.join(",")));
            }
        }
        let hand = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__x","arguments":{"q":"é"}}}"#,
            r#"{"params":{"arguments":{"n":[1,2]},"_meta":{"k":"v"},"name":"a__x","requestState":"st"},"method":"tools/call","id":"req-7","jsonrpc":"2.0"}"#,
            r#"{ "jsonrpc" : "2.0" , "id" : 3 , "method" : "prompts/get" , "params" : { "name" : "a__x" , "arguments" : { } } }"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"tools\/call","params":{"name":"a__x"}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"a__x"}}"#,
        ];
        for body in generated.iter().map(String::as_str).chain(hand) {
            for own in ["x", "a_much_longer_name_than_before", "ünï", ""] {
                let old = body.as_bytes();
                let Payload::Single(m) = parse(old).unwrap() else {
                    panic!("one message")
                };
                // params.name's string, not the argument of the same name.
                let (start, _) = body
                    .match_indices("\"a__x\"")
                    .find(|(at, _)| !body[..*at].ends_with(r#""arguments":{"name":"#))
                    .unwrap();
                let quoted = serde_json::to_string(own).unwrap();
                let new = [&old[..start], quoted.as_bytes(), &old[start + 6..]].concat();
                let splice = Splice {
                    cut: start..start + 6,
                    put: quoted.len(),
                };
                let moved = m.moved(old, &new, &splice).expect("moves");
                let Payload::Single(again) = parse(&new).unwrap() else {
                    panic!("one message")
                };
                assert_eq!(
                    format!("{moved:?}"),
                    format!("{again:?}"),
                    "{body} as {own}"
                );
            }
        }
        // A cut that is not the name's whole string: read again.
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__x"}}"#;
        let Payload::Single(m) = parse(body).unwrap() else {
            panic!("one message")
        };
        let splice = Splice {
            cut: 20..40,
            put: 4,
        };
        let new = [&body[..20], b"\"x\"".as_slice(), &body[40..]].concat();
        assert!(m.moved(body, &new, &splice).is_none());
    }

    use super::*;

    fn single(s: &str) -> Message<'_> {
        match parse(s.as_bytes()).unwrap() {
            Payload::Single(m) => m,
            Payload::Batch(_) => panic!("batch"),
        }
    }

    fn code(s: &str) -> i64 {
        parse(s.as_bytes()).unwrap_err().rpc_code()
    }

    #[test]
    fn kinds() {
        let m = single(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
        assert_eq!(
            (m.kind, m.id_text(), m.method()),
            (MessageKind::Request, Some("1"), Some("tools/list"))
        );
        assert_eq!(
            single(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).kind,
            MessageKind::Notification
        );
        assert_eq!(
            single(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#).kind,
            MessageKind::Response
        );
        assert_eq!(
            single(r#"{"jsonrpc":"2.0","id":"a","error":{"code":1,"message":"x"}}"#).kind,
            MessageKind::Response
        );
    }

    /// prompts/get names its prompt by `params.name`, resources/read by `params.uri`: the
    /// other field never stands in for it.
    #[test]
    fn targets_come_from_the_field_the_server_reads() {
        fn t(body: &str) -> Option<ToolName<'_>> {
            single(body).target
        }
        assert_eq!(
            t(
                r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"name":"kb://docs/a","uri":"kb://private/b"}}"#
            ),
            Some(ToolName::Name("kb://private/b".into()))
        );
        assert_eq!(
            t(
                r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"uri":"ok","name":"n\u0061sty"}}"#
            ),
            Some(ToolName::Name("nasty".into()))
        );
        assert_eq!(
            t(r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":7}}"#),
            Some(ToolName::NotString)
        );
        assert_eq!(
            t(r#"{"jsonrpc":"2.0","id":1,"method":"resources/unsubscribe"}"#),
            Some(ToolName::Missing)
        );
        assert_eq!(
            t(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}"#),
            None
        );
        // A repeated uri is refused before any policy looks.
        assert!(parse(br#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"kb://docs/a","uri":"kb://private/b"}}"#).is_err());
    }

    #[test]
    fn escaped_names_are_decoded() {
        let m = single(
            r#"{"jsonrpc":"2.0","id":1,"m\u0065thod":"tools/call","params":{"n\u0061me":"move_\u0064ocument"}}"#,
        );
        assert_eq!(m.method(), Some("tools/call"));
        assert_eq!(m.tool, Some(ToolName::Name("move_document".into())));
    }

    #[test]
    fn tool_name_shapes() {
        fn t(p: &str) -> ToolName<'static> {
            let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call"{p}}}"#);
            match single(&body).tool.unwrap() {
                ToolName::Name(n) => ToolName::Name(n.into_owned().into()),
                ToolName::Missing => ToolName::Missing,
                ToolName::NotString => ToolName::NotString,
            }
        }
        assert_eq!(t(""), ToolName::Missing);
        assert_eq!(t(r#","params":{}"#), ToolName::Missing);
        assert_eq!(t(r#","params":[1]"#), ToolName::Missing);
        assert_eq!(t(r#","params":{"name":7}"#), ToolName::NotString);
        assert_eq!(t(r#","params":{"name":null}"#), ToolName::NotString);
        assert_eq!(
            t(r#","params":{"name":"x","arguments":{"name":"y"}}"#),
            ToolName::Name("x".into())
        );
    }

    #[test]
    fn duplicate_keys_are_refused() {
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}"#),
            -32600
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"x","x":1,"x":2}"#),
            -32600
        );
        // Same key once plain and once escaped is still a repeat.
        assert_eq!(
            code(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","n\u0061me":"b"}}"#
            ),
            -32600
        );
        // Nested objects may repeat keys of the envelope.
        single(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"id":1,"name":2}}}"#,
        );
    }

    #[test]
    fn malformed_and_invalid() {
        assert_eq!(code("{"), -32700);
        assert_eq!(code("{\"jsonrpc\":\"2.0\",}"), -32700);
        assert_eq!(code("nope"), -32700);
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"ping"} trailing"#),
            -32700
        );
        assert_eq!(code("\u{feff}"), -32700);
        assert_eq!(code("42"), -32600);
        assert_eq!(code("[]"), -32600);
        assert_eq!(code("[1]"), -32600);
        assert_eq!(code(r#"{"id":1,"method":"ping"}"#), -32600);
        assert_eq!(code(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#), -32600);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#), -32600);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":5}"#), -32600);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1}"#), -32600);
        assert_eq!(parse(b"\xff\xfe").unwrap_err().rpc_code(), -32700);
    }

    #[test]
    fn batches() {
        let p = parse(br#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":"x","method":"tools/list"}]"#).unwrap();
        assert!(p.is_batch());
        assert_eq!(
            p.list_ids()
                .into_iter()
                .map(|(id, _)| id)
                .collect::<Vec<_>>(),
            vec!["1".into(), "\"x\"".into()] as Vec<Box<str>>
        );
        assert!(p.has_requests());
    }

    /// Envelopes as clients send them, and the shapes around them.
    const SEEDS: &[&str] = &[
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tool_001","arguments":{"id":"welcome"}}}"#,
        r#"{"jsonrpc":"2.0","id":"a-1","method":"tools/list","params":{"cursor":"x"}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"ping","params":[1,2]}"#,
        r#"{"jsonrpc":"2.0","id":-1.5e3,"result":{"content":[{"type":"text","text":"a\nb"}]}}"#,
        r#"{"jsonrpc":"2.0","id":"x","error":{"code":-32000,"message":"m"}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a","name":7}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":null,"uri":"u","arguments":{"deep":[[{"a":true}],false]}}}"#,
        r#" { "jsonrpc" : "2.0" , "id" : 0 , "method" : "tools/call" , "params" : { } } "#,
        r#"{"id":4,"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{},"name":"é日本"}}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"x","params":{"name":"a"},"extra":{"k":"\u00e9"}}"#,
        r#"{"jsonrpc":"2.0","id":6,"method":"prompts/get","params":{"name":"summarize","uri":"kb://x"}}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"resources/subscribe","params":{"name":"kb://docs/a","uri":["kb://x"]}}"#,
        r#"{"jsonrpc":"2.0","id":8,"method":"prompts/get"}"#,
    ];

    /// The one-pass reader either steps aside or reads exactly what serde_json reads: on
    /// the seeds and on many thousands of random edits of them (characters that matter to
    /// JSON put in, taken out or swapped), never a message serde_json would refuse or
    /// read differently.
    #[test]
    fn fast_and_serde_agree() {
        for seed in SEEDS {
            let fast = read_message(seed).unwrap_or_else(|| panic!("stepped aside on {seed}"));
            let slow = message_by_serde(seed).unwrap();
            assert_eq!(format!("{fast:?}"), format!("{slow:?}"), "{seed}");
        }
        // Besides the JSON pieces every edit may use: what an envelope hangs on.
        const BITS: &[&str] = &[
            "+",
            "a",
            "\\u0061",
            "\\u12",
            "\u{1}",
            "é",
            "\"name\"",
            "\"id\"",
            "\"method\"",
            "\"params\"",
            "\"2.0\"",
            "\"result\"",
        ];
        let (mut read, mut agreed_err) = (0, 0);
        for text in wire::json::read::edits(SEEDS, BITS, 0x9e37_79b9_7f4a_7c15, 40_000) {
            let slow = message_by_serde(&text);
            match read_message(&text) {
                Some(fast) => {
                    read += 1;
                    let slow = slow.unwrap_or_else(|e| panic!("{text}: read, but serde: {e}"));
                    assert_eq!(format!("{fast:?}"), format!("{slow:?}"), "{text}");
                }
                None => agreed_err += usize::from(slow.is_err()),
            }
        }
        // The edits reach both sides: many still read, many are refused.
        assert!(read > 2_000 && agreed_err > 10_000, "{read} {agreed_err}");
    }

    #[test]
    fn mcp_name_mirrors_name_or_uri() {
        assert_eq!(
            single(
                r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a"}}"#
            )
            .mcp_name
            .as_deref(),
            Some("file:///a")
        );
        assert_eq!(
            single(r#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"p"}}"#)
                .mcp_name
                .as_deref(),
            Some("p")
        );
    }
}
