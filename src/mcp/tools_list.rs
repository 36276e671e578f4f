//! The tools/list rewrite. A response to a tools/list request loses the tools its profile
//! may not call; everything else stays as the upstream wrote it. The rewrite splices raw
//! JSON: the kept tools are copied byte for byte into a new `tools` array, which replaces
//! the old one at its offset in the body, so unknown fields, `nextCursor` and `_meta`
//! survive untouched. Works on one JSON text (a response or a batch of responses): a JSON
//! body, or the data of one SSE event (see `transport::relay`).

use crate::config::{Profile, Snapshot};
use crate::mcp::jsonrpc::Text;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::ops::Range;
use std::sync::Arc;

/// Largest SSE event or JSON body held for a rewrite; past it the answer fails closed.
pub const MAX_REWRITE_BYTES: usize = 32 << 20;

/// What a profile may see: the global hidden list and the profile's allow/deny.
#[derive(Clone)]
pub struct ToolFilter {
    snapshot: Arc<Snapshot>,
    profile: Arc<Profile>,
}

impl ToolFilter {
    pub fn new(snapshot: Arc<Snapshot>, profile: Arc<Profile>) -> Self {
        ToolFilter { snapshot, profile }
    }

    pub fn keeps(&self, tool: &str) -> bool {
        !self.snapshot.hidden.matches(tool) && self.profile.allows_tool(tool)
    }

    /// A list that depends on the caller's profile must not be shared by caches.
    fn restricts(&self) -> bool {
        !(self.snapshot.hidden.is_empty()
            && self.profile.allow.matches_everything()
            && self.profile.deny.is_empty())
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

/// What a `result` holds for the rewrite: each tool as its raw JSON, and `cacheScope`.
/// Whether it must be a valid tools/list result is known only once the response's id is
/// (it may come after `result`), so anything else is noted here, not refused.
#[derive(Default)]
struct ListResult<'a> {
    tools: Tools<'a>,
    cache_scope: Option<&'a RawValue>,
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
        let (mut seen_tools, mut seen_scope) = (false, false);
        while let Some(Text(key)) = map.next_key::<Text>()? {
            match &*key {
                "tools" => {
                    if seen_tools {
                        out.unreadable = Some("the tools/list result repeats \"tools\"");
                    }
                    seen_tools = true;
                    out.tools = map.next_value_seed(ToolsSeed(std::marker::PhantomData))?;
                }
                "cacheScope" => {
                    if seen_scope {
                        out.unreadable = Some("the tools/list result repeats \"cacheScope\"");
                    }
                    seen_scope = true;
                    out.cache_scope = Some(map.next_value::<&'de RawValue>()?);
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

/// The value of a tool object's top-level `"name"` key, when it is a string, found by a
/// light scan instead of a second full parse (serde_json has already validated the JSON).
/// `None` if absent, not a string, or given twice (parsers would disagree which counts).
fn tool_name(object: &str) -> Option<std::borrow::Cow<'_, str>> {
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
        let is_name = key == "\"name\""
            || (key.contains('\\')
                && serde_json::from_str::<Text>(key).is_ok_and(|Text(k)| k == "name"));
        if is_name {
            if found.is_some() {
                return None;
            }
            let value = &object[value_start..i];
            found = Some(
                match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
                    Some(plain) if !plain.contains('\\') => std::borrow::Cow::Borrowed(plain),
                    Some(_) => serde_json::from_str::<Text>(value).ok()?.0,
                    None => return None,
                },
            );
        }
    }
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

/// Rewrites the tools/list responses (those whose id is in `ids`) found in `text`, a JSON
/// response or batch of responses. `Ok(None)`: nothing to change, forward the original.
pub fn rewrite(
    text: &str,
    ids: &[Box<str>],
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
    ids: &[Box<str>],
    filter: &ToolFilter,
    edits: &mut Vec<(Range<usize>, String)>,
) -> Result<(), String> {
    if !message.trim_start().starts_with('{') {
        return Ok(());
    }
    let r: Response = serde_json::from_str(message).map_err(|e| e.to_string())?;
    let (Some(id), Some(list)) = (r.id, r.result) else {
        return Ok(());
    };
    if !ids.iter().any(|i| **i == *id.get().trim()) {
        return Ok(());
    }
    if let Some(why) = list.unreadable {
        return Err(why.into());
    }
    let Tools::Array(tools) = list.tools else {
        return Err("tools/list result has no \"tools\" array".into());
    };
    if let (Some(first), Some(last)) = (tools.first(), tools.last()) {
        // The elements are replaced from the first one's start to the last one's end, so
        // the brackets and the whitespace around them stay as the upstream wrote them.
        let region = span_in(whole, first.get()).start..span_in(whole, last.get()).end;
        let mut kept = String::with_capacity(region.len());
        let mut removed = false;
        for tool in &tools {
            // A tool whose name cannot be read cannot be shown to be allowed: drop it.
            if tool_name(tool.get()).is_some_and(|name| filter.keeps(&name)) {
                if !kept.is_empty() {
                    kept.push(',');
                }
                kept.push_str(tool.get());
            } else {
                removed = true;
            }
        }
        if removed {
            edits.push((region, kept));
        }
    }
    if let Some(scope) = list.cache_scope {
        if filter.restricts() {
            edits.push((span_in(whole, scope.get()), "\"private\"".to_string()));
        }
    }
    Ok(())
}

/// The tools/list requests of one payload and the filter of the caller's profile.
#[derive(Clone)]
pub struct ListRewrite {
    pub ids: Vec<Box<str>>,
    pub filter: ToolFilter,
}

impl ListRewrite {
    /// Rewrites a JSON message or batch if it answers one of `ids`. `Ok(None)`: unchanged.
    pub fn apply(&self, text: &str) -> Result<Option<String>, String> {
        rewrite(text, &self.ids, &self.filter)
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

    const LIST: &str = r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[ {"name":"a","x":{"name":"z"}} , {"name":"b"},{"name":"m\u006fve"},{"nope":1} ],"nextCursor":"c2","_meta":{"k":[1]},"cacheScope":"public","extra":true}}"#;

    #[test]
    fn keeps_allowed_tools_byte_for_byte() {
        let out = rewrite(LIST, &["3".into()], &filter("\"a\", \"move\"", "\"move\""))
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
            rewrite(LIST, &["4".into()], &filter("\"*\"", "")).unwrap(),
            None
        );
        // Allow-all with nothing hidden: no tool removed, cacheScope kept, and the tool
        // without a name is the only casualty of a restricted profile.
        let none_removed =
            r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"a"}],"cacheScope":"public"}}"#;
        assert_eq!(
            rewrite(none_removed, &["3".into()], &filter("\"*\"", "")).unwrap(),
            None
        );
    }

    #[test]
    fn batches_are_rewritten_per_element() {
        let batch = format!(r#"[{{"jsonrpc":"2.0","id":1,"result":{{}}}}, {LIST}]"#);
        let out = rewrite(&batch, &["3".into()], &filter("\"b\"", ""))
            .unwrap()
            .unwrap();
        assert!(out.starts_with(r#"[{"jsonrpc":"2.0","id":1,"result":{}}, {"jsonrpc":"2.0","id":3,"result":{"tools":[ {"name":"b"} ]"#), "{out}");
    }

    #[test]
    fn tool_names_by_scan() {
        assert_eq!(tool_name(r#"{"name":"a"}"#).as_deref(), Some("a"));
        assert_eq!(
            tool_name(r#" { "x" : {"name":"inner","y":[1,"}"]} , "name" : "outer" } "#).as_deref(),
            Some("outer")
        );
        assert_eq!(
            tool_name(r#"{"n\u0061me":"m\u006fve"}"#).as_deref(),
            Some("move")
        );
        assert_eq!(
            tool_name(r#"{"description":"has \"name\": inside","name":"b"}"#).as_deref(),
            Some("b")
        );
        assert_eq!(tool_name(r#"{"name":7}"#), None);
        assert_eq!(tool_name(r#"{"nope":"a"}"#), None);
        assert_eq!(
            tool_name(r#"{"name":"a","name":"b"}"#),
            None,
            "a repeated name is unreadable"
        );
        assert_eq!(tool_name(r#"{"name":"a","n\u0061me":"b"}"#), None);
        assert_eq!(
            tool_name(r#"{"x":-1.5e3,"name":"c","y":true}"#).as_deref(),
            Some("c")
        );
    }

    #[test]
    fn malformed_lists_fail_closed() {
        let f = filter("\"a\"", "");
        assert!(
            rewrite(
                r#"{"jsonrpc":"2.0","id":3,"result":{"tools":{}}}"#,
                &["3".into()],
                &f
            )
            .is_err()
        );
        assert!(rewrite(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#, &["3".into()], &f).is_err());
        for bad in [
            r#"{"jsonrpc":"2.0","id":3,"result":5}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":[{"name":"a"}]}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{"tools":"a"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[],"tools":[{"name":"x"}]}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[],"cacheScope":"a","cacheScope":"b"}}"#,
            // The id after the result: still known to be the list's.
            r#"{"jsonrpc":"2.0","result":{"tools":{}},"id":3}"#,
        ] {
            assert!(rewrite(bad, &["3".into()], &f).is_err(), "{bad}");
        }
        // The same shapes answering other requests are not the rewrite's business.
        let batch = r#"[{"id":1,"result":5},{"id":2,"result":{"tools":"a"}},{"id":4,"result":{"tools":[{"name":"x"}]}}]"#;
        assert_eq!(rewrite(batch, &["3".into()], &f).unwrap(), None);
        // Escaped key names are the same keys.
        let escaped =
            r#"{"jsonrpc":"2.0","id":3,"result":{"t\u006fols":[{"name":"a"},{"name":"b"}]}}"#;
        assert_eq!(
            rewrite(escaped, &["3".into()], &f).unwrap().unwrap(),
            r#"{"jsonrpc":"2.0","id":3,"result":{"t\u006fols":[{"name":"a"}]}}"#
        );
        // An error response to tools/list passes.
        assert_eq!(
            rewrite(
                r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"m"}}"#,
                &["3".into()],
                &f
            )
            .unwrap(),
            None
        );
    }
}
