//! `[[tools.arguments]]`: rules on the value a tools/call passes at a JSON pointer
//! (RFC 6901) in its `params.arguments`; and `[tools.deprecated.NAME]`, the tools on
//! their way out.

use super::{Fail, at, check_patterns, fail};
use crate::config::glob::Matcher;
use crate::config::raw::{self, S};
use crate::config::units::parse_time;
use std::collections::BTreeMap;
use std::time::SystemTime;

#[derive(Debug)]
pub struct ArgumentRule {
    pub tool: Matcher,
    /// As written, for refusals and `check`.
    pub pointer: Box<str>,
    /// The pointer's reference tokens, unescaped (`~1` is `/`, `~0` is `~`).
    pub tokens: Box<[Box<str>]>,
    /// `None`: any value not denied.
    pub allow: Option<Matcher>,
    pub deny: Matcher,
}

impl ArgumentRule {
    /// Whether `value` (a string argument, or a number's or boolean's JSON text) passes.
    pub fn admits(&self, value: &str) -> bool {
        self.allow.as_ref().is_none_or(|a| a.matches(value)) && !self.deny.matches(value)
    }
}

/// The reference tokens of a JSON pointer: `""` is the whole document, anything else
/// starts with `/`.
pub fn pointer_tokens(pointer: &str) -> Result<Box<[Box<str>]>, String> {
    if pointer.is_empty() {
        return Ok(Box::default());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(format!(
            "pointer {pointer:?} must start with '/' (a JSON pointer, e.g. \"/path\")"
        ));
    };
    rest.split('/')
        .map(|t| {
            let mut out = String::with_capacity(t.len());
            let mut chars = t.chars();
            while let Some(c) = chars.next() {
                match c {
                    '~' => match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => {
                            return Err(format!(
                                "pointer {pointer:?}: '~' must be followed by 0 or 1"
                            ));
                        }
                    },
                    c => out.push(c),
                }
            }
            Ok(out.into_boxed_str())
        })
        .collect()
}

/// A deprecated tool: listed with a marker until `sunset`, hidden and refused from then.
#[derive(Debug)]
pub struct Deprecation {
    pub replacement: Box<str>,
    pub sunset: SystemTime,
    /// As written, for the marker and messages.
    pub sunset_text: Box<str>,
}

impl Deprecation {
    pub fn gone(&self, now: SystemTime) -> bool {
        now >= self.sunset
    }

    /// What its description is prefixed with while it is listed.
    pub fn prefix(&self) -> String {
        format!(
            "[deprecated: use {}; removed {}] ",
            self.replacement, self.sunset_text
        )
    }
}

pub(super) fn deprecations(
    raw: &BTreeMap<String, S<raw::RawDeprecated>>,
) -> Result<BTreeMap<Box<str>, Deprecation>, Fail> {
    let mut out = BTreeMap::new();
    for (name, d) in raw {
        let d = d.get_ref();
        let text = d.sunset.get_ref().trim();
        // A bare date is the start of that day, UTC.
        let full = if text.len() == 10 {
            format!("{text}T00:00:00Z")
        } else {
            text.to_string()
        };
        let sunset = at(&d.sunset, parse_time(&full))?;
        if d.replacement.get_ref() == name {
            return fail(d.replacement.span(), "a tool cannot replace itself");
        }
        out.insert(
            name.as_str().into(),
            Deprecation {
                replacement: d.replacement.get_ref().as_str().into(),
                sunset,
                sunset_text: text.into(),
            },
        );
    }
    Ok(out)
}

pub(super) fn argument_rules(raw: &[S<raw::RawArgumentRule>]) -> Result<Vec<ArgumentRule>, Fail> {
    let mut out = Vec::with_capacity(raw.len());
    for r in raw {
        let rule = r.get_ref();
        if rule.allow.is_none() && rule.deny.is_none() {
            return fail(r.span(), "an argument rule needs allow or deny");
        }
        check_patterns(std::slice::from_ref(&rule.tool))?;
        for list in [&rule.allow, &rule.deny].into_iter().flatten() {
            check_patterns(list)?;
        }
        let matcher = |l: &Vec<S<String>>| Matcher::new(l.iter().map(|s| s.get_ref().as_str()));
        out.push(ArgumentRule {
            tool: Matcher::new([rule.tool.get_ref().as_str()]),
            pointer: rule.pointer.get_ref().as_str().into(),
            tokens: at(&rule.pointer, pointer_tokens(rule.pointer.get_ref()))?,
            allow: rule.allow.as_ref().map(matcher),
            deny: rule.deny.as_ref().map(matcher).unwrap_or_default(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::pointer_tokens;

    #[test]
    fn pointers_unescape_as_rfc_6901_says() {
        let t = |p: &str| {
            pointer_tokens(p).map(|v| v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(t("").unwrap(), Vec::<String>::new());
        assert_eq!(t("/path").unwrap(), ["path"]);
        assert_eq!(t("/a~1b/c~0d/0").unwrap(), ["a/b", "c~d", "0"]);
        assert_eq!(t("/").unwrap(), [""]);
        assert!(t("path").is_err());
        assert!(t("/a~2").is_err());
        assert!(t("/a~").is_err());
    }
}
