//! `server/discover` (MCP 2026-07-28) as a profile sees it (docs/protocol.md): the upstream's
//! answer with the capabilities the profile cannot use taken out, `listChanged: true` on
//! the lists mcpgate itself announces changes of (a reload, a sunset), and the caching
//! hints of a filtered answer (`cacheScope: "private"`, `ttlMs` capped like a list's).
//! Discover answers are small and rare, so this one reads and writes the whole message.

use crate::config::Profile;
use serde_json::Value;
use serde_json::value::RawValue;
use std::time::Duration;

/// The lists a profile filters and mcpgate announces changes of.
const LISTS: [&str; 3] = ["tools", "resources", "prompts"];

/// Rewrites the answer to the discover request `id` in `text` (one message or a batch).
/// `Ok(None)`: `text` holds no such answer.
pub fn narrow(
    text: &str,
    id: &str,
    profile: &Profile,
    fresh_for: Duration,
) -> Result<Option<String>, String> {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow)]
        id: Option<&'a RawValue>,
    }
    let answers = |t: &str| {
        serde_json::from_str::<Head>(t)
            .ok()
            .and_then(|h| h.id)
            .is_some_and(|i| i.get().trim() == id)
    };
    if text.trim_start().starts_with('[') {
        let items: Vec<&RawValue> = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if !items.iter().any(|i| answers(i.get())) {
            return Ok(None);
        }
        let mut all: Vec<Value> = Vec::with_capacity(items.len());
        for item in items {
            let mut v: Value = serde_json::from_str(item.get()).map_err(|e| e.to_string())?;
            if answers(item.get()) {
                edit(&mut v, profile, fresh_for)?;
            }
            all.push(v);
        }
        return serde_json::to_string(&all)
            .map(Some)
            .map_err(|e| e.to_string());
    }
    if !answers(text) {
        return Ok(None);
    }
    let mut v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    edit(&mut v, profile, fresh_for)?;
    serde_json::to_string(&v)
        .map(Some)
        .map_err(|e| e.to_string())
}

fn edit(message: &mut Value, profile: &Profile, fresh_for: Duration) -> Result<(), String> {
    let Some(result) = message.get_mut("result") else {
        // An error answer passes as it is.
        return Ok(());
    };
    let Some(result) = result.as_object_mut() else {
        return Err("the server/discover result is not an object".into());
    };
    let Some(caps) = result
        .get_mut("capabilities")
        .and_then(Value::as_object_mut)
    else {
        return Err("the server/discover result has no capabilities object".into());
    };
    for list in LISTS {
        if !profile.may_use(list) {
            caps.remove(list);
            continue;
        }
        if let Some(Value::Object(cap)) = caps.get_mut(list) {
            cap.insert("listChanged".into(), Value::Bool(true));
        }
    }
    result.insert("cacheScope".into(), Value::from("private"));
    let most = fresh_for.as_millis() as u64;
    let ttl = result
        .get("ttlMs")
        .and_then(Value::as_u64)
        .map_or(0, |t| t.min(most));
    result.insert("ttlMs".into(), Value::from(ttl));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;

    fn profile(rules: &str) -> std::sync::Arc<Profile> {
        let text = format!(
            "[upstreams.u]\nurl = \"http://127.0.0.1:9/mcp\"\n[profiles.p]\nupstream = \"u\"\n{rules}\n"
        );
        load_str(&text, "t.toml").unwrap().profiles["p"].clone()
    }

    const DISCOVER: &str = r#"{"jsonrpc":"2.0","id":"d1","result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{},"resources":{"subscribe":true},"prompts":{"listChanged":false},"logging":{}},"ttlMs":3600000,"cacheScope":"public"}}"#;

    fn caps(text: &str) -> Value {
        serde_json::from_str::<Value>(text).unwrap()["result"].clone()
    }

    #[test]
    fn capabilities_narrow_to_the_profile() {
        let p = profile("allow = [\"*\"]\nprompts = { allow = [] }");
        let out = narrow(DISCOVER, "\"d1\"", &p, Duration::from_secs(60))
            .unwrap()
            .unwrap();
        let r = caps(&out);
        assert_eq!(r["capabilities"]["prompts"], Value::Null);
        assert_eq!(r["capabilities"]["tools"]["listChanged"], true);
        assert_eq!(r["capabilities"]["resources"]["subscribe"], true);
        assert_eq!(r["capabilities"]["resources"]["listChanged"], true);
        assert_eq!(r["capabilities"]["logging"], serde_json::json!({}));
        assert_eq!(r["cacheScope"], "private");
        assert_eq!(r["ttlMs"], 60_000);
        assert_eq!(r["supportedVersions"][0], "2026-07-28");
    }

    #[test]
    fn methods_and_empty_rules_take_capabilities_away() {
        let p = profile("allow = []\nmethods = [\"prompts/*\", \"server/discover\"]");
        let r = caps(
            &narrow(DISCOVER, "\"d1\"", &p, Duration::from_secs(60))
                .unwrap()
                .unwrap(),
        );
        let names: Vec<_> = r["capabilities"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(names, ["logging", "prompts"]);
    }

    #[test]
    fn other_answers_pass_and_broken_ones_fail() {
        let p = profile("allow = [\"*\"]");
        assert_eq!(
            narrow(DISCOVER, "\"d2\"", &p, Duration::ZERO).unwrap(),
            None
        );
        let batch = format!(r#"[{{"jsonrpc":"2.0","id":1,"result":{{}}}},{DISCOVER}]"#);
        let out = narrow(&batch, "\"d1\"", &p, Duration::ZERO)
            .unwrap()
            .unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v[0]["result"], serde_json::json!({}));
        assert_eq!(v[1]["result"]["ttlMs"], 0);
        let error = r#"{"jsonrpc":"2.0","id":"d1","error":{"code":-32601,"message":"no"}}"#;
        let out = narrow(error, "\"d1\"", &p, Duration::ZERO)
            .unwrap()
            .unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&out).unwrap()["error"]["code"],
            -32601
        );
        let bad = r#"{"jsonrpc":"2.0","id":"d1","result":{"capabilities":7}}"#;
        assert!(narrow(bad, "\"d1\"", &p, Duration::ZERO).is_err());
    }
}
