//! Tests of the list rewrite: what a profile keeps, the splice byte for byte, deprecated
//! tools marked, answers that fail closed.

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
    let escaped = r#"{"jsonrpc":"2.0","id":3,"result":{"t\u006fols":[{"name":"a"},{"name":"b"}]}}"#;
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
