//! Rules on a tool's annotations (`allow_annotations`, `deny_annotations`, and the
//! `annotations` of an approval rule): hint names and the value each must have.

use super::{Fail, fail};
use crate::config::raw::S;
use std::collections::BTreeMap;

/// Hint names and the value each must have.
pub type HintRules = Box<[(Box<str>, serde_json::Value)]>;

/// Whether every hint of `rules` holds in `hints`. The four hints MCP defines have its
/// defaults when absent (`readOnlyHint` false, `destructiveHint` true unless read-only,
/// `idempotentHint` false, `openWorldHint` true); any other absent hint holds nothing.
pub(super) fn hints_hold(
    hints: &serde_json::Map<String, serde_json::Value>,
    rules: &[(Box<str>, serde_json::Value)],
) -> bool {
    use serde_json::Value;
    let read_only = hints.get("readOnlyHint") == Some(&Value::Bool(true));
    rules.iter().all(|(name, want)| {
        let have = match (&**name, hints.get(&**name)) {
            ("destructiveHint", _) if read_only => Value::Bool(false),
            (_, Some(v)) => v.clone(),
            ("readOnlyHint" | "idempotentHint", None) => Value::Bool(false),
            ("destructiveHint" | "openWorldHint", None) => Value::Bool(true),
            (_, None) => return false,
        };
        have == *want
    })
}

/// `allow_annotations` or `deny_annotations`: hint names and the value each must have
/// (a boolean, a string or an integer).
pub(super) fn hint_rules(
    raw: Option<&S<BTreeMap<String, S<toml::Value>>>>,
) -> Result<HintRules, Fail> {
    let Some(table) = raw else {
        return Ok(Box::default());
    };
    if table.get_ref().is_empty() {
        return fail(
            table.span(),
            "an empty annotations table would match every tool",
        );
    }
    table
        .get_ref()
        .iter()
        .map(|(name, v)| {
            let value = match v.get_ref() {
                toml::Value::Boolean(b) => serde_json::Value::Bool(*b),
                toml::Value::String(s) => serde_json::Value::String(s.clone()),
                toml::Value::Integer(i) => serde_json::Value::from(*i),
                _ => {
                    return fail(
                        v.span(),
                        "an annotation value is a boolean, a string or an integer",
                    );
                }
            };
            Ok((name.as_str().into(), value))
        })
        .collect()
}
