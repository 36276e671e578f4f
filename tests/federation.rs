//! Federation (docs/federation.md): one route over several real MCP servers. The members are the
//! TypeScript SDK v2 server (2026-07-28, over HTTP), our sample server (legacy only,
//! paginating its tools: mcpgate bridges it), the Python SDK server as a stdio child, and
//! Python SDK servers whose tool names are crafted to collide. The clients are the
//! TypeScript SDK v2 client (`fed_client.mjs`) and the Python SDK client.

mod support;

use mcpgate::cli::sample;
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;
use support::{
    Gateway, fed_client, free_port, node22, peers, post, python, run_client, start_peer,
    ts2_server_on, upstream,
};

/// A Python SDK server whose tools are `tools`, each answering `<name>:<tool>`.
fn named_server(port: u16, name: &str, tools: &[&str]) -> support::Peer {
    start_peer(
        Command::new(python())
            .arg(peers().join("py_named.py"))
            .arg(port.to_string())
            .arg(name)
            .args(tools),
        port,
    )
}

const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}"#;

fn modern(method: &str) -> Vec<(&str, &str)> {
    vec![
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ]
}

fn list_body(method: &str, cursor: Option<&str>) -> String {
    let cursor = cursor.map_or(String::new(), |c| format!(r#","cursor":{c:?}"#));
    format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{{META}{cursor}}}}}"#)
}

/// Three members of both generations and transports behind one route, in each prefix
/// mode: merged lists (the sample server paginating), calls, reads and prompts routed to
/// the member that has them, policy by the names the client sees, a member's question
/// and progress reaching the client's request, its list change reaching a listen stream,
/// the audit naming the member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_of_both_generations_behind_one_route() {
    let dir = tempfile::tempdir().unwrap();
    let notes_port = free_port();
    let _notes = ts2_server_on(notes_port, &dir.path().join("notes.jsonl"));
    let docs = upstream(sample::Options {
        page_size: Some(4),
        record: true,
        ..Default::default()
    })
    .await;
    let audit = dir.path().join("audit.jsonl");
    let py = python();
    let script = peers().join("py_server.py");
    let mut text = format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.notes]
url = "http://127.0.0.1:{notes_port}/mcp"
timeout = "10s"

[upstreams.docs]
url = "{docs}"
protocol = "legacy"
timeout = "10s"

[upstreams.py]
command = [{py:?}, {script:?}, "stdio"]
timeout = "10s"

[tools]
hidden = ["py__move_document", "move_document"]

[audit]
path = {audit:?}
"#,
        docs = docs.url(),
    );
    for (profile, prefix) in [
        ("conflict", "on_conflict"),
        ("always", "always"),
        ("never", "never"),
    ] {
        text.push_str(&format!(
            r#"
[profiles.{profile}]
upstreams = ["notes", "docs", "py"]
prefix = "{prefix}"
allow = ["*"]
deny = ["docs__delete_document"]

[[routes]]
listen = "main"
path = "/{profile}"
profile = "{profile}"
auth = "none"
"#
        ));
    }
    let gw = Gateway::start(&text);

    // on_conflict: only the names the sample and the Python store share are prefixed.
    let plan = json!({
        "calls": [
            ["echo", {"text": "hi"}],
            ["docs__get_document", {"id": "welcome"}],
            ["py__get_document", {"id": "welcome"}],
            ["list_documents", {}],
            ["delete_note", {"id": "n1"}],
            ["slow", {"ms": 150}, "progress"],
            ["py__move_document", {"id": "welcome", "new_id": "w"}],
            ["docs__delete_document", {"id": "welcome"}],
            ["no_such_tool", {}],
        ],
        "reads": ["file:///public/readme.txt", "file:///nowhere"],
        "prompts": [["greet", {"who": "Ada"}]],
        "listen": ["touch", {"uri": "file:///public/readme.txt"}],
    });
    let out = fed_client(&gw.url("/conflict"), plan).await;
    let names: Vec<&str> = out["tools"]["names"]
        .as_array()
        .unwrap_or_else(|| panic!("{out}"))
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    // The sample lists 4 tools a page: its 10 take three pages of the merged list, under
    // a sealed cursor (the SDK client follows them itself; here they are followed by
    // hand). A cursor sealed for one profile opens for no other.
    let mut cursor: Option<String> = None;
    let mut pages = Vec::new();
    loop {
        let r = post(
            &gw.url("/conflict"),
            &modern("tools/list"),
            &list_body("tools/list", cursor.as_deref()),
        )
        .await;
        let result = r.messages()[0]["result"].clone();
        pages.push(result["tools"].as_array().map_or(0, Vec::len));
        match result["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
        let r = post(
            &gw.url("/always"),
            &modern("tools/list"),
            &list_body("tools/list", cursor.as_deref()),
        )
        .await;
        assert_eq!(r.messages()[0]["error"]["code"], -32602, "{}", r.body);
    }
    assert_eq!(pages.len(), 3, "{pages:?}");
    assert_eq!(
        pages.iter().sum::<usize>(),
        names.len(),
        "{pages:?} {names:?}"
    );
    for shown in [
        "echo",
        "grüße",
        "touch",
        "list_documents",
        "docs__get_document",
        "py__get_document",
        "docs__search_knowledge",
        "py__search_knowledge",
        "py__delete_document",
        "upload_document",
    ] {
        assert!(names.contains(&shown), "{shown} not in {names:?}");
    }
    for hidden in [
        "get_document",
        "py__move_document",
        "docs__delete_document",
        "move_document",
    ] {
        assert!(!names.contains(&hidden), "{hidden} in {names:?}");
    }
    // Member order: the TypeScript server's tools first.
    assert_eq!(names[0], "echo", "{names:?}");
    assert_eq!(out["discover"]["versions"], json!(["2026-07-28"]), "{out}");
    let calls = &out["calls"];
    assert_eq!(calls["echo"], "echo: hi", "{out}");
    // The sample server writes a title first: each call reached its own member.
    assert_eq!(
        calls["docs__get_document"],
        "# Welcome\nThis store holds the team's notes."
    );
    assert_eq!(
        calls["py__get_document"],
        "This store holds the team's notes."
    );
    assert_eq!(calls["delete_note"], "deleted n1", "{out}");
    assert_eq!(out["elicited"], json!(["Delete note n1?"]), "{out}");
    assert_eq!(calls["slow"]["progress"], json!([1, 2, 3]), "{out}");
    assert_eq!(calls["py__move_document"]["error"], -32602, "{out}");
    assert_eq!(calls["docs__delete_document"]["error"], -32602, "{out}");
    assert_eq!(calls["no_such_tool"]["error"], -32602, "{out}");
    assert_eq!(
        out["reads"]["file:///public/readme.txt"],
        "contents of file:///public/readme.txt"
    );
    assert_eq!(out["reads"]["file:///nowhere"]["error"], -32602, "{out}");
    assert_eq!(out["prompts"]["greet"], "Say hello to Ada", "{out}");
    assert_eq!(out["listen"], json!(["tools"]), "{out}");
    // The sample server was asked for its own names, never the prefixed ones.
    let asked: Vec<Value> = docs
        .received()
        .iter()
        .filter_map(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .filter(|m| m["method"] == "tools/call")
        .map(|m| m["params"]["name"].clone())
        .collect();
    assert!(asked.contains(&json!("get_document")), "{asked:?}");
    assert!(
        !asked.iter().any(|n| n.as_str().unwrap().contains("__")),
        "{asked:?}"
    );
    assert!(!asked.contains(&json!("delete_document")), "{asked:?}");
    // The notes server saw its own name in Mcp-Name too.
    let notes_seen = std::fs::read_to_string(dir.path().join("notes.jsonl")).unwrap();
    assert!(notes_seen.contains(r#""mcp_name":"echo""#), "{notes_seen}");

    // always: every name prefixed; never: the first member keeps a shared name.
    let out = fed_client(
        &gw.url("/always"),
        json!({"calls": [["py__search_knowledge", {"query": "notes"}]]}),
    )
    .await;
    let names = out["tools"]["names"].as_array().unwrap();
    assert!(
        names.iter().all(|n| {
            let n = n.as_str().unwrap();
            n.starts_with("notes__") || n.starts_with("docs__") || n.starts_with("py__")
        }),
        "{out}"
    );
    assert!(out["calls"]["py__search_knowledge"].is_string(), "{out}");
    let out = fed_client(
        &gw.url("/never"),
        json!({"calls": [["get_document", {"id": "welcome"}]]}),
    )
    .await;
    let names: Vec<&str> = out["tools"]["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(
        names.iter().filter(|n| **n == "get_document").count(),
        1,
        "{names:?}"
    );
    assert!(!names.iter().any(|n| n.contains("__")), "{names:?}");
    assert_eq!(
        out["calls"]["get_document"],
        "# Welcome\nThis store holds the team's notes."
    );

    // The Python SDK client (auto: 2026-07-28) on the same route.
    let url = gw.url("/conflict");
    let py_out = tokio::task::spawn_blocking(move || {
        let out = run_client(
            Command::new(python())
                .arg(peers().join("py_client.py"))
                .args([
                    &url,
                    "auto",
                    "-",
                    "py__get_document",
                    r#"{"id":"welcome"}"#,
                    "py__move_document",
                ]),
        );
        serde_json::from_str::<Value>(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
    })
    .await
    .unwrap();
    assert_eq!(
        py_out["call"],
        json!(["This store holds the team's notes."]),
        "{py_out}"
    );
    assert!(py_out["refused"].is_string(), "{py_out}");

    // The audit names the member a call went to, under the name the client used.
    let records = gw_records(&audit).await;
    let call = records
        .iter()
        .find(|r| r["tool"] == "docs__get_document")
        .unwrap_or_else(|| panic!("{records:?}"));
    assert_eq!(call["upstream"], "docs", "{call}");
    assert_eq!(call["profile"], "conflict", "{call}");
}

/// The audit records written so far (waits for the file to hold the call of
/// `docs__get_document`).
async fn gw_records(path: &std::path::Path) -> Vec<Value> {
    support::eventually(Duration::from_secs(5), "the audit records", || async {
        let text = std::fs::read_to_string(path).ok()?;
        let records: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        records
            .iter()
            .any(|r| r["tool"] == "docs__get_document")
            .then_some(records)
    })
    .await
}

/// Names crafted to meet: `kb` lists `tickets__search`, which is what `tickets`'s own
/// `search` becomes when prefixed. Neither is split at the separator: each visible name
/// reaches exactly the member that listed it, and a member answering for another's name
/// cannot take its calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_crafted_to_collide_reach_only_their_own_member() {
    let (kb_port, tickets_port, cal_port) = (free_port(), free_port(), free_port());
    let _kb = named_server(kb_port, "kb", &["tickets__search", "search", "a__b"]);
    let _tickets = named_server(tickets_port, "tickets", &["search", "open"]);
    let _cal = named_server(cal_port, "a", &["b"]);
    let mut text = format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.kb]
url = "http://127.0.0.1:{kb_port}/mcp"
[upstreams.tickets]
url = "http://127.0.0.1:{tickets_port}/mcp"
[upstreams.a]
url = "http://127.0.0.1:{cal_port}/mcp"
"#
    );
    for (profile, prefix) in [
        ("conflict", "on_conflict"),
        ("always", "always"),
        ("never", "never"),
    ] {
        text.push_str(&format!(
            r#"
[profiles.{profile}]
upstreams = ["kb", "tickets", "a"]
prefix = "{prefix}"
allow = ["*"]

[[routes]]
listen = "main"
path = "/{profile}"
profile = "{profile}"
auth = "none"
"#
        ));
    }
    let gw = Gateway::start(&support::with_admin(text));
    let out = fed_client(
        &gw.url("/conflict"),
        json!({"calls": [
            ["kb__tickets__search", {}], ["tickets__search", {}], ["kb__search", {}],
            ["open", {}], ["a__b", {}], ["b", {}], ["a__a__b", {}], ["kb__a__b", {}]
        ]}),
    )
    .await;
    let mut names: Vec<&str> = out["tools"]["names"]
        .as_array()
        .unwrap_or_else(|| panic!("{out}"))
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    names.sort();
    // kb's own `tickets__search` met tickets' prefixed `search`: both are prefixed. kb's
    // own `a__b` and member a's `b` do not meet unprefixed: neither is prefixed, and the
    // name `a__b` is kb's, never split into member a's `b`.
    assert_eq!(
        names,
        [
            "a__b",
            "b",
            "kb__search",
            "kb__tickets__search",
            "open",
            "tickets__search"
        ],
        "{out}"
    );
    let calls = &out["calls"];
    assert_eq!(calls["kb__tickets__search"], "kb:tickets__search", "{out}");
    assert_eq!(calls["tickets__search"], "tickets:search", "{out}");
    assert_eq!(calls["kb__search"], "kb:search", "{out}");
    assert_eq!(calls["open"], "tickets:open", "{out}");
    assert_eq!(calls["a__b"], "kb:a__b", "{out}");
    assert_eq!(calls["b"], "a:b", "{out}");
    assert_eq!(calls["a__a__b"]["error"], -32602, "{out}");
    assert_eq!(calls["kb__a__b"]["error"], -32602, "{out}");

    // `mcpgate check --probe` reads the members' lists and prints the names as the
    // clients see them, why some are prefixed, and what `never` lets the first keep.
    let probe = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .args(["check", "--probe", "-c"])
        .arg(gw.config_path())
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&probe.stdout);
    assert!(probe.status.success(), "{printed}");
    let conflict = printed
        .split("\nprofile conflict:")
        .nth(1)
        .unwrap_or_else(|| panic!("{printed}"));
    let conflict = conflict.split("\nprofile ").next().unwrap();
    assert!(conflict.contains("kb__tickets__search"), "{conflict}");
    assert!(
        conflict
            .lines()
            .any(|l| l.contains("kb__tickets__search") && l.ends_with("-> kb tickets__search")),
        "{conflict}"
    );
    assert!(
        conflict.contains("prefixed: search is a tool of kb, tickets"),
        "{conflict}"
    );
    let never = printed.split("\nprofile never:").nth(1).unwrap();
    assert!(
        never.contains(
            "collision: search is claimed by kb search, tickets search; the first keeps it"
        ),
        "{never}"
    );

    // always: `kb__a__b` is kb's `a__b`, and `a__b` is member a's `b`.
    let out = fed_client(
        &gw.url("/always"),
        json!({"calls": [["kb__a__b", {}], ["a__b", {}], ["tickets__search", {}], ["kb__tickets__search", {}]]}),
    )
    .await;
    let calls = &out["calls"];
    assert_eq!(calls["kb__a__b"], "kb:a__b", "{out}");
    assert_eq!(calls["a__b"], "a:b", "{out}");
    assert_eq!(calls["tickets__search"], "tickets:search", "{out}");
    assert_eq!(calls["kb__tickets__search"], "kb:tickets__search", "{out}");

    // never: tickets' `search` is shadowed by kb's. Not silent at run time: a warning
    // naming both, and a metric (none for the profiles where nothing is shadowed).
    let out = fed_client(&gw.url("/never"), json!({"calls": [["search", {}]]})).await;
    assert_eq!(out["calls"]["search"], "kb:search", "{out}");
    let log = gw
        .log_with("a federated member's name is not shown", 1)
        .await;
    let line = log
        .lines()
        .find(|l| l.contains("a federated member's name is not shown"))
        .unwrap();
    assert!(line.contains("\"profile\":\"never\""), "{line}");
    assert!(line.contains("\"kept\":\"kb search\""), "{line}");
    assert!(line.contains("\"shadowed\":\"tickets search\""), "{line}");
    assert_eq!(
        log.matches("a federated member's name is not shown")
            .count(),
        1
    );
    let metrics = support::send(http::Method::GET, &gw.admin_url("/metrics"), &[], "")
        .await
        .body;
    assert!(
        metrics.contains("mcpgate_federation_shadowed{profile=\"never\",kind=\"tool\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("mcpgate_federation_shadowed{profile=\"always\",kind=\"tool\"} 0"),
        "{metrics}"
    );
}

/// A member killed mid-test: lists carry the others' items and name it unavailable, its
/// calls get the upstream-unavailable error, the others' calls go on; when it comes back,
/// so do its items; a member's replica goes down and its other replica serves its calls.
/// A rate rule counts a tool by the name the client sees. Forged cursors,
/// batches, and a GET or DELETE without a session are refused as a server would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_down_leaves_the_others_and_hostile_requests_change_nothing() {
    let (kb_port, tickets_port, replica_port) = (free_port(), free_port(), free_port());
    let kb = named_server(kb_port, "kb", &["search", "read"]);
    let _tickets = named_server(tickets_port, "tickets", &["search", "open"]);
    // tickets has two replicas.
    let replica = named_server(replica_port, "tickets", &["search", "open"]);
    let text = format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[transport]
fanout_timeout = "1s"

# Limits name tools as the clients see them.
[limits]
rate = [ {{ key = "global", tools = ["kb__search"], rate = "2/m", burst = 2 }} ]

[upstreams.kb]
url = "http://127.0.0.1:{kb_port}/mcp"
timeout = "5s"
[upstreams.tickets]
endpoints = ["http://127.0.0.1:{tickets_port}/mcp", "http://127.0.0.1:{replica_port}/mcp"]
session_key = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
timeout = "5s"

[profiles.assistant]
upstreams = ["kb", "tickets"]
allow = ["*"]

[profiles.other]
upstreams = ["tickets", "kb"]
allow = ["*"]

[[routes]]
listen = "main"
path = "/mcp"
profile = "assistant"
auth = "none"

[[routes]]
listen = "main"
path = "/other"
profile = "other"
auth = "none"
"#
    );
    let gw = Gateway::start(&support::with_admin(text));
    let url = gw.url("/mcp");
    let list = |cursor: Option<&str>| list_body("tools/list", cursor);
    let r = post(&url, &modern("tools/list"), &list(None)).await;
    let result = &r.messages()[0]["result"];
    assert_eq!(
        result["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["kb__search", "read", "tickets__search", "open"],
        "{result}"
    );
    assert_eq!(result["resultType"], "complete");
    assert!(result.get("_meta").is_none(), "{result}");

    // Hostile: a forged cursor, one sealed for another profile, a batch, a legacy client.
    let r = post(&url, &modern("tools/list"), &list(Some("AAAA-forged"))).await;
    assert_eq!(r.messages()[0]["error"]["code"], -32602, "{}", r.body);
    let r = post(&url, &modern("tools/list"), &list(Some(&"A".repeat(9000)))).await;
    assert_eq!(r.messages()[0]["error"]["code"], -32602, "{}", r.body);
    let batch = format!("[{},{}]", list(None), list(None));
    let r = post(&url, &modern("tools/list"), &batch).await;
    assert_eq!(r.status, 400, "{}", r.body);
    // A 2026-07-28 client has no GET stream here, nor a session to end.
    let r = support::send(
        http::Method::GET,
        &url,
        &[("accept", "text/event-stream")],
        "",
    )
    .await;
    assert_eq!(r.status, 405, "{}", r.body);
    let r = support::send(http::Method::DELETE, &url, &[], "").await;
    assert_eq!(r.status, 405, "{}", r.body);
    let call = |name: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"{name}","arguments":{{}},{META}}}}}"#
        )
    };
    let headers = |name: &'static str| {
        vec![
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", name),
        ]
    };
    // The rate rule on `kb__search` (kb's `search`) counts its calls, not tickets'.
    for _ in 0..2 {
        let r = post(&url, &headers("kb__search"), &call("kb__search")).await;
        assert_eq!(
            r.messages()[0]["result"]["content"][0]["text"],
            "kb:search",
            "{}",
            r.body
        );
    }
    let r = post(&url, &headers("kb__search"), &call("kb__search")).await;
    assert_eq!(r.status, 429, "{}", r.body);
    let r = post(&url, &headers("tickets__search"), &call("tickets__search")).await;
    assert_eq!(
        r.messages()[0]["result"]["content"][0]["text"],
        "tickets:search",
        "{}",
        r.body
    );
    // A name whose Mcp-Name says another: refused before any routing.
    let r = post(&url, &headers("open"), &call("read")).await;
    assert_eq!(r.status, 400, "{}", r.body);

    // kb goes down.
    drop(kb);
    let r = post(&url, &modern("tools/list"), &list(None)).await;
    let result = &r.messages()[0]["result"];
    assert_eq!(
        result["_meta"]["mcpgate/unavailable"],
        json!(["kb"]),
        "{result}"
    );
    let names: Vec<&str> = result["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    // The names stay as they were: a member that is down for a while renames nothing of
    // the others', so what clients hold still routes.
    assert_eq!(names, ["tickets__search", "open"], "{result}");
    let r = post(&url, &headers("open"), &call("open")).await;
    assert_eq!(
        r.messages()[0]["result"]["content"][0]["text"],
        "tickets:open",
        "{}",
        r.body
    );
    // What kb served is still known as kb's; its call gets the upstream-unavailable error.
    let r = post(&url, &headers("read"), &call("read")).await;
    assert_eq!(r.status, 502, "{}", r.body);
    let metrics = reqwest_text(&gw.admin_url("/metrics")).await;
    assert!(
        metrics
            .contains(r#"mcpgate_federation_member_available{profile="assistant",member="kb"} 0"#),
        "{metrics}"
    );
    let status: Value =
        serde_json::from_str(&reqwest_text(&gw.admin_url("/status")).await).unwrap();
    let kb = status["federation"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["profile"] == "assistant" && m["member"] == "kb")
        .unwrap_or_else(|| panic!("{status}"))
        .clone();
    assert_eq!(kb["available"], false, "{kb}");
    assert!(
        kb["error"].as_str().unwrap().contains("connection failed"),
        "{kb}"
    );
    let page = reqwest_text(&gw.admin_url("/")).await;
    assert!(page.contains("<table id=federation>"), "{page}");

    // One of tickets' replicas goes down too: its calls go to the other.
    drop(replica);
    for _ in 0..4 {
        let r = post(&url, &headers("open"), &call("open")).await;
        assert_eq!(
            r.messages()[0]["result"]["content"][0]["text"],
            "tickets:open",
            "{}",
            r.body
        );
    }

    // kb comes back on its port.
    let _kb = named_server(kb_port, "kb", &["search", "read"]);
    let r = post(&url, &modern("tools/list"), &list(None)).await;
    let result = &r.messages()[0]["result"];
    assert!(result.get("_meta").is_none(), "{result}");
    assert_eq!(result["tools"].as_array().unwrap().len(), 4, "{result}");
    let r = post(&url, &headers("read"), &call("read")).await;
    assert_eq!(
        r.messages()[0]["result"]["content"][0]["text"],
        "kb:read",
        "{}",
        r.body
    );
}

async fn reqwest_text(url: &str) -> String {
    support::send(http::Method::GET, url, &[], "").await.body
}

/// The TypeScript SDK v1 client's full tour (`ts1_bridge_client.mjs`): a legacy session
/// that is asked for input, logs, a GET stream, a subscription.
async fn ts1_tour(url: &str) -> Value {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || {
        let out = run_client(
            Command::new(node22())
                .current_dir(peers())
                .arg("ts1_bridge_client.mjs")
                .args([&url, "-", "full"]),
        );
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
    })
    .await
    .unwrap()
}

/// Legacy clients: one session over members of both generations. Behind `/old` the
/// TypeScript SDK v1 server (legacy: it asks on the call's stream) and a Python server;
/// behind `/new` the SDK v2 server (2026-07-28: each member session is mcpgate's bridge)
/// and the same Python server. The SDK v1 client's questions, progress, logs, GET stream
/// (a member's list change), subscription and `DELETE` each reach the right member; two
/// gateways with one `session_key` serve one session (the second opens its own member
/// sessions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_sessions_span_members_of_both_generations_and_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let (old_port, new_port, cal_port) = (free_port(), free_port(), free_port());
    let old_record = dir.path().join("old.jsonl");
    let _old = start_peer(
        Command::new(node22())
            .current_dir(peers())
            .arg("ts1_server.mjs")
            .args(["--port", &old_port.to_string(), "--record"])
            .arg(&old_record),
        old_port,
    );
    let _new = ts2_server_on(new_port, &dir.path().join("new.jsonl"));
    let _cal = named_server(cal_port, "cal", &["today"]);
    let key = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    let text = format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

# The servers start cold (Node, Python): their first answers may be slow.
[transport]
fanout_timeout = "10s"

[upstreams.old]
url = "http://127.0.0.1:{old_port}/mcp"
session_key = "{key}"
timeout = "10s"
[upstreams.new]
url = "http://127.0.0.1:{new_port}/mcp"
session_key = "{key}"
timeout = "10s"
[upstreams.cal]
url = "http://127.0.0.1:{cal_port}/mcp"
session_key = "{key}"
timeout = "10s"

[profiles.old]
upstreams = ["old", "cal"]
allow = ["*"]
[profiles.new]
upstreams = ["new", "cal"]
allow = ["*"]

[[routes]]
listen = "main"
path = "/old"
profile = "old"
auth = "none"
[[routes]]
listen = "main"
path = "/new"
profile = "new"
auth = "none"
"#
    );
    let gw = Gateway::start(&text);
    for (path, filtered_logs) in [
        ("/old", json!(["debug", "info", "warning"])),
        ("/new", json!(["info", "warning"])),
    ] {
        let out = ts1_tour(&gw.url(path)).await;
        assert_eq!(out["server"]["name"], &path[1..], "{path}: {out}");
        assert_eq!(out["session"], true, "{out}");
        let tools = out["tools"].as_array().unwrap();
        assert!(
            tools.contains(&json!("today")) && tools.contains(&json!("echo")),
            "{out}"
        );
        assert_eq!(out["echo"], "echo: hi", "{path}: {out}");
        assert_eq!(out["progress"], json!([1, 2, 3]), "{path}: {out}");
        assert_eq!(
            out["read"], "contents of file:///public/readme.txt",
            "{path}: {out}"
        );
        assert_eq!(out["prompt"], "Say hello to Ada", "{path}: {out}");
        // The member's questions (elicitation twice over, sampling, roots) reached the
        // client, and its answers the member.
        assert_eq!(out["delete"], "deleted n1", "{path}: {out}");
        assert_eq!(out["summary"], "summary: short (22)", "{path}: {out}");
        assert_eq!(out["roots"], "roots: file:///work", "{path}: {out}");
        assert_eq!(out["twice"], "confirmed by Ada", "{path}: {out}");
        assert_eq!(
            out["asked"],
            json!(["Delete note n1?", "Your name?", "Sure, Ada?"]),
            "{path}: {out}"
        );
        assert_eq!(out["ping"], true);
        // The legacy server logs what it logs; the 2026-07-28 one is given the level the
        // client set, through mcpgate's bridge.
        assert_eq!(out["logs"], filtered_logs, "{path}: {out}");
        // A member's list change, and its resource update once subscribed, on the
        // session's GET stream; nothing once unsubscribed.
        assert_eq!(out["changed"], 1, "{path}: {out}");
        assert_eq!(
            out["updated"],
            json!(["file:///public/readme.txt"]),
            "{path}: {out}"
        );
        assert_eq!(out["updated_after"], json!([]), "{path}: {out}");
    }
    // A 2026-07-28 client on the same route: the legacy member is bridged for it, its
    // question (an elicitation on the call's stream) made an input_required round.
    let out = fed_client(
        &gw.url("/old"),
        json!({"calls": [["echo", {"text": "m"}], ["delete_note", {"id": "n9"}], ["today", {}]]}),
    )
    .await;
    assert!(out["unavailable"].is_null(), "{out}");
    assert!(
        out["tools"]["names"]
            .as_array()
            .unwrap()
            .contains(&json!("echo")),
        "{out}"
    );
    assert_eq!(out["calls"]["echo"], "echo: m", "{out}");
    assert_eq!(out["calls"]["delete_note"], "deleted n9", "{out}");
    assert_eq!(out["calls"]["today"], "cal:today", "{out}");
    // The client's DELETE ended the legacy member's session.
    let seen = std::fs::read_to_string(&old_record).unwrap();
    assert!(seen.contains(r#""method":"DELETE""#), "{seen}");

    // Two replicas, one key: a session opened on one is served by the other.
    let other = Gateway::start(&text);
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let r = post(&gw.url("/old"), &[], init).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let session = r.headers["mcp-session-id"].to_str().unwrap().to_string();
    let in_session = |method: &'static str| {
        vec![
            ("mcp-session-id", session.clone()),
            ("mcp-protocol-version", "2025-11-25".to_string()),
            ("x-method", method.to_string()),
        ]
    };
    let headers = in_session("tools/call");
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"today","arguments":{}}}"#;
    let r = post(&other.url("/old"), &headers, call).await;
    assert_eq!(
        r.messages()[0]["result"]["content"][0]["text"],
        "cal:today",
        "{}",
        r.body
    );
    let r = post(
        &other.url("/old"),
        &headers,
        &call
            .replace("today", "echo")
            .replace("{}}}", r#"{"text":"x"}}}"#),
    )
    .await;
    assert_eq!(
        r.messages()[0]["result"]["content"][0]["text"],
        "echo: x",
        "{}",
        r.body
    );
    // Hostile: the id on another profile's route, a forged id, a member's answer id.
    let r = post(&other.url("/new"), &headers, call).await;
    assert_eq!(r.status, 404, "{}", r.body);
    let forged = [
        ("mcp-session-id", "bm90LWEtc2Vzc2lvbg"),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let r = post(&gw.url("/old"), &forged, call).await;
    assert_eq!(r.status, 404, "{}", r.body);
    let answer = r#"{"jsonrpc":"2.0","id":"mcpgate-fed:7:1","result":{}}"#;
    let r = post(&gw.url("/old"), &headers, answer).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let answer = r#"{"jsonrpc":"2.0","id":5,"result":{}}"#;
    let r = post(&gw.url("/old"), &headers, answer).await;
    assert_eq!(r.status, 400, "{}", r.body);
}

/// Two members paginating at once (the sample server, 3 tools a page, twice): each page
/// carries both members' next pages until each is done, and the TypeScript SDK v2 client
/// follows the one cursor through them. Annotation rules on a federated profile judge each
/// member's tools by what that member says of them, by the names the client sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_paginating_at_once_and_annotation_rules() {
    let paged = || sample::Options {
        page_size: Some(3),
        ..Default::default()
    };
    let (a, b) = (upstream(paged()).await, upstream(paged()).await);
    let text = format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.a]
url = "{a}"
protocol = "legacy"
[upstreams.b]
url = "{b}"
protocol = "legacy"

[profiles.all]
upstreams = ["a", "b"]
allow = ["*"]

[profiles.readonly]
upstreams = ["a", "b"]
prefix = "always"
allow_annotations = {{ readOnlyHint = true }}

[profiles.careful]
upstreams = ["b", "a"]
allow = ["*"]
deny_annotations = {{ readOnlyHint = false }}

[[routes]]
listen = "main"
path = "/all"
profile = "all"
auth = "none"
[[routes]]
listen = "main"
path = "/readonly"
profile = "readonly"
auth = "none"
[[routes]]
listen = "main"
path = "/careful"
profile = "careful"
auth = "none"
"#,
        a = a.url(),
        b = b.url(),
    );
    let gw = Gateway::start(&text);

    // By hand: 10 tools each, 3 a page: four pages, the first three with both members'.
    let url = gw.url("/all");
    let mut cursor: Option<String> = None;
    let mut pages: Vec<Vec<String>> = Vec::new();
    loop {
        let r = post(
            &url,
            &modern("tools/list"),
            &list_body("tools/list", cursor.as_deref()),
        )
        .await;
        let result = &r.messages()[0]["result"];
        pages.push(
            result["tools"]
                .as_array()
                .unwrap_or_else(|| panic!("{}", r.body))
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_string())
                .collect(),
        );
        cursor = result["nextCursor"].as_str().map(str::to_string);
        if cursor.is_none() {
            break;
        }
        assert!(pages.len() < 10, "{pages:?}");
    }
    let own: Vec<&str> = sample::TOOLS.iter().map(|(n, _)| *n).collect();
    let expected: Vec<Vec<String>> = own
        .chunks(3)
        .map(|chunk| {
            let a = chunk.iter().map(|n| format!("a__{n}"));
            a.chain(chunk.iter().map(|n| format!("b__{n}"))).collect()
        })
        .collect();
    assert_eq!(pages, expected);

    // The SDK client follows the same cursor (its listTools reads every page).
    let out = fed_client(
        &url,
        json!({"calls": [["b__get_document", {"id": "welcome"}]]}),
    )
    .await;
    assert_eq!(out["tools"]["names"], json!(expected.concat()), "{out}");
    assert_eq!(
        out["calls"]["b__get_document"],
        "# Welcome\nThis store holds the team's notes."
    );

    // allow_annotations: only the tools each member says are read-only.
    let read_only: Vec<&str> = own
        .iter()
        .copied()
        .filter(|n| {
            n.starts_with("get")
                || n.starts_with("list")
                || n.starts_with("search")
                || *n == "batch_read"
        })
        .collect();
    let out = fed_client(
        &gw.url("/readonly"),
        json!({"calls": [["a__search_knowledge", {"query": "notes"}], ["b__delete_document", {"id": "welcome"}], ["a__upload_document", {"id": "x", "title": "x", "text": "x"}]]}),
    )
    .await;
    let shown: Vec<&str> = out["tools"]["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let mut expected: Vec<String> = read_only.iter().map(|n| format!("a__{n}")).collect();
    expected.extend(read_only.iter().map(|n| format!("b__{n}")));
    let mut sorted = shown.clone();
    sorted.sort();
    expected.sort();
    assert_eq!(sorted, expected, "{out}");
    assert!(out["calls"]["a__search_knowledge"].is_string(), "{out}");
    assert_eq!(out["calls"]["b__delete_document"]["error"], -32602, "{out}");
    assert_eq!(out["calls"]["a__upload_document"]["error"], -32602, "{out}");

    // deny_annotations, on a gateway that has not read a list yet: the call is judged by
    // what the member said, found first.
    let gw2 = Gateway::start(&text);
    let call = |name: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{{META},"name":"{name}","arguments":{{"id":"welcome"}}}}}}"#
        )
    };
    let mut headers = modern("tools/call");
    headers.push(("mcp-name", "b__delete_document"));
    let r = post(&gw2.url("/careful"), &headers, &call("b__delete_document")).await;
    assert_eq!(r.messages()[0]["error"]["code"], -32602, "{}", r.body);
    assert!(r.body.contains("Tool not allowed"), "{}", r.body);
    let mut headers = modern("tools/call");
    headers.push(("mcp-name", "a__get_document"));
    let r = post(&gw2.url("/careful"), &headers, &call("a__get_document")).await;
    assert!(
        r.messages()[0]["result"]["content"].is_array(),
        "{}",
        r.body
    );
    // Neither member ran a tool it was not allowed.
    for s in [&a, &b] {
        let called = s.called_tools();
        assert!(
            !called
                .iter()
                .any(|n| n == "delete_document" || n == "upload_document"),
            "{called:?}"
        );
    }
}

const TASKS_META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#;

/// The tasks extension behind a federated route: a call of the tasks fixture's tool (the
/// SDK v2 server with `tasks_ext.mjs`) makes a task whose sealed id takes `tasks/get` and
/// `tasks/cancel` back to that member, with its own id; forged ids, another member's
/// sealing, another caller's and a client without the extension are refused before any
/// member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_of_a_member_is_reached_through_the_federated_route() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("received.jsonl");
    let (jobs_port, kb_port) = (free_port(), free_port());
    let _jobs = start_peer(
        Command::new(node22())
            .current_dir(peers())
            .arg("conformance2_server.mjs")
            .args(["--port", &jobs_port.to_string(), "--record"])
            .arg(&record),
        jobs_port,
    );
    let _kb = named_server(kb_port, "kb", &["search"]);
    let audit = dir.path().join("audit.jsonl");
    let text = format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.jobs]
url = "http://127.0.0.1:{jobs_port}/mcp"
timeout = "10s"
[upstreams.kb]
url = "http://127.0.0.1:{kb_port}/mcp"
timeout = "10s"

[profiles.all]
upstreams = ["kb", "jobs"]
allow = ["*"]

[[routes]]
listen = "main"
path = "/mcp"
profile = "all"

[[tokens]]
id = "alice"
sha256 = "{alice}"
profiles = ["all"]
[[tokens]]
id = "bob"
sha256 = "{bob}"
profiles = ["all"]

[audit]
path = {audit:?}
"#,
        alice = support::hash("alice-token-0123456789"),
        bob = support::hash("bob-token-0123456789ab"),
    );
    let gw = Gateway::start(&text);
    let url = gw.url("/mcp");
    let (alice, bob) = (
        support::bearer("alice-token-0123456789"),
        support::bearer("bob-token-0123456789ab"),
    );
    let headers = |method: &'static str, name: &str, who: &str| -> Vec<(String, String)> {
        vec![
            ("mcp-protocol-version".into(), "2026-07-28".into()),
            ("mcp-method".into(), method.into()),
            ("mcp-name".into(), name.into()),
            ("authorization".into(), who.into()),
        ]
    };
    let send = |h: Vec<(String, String)>, body: String| {
        let url = url.clone();
        async move {
            let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            post(&url, &h, &body).await
        }
    };
    let made = send(
        headers("tools/call", "slow_compute", &alice),
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"slow_compute","arguments":{{"seconds":30,"label":"x"}},{TASKS_META}}}}}"#
        ),
    )
    .await;
    let result = made.messages()[0]["result"].clone();
    assert_eq!(result["resultType"], "task", "{}", made.body);
    let task = result["taskId"].as_str().unwrap().to_string();
    let task_request = |method: &str, task: &str, meta: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":9,"method":"{method}","params":{{"taskId":{},{meta}}}}}"#,
            json!(task)
        )
    };
    let seen = || -> Vec<(Value, Value)> {
        std::fs::read_to_string(&record)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let r: Value = serde_json::from_str(l).unwrap();
                let body = serde_json::from_str(r["body"].as_str().unwrap()).unwrap();
                (r["name"].clone(), body)
            })
            .collect()
    };

    let r = send(
        headers("tasks/get", &task, &alice),
        task_request("tasks/get", &task, TASKS_META),
    )
    .await;
    let got = &r.messages()[0]["result"];
    assert_eq!(got["taskId"], task.as_str(), "{}", r.body);
    assert_eq!(got["status"], "working", "{}", r.body);
    let (name, body) = seen().pop().unwrap();
    assert_eq!(body["method"], "tasks/get");
    let original = body["params"]["taskId"].as_str().unwrap().to_string();
    assert_ne!(original, task, "the member never sees the client's id");
    assert_eq!(name, original.as_str());

    // Refused before any member: forged, the member's own id, bob's request for alice's
    // task, and a client that did not declare the extension.
    let before = seen().len();
    for (who, id) in [
        (&alice, "forged"),
        (&alice, original.as_str()),
        (&bob, task.as_str()),
    ] {
        let r = send(
            headers("tasks/get", id, who),
            task_request("tasks/get", id, TASKS_META),
        )
        .await;
        assert_eq!(r.messages()[0]["error"]["code"], -32602, "{}", r.body);
        assert_eq!(r.messages()[0]["error"]["data"]["reason"], "unknown_task");
    }
    let r = send(
        headers("tasks/get", &task, &alice),
        task_request("tasks/get", &task, META),
    )
    .await;
    assert_eq!(r.messages()[0]["error"]["code"], -32021, "{}", r.body);
    assert_eq!(
        seen().len(),
        before,
        "no refused request reached the member"
    );

    // Cancelled at its member; the audit names it.
    let r = send(
        headers("tasks/cancel", &task, &alice),
        task_request("tasks/cancel", &task, TASKS_META),
    )
    .await;
    assert!(r.messages()[0].get("error").is_none(), "{}", r.body);
    let r = send(
        headers("tasks/get", &task, &alice),
        task_request("tasks/get", &task, TASKS_META),
    )
    .await;
    assert_eq!(
        r.messages()[0]["result"]["status"],
        "cancelled",
        "{}",
        r.body
    );
    let records = support::eventually(Duration::from_secs(5), "the cancel's record", || async {
        let text = std::fs::read_to_string(&audit).unwrap_or_default();
        let records: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        records
            .iter()
            .any(|r| r["method"] == "tasks/cancel")
            .then_some(records)
    })
    .await;
    let cancel = records
        .iter()
        .find(|r| r["method"] == "tasks/cancel")
        .unwrap();
    assert_eq!(cancel["upstream"], "jobs", "{cancel}");
}
