//! A JSON pointer (RFC 6901) looked up in a call's `params.arguments`, over the bytes
//! the upstream is sent: keys decoded as JSON decodes them, and an object on the way that
//! repeats a key refused (servers differ on which copy they would read, so neither is
//! judged).

use crate::mcp::jsonrpc::Text;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

/// What the pointer finds.
#[derive(Debug, PartialEq, Eq)]
pub enum Found<'a> {
    /// A string, decoded.
    Text(Cow<'a, str>),
    /// A number or a boolean, as its JSON text.
    Scalar(&'a str),
    /// Nothing there, or `null`.
    Missing,
    /// An object or an array: no glob can judge it.
    Structure,
}

/// The value at `tokens` (unescaped reference tokens) in `json`; `Err` for an object on
/// the way that repeats a key, or text that is not JSON.
pub fn lookup<'a>(json: &'a str, tokens: &[Box<str>]) -> Result<Found<'a>, String> {
    let mut at = json.trim();
    for token in tokens {
        at = match at.as_bytes().first() {
            Some(b'{') => {
                let Entries(entries) = serde_json::from_str(at).map_err(|e| e.to_string())?;
                match entries.into_iter().find(|(k, _)| **k == **token) {
                    Some((_, v)) => v.get().trim(),
                    None => return Ok(Found::Missing),
                }
            }
            Some(b'[') => {
                let items: Vec<&RawValue> = serde_json::from_str(at).map_err(|e| e.to_string())?;
                // RFC 6901: an index is digits without a leading zero.
                let index = (token.bytes().all(|b| b.is_ascii_digit())
                    && !token.is_empty()
                    && (token.len() == 1 || !token.starts_with('0')))
                .then(|| token.parse::<usize>().ok())
                .flatten();
                match index.and_then(|i| items.get(i)) {
                    Some(v) => v.get().trim(),
                    None => return Ok(Found::Missing),
                }
            }
            _ => return Ok(Found::Missing),
        };
    }
    Ok(match at.as_bytes().first() {
        Some(b'"') => {
            let Text(t) = serde_json::from_str(at).map_err(|e| e.to_string())?;
            Found::Text(t)
        }
        Some(b'{' | b'[') => Found::Structure,
        Some(b'n') | None => Found::Missing,
        Some(_) => Found::Scalar(at),
    })
}

/// An object's entries as decoded keys and raw values, in order; a repeated key is an
/// error.
pub struct Entries<'a>(pub Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Entries<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Entries<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut out: Vec<(Cow<'a, str>, &'a RawValue)> = Vec::new();
                while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
                    if out.iter().any(|(k, _)| *k == key) {
                        return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
                    }
                    let value = map.next_value::<&'de RawValue>()?;
                    out.push((key, value));
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find<'a>(json: &'a str, pointer: &str) -> Result<Found<'a>, String> {
        let tokens = crate::config::compile::pointer_tokens(pointer).unwrap();
        lookup(json, &tokens)
    }

    #[test]
    fn finds_what_rfc_6901_says() {
        let doc =
            r#"{"path":"drafts/a","n":{"a/b":[10,"x",{"~k":true}]},"nul":null,"e\u0073c":"d"}"#;
        assert_eq!(find(doc, "/path"), Ok(Found::Text("drafts/a".into())));
        assert_eq!(find(doc, "/n/a~1b/0"), Ok(Found::Scalar("10")));
        assert_eq!(find(doc, "/n/a~1b/2/~0k"), Ok(Found::Scalar("true")));
        assert_eq!(
            find(doc, "/esc"),
            Ok(Found::Text("d".into())),
            "keys are decoded"
        );
        assert_eq!(find(doc, "/nul"), Ok(Found::Missing));
        assert_eq!(find(doc, "/none"), Ok(Found::Missing));
        assert_eq!(
            find(doc, "/n/a~1b/01"),
            Ok(Found::Missing),
            "no leading zeros"
        );
        assert_eq!(find(doc, "/n/a~1b/9"), Ok(Found::Missing));
        assert_eq!(find(doc, "/path/x"), Ok(Found::Missing));
        assert_eq!(find(doc, "/n"), Ok(Found::Structure));
        assert_eq!(find(doc, ""), Ok(Found::Structure));
        // A repeated key on the way, in any spelling, is refused.
        assert!(find(r#"{"path":"drafts/a","path":"x"}"#, "/path").is_err());
        assert!(find(r#"{"path":"drafts/a","p\u0061th":"x"}"#, "/path").is_err());
        assert!(find(r#"{"a":{"b":1,"b":2}}"#, "/a/b").is_err());
    }
}
