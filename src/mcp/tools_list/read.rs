//! A list answer read without a value tree: the result's list and each item's span in the
//! answer's text, and an item's fields by their place, so the rewrite can splice the items
//! it keeps.

use super::*;

/// A response read in one pass, its `result` as far as a tools/list rewrite needs it.
#[derive(Deserialize)]
pub(super) struct Response<'a> {
    #[serde(borrow)]
    pub(super) id: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(super) result: Option<ListResult<'a>>,
}

/// What a `result` holds for the rewrite: the items of each list array it has (`tools`,
/// `resources`, …, by `ListKind` order) as raw JSON, and `cacheScope`. Whether it must be
/// a valid list result, and of which kind, is known only once the response's id is (it
/// may come after `result`), so anything else is noted here, not refused.
#[derive(Default)]
pub(super) struct ListResult<'a> {
    pub(super) lists: [Tools<'a>; 4],
    pub(super) cache_scope: Option<&'a RawValue>,
    /// `ttlMs` (2026-07-28): how long the client may keep the list.
    pub(super) ttl_ms: Option<&'a RawValue>,
    /// Why this is not a readable tools/list result, if it is not.
    pub(super) unreadable: Option<&'static str>,
}

#[derive(Default)]
pub(super) enum Tools<'a> {
    #[default]
    Missing,
    Array(Vec<&'a RawValue>),
    NotArray,
}

/// Reads any JSON value; an object becomes a `ListResult`, anything else is noted.
pub(super) struct ResultVisitor<'a>(std::marker::PhantomData<&'a ()>);

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
pub(super) struct ToolsSeed<'a>(std::marker::PhantomData<&'a ()>);

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
pub(super) fn item_name<'o>(object: &'o str, field: &str) -> Option<std::borrow::Cow<'o, str>> {
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

/// The index just past the string starting at `start` (which is a `"`).
pub(super) fn string_end(b: &[u8], start: usize) -> Option<usize> {
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
pub(super) fn value_end(b: &[u8], start: usize) -> Option<usize> {
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
pub(super) fn span_in(whole: &str, part: &str) -> Range<usize> {
    let start = part.as_ptr() as usize - whole.as_ptr() as usize;
    start..start + part.len()
}
