//! Tool policy and the tools/list rewrite, end to end: real gateway process, sample
//! upstream in JSON and SSE modes, assertions on what the client got and what the
//! upstream received.

mod support;

use mcpgate::cli::sample::{self, Mode};
use serde_json::Value;
use support::*;

async fn tools_list_is_filtered(mode: Mode) {
    let up = upstream(sample::Options {
        mode,
        ..Default::default()
    })
    .await;
    let gw = Gateway::start(&config(&up.url(), "10s"));

    let r = post(&gw.url(&format!("/gpt-mcp/{GPT}/mcp")), &[], &list(1)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.tool_names(), GPT_TOOLS);

    let auth = bearer(READONLY);
    let r = post(
        &gw.url("/mcp-readonly"),
        &[("authorization", &auth)],
        &list(2),
    )
    .await;
    assert_eq!(
        r.tool_names(),
        READONLY_TOOLS,
        "get_* allowed, get_document_for_rewrite denied"
    );

    // Allow-all still loses the hidden tool.
    let r = post(&gw.url("/mcp-gpt-full"), &[], &list(3)).await;
    let names = r.tool_names();
    assert_eq!(names.len(), sample::TOOLS.len() - 1);
    assert!(!names.contains(&"move_document".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_is_filtered_from_a_json_upstream() {
    tools_list_is_filtered(Mode::Json).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_is_filtered_from_an_sse_upstream() {
    tools_list_is_filtered(Mode::Sse).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_tools_and_other_fields_are_byte_for_byte() {
    let up = upstream(sample::Options {
        cache_scope: true,
        ..Default::default()
    })
    .await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let direct = post(&up.url(), &[], &list(1)).await;
    let through = post(&gw.url(&format!("/gpt-mcp/{GPT}/mcp")), &[], &list(1)).await;

    // Every kept tool appears in the gateway's body exactly as the upstream wrote it.
    let raw: Value = direct.json();
    for tool in raw["result"]["tools"].as_array().unwrap() {
        let text = tool.to_string(); // the sample writes compact JSON with sorted keys
        assert!(direct.body.contains(&text));
        let kept = tool["name"] != "move_document";
        assert_eq!(through.body.contains(&text), kept, "{}", tool["name"]);
    }
    let (d, t) = (direct.json(), through.json());
    assert_eq!(t["result"]["_meta"], d["result"]["_meta"]);
    assert_eq!(t["id"], d["id"]);
    assert_eq!(d["result"]["cacheScope"], "public");
    assert_eq!(
        t["result"]["cacheScope"], "private",
        "a filtered list must not be shared"
    );
    assert_eq!(
        through.header("content-length"),
        through.body.len().to_string()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_of_a_paginated_list_is_filtered() {
    for mode in [Mode::Json, Mode::Sse] {
        let up = upstream(sample::Options {
            mode,
            page_size: Some(3),
            ..Default::default()
        })
        .await;
        let gw = Gateway::start(&config(&up.url(), "10s"));
        let auth = bearer(READONLY);
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let body = match &cursor {
                Some(c) => format!(
                    r#"{{"jsonrpc":"2.0","id":{pages},"method":"tools/list","params":{{"cursor":"{c}"}}}}"#
                ),
                None => list(pages),
            };
            let r = post(&gw.url("/mcp-readonly"), &[("authorization", &auth)], &body).await;
            let m = r
                .messages()
                .into_iter()
                .find(|m| m.get("result").is_some())
                .unwrap();
            assert_eq!(m["result"]["_meta"]["sample/page"], pages, "{mode:?}");
            seen.extend(r.tool_names());
            pages += 1;
            match m["result"]["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => break,
            }
        }
        assert_eq!(pages, 4, "{mode:?}: 10 tools in pages of 3");
        assert_eq!(seen, READONLY_TOOLS, "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_events_other_than_the_list_pass_unchanged() {
    let up = sse_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let r = post(&gw.url(&format!("/gpt-mcp/{GPT}/mcp")), &[], &list(7)).await;
    assert_eq!(r.header("content-type"), "text/event-stream");
    // The priming event (an id and empty data) comes first, byte for byte.
    assert!(
        r.body.starts_with("id: ") && r.body.contains("\ndata: \n\n"),
        "{}",
        r.body
    );
    // A tools/call answer is an untouched pass-through, notification included.
    let direct = post(&up.url(), &[], &call(8, "get_document")).await;
    let through = post(
        &gw.url(&format!("/gpt-mcp/{GPT}/mcp")),
        &[],
        &call(8, "get_document"),
    )
    .await;
    assert_eq!(direct.messages(), through.messages());
    assert_eq!(through.messages().len(), 2, "log notification and result");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_calls_never_reach_the_upstream() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let auth = bearer(READONLY);

    let r = post(
        &gw.url("/mcp-readonly"),
        &[("authorization", &auth), ("x-request-id", "req-42")],
        &call(5, "delete_document"),
    )
    .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["id"], 5);
    assert_eq!(v["error"]["code"], -32602);
    assert_eq!(v["error"]["message"], "Tool not allowed: delete_document");
    assert_eq!(v["error"]["data"]["request_id"], "req-42");
    assert_eq!(r.header("x-request-id"), "req-42");

    // Denied by the profile's deny list, though allow's glob matches.
    let r = post(
        &gw.url("/mcp-readonly"),
        &[("authorization", &auth)],
        &call(6, "get_document_for_rewrite"),
    )
    .await;
    assert_eq!(
        r.json()["error"]["message"],
        "Tool not allowed: get_document_for_rewrite"
    );

    // Hidden: unknown, even for allow-all.
    let r = post(&gw.url("/mcp-gpt-full"), &[], &call(7, "move_document")).await;
    assert_eq!(r.json()["error"]["message"], "Unknown tool: move_document");
    assert_eq!(r.json()["id"], 7);

    // Allowed calls arrive.
    let r = post(
        &gw.url("/mcp-readonly"),
        &[("authorization", &auth)],
        &call(8, "get_document"),
    )
    .await;
    assert_eq!(r.json()["result"]["isError"], false, "{}", r.body);
    let r = post(&gw.url("/mcp-gpt-full"), &[], &call(9, "delete_document")).await;
    assert_eq!(r.json()["result"]["content"][0]["text"], "deleted welcome");

    assert_eq!(up.called_tools(), ["get_document", "delete_document"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_unknown_to_the_configuration_are_unknown_tools() {
    let up = json_upstream().await;
    // Without an allow-all profile, a name no profile mentions is "unknown".
    let text = config(&up.url(), "10s").replace(
        "[profiles.gpt-full]\nupstream = \"docs\"\nallow = [\"*\"]",
        "[profiles.gpt-full]\nupstream = \"docs\"\nallow = [\"list_*\"]",
    );
    let text = text.replace(
        "[profiles.limited]\nupstream = \"docs\"\nallow = [\"*\"]",
        "[profiles.limited]\nupstream = \"docs\"\nallow = [\"list_*\"]",
    );
    let gw = Gateway::start(&text);
    let r = post(
        &gw.url(&format!("/gpt-mcp/{GPT}/mcp")),
        &[],
        &call(1, "format_disk"),
    )
    .await;
    assert_eq!(r.json()["error"]["message"], "Unknown tool: format_disk");
    assert!(up.called_tools().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_list_limits_what_a_profile_sends() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let auth = bearer(LIMITED);
    let h = [("authorization", auth.as_str())];
    let r = post(&gw.url("/mcp-limited"), &h, &call(1, "get_document")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["error"]["code"], -32601);
    assert_eq!(
        r.json()["error"]["message"],
        "Method not allowed: tools/call"
    );
    let r = post(&gw.url("/mcp-limited"), &h, &list(2)).await;
    assert_eq!(r.tool_names().len(), 9);
    // A refused notification is not forwarded; there is nobody to answer.
    let r = post(
        &gw.url("/mcp-limited"),
        &h,
        r#"{"jsonrpc":"2.0","method":"resources/subscribe_later"}"#,
    )
    .await;
    assert_eq!(r.status, 202);
    assert!(r.body.is_empty());
    let methods: Vec<Value> = up
        .received()
        .iter()
        .map(|r| r.json()["method"].clone())
        .collect();
    assert_eq!(methods, [Value::from("tools/list")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_batches_are_refused_whole() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let auth = bearer(READONLY);
    let batch = format!(
        r#"[{},{{"jsonrpc":"2.0","method":"notifications/progress","params":{{}}}},{},{}]"#,
        call(1, "get_document"),
        call(2, "delete_document"),
        list(3)
    );
    let r = post(
        &gw.url("/mcp-readonly"),
        &[("authorization", &auth)],
        &batch,
    )
    .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    let items = v.as_array().unwrap();
    assert_eq!(items.len(), 3, "one error per request element: {v}");
    assert_eq!(items[0]["id"], 1);
    assert_eq!(
        items[0]["error"]["message"],
        "Batch not forwarded: another request in it was refused"
    );
    assert_eq!(items[1]["id"], 2);
    assert_eq!(
        items[1]["error"]["message"],
        "Tool not allowed: delete_document"
    );
    assert_eq!(items[2]["id"], 3);
    assert!(
        up.received().is_empty(),
        "nothing of a refused batch is forwarded"
    );

    // An acceptable batch is forwarded, and its tools/list element is filtered.
    let batch = format!("[{},{}]", call(4, "get_document"), list(5));
    let r = post(
        &gw.url("/mcp-readonly"),
        &[("authorization", &auth)],
        &batch,
    )
    .await;
    let v = r.json();
    assert_eq!(v[0]["result"]["isError"], false, "{v}");
    let names: Vec<&str> = v[1]["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, READONLY_TOOLS);
    assert_eq!(up.received().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escaped_names_are_judged_after_decoding() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let url = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    let hidden = r#"{"jsonrpc":"2.0","id":1,"method":"tools/c\u0061ll","params":{"n\u0061me":"m\u006fve_document","arguments":{}}}"#;
    let r = post(&url, &[], hidden).await;
    assert_eq!(r.json()["error"]["message"], "Unknown tool: move_document");
    // An allowed name written with escapes is forwarded as the original bytes.
    let allowed = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_\u0064ocument","arguments":{"id":"welcome"}}}"#;
    let r = post(&url, &[], allowed).await;
    assert_eq!(r.json()["result"]["isError"], false, "{}", r.body);
    let got = up.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].body, allowed.as_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_non_string_tool_names_are_refused() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let url = gw.url("/mcp-gpt-full");
    for (params, message) in [
        (
            r#""params":{"arguments":{}}"#,
            "Unknown tool: (params.name is missing)",
        ),
        (
            r#""params":{"name":["move_document"]}"#,
            "Unknown tool: (params.name is not a string)",
        ),
        (
            r#""params":{"name":null}"#,
            "Unknown tool: (params.name is not a string)",
        ),
        (
            r#""params":"move_document""#,
            "Unknown tool: (params.name is missing)",
        ),
    ] {
        let r = post(
            &url,
            &[],
            &format!(r#"{{"jsonrpc":"2.0","id":"x","method":"tools/call",{params}}}"#),
        )
        .await;
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["error"]["message"], message);
        assert_eq!(r.json()["id"], "x");
    }
    assert!(up.received().is_empty());
}

/// Resources and prompts rules against smuggling: the URI or name the server would read
/// is the one judged, whatever else the request carries; a refused element stops its
/// whole batch; nothing refused reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_and_prompt_rules_hold_against_smuggling() {
    let up = json_upstream().await;
    let text = config(&up.url(), "10s").replace(
        "deny = [\"get_document_for_rewrite\"]",
        "deny = [\"get_document_for_rewrite\"]\nresources = { allow = [\"kb://docs/*\"], deny = [\"kb://docs/private/*\"] }\nprompts = { allow = [\"summarize_*\"] }",
    );
    let gw = Gateway::start(&text);
    let auth = bearer(READONLY);
    let url = gw.url("/mcp-readonly");
    let read = |id: u64, params: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"resources/read","params":{params}}}"#)
    };
    let hostile = [
        read(1, r#"{"uri":"kb://docs/private/plan"}"#),
        read(2, r#"{"uri":"kb://docs/../private/plan"}"#),
        read(3, r#"{"uri":"kb://docs/%2E%2E/private/plan"}"#),
        read(4, r#"{"uri":"kb://docs/a%2Fb"}"#),
        read(5, r#"{"uri":"kb://docs\\..\\private"}"#),
        read(6, r#"{"uri":"kb://d\u006fcs/private/plan"}"#),
        read(7, r#"{"name":"kb://docs/ok","uri":"kb://other/x"}"#),
        read(8, r#"{"uri":7}"#),
        read(9, r#"{}"#),
        r#"{"jsonrpc":"2.0","id":10,"method":"resources/subscribe","params":{"uri":"kb://other/x"}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":11,"method":"prompts/get","params":{"name":"rewrite_all"}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":12,"method":"prompts/get","params":{"n\u0061me":"rewrite_all"}}"#.to_string(),
        format!("[{},{}]", read(13, r#"{"uri":"kb://docs/ok"}"#), read(14, r#"{"uri":"kb://other/x"}"#)),
    ];
    for body in &hostile {
        let r = post(&url, &[("authorization", &auth)], body).await;
        assert_eq!(r.status, 200, "{body}: {}", r.body);
        for m in r.messages() {
            assert_eq!(m["error"]["code"], -32602, "{body}: {}", r.body);
        }
    }
    // A repeated key: refused before policy, as a bad request.
    let r = post(
        &url,
        &[("authorization", &auth)],
        &read(
            15,
            r#"{"uri":"kb://docs/ok","uri":"kb://docs/private/plan"}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    // An Mcp-Name that disagrees with the uri: refused.
    let r = post(
        &url,
        &[
            ("authorization", &auth),
            ("mcp-method", "resources/read"),
            ("mcp-name", "kb://docs/ok"),
        ],
        &read(16, r#"{"uri":"kb://docs/private/plan"}"#),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    // Nor may a name beside the uri stand in for it in Mcp-Name.
    let r = post(
        &url,
        &[
            ("authorization", &auth),
            ("mcp-method", "resources/read"),
            ("mcp-name", "kb://docs/ok"),
        ],
        &read(
            17,
            r#"{"name":"kb://docs/ok","uri":"kb://docs/private/plan"}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        up.received().is_empty(),
        "a refused request reached the upstream"
    );

    // What the rules allow goes through, and the other profiles have no such rules.
    let r = post(
        &url,
        &[("authorization", &auth)],
        &read(20, r#"{"uri":"kb://docs/ok"}"#),
    )
    .await;
    assert_eq!(r.status, 200);
    let r = post(
        &gw.url("/mcp-gpt-full"),
        &[],
        &read(21, r#"{"uri":"kb://docs/private/plan"}"#),
    )
    .await;
    assert_eq!(r.status, 200);
    let got: Vec<String> = up
        .received()
        .iter()
        .map(|r| r.json()["params"]["uri"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(got, ["kb://docs/ok", "kb://docs/private/plan"]);
}

/// `[[tools.arguments]]`: the value at the pointer is judged as the upstream will read
/// it; a missing value, a repeated key or a refused element stops the call (and its
/// batch); the refusal names the pointer, and the audit trail never the redacted value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argument_rules_judge_the_value_the_upstream_reads() {
    let up = json_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let trail = dir.path().join("audit.jsonl");
    let text = config(&up.url(), "10s").replace(
        "deny_code = -32602",
        "deny_code = -32602\n\n[[tools.arguments]]\ntool = \"delete_*\"\npointer = \"/id\"\nallow = [\"drafts/*\"]\ndeny = [\"drafts/keep-*\"]\n",
    ) + &format!("\n[audit]\npath = \"{}\"\nredact = [\"id\"]\n", trail.display());
    let gw = Gateway::start(&text);
    let url = gw.url("/mcp-gpt-full");
    let delete = |id: u64, args: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"delete_document","arguments":{args}}}}}"#
        )
    };
    let refused = [
        delete(1, r#"{"id":"welcome"}"#),
        delete(2, r#"{"id":"drafts/keep-this"}"#),
        delete(3, r#"{}"#),
        delete(4, r#"{"id":null}"#),
        delete(5, r#"{"id":["drafts/a"]}"#),
        delete(6, r#"{"id":"drafts/a","id":"welcome"}"#),
        delete(7, r#"{"id":"drafts/a","\u0069d":"welcome"}"#),
        delete(8, r#""drafts/a""#),
        format!(
            "[{},{}]",
            delete(9, r#"{"id":"drafts/a"}"#),
            delete(10, r#"{"id":"secret-plan"}"#)
        ),
    ];
    for body in &refused {
        let r = post(&url, &[], body).await;
        assert_eq!(r.status, 200, "{body}: {}", r.body);
        for m in r.messages() {
            assert_eq!(m["error"]["code"], -32602, "{body}: {}", r.body);
        }
        assert!(
            !r.body.contains("secret-plan") && !r.body.contains("welcome"),
            "{}",
            r.body
        );
    }
    let r = post(&url, &[], &delete(1, r#"{"id":"welcome"}"#)).await;
    assert_eq!(r.json()["error"]["message"], "Argument not allowed: /id");
    assert!(
        up.received().is_empty(),
        "a refused call reached the upstream"
    );

    // Allowed values pass, the escaped key included; other tools are not concerned.
    for (id, args) in [
        (20, r#"{"id":"drafts/a"}"#),
        (21, r#"{"\u0069d":"drafts/b"}"#),
    ] {
        let r = post(&url, &[], &delete(id, args)).await;
        assert!(r.json()["result"].is_object(), "{}", r.body);
    }
    let r = post(&url, &[], &call(22, "get_document")).await;
    assert!(r.json()["result"].is_object(), "{}", r.body);
    assert_eq!(
        up.called_tools(),
        ["delete_document", "delete_document", "get_document"]
    );

    // The trail records the refusals with the pointer, never the redacted value.
    let mut audit = String::new();
    for _ in 0..500 {
        audit = std::fs::read_to_string(&trail).unwrap_or_default();
        if audit.matches("Argument not allowed: /id").count() >= 10 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        audit.matches("Argument not allowed: /id").count() >= 10,
        "{audit}"
    );
    assert!(
        !audit.contains("secret-plan") && !audit.contains("keep-this"),
        "{audit}"
    );
}

/// Deprecation with a sunset: before it the tool is listed, marked, callable and its
/// calls counted per token; from it (with no reload) it is gone from every list and its
/// calls are refused naming the replacement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deprecated_tool_is_marked_until_its_sunset_and_gone_from_it() {
    let up = json_upstream().await;
    let soon = humantime::format_rfc3339_seconds(
        std::time::SystemTime::now() + std::time::Duration::from_secs(4),
    )
    .to_string();
    let text = config(&up.url(), "10s").replace(
        "deny_code = -32602",
        &format!(
            "deny_code = -32602\n\n[tools.deprecated.update_document]\nreplacement = \"patch_document\"\nsunset = \"{soon}\"\n\n[tools.deprecated.upload_document]\nreplacement = \"ingest_document\"\nsunset = \"2020-01-01\"\n"
        ),
    ) + "\n[admin]\naddr = \"127.0.0.1:0\"\n";
    let gw = Gateway::start(&text);
    let url = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));

    let r = post(&url, &[], &list(1)).await;
    let tools = r.messages()[0]["result"]["tools"]
        .as_array()
        .unwrap()
        .clone();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(
        !names.contains(&"upload_document"),
        "past its sunset: {names:?}"
    );
    let update = tools
        .iter()
        .find(|t| t["name"] == "update_document")
        .expect("listed");
    let prefix = format!("[deprecated: use patch_document; removed {soon}] ");
    assert!(
        update["description"].as_str().unwrap().starts_with(&prefix),
        "{update}"
    );
    assert_eq!(
        update["_meta"]["mcpgate/deprecated"],
        serde_json::json!({ "replacement": "patch_document", "sunset": soon })
    );
    assert!(update["inputSchema"].is_object(), "the rest kept: {update}");
    // Tools not deprecated are untouched.
    let get = tools.iter().find(|t| t["name"] == "get_document").unwrap();
    assert!(
        get.get("_meta")
            .is_none_or(|m| m.get("mcpgate/deprecated").is_none())
    );

    // Before the sunset: calls pass, counted for the token that made them.
    for id in 2..4 {
        let r = post(&url, &[], &call(id, "update_document")).await;
        assert!(r.json()["result"].is_object(), "{}", r.body);
    }
    let r = post(&url, &[], &call(4, "upload_document")).await;
    assert_eq!(
        r.json()["error"]["message"],
        "Unknown tool: upload_document (replaced by ingest_document)"
    );
    let m = send(http::Method::GET, &gw.admin_url("/metrics"), &[], "")
        .await
        .body;
    assert!(
        m.contains(
            "mcpgate_deprecated_calls_total{tool=\"update_document\",caller=\"chatgpt-app\"} 2"
        ),
        "{m}"
    );

    // The sunset passes: no reload, the tool is gone.
    eventually(
        std::time::Duration::from_secs(10),
        "the sunset passed",
        || async {
            let r = post(&url, &[], &list(5)).await;
            (!r.tool_names().contains(&"update_document".to_string())).then_some(())
        },
    )
    .await;
    let r = post(&url, &[], &call(6, "update_document")).await;
    assert_eq!(
        r.json()["error"]["message"],
        "Unknown tool: update_document (replaced by patch_document)"
    );
    assert_eq!(up.called_tools(), ["update_document", "update_document"]);
}

/// Annotation rules (docs/policy.md): the upstream's own hints allow read-only tools beyond the
/// name list and refuse destructive ones; mcpgate reads the tool list itself at start,
/// so a call needs no client's tools/list first; tools/list is judged by the list's own
/// hints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotation_rules_use_what_the_upstream_says_of_its_tools() {
    let up = json_upstream().await;
    let text = config(&up.url(), "10s").replace(
        "deny = [\"get_document_for_rewrite\"]",
        "deny = [\"get_document_for_rewrite\"]\n\n[profiles.hinted]\nupstream = \"docs\"\nallow = [\"search_knowledge\", \"update_document\"]\nallow_annotations = { readOnlyHint = true }\ndeny_annotations = { destructiveHint = true }",
    ) + "\n[[routes]]\nlisten = \"main\"\npath = \"/hinted\"\nprofile = \"hinted\"\nauth = \"none\"\n";
    let gw = Gateway::start(&text);
    let url = gw.url("/hinted");
    // The start's own read of the list: wait for it (its session shows at the upstream).
    for _ in 0..200 {
        if up
            .received()
            .iter()
            .any(|r| r.json()["method"] == "tools/list")
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let before = up.received().len();
    // Read-only by the upstream's word, not by name: allowed, with no tools/list first.
    let r = post(&url, &[], &call(1, "get_document")).await;
    assert!(r.json()["result"].is_object(), "{}", r.body);
    // Allowed by name but destructive by default (no hint says otherwise): refused.
    let r = post(&url, &[], &call(2, "update_document")).await;
    assert_eq!(
        r.json()["error"]["message"],
        "Tool not allowed: update_document",
        "{}",
        r.body
    );
    let r = post(&url, &[], &call(3, "delete_document")).await;
    assert_eq!(r.json()["error"]["code"], -32602);
    assert_eq!(
        up.received().len(),
        before + 1,
        "only the allowed call went up"
    );
    // The list shows what the hints and names allow: the read-only tools (by their own
    // hints), search_knowledge by name, and not update_document (destructive).
    let r = post(&url, &[], &list(4)).await;
    assert_eq!(
        r.tool_names(),
        [
            "search_knowledge",
            "list_documents",
            "get_document",
            "get_document_for_rewrite",
            "batch_read"
        ]
    );
}

/// Fail closed: when the rules need a tool's annotations and nobody has said them (the
/// upstream could not be read), the call is refused by the policy, not guessed at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_annotations_are_unknown_is_refused() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    let text = config(&url, "10s").replace(
        "deny = [\"get_document_for_rewrite\"]",
        "deny = [\"get_document_for_rewrite\"]\n\n[profiles.hinted]\nupstream = \"docs\"\nallow = [\"get_document\"]\ndeny_annotations = { destructiveHint = true }",
    ) + "\n[[routes]]\nlisten = \"main\"\npath = \"/hinted\"\nprofile = \"hinted\"\nauth = \"none\"\n";
    let gw = Gateway::start(&text);
    let r = post(&gw.url("/hinted"), &[], &call(1, "get_document")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json()["error"]["message"],
        "Tool not allowed: get_document (its annotations are not known yet)"
    );
    gw.log_with("cannot read the upstream's tool list", 1).await;
}
