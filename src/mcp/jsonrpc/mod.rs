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

mod read;

use read::*;

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

/// The tasks extension's methods that name one task (`params.taskId`, which `Mcp-Name`
/// mirrors).
pub fn is_task_method(method: &str) -> bool {
    matches!(method, "tasks/get" | "tasks/update" | "tasks/cancel")
}

#[cfg(test)]
mod tests;
