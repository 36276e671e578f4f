//! The list rewrite. A response to a tools/list request loses the tools its profile may
//! not call, and likewise resources/list (by `uri`), resources/templates/list (by
//! `uriTemplate`) and prompts/list (by `name`); everything else stays as the upstream
//! wrote it. The rewrite splices raw
//! JSON: the kept tools are copied byte for byte into a new `tools` array, which replaces
//! the old one at its offset in the body, so unknown fields, `nextCursor` and `_meta`
//! survive untouched. Works on one JSON text (a response or a batch of responses): a JSON
//! body, or the data of one SSE event (see `transport::relay`).

use crate::config::compile::Deprecation;
use crate::config::pins::PinKind;
use crate::config::{Profile, Snapshot};
use crate::mcp::jsonrpc::{ListKind, Text};
use crate::mcp::pointer::Entries;
use crate::upstream::hints::{HintStore, tool_hints};
use crate::upstream::pins::PinStore;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::ops::Range;
use std::sync::Arc;

/// Largest SSE event or JSON body held for a rewrite; past it the answer fails closed.
pub const MAX_REWRITE_BYTES: usize = 32 << 20;

/// What a profile may see: the global hidden list and the profile's rules.
#[derive(Clone)]
pub struct ToolFilter {
    snapshot: Arc<Snapshot>,
    profile: Arc<Profile>,
    /// Where the annotations of the tools listed are kept, when a profile of the
    /// upstream judges by them.
    hints: Option<Arc<HintStore>>,
    /// What the upstream's tools and prompts were last seen to be, when it is pinned.
    pins: Option<Arc<PinStore>>,
}

impl ToolFilter {
    pub fn new(snapshot: Arc<Snapshot>, profile: Arc<Profile>) -> Self {
        ToolFilter {
            snapshot,
            profile,
            hints: None,
            pins: None,
        }
    }

    /// The same, judging the tools and prompts of its lists against the pins file, with
    /// `store` (the pinned upstream's) learning them.
    pub fn pinning(mut self, store: Arc<PinStore>) -> Self {
        self.pins = Some(store);
        self
    }

    /// The same, teaching `store` the annotations of the tools its lists carry.
    pub fn learning(mut self, store: Arc<HintStore>) -> Self {
        self.hints = Some(store);
        self
    }

    /// `keeps`, for a tool whose annotations (from the list itself) are `hints`.
    pub fn keeps_with(
        &self,
        tool: &str,
        hints: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> bool {
        !self.snapshot.hidden.matches(tool)
            && self.profile.allows_tool_with(tool, hints).unwrap_or(false)
            && self
                .snapshot
                .deprecation(tool)
                .is_none_or(|d| !d.gone(std::time::SystemTime::now()))
    }

    /// Whether the profile judges tools by their annotations.
    pub fn judges_hints(&self) -> bool {
        !self.profile.allow_annotations.is_empty() || !self.profile.deny_annotations.is_empty()
    }

    /// Whether an item of a `kind` list, named `name`, stays.
    pub fn keeps_item(&self, kind: ListKind, name: &str) -> bool {
        match kind {
            ListKind::Tools => self.keeps_with(name, None),
            ListKind::Resources | ListKind::ResourceTemplates => self.profile.allows_resource(name),
            ListKind::Prompts => self.profile.allows_prompt(name),
        }
    }

    /// How long a list filtered now may be cached.
    pub fn fresh_for(&self) -> std::time::Duration {
        self.snapshot.list_fresh_for(std::time::SystemTime::now())
    }

    /// A list that depends on the caller's profile must not be shared by caches.
    pub fn restricts(&self, kind: ListKind) -> bool {
        match kind {
            ListKind::Tools => {
                !(self.snapshot.hidden.is_empty()
                    && self.profile.allow.matches_everything()
                    && self.profile.deny.is_empty())
            }
            ListKind::Resources | ListKind::ResourceTemplates => self.profile.resources.is_some(),
            ListKind::Prompts => self.profile.prompts.is_some(),
        }
    }
}

/// A response read in one pass, its `result` as far as a tools/list rewrite needs it.
#[derive(Deserialize)]
struct Response<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<ListResult<'a>>,
}

/// What a `result` holds for the rewrite: the items of each list array it has (`tools`,
/// `resources`, …, by `ListKind` order) as raw JSON, and `cacheScope`. Whether it must be
/// a valid list result, and of which kind, is known only once the response's id is (it
/// may come after `result`), so anything else is noted here, not refused.
#[derive(Default)]
struct ListResult<'a> {
    lists: [Tools<'a>; 4],
    cache_scope: Option<&'a RawValue>,
    /// `ttlMs` (2026-07-28): how long the client may keep the list.
    ttl_ms: Option<&'a RawValue>,
    /// Why this is not a readable tools/list result, if it is not.
    unreadable: Option<&'static str>,
}

#[derive(Default)]
enum Tools<'a> {
    #[default]
    Missing,
    Array(Vec<&'a RawValue>),
    NotArray,
}

/// Reads any JSON value; an object becomes a `ListResult`, anything else is noted.
struct ResultVisitor<'a>(std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> serde::de::Visitor<'de> for ResultVisitor<'a> {
    type Value = ListResult<'a>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut out = ListResult::default();
        let (mut seen_lists, mut seen_scope, mut seen_ttl) = ([false; 4], false, false);
        while let Some(Text(key)) = map.next_key::<Text>()? {
            if let Some(i) = ListKind::ALL.iter().position(|k| k.array() == key) {
                if seen_lists[i] {
                    out.unreadable = Some("the list result repeats its array");
                }
                seen_lists[i] = true;
                out.lists[i] = map.next_value_seed(ToolsSeed(std::marker::PhantomData))?;
                continue;
            }
            match &*key {
                "cacheScope" => {
                    if seen_scope {
                        out.unreadable = Some("the tools/list result repeats \"cacheScope\"");
                    }
                    seen_scope = true;
                    out.cache_scope = Some(map.next_value::<&'de RawValue>()?);
                }
                "ttlMs" => {
                    if seen_ttl {
                        out.unreadable = Some("the list result repeats \"ttlMs\"");
                    }
                    seen_ttl = true;
                    out.ttl_ms = Some(map.next_value::<&'de RawValue>()?);
                }
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(out)
    }

    fn visit_seq<S: serde::de::SeqAccess<'de>>(self, mut seq: S) -> Result<Self::Value, S::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(ListResult::not_an_object())
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(ListResult::not_an_object())
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(ListResult::not_an_object())
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(ListResult::not_an_object())
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(ListResult::not_an_object())
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(ListResult::not_an_object())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(ListResult::not_an_object())
    }
}

impl ListResult<'_> {
    fn not_an_object() -> Self {
        ListResult {
            unreadable: Some("the tools/list result is not an object"),
            ..ListResult::default()
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ListResult<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ResultVisitor(std::marker::PhantomData))
    }
}

/// Reads the value of `tools`: an array's elements as raw JSON, anything else noted.
struct ToolsSeed<'a>(std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> serde::de::DeserializeSeed<'de> for ToolsSeed<'a> {
    type Value = Tools<'a>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de: 'a, 'a> serde::de::Visitor<'de> for ToolsSeed<'a> {
    type Value = Tools<'a>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_seq<S: serde::de::SeqAccess<'de>>(self, mut seq: S) -> Result<Self::Value, S::Error> {
        let mut tools = Vec::with_capacity(seq.size_hint().unwrap_or(64));
        while let Some(tool) = seq.next_element::<&'de RawValue>()? {
            tools.push(tool);
        }
        Ok(Tools::Array(tools))
    }

    fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(Tools::NotArray)
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Tools::NotArray)
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Tools::NotArray)
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Tools::NotArray)
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Tools::NotArray)
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Tools::NotArray)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(Tools::NotArray)
    }
}

/// The value of an item object's top-level `field` key (`"name"`, `"uri"`, …), when it is
/// a string, found by a light scan instead of a second full parse (serde_json has already
/// validated the JSON). `None` if absent, not a string, or given twice (parsers would
/// disagree which counts).
fn item_name<'o>(object: &'o str, field: &str) -> Option<std::borrow::Cow<'o, str>> {
    item_field(object, field).map(|(_, name)| name)
}

/// [`item_name`], with where the value (its quotes included) is in `object`: a federated
/// list shows an item under another name by writing over it.
pub fn item_field<'o>(
    object: &'o str,
    field: &str,
) -> Option<(Range<usize>, std::borrow::Cow<'o, str>)> {
    let b = object.as_bytes();
    let mut i = b.iter().position(|&c| c == b'{')? + 1;
    let mut found = None;
    loop {
        i += b
            .get(i..)?
            .iter()
            .take_while(|c| c.is_ascii_whitespace())
            .count();
        match b.get(i)? {
            b'}' => return found,
            b',' => {
                i += 1;
                continue;
            }
            b'"' => {}
            _ => return None,
        }
        let key_end = string_end(b, i)?;
        let key = &object[i..key_end];
        i = key_end;
        i += b
            .get(i..)?
            .iter()
            .take_while(|c| c.is_ascii_whitespace())
            .count();
        if b.get(i) != Some(&b':') {
            return None;
        }
        i += 1;
        i += b
            .get(i..)?
            .iter()
            .take_while(|c| c.is_ascii_whitespace())
            .count();
        let value_start = i;
        i = value_end(b, i)?;
        let is_name = (key.len() == field.len() + 2 && key[1..key.len() - 1] == *field)
            || (key.contains('\\')
                && serde_json::from_str::<Text>(key).is_ok_and(|Text(k)| k == field));
        if is_name {
            if found.is_some() {
                return None;
            }
            let value = &object[value_start..i];
            let name = match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
                Some(plain) if !plain.contains('\\') => std::borrow::Cow::Borrowed(plain),
                Some(_) => serde_json::from_str::<Text>(value).ok()?.0,
                None => return None,
            };
            found = Some((value_start..i, name));
        }
    }
}

/// A tool object's text with its `description` prefixed and `_meta["mcpgate/deprecated"]`
/// set to `{"replacement", "sunset"}` (docs/policy.md), every other member as it was. `None` if
/// the object cannot be read (a repeated key among them).
fn mark_deprecated(tool: &str, d: &Deprecation) -> Option<String> {
    let Entries(entries) = serde_json::from_str(tool).ok()?;
    let marker = serde_json::json!({
        "replacement": &*d.replacement,
        "sunset": &*d.sunset_text,
    })
    .to_string();
    let mut out = String::with_capacity(tool.len() + 128);
    out.push('{');
    let (mut described, mut meta) = (false, false);
    for (key, value) in &entries {
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(&**key).ok()?);
        out.push(':');
        match &**key {
            "description" => {
                described = true;
                let old =
                    serde_json::from_str::<Text>(value.get()).map_or(Default::default(), |t| t.0);
                out.push_str(&serde_json::to_string(&format!("{}{old}", d.prefix())).ok()?);
            }
            "_meta" => {
                meta = true;
                let Entries(inner) =
                    serde_json::from_str(value.get()).unwrap_or(Entries(Vec::new()));
                out.push('{');
                for (k, v) in inner.iter().filter(|(k, _)| k != "mcpgate/deprecated") {
                    out.push_str(&serde_json::to_string(&**k).ok()?);
                    out.push(':');
                    out.push_str(v.get());
                    out.push(',');
                }
                out.push_str("\"mcpgate/deprecated\":");
                out.push_str(&marker);
                out.push('}');
            }
            _ => out.push_str(value.get()),
        }
    }
    if !described {
        out.push_str(",\"description\":");
        out.push_str(&serde_json::to_string(d.prefix().trim_end()).ok()?);
    }
    if !meta {
        out.push_str(",\"_meta\":{\"mcpgate/deprecated\":");
        out.push_str(&marker);
        out.push('}');
    }
    out.push('}');
    Some(out)
}

/// The index just past the string starting at `start` (which is a `"`).
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    loop {
        // Jumps to the next quote or backslash instead of looking at every byte.
        i += memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        match b[i] {
            b'\\' => i += 2,
            _ => return Some(i + 1),
        }
    }
}

/// The index just past the JSON value starting at `start`.
fn value_end(b: &[u8], start: usize) -> Option<usize> {
    match *b.get(start)? {
        b'"' => string_end(b, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = start;
            loop {
                match *b.get(i)? {
                    b'"' => {
                        i = string_end(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => Some(
            start
                + b[start..]
                    .iter()
                    .position(|c| matches!(c, b',' | b'}' | b']') || c.is_ascii_whitespace())
                    .unwrap_or(b.len() - start),
        ),
    }
}

/// Where `part` (a slice of `whole`) sits in `whole`.
fn span_in(whole: &str, part: &str) -> Range<usize> {
    let start = part.as_ptr() as usize - whole.as_ptr() as usize;
    start..start + part.len()
}

/// Rewrites the list responses (those whose id is in `ids`, each with its kind) found in
/// `text`, a JSON response or batch of responses. `Ok(None)`: nothing to change, forward
/// the original.
pub fn rewrite(
    text: &str,
    ids: &[(Box<str>, ListKind)],
    filter: &ToolFilter,
) -> Result<Option<String>, String> {
    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    if text.trim_start().starts_with('[') {
        let items: Vec<&RawValue> = serde_json::from_str(text).map_err(|e| e.to_string())?;
        for item in items {
            edits_for(text, item.get(), ids, filter, &mut edits)?;
        }
    } else {
        edits_for(text, text, ids, filter, &mut edits)?;
    }
    if edits.is_empty() {
        return Ok(None);
    }
    edits.sort_by_key(|(r, _)| r.start);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (range, replacement) in edits {
        out.push_str(&text[at..range.start]);
        out.push_str(&replacement);
        at = range.end;
    }
    out.push_str(&text[at..]);
    Ok(Some(out))
}

fn edits_for(
    whole: &str,
    message: &str,
    ids: &[(Box<str>, ListKind)],
    filter: &ToolFilter,
    edits: &mut Vec<(Range<usize>, String)>,
) -> Result<(), String> {
    if !message.trim_start().starts_with('{') {
        return Ok(());
    }
    let r: Response = serde_json::from_str(message).map_err(|e| e.to_string())?;
    let (Some(id), Some(mut list)) = (r.id, r.result) else {
        return Ok(());
    };
    let Some(&(_, kind)) = ids.iter().find(|(i, _)| **i == *id.get().trim()) else {
        return Ok(());
    };
    if let Some(why) = list.unreadable {
        return Err(why.into());
    }
    let at = ListKind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
    let Tools::Array(tools) = std::mem::take(&mut list.lists[at]) else {
        return Err(format!("the list result has no \"{}\" array", kind.array()));
    };
    if let (Some(first), Some(last)) = (tools.first(), tools.last()) {
        // The elements are replaced from the first one's start to the last one's end, so
        // the brackets and the whitespace around them stay as the upstream wrote them.
        let region = span_in(whole, first.get()).start..span_in(whole, last.get()).end;
        let mut kept = String::with_capacity(region.len());
        let mut changed = false;
        // With annotation rules the tools are read whole: the list's own annotations judge
        // them, and the upstream's store learns them.
        let read_hints =
            kind == ListKind::Tools && (filter.hints.is_some() || filter.judges_hints());
        let mut learned = Vec::new();
        // A pinned upstream's list: the names whose definitions are not approved (docs/pinning.md).
        let unpinned = match (&filter.pins, kind) {
            (Some(store), ListKind::Tools | ListKind::Prompts) => {
                let pin_kind = match kind {
                    ListKind::Tools => PinKind::Tool,
                    _ => PinKind::Prompt,
                };
                let upstream = &filter.profile.upstream;
                let hidden = store.page(
                    &upstream.name,
                    upstream.pin,
                    &filter.snapshot.pins,
                    pin_kind,
                    whole[region.clone()].as_bytes(),
                    tools.iter().map(|t| t.get()),
                );
                (!hidden.is_empty()).then_some(hidden)
            }
            _ => None,
        };
        for tool in &tools {
            // An item whose name cannot be read cannot be shown to be allowed: drop it.
            let name = item_name(tool.get(), kind.key());
            let name = name.filter(|n| unpinned.as_ref().is_none_or(|h| !h.contains(&**n)));
            let keep = match &name {
                Some(n) if read_hints => {
                    let hints = serde_json::from_str::<serde_json::Value>(tool.get())
                        .ok()
                        .as_ref()
                        .and_then(tool_hints)
                        .filter(|(listed, _)| **listed == **n);
                    let keep = filter.keeps_with(n, hints.as_ref().map(|(_, h)| &**h));
                    learned.extend(hints);
                    keep
                }
                Some(n) => filter.keeps_item(kind, n),
                None => false,
            };
            let Some(name) = name.filter(|_| keep) else {
                changed = true;
                continue;
            };
            let deprecation = match kind {
                ListKind::Tools => filter.snapshot.deprecation(&name),
                _ => None,
            };
            let text = match deprecation {
                // Listed until its sunset, marked. One that cannot be marked is dropped.
                Some(d) => match mark_deprecated(tool.get(), d) {
                    Some(marked) => std::borrow::Cow::Owned(marked),
                    None => {
                        changed = true;
                        continue;
                    }
                },
                None => std::borrow::Cow::Borrowed(tool.get()),
            };
            changed |= deprecation.is_some();
            if !kept.is_empty() {
                kept.push(',');
            }
            kept.push_str(&text);
        }
        if let Some(store) = &filter.hints {
            store.learn(learned);
        }
        if changed {
            edits.push((region, kept));
        }
    }
    if let Some(scope) = list.cache_scope {
        if filter.restricts(kind) {
            edits.push((span_in(whole, scope.get()), "\"private\"".to_string()));
        }
    }
    if let Some(ttl) = list.ttl_ms {
        // No longer than the upstream said, nor than until mcpgate may change the list.
        let most = filter.fresh_for().as_millis() as u64;
        let given = ttl.get().parse::<u64>().ok();
        if given.is_none_or(|t| t > most) {
            edits.push((
                span_in(whole, ttl.get()),
                given.unwrap_or(0).min(most).to_string(),
            ));
        }
    }
    Ok(())
}

/// The list requests of one payload (with what each lists) and the filter of the
/// caller's profile.
#[derive(Clone)]
pub struct ListRewrite {
    pub ids: Vec<(Box<str>, ListKind)>,
    /// The id of a `server/discover` request, whose answer is narrowed to the profile.
    pub discover: Option<Box<str>>,
    /// A request that may be answered `input_required`: that answer's state is sealed.
    pub rounds: Option<crate::mcp::rounds::Issue>,
    /// Task ids of the answers to show as the client's sealed ones.
    pub tasks: Option<crate::mcp::task_ids::Shown>,
    /// A legacy server's answer to a 2026-07-28 client: made a 2026-07-28 result first.
    pub completes: Option<crate::mcp::to_legacy::Completes>,
    pub filter: ToolFilter,
}

impl ListRewrite {
    /// Rewrites a JSON message or batch if it answers one of `ids` (or the discover
    /// request). `Ok(None)`: unchanged.
    pub fn apply(&self, text: &str) -> Result<Option<String>, String> {
        let completed = match &self.completes {
            Some(c) => c.apply(text)?,
            None => None,
        };
        let text = completed.as_deref().unwrap_or(text);
        let mut out = match self.ids.is_empty() {
            true => None,
            false => rewrite(text, &self.ids, &self.filter)?,
        };
        if let Some(id) = &self.discover {
            let base = out.as_deref().unwrap_or(text);
            let narrowed = crate::mcp::discover::narrow(
                base,
                id,
                &self.filter.profile,
                self.filter.fresh_for(),
            )?;
            out = narrowed.or(out);
        }
        if let Some(issue) = &self.rounds {
            let base = out.as_deref().unwrap_or(text);
            out = issue.seal_answer(base)?.or(out);
        }
        if let Some(shown) = &self.tasks {
            let base = out.as_deref().unwrap_or(text);
            out = shown.apply(base)?.or(out);
        }
        Ok(out.or(completed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;

    fn filter(allow: &str, hidden: &str) -> ToolFilter {
        let text = format!(
            "[upstreams.u]\nurl = \"http://127.0.0.1:9/mcp\"\n[tools]\nhidden = [{hidden}]\n[profiles.p]\nupstream = \"u\"\nallow = [{allow}]\n"
        );
        let s = Arc::new(load_str(&text, "t.toml").unwrap());
        let p = s.profiles["p"].clone();
        ToolFilter::new(s, p)
    }

    fn tools(id: &str) -> (Box<str>, ListKind) {
        (id.into(), ListKind::Tools)
    }

    const LIST: &str = r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[ {"name":"a","x":{"name":"z"}} , {"name":"b"},{"name":"m\u006fve"},{"nope":1} ],"nextCursor":"c2","_meta":{"k":[1]},"cacheScope":"public","extra":true}}"#;

    #[test]
    fn keeps_allowed_tools_byte_for_byte() {
        let out = rewrite(LIST, &[tools("3")], &filter("\"a\", \"move\"", "\"move\""))
            .unwrap()
            .unwrap();
        assert_eq!(
            out,
            r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[ {"name":"a","x":{"name":"z"}} ],"nextCursor":"c2","_meta":{"k":[1]},"cacheScope":"private","extra":true}}"#
        );
    }

    #[test]
    fn other_ids_and_unfiltered_lists_are_untouched() {
        assert_eq!(
            rewrite(LIST, &[tools("4")], &filter("\"*\"", "")).unwrap(),
            None
        );
        // Allow-all with nothing hidden: no tool removed, cacheScope kept, and the tool
        // without a name is the only casualty of a restricted profile.
        let none_removed =
            r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"a"}],"cacheScope":"public"}}"#;
        assert_eq!(
            rewrite(none_removed, &[tools("3")], &filter("\"*\"", "")).unwrap(),
            None
        );
    }

    #[test]
    fn batches_are_rewritten_per_element() {
        let batch = format!(r#"[{{"jsonrpc":"2.0","id":1,"result":{{}}}}, {LIST}]"#);
        let out = rewrite(&batch, &[tools("3")], &filter("\"b\"", ""))
            .unwrap()
            .unwrap();
        assert!(out.starts_with(r#"[{"jsonrpc":"2.0","id":1,"result":{}}, {"jsonrpc":"2.0","id":3,"result":{"tools":[ {"name":"b"} ]"#), "{out}");
    }

    #[test]
    fn tool_names_by_scan() {
        assert_eq!(item_name(r#"{"name":"a"}"#, "name").as_deref(), Some("a"));
        assert_eq!(
            item_name(
                r#" { "x" : {"name":"inner","y":[1,"}"]} , "name" : "outer" } "#,
                "name"
            )
            .as_deref(),
            Some("outer")
        );
        assert_eq!(
            item_name(r#"{"n\u0061me":"m\u006fve"}"#, "name").as_deref(),
            Some("move")
        );
        assert_eq!(
            item_name(
                r#"{"description":"has \"name\": inside","name":"b"}"#,
                "name"
            )
            .as_deref(),
            Some("b")
        );
        assert_eq!(item_name(r#"{"name":7}"#, "name"), None);
        assert_eq!(item_name(r#"{"nope":"a"}"#, "name"), None);
        assert_eq!(
            item_name(r#"{"name":"a","name":"b"}"#, "name"),
            None,
            "a repeated name is unreadable"
        );
        assert_eq!(item_name(r#"{"name":"a","n\u0061me":"b"}"#, "name"), None);
        assert_eq!(
            item_name(r#"{"x":-1.5e3,"name":"c","y":true}"#, "name").as_deref(),
            Some("c")
        );
    }

    #[test]
    fn malformed_lists_fail_closed() {
        let f = filter("\"a\"", "");
        assert!(
            rewrite(
                r#"{"jsonrpc":"2.0","id":3,"result":{"tools":{}}}"#,
                &[tools("3")],
                &f
            )
            .is_err()
        );
        assert!(rewrite(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#, &[tools("3")], &f).is_err());
        for bad in [
            r#"{"jsonrpc":"2.0","id":3,"result":5}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":[{"name":"a"}]}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{"tools":"a"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[],"tools":[{"name":"x"}]}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[],"cacheScope":"a","cacheScope":"b"}}"#,
            // The id after the result: still known to be the list's.
            r#"{"jsonrpc":"2.0","result":{"tools":{}},"id":3}"#,
        ] {
            assert!(rewrite(bad, &[tools("3")], &f).is_err(), "{bad}");
        }
        // The same shapes answering other requests are not the rewrite's business.
        let batch = r#"[{"id":1,"result":5},{"id":2,"result":{"tools":"a"}},{"id":4,"result":{"tools":[{"name":"x"}]}}]"#;
        assert_eq!(rewrite(batch, &[tools("3")], &f).unwrap(), None);
        // Escaped key names are the same keys.
        let escaped =
            r#"{"jsonrpc":"2.0","id":3,"result":{"t\u006fols":[{"name":"a"},{"name":"b"}]}}"#;
        assert_eq!(
            rewrite(escaped, &[tools("3")], &f).unwrap().unwrap(),
            r#"{"jsonrpc":"2.0","id":3,"result":{"t\u006fols":[{"name":"a"}]}}"#
        );
        // An error response to tools/list passes.
        assert_eq!(
            rewrite(
                r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"m"}}"#,
                &[tools("3")],
                &f
            )
            .unwrap(),
            None
        );
    }

    /// resources/list by `uri`, resources/templates/list by `uriTemplate`, prompts/list by
    /// `name`, each by the profile's rules; a resource URI with a dot segment goes too.
    #[test]
    fn resources_templates_and_prompts_are_filtered() {
        let text = "[upstreams.u]\nurl = \"http://127.0.0.1:9/mcp\"\n[profiles.p]\nupstream = \"u\"\nallow = [\"*\"]\nresources = { allow = [\"kb://docs/*\"], deny = [\"kb://docs/private/*\"] }\nprompts = { allow = [\"summarize_*\"] }\n";
        let s = Arc::new(load_str(text, "t.toml").unwrap());
        let f = ToolFilter::new(s.clone(), s.profiles["p"].clone());
        let resources = r#"{"jsonrpc":"2.0","id":1,"result":{"resources":[{"uri":"kb://docs/a","name":"a"},{"uri":"kb://docs/private/b","name":"b"},{"name":"kb://docs/c","uri":"kb://other/c"},{"uri":"kb://docs/../private/d"}],"nextCursor":"n"}}"#;
        assert_eq!(
            rewrite(resources, &[("1".into(), ListKind::Resources)], &f)
                .unwrap()
                .unwrap(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"resources":[{"uri":"kb://docs/a","name":"a"}],"nextCursor":"n"}}"#
        );
        let templates = r#"{"jsonrpc":"2.0","id":2,"result":{"resourceTemplates":[{"uriTemplate":"kb://docs/{id}"},{"uriTemplate":"kb://users/{id}"}]}}"#;
        assert_eq!(
            rewrite(templates, &[("2".into(), ListKind::ResourceTemplates)], &f)
                .unwrap()
                .unwrap(),
            r#"{"jsonrpc":"2.0","id":2,"result":{"resourceTemplates":[{"uriTemplate":"kb://docs/{id}"}]}}"#
        );
        let prompts = r#"{"jsonrpc":"2.0","id":3,"result":{"prompts":[{"name":"summarize_doc"},{"name":"rewrite_doc"}],"cacheScope":"public"}}"#;
        assert_eq!(
            rewrite(prompts, &[("3".into(), ListKind::Prompts)], &f)
                .unwrap()
                .unwrap(),
            r#"{"jsonrpc":"2.0","id":3,"result":{"prompts":[{"name":"summarize_doc"}],"cacheScope":"private"}}"#
        );
        // A tools/list answer is judged by the tool rules, whatever arrays it carries.
        let mixed = r#"{"jsonrpc":"2.0","id":4,"result":{"tools":[{"name":"x"}],"prompts":[{"name":"rewrite_doc"}]}}"#;
        assert_eq!(rewrite(mixed, &[tools("4")], &f).unwrap(), None);
        // A prompts/list answer without its array fails closed.
        assert!(
            rewrite(
                r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[]}}"#,
                &[("3".into(), ListKind::Prompts)],
                &f
            )
            .is_err()
        );
    }

    #[test]
    fn a_deprecated_tool_is_marked_and_keeps_the_rest() {
        let d = Deprecation {
            replacement: "new_tool".into(),
            sunset: std::time::SystemTime::now() + std::time::Duration::from_secs(3600),
            sunset_text: "2099-01-01".into(),
        };
        let marked = mark_deprecated(
            r#"{"name":"old","description":"Does \"x\".","_meta":{"k":[1],"mcpgate/deprecated":0},"inputSchema":{"type":"object"}}"#,
            &d,
        )
        .unwrap();
        assert_eq!(
            marked,
            r#"{"name":"old","description":"[deprecated: use new_tool; removed 2099-01-01] Does \"x\".","_meta":{"k":[1],"mcpgate/deprecated":{"replacement":"new_tool","sunset":"2099-01-01"}},"inputSchema":{"type":"object"}}"#
        );
        let bare = mark_deprecated(r#"{"name":"old"}"#, &d).unwrap();
        assert_eq!(
            bare,
            r#"{"name":"old","description":"[deprecated: use new_tool; removed 2099-01-01]","_meta":{"mcpgate/deprecated":{"replacement":"new_tool","sunset":"2099-01-01"}}}"#
        );
        assert_eq!(mark_deprecated(r#"{"name":"old","name":"x"}"#, &d), None);
    }

    /// A 2026-07-28 list is cached no longer than `[transport] list_ttl`, nor past the next
    /// sunset, nor longer than the upstream said; a negative or unreadable `ttlMs` is 0.
    #[test]
    fn ttl_is_capped_by_list_ttl_and_the_next_sunset() {
        let with = |extra: &str| {
            let text = format!(
                "[upstreams.u]\nurl = \"http://127.0.0.1:9/mcp\"\n[profiles.p]\nupstream = \"u\"\nallow = [\"*\"]\n[transport]\nlist_ttl = \"5s\"\n{extra}"
            );
            let s = Arc::new(load_str(&text, "t.toml").unwrap());
            let p = s.profiles["p"].clone();
            ToolFilter::new(s, p)
        };
        let list = |ttl: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":3,"result":{{"tools":[{{"name":"a"}}],"resultType":"complete","ttlMs":{ttl},"cacheScope":"public"}}}}"#
            )
        };
        let f = with("");
        let out = rewrite(&list("3600000"), &[tools("3")], &f)
            .unwrap()
            .unwrap();
        assert_eq!(
            out,
            list("5000"),
            "capped by list_ttl; all tools allowed: still public"
        );
        assert_eq!(rewrite(&list("1200"), &[tools("3")], &f).unwrap(), None);
        for bad in ["-1", "1.5", "\"60\"", "null"] {
            let out = rewrite(&list(bad), &[tools("3")], &f).unwrap().unwrap();
            assert_eq!(out, list("0"), "{bad}");
        }
        // A sunset two seconds away caps it further.
        let soon = humantime::format_rfc3339_seconds(
            std::time::SystemTime::now() + std::time::Duration::from_secs(2),
        );
        let f = with(&format!(
            "[tools.deprecated.old]\nreplacement = \"a\"\nsunset = \"{soon}\"\n"
        ));
        let out = rewrite(&list("3600000"), &[tools("3")], &f)
            .unwrap()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let ttl = v["result"]["ttlMs"].as_u64().unwrap();
        assert!((1_000..=2_000).contains(&ttl), "{ttl}");
    }
}
