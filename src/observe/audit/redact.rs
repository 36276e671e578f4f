//! Redaction of tool-call arguments: the values of configured keys, at any depth, become
//! their SHA-256 and length; oversized arguments keep only their hash and size.

use super::MAX_ARGUMENTS_BYTES;
use super::chain::hex_sha256;
use serde_json::Value;

/// A call's `arguments` as the JSON text its records carry: the client's own text when
/// no key is redacted (written without the whitespace between tokens), else the value
/// with the values of `redact` keys (at any depth) replaced by their SHA-256 and length.
/// Oversized arguments shrink to their hash and size. `None`: the call had none.
pub fn redact_arguments(arguments: Option<&str>, redact: &[String]) -> Option<Box<str>> {
    let text = arguments?;
    if text.len() > MAX_ARGUMENTS_BYTES {
        let stub = serde_json::json!({"truncated": true, "sha256": hex_sha256(text.as_bytes()), "len": text.len()});
        return Some(stub.to_string().into());
    }
    if redact.is_empty() {
        return Some(text.into());
    }
    let mut v: Value = serde_json::from_str(text).ok()?;
    redact_value(&mut v, redact);
    Some(v.to_string().into())
}

pub(super) fn redact_value(v: &mut Value, redact: &[String]) {
    match v {
        Value::Object(map) => {
            for (k, val) in map.iter_mut() {
                if redact.iter().any(|r| r == k) {
                    let bytes = match &*val {
                        Value::String(s) => s.as_bytes().to_vec(),
                        other => other.to_string().into_bytes(),
                    };
                    *val = serde_json::json!({"sha256": hex_sha256(&bytes), "len": bytes.len()});
                } else {
                    redact_value(val, redact);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| redact_value(i, redact)),
        _ => {}
    }
}
