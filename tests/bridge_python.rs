//! The bridge between MCP's generations with the Python SDK 2.3 server (`py_server.py`,
//! a document store) as the upstream, over HTTP and as a stdio child, held to one
//! generation by its upstream's `protocol`: `legacy` (mcpgate opens sessions there for
//! 2026-07-28 clients) or `modern` (legacy clients' sessions are mcpgate's seals, their
//! requests sent as 2026-07-28 ones). Each route is used by clients of both generations:
//! the TypeScript SDK v2 and v1 clients and the Python SDK client in each of its modes.

mod support;

use serde_json::{Value, json};
use std::process::Command;
use support::{Gateway, free_port, node22, peers, python, run_client, start_peer, ts2_client};

/// The TypeScript SDK v1 client (legacy): lists, calls `get_document`, tries the hidden
/// `move_document`.
fn ts1_client(url: &str) -> Value {
    let out = run_client(
        Command::new(node22())
            .current_dir(peers())
            .arg("ts_client.mjs")
            .args([
                url,
                "-",
                "get_document",
                r#"{"id":"welcome"}"#,
                "move_document",
            ]),
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The Python SDK client in `mode` (`auto`: 2026-07-28; `legacy`: a session), the same
/// steps.
fn py_client(url: &str, mode: &str) -> Value {
    let out = run_client(
        Command::new(python())
            .arg(peers().join("py_client.py"))
            .args([
                url,
                mode,
                "-",
                "get_document",
                r#"{"id":"welcome"}"#,
                "move_document",
            ]),
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn python_servers_of_either_generation_serve_clients_of_both() {
    let port = free_port();
    let _server = start_peer(
        Command::new(python())
            .arg(peers().join("py_server.py"))
            .arg(port.to_string()),
        port,
    );
    let py = python();
    let script = peers().join("py_server.py");
    let mut text = String::from(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[tools]
hidden = ["move_document"]
"#,
    );
    for (name, protocol) in [
        ("http_legacy", "legacy"),
        ("http_modern", "modern"),
        ("stdio_legacy", "legacy"),
        ("stdio_modern", "modern"),
    ] {
        let at = match name.starts_with("http") {
            true => format!(r#"url = "http://127.0.0.1:{port}/mcp""#),
            false => format!(r#"command = [{py:?}, {script:?}, "stdio"]"#),
        };
        text.push_str(&format!(
            r#"
[upstreams.{name}]
{at}
protocol = "{protocol}"
timeout = "10s"

[profiles.{name}]
upstream = "{name}"
allow = ["*"]

[[routes]]
listen = "main"
path = "/{name}"
profile = "{name}"
auth = "none"
"#
        ));
    }
    let gw = Gateway::start(&text);
    let listed = json!(["delete_document", "get_document", "search_knowledge"]);
    let notes = json!(["This store holds the team's notes."]);
    for name in ["http_legacy", "http_modern", "stdio_legacy", "stdio_modern"] {
        let url = gw.url(&format!("/{name}"));
        // The 2026-07-28 client: bridged to a server held to the legacy protocol.
        let ts2 = ts2_client(&url, "docs", None);
        assert_eq!(ts2["discover"], json!(["2026-07-28"]), "{name}: {ts2}");
        assert_eq!(ts2["tools"], listed, "{name}: {ts2}");
        assert_eq!(ts2["get"], notes[0], "{name}: {ts2}");
        assert_eq!(ts2["move"]["error"], -32602, "{name}: {ts2}");
        // The legacy client: bridged to a server held to 2026-07-28.
        let ts1 = ts1_client(&url);
        let mut tools = ts1["tools"].as_array().unwrap().clone();
        tools.sort_by_key(|t| t.to_string());
        assert_eq!(Value::from(tools), listed, "{name}: {ts1}");
        assert_eq!(ts1["call"], notes, "{name}: {ts1}");
        assert!(ts1["refused"].is_string(), "{name}: {ts1}");
        // The Python client in each mode: the version it ends up speaking is its own,
        // whatever the server is held to.
        for (mode, version) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
            let out = py_client(&url, mode);
            assert_eq!(out["version"], version, "{name} {mode}: {out}");
            let mut tools = out["tools"].as_array().unwrap().clone();
            tools.sort_by_key(|t| t.to_string());
            assert_eq!(Value::from(tools), listed, "{name} {mode}: {out}");
            assert_eq!(out["call"], notes, "{name} {mode}: {out}");
            assert!(out["refused"].is_string(), "{name} {mode}: {out}");
        }
    }
    // And mcpgate logged no error doing it.
    assert!(!gw.log().contains("\"level\":\"ERROR\""), "{}", gw.log());
}
