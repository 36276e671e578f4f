//! The bridge between MCP's generations the other way (docs/protocol.md): 2026-07-28 clients (no
//! session, `server/discover`, `input_required` rounds) in front of a legacy server
//! through mcpgate. The server is the TypeScript SDK v1 fixture (sessions only; it asks
//! for input on the call's stream), recording what reaches it; the clients are the
//! TypeScript SDK v2 client and the Python SDK 2.3 client in 2026-07-28 mode, each able to
//! answer elicitation, sampling and roots, and raw HTTP for the hostile cases.

mod support;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::{Gateway, Peer, hash, node22, peers, post, run_client, ts1_server};

const ALICE: &str = "tok-alice-L3gacyBr1dGeK3y00000000000000";
const BOB: &str = "tok-bob-L3gacyBr1dGeK3y0000000000000000";

/// What the server recorded: requests (headers and body) and notes of what it ran.
fn record(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect()
}

fn bodies(path: &Path) -> Vec<Value> {
    record(path)
        .iter()
        .filter_map(|r| {
            r["body"]
                .as_str()
                .and_then(|b| serde_json::from_str(b).ok())
        })
        .collect()
}

fn notes(path: &Path) -> Vec<Value> {
    record(path)
        .into_iter()
        .filter(|r| r.get("headers").is_none())
        .collect()
}

/// The server behind an open route and a bearer route, its era `protocol`.
fn config(port: u16, protocol: &str, input_timeout: &str) -> String {
    support::with_admin(format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[transport]
input_timeout = "{input_timeout}"

[upstreams.old]
url = "http://127.0.0.1:{port}/mcp"
timeout = "10s"
protocol = "{protocol}"

[profiles.all]
upstream = "old"
allow = ["*"]

[[routes]]
listen = "main"
path = "/all"
profile = "all"
auth = "none"

[[routes]]
listen = "main"
path = "/team"
profile = "all"

[[tokens]]
id = "alice"
sha256 = "{alice}"
profiles = ["all"]

[[tokens]]
id = "bob"
sha256 = "{bob}"
profiles = ["all"]
"#,
        alice = hash(ALICE),
        bob = hash(BOB),
    ))
}

struct Setup {
    _server: Peer,
    _dir: tempfile::TempDir,
    record: PathBuf,
    gw: Gateway,
}

fn setup(protocol: &str, input_timeout: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("received.jsonl");
    let (server, port) = ts1_server(&record);
    let gw = Gateway::start(&config(port, protocol, input_timeout));
    Setup {
        _server: server,
        _dir: dir,
        record,
        gw,
    }
}

fn ts2_client(url: &str, bearer: Option<&str>, scenario: &str) -> Value {
    let out = run_client(
        Command::new(node22())
            .current_dir(peers())
            .arg("ts2_bridge_client.mjs")
            .args([url, bearer.unwrap_or("-"), scenario]),
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// What every full scenario sees, whatever the client.
fn assert_full(out: &Value) {
    assert_eq!(out["echo"], "echo: hi", "{out}");
    assert_eq!(
        out["read"], "contents of file:///public/readme.txt",
        "{out}"
    );
    assert_eq!(out["prompt"], "Say hello to Ada", "{out}");
    assert_eq!(out["delete"], "deleted n1", "{out}");
    assert_eq!(out["summary"], "summary: short (22)", "{out}");
    assert_eq!(out["twice"], "confirmed by Ada", "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_v2_client_is_served_by_a_legacy_server() {
    let s = setup("auto", "30s");
    let out = ts2_client(&s.gw.url("/team"), Some(ALICE), "full");
    assert_full(&out);
    assert_eq!(out["discover"]["versions"], json!(["2026-07-28"]), "{out}");
    assert_eq!(out["discover"]["server"], "ts1-fixture", "{out}");
    assert_eq!(
        out["discover"]["instructions"], "A legacy fixture.",
        "{out}"
    );
    assert_eq!(
        out["tools"],
        json!([
            "ask_twice",
            "chatty",
            "delete_note",
            "echo",
            "hang",
            "roots",
            "slow",
            "summarize",
            "touch"
        ]),
        "{out}"
    );
    assert_eq!(out["slow"]["text"], "slept 150", "{out}");
    assert_eq!(out["slow"]["progress"], json!([1, 2, 3]), "{out}");
    assert_eq!(
        out["resources"],
        json!(["file:///public/readme.txt", "file:///secret/keys.txt"]),
        "{out}"
    );
    assert_eq!(out["roots"], "roots: file:///modern", "{out}");
    assert_eq!(
        out["asked"],
        json!(["Delete note n1?", "Your name?", "Sure, Ada?"]),
        "{out}"
    );
    assert_eq!(
        out["listen"],
        json!(["tools", "updated file:///public/readme.txt"]),
        "{out}"
    );
    // The server saw legacy requests only, in one session (mcpgate's initialize first),
    // and each tool that asked ran once.
    let bodies = bodies(&s.record);
    let inits: Vec<&Value> = bodies
        .iter()
        .filter(|b| b["method"] == "initialize")
        .collect();
    assert_eq!(inits.len(), 1, "{bodies:?}");
    assert_eq!(inits[0]["params"]["clientInfo"]["name"], "ts2-bridge");
    assert!(inits[0]["params"]["capabilities"]["elicitation"].is_object());
    // Before mcpgate knew the server's era (`auto`, no health checks), the client's first
    // request went as it came; the server refused it, a server/discover probe showed it
    // legacy, and from then on everything went in mcpgate's session.
    let mut sessionless = Vec::new();
    for r in record(&s.record)
        .iter()
        .filter(|r| r.get("headers").is_some())
    {
        let h = &r["headers"];
        let body: Value =
            serde_json::from_str(r["body"].as_str().unwrap_or("null")).unwrap_or_default();
        if body["method"] == "initialize" {
            continue;
        }
        if h.get("mcp-session-id").is_none() {
            sessionless.push((h["user-agent"].clone(), body["method"].clone()));
            continue;
        }
        assert_eq!(h["mcp-protocol-version"], "2025-11-25", "{r}");
        assert!(h.get("mcp-method").is_none(), "{r}");
        assert!(h.get("authorization").is_none(), "{r}");
    }
    assert_eq!(
        sessionless,
        vec![
            (json!("node"), json!("server/discover")),
            (json!("mcpgate-health"), json!("server/discover"))
        ]
    );
    let ran: Vec<Value> = notes(&s.record)
        .into_iter()
        .map(|n| n["ran"].clone())
        .collect();
    assert_eq!(
        ran.iter().filter(|r| **r == "delete_note").count(),
        1,
        "{ran:?}"
    );
}

#[test]
fn the_python_client_in_auto_mode_is_served_by_a_legacy_server() {
    let s = setup("legacy", "30s");
    let out = run_client(
        Command::new(support::python())
            .current_dir(peers())
            .arg("py_bridge_client.py")
            .args([&s.gw.url("/all"), "auto", "-"]),
    );
    let out: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    // It asked server/discover, got 2026-07-28, and spoke it.
    assert_eq!(out["version"], "2026-07-28", "{out}");
    assert_full(&out);
    assert_eq!(out["slow"], "slept 150", "{out}");
    assert_eq!(out["progress"], json!([1.0, 2.0, 3.0]), "{out}");
    assert_eq!(out["roots"], "roots: file:///py", "{out}");
    let inits = bodies(&s.record)
        .into_iter()
        .filter(|b| b["method"] == "initialize")
        .count();
    assert_eq!(inits, 1);
}

/// The 2026-07-28 fields of a request by a client that declares elicitation.
const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}}}"#;

fn delete(id: u64, note: &str, retry: Option<(&str, &str)>) -> String {
    let retry = retry.map_or(String::new(), |(state, confirm)| {
        format!(
            r#","requestState":{},"inputResponses":{{"input":{{"action":"accept","content":{{"confirm":{confirm}}}}}}}"#,
            serde_json::to_string(state).unwrap()
        )
    });
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"delete_note","arguments":{{"id":"{note}"}}{retry},{META}}}}}"#
    )
}

async fn call(gw: &Gateway, token: &str, body: &str) -> Value {
    let auth = format!("Bearer {token}");
    let r = support::send(
        http::Method::POST,
        &gw.url("/team"),
        &[
            ("content-type", "application/json"),
            ("authorization", &auth),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "delete_note"),
            ("accept", "application/json"),
        ],
        body.to_string(),
    )
    .await;
    // mcpgate's refusals of a malformed request are 400s, the rest 200.
    assert!(r.status == 200 || r.status == 400, "{}", r.body);
    serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.body))
}

fn ran(record: &Path, note: &str) -> usize {
    notes(record)
        .iter()
        .filter(|n| n["ran"] == "delete_note" && n["id"] == note)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_is_resumed_only_by_its_own_retry() {
    let s = setup("legacy", "30s");
    let first = call(&s.gw, ALICE, &delete(1, "n1", None)).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    assert_eq!(
        result["inputRequests"]["input"]["method"], "elicitation/create",
        "{first}"
    );
    assert_eq!(
        result["inputRequests"]["input"]["params"]["message"],
        "Delete note n1?"
    );
    let state = result["requestState"].as_str().unwrap().to_string();
    // The client sees mcpgate's seal, not which call is held.
    assert!(!state.contains("mcpgate-held"), "{state}");

    // A retry with another argument, a forged state, another token's retry: refused, and
    // the call still waits.
    let changed = call(&s.gw, ALICE, &delete(2, "n9", Some((&state, "true")))).await;
    assert_eq!(changed["error"]["code"], -32600, "{changed}");
    assert!(
        changed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("arguments differ"),
        "{changed}"
    );
    let mut forged = state.clone().into_bytes();
    let last = forged.len() - 3;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    let bad = call(&s.gw, ALICE, &delete(3, "n1", Some((&forged, "true")))).await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let bobs = call(&s.gw, BOB, &delete(4, "n1", Some((&state, "true")))).await;
    assert_eq!(bobs["error"]["code"], -32602, "{bobs}");
    assert_eq!(ran(&s.record, "n1"), 0);

    // The right retry: the server gets the answer, the call ends, once.
    let done = call(&s.gw, ALICE, &delete(5, "n1", Some((&state, "true")))).await;
    assert_eq!(done["id"], 5, "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "deleted n1", "{done}");
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    let again = call(&s.gw, ALICE, &delete(6, "n1", Some((&state, "true")))).await;
    assert_eq!(again["error"]["code"], -32602, "{again}");
    assert_eq!(ran(&s.record, "n1"), 1);

    // A batch cannot be bridged; a response is no way to answer.
    let batch = post(
        &s.gw.url("/all"),
        &[("mcp-protocol-version", "2026-07-28")],
        &format!("[{}]", delete(7, "n3", None)),
    )
    .await;
    assert_eq!(batch.status, 400, "{}", batch.body);
}

/// The messages of an answer, JSON or an event stream.
fn messages(body: &str) -> Vec<Value> {
    if body.trim_start().starts_with('{') {
        return vec![serde_json::from_str(body).unwrap()];
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_json::from_str(d.trim()).unwrap())
        .collect()
}

/// A 2026-07-28 request of `method` with `params` (without their `_meta`) and `meta`.
async fn modern(gw: &Gateway, method: &str, params: &str, meta: &str) -> support::Reply {
    let sep = if params.is_empty() { "" } else { "," };
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"{method}","params":{{{params}{sep}"_meta":{{{meta}}}}}}}"#
    );
    let version = serde_json::from_str::<Value>(&format!("{{{meta}}}")).unwrap()
        ["io.modelcontextprotocol/protocolVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut headers = vec![
        ("mcp-protocol-version", version.as_str()),
        ("mcp-method", method),
    ];
    let name = serde_json::from_str::<Value>(&format!("{{{params}}}")).unwrap()["name"]
        .as_str()
        .map(str::to_string);
    if let Some(n) = &name {
        headers.push(("mcp-name", n));
    }
    post(&gw.url("/all"), &headers, &body).await
}

/// What 2026-07-28 does not have, or a client did not declare, is refused as a server of
/// that revision refuses it, though the legacy server behind would have served it; log
/// messages reach a client as its request's level says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_answers_as_a_2026_07_28_server_would() {
    let s = setup("legacy", "30s");
    let gw = &s.gw;
    const BARE: &str = r#""io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}"#;
    // Methods 2026-07-28 removed, and one the server does not know: 404, -32601.
    for method in ["ping", "initialize", "logging/setLevel", "vendor/unknown"] {
        let r = modern(gw, method, "", BARE).await;
        assert_eq!(r.status, 404, "{method}: {}", r.body);
        let m = &messages(&r.body)[0];
        assert_eq!(m["error"]["code"], -32601, "{m}");
        assert_eq!(m["id"], 9, "{m}");
    }
    // A revision the bridge does not speak: 400, -32022, naming the one it does.
    let r = modern(
        gw,
        "tools/list",
        "",
        r#""io.modelcontextprotocol/protocolVersion":"v999.0.0","io.modelcontextprotocol/clientCapabilities":{}"#,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let m = &messages(&r.body)[0];
    assert_eq!(m["error"]["code"], -32022, "{m}");
    assert_eq!(
        m["error"]["data"]["supported"],
        json!(["2026-07-28"]),
        "{m}"
    );
    assert_eq!(m["error"]["data"]["requested"], "v999.0.0", "{m}");
    // The server asks for sampling, which the client did not declare: 400, -32021, naming
    // it.
    let r = modern(
        gw,
        "tools/call",
        r#""name":"summarize","arguments":{"text":"abc"}"#,
        BARE,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let m = &messages(&r.body)[0];
    assert_eq!(m["error"]["code"], -32021, "{m}");
    assert_eq!(
        m["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}})
    );
    // The server was told no, and that the call is no longer wanted.
    let got = bodies(&s.record);
    assert!(
        got.iter().any(|b| b["error"]["code"] == -32601
            && b["error"]["message"] == "the client did not declare sampling"),
        "{got:?}"
    );
    // (The cancel goes as the call is let go, after the client's answer.)
    let started = std::time::Instant::now();
    while !bodies(&s.record)
        .iter()
        .any(|b| b["method"] == "notifications/cancelled" && b["params"]["requestId"] == 9)
    {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            bodies(&s.record)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Log messages: none without a level, from the level up with one.
    let levels = |body: &str| -> Vec<String> {
        messages(body)
            .iter()
            .filter(|m| m["method"] == "notifications/message")
            .map(|m| m["params"]["level"].as_str().unwrap().to_string())
            .collect()
    };
    let quiet = modern(gw, "tools/call", r#""name":"chatty","arguments":{}"#, BARE).await;
    assert_eq!(quiet.status, 200, "{}", quiet.body);
    assert!(levels(&quiet.body).is_empty(), "{}", quiet.body);
    assert!(quiet.body.contains("chatted"), "{}", quiet.body);
    let info = format!(r#"{BARE},"io.modelcontextprotocol/logLevel":"info""#);
    let told = modern(gw, "tools/call", r#""name":"chatty","arguments":{}"#, &info).await;
    assert_eq!(levels(&told.body), ["info", "warning"], "{}", told.body);
    // The removed methods never reached the server (its initialize and log level are
    // mcpgate's own, with ids of its own); the unknown one did, and was answered there.
    let got = bodies(&s.record);
    let from_client = |method: &str| got.iter().any(|b| b["method"] == method && b["id"] == 9);
    for method in ["ping", "initialize", "logging/setLevel"] {
        assert!(!from_client(method), "{method}");
    }
    assert!(from_client("vendor/unknown"));
    // mcpgate set the session's level to the lowest, once per session.
    assert!(
        got.iter()
            .any(|b| b["method"] == "logging/setLevel" && b["params"]["level"] == "debug")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_call_and_a_client_that_left_are_cancelled_upstream() {
    let s = setup("legacy", "1s");
    let first = call(&s.gw, ALICE, &delete(1, "n1", None)).await;
    let state = first["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_string();
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    // Its time is up: the server was told, and a late retry is refused.
    assert!(
        notes(&s.record)
            .iter()
            .any(|n| n["cancelled"] == "delete_note" && n["id"] == "n1"),
        "{:?}",
        notes(&s.record)
    );
    let late = call(&s.gw, ALICE, &delete(2, "n1", Some((&state, "true")))).await;
    assert_eq!(late["error"]["code"], -32602, "{late}");
    assert_eq!(ran(&s.record, "n1"), 0);

    // A client that leaves mid-call: the server is told to stop.
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"hang","arguments":{{}},{META}}}}}"#
    );
    let headers =
        "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: hang\r\n";
    support::post_and_hang_up(
        s.gw.listeners["main"],
        "/all",
        headers,
        &body,
        Duration::from_millis(500),
    )
    .await;
    let started = std::time::Instant::now();
    while !notes(&s.record).iter().any(|n| n["cancelled"] == "hang") {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            notes(&s.record)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The same clients in front of the SDK v1 server run as a stdio child that speaks only
/// the legacy protocol (`protocol = "legacy"`): mcpgate initializes it for each caller and
/// client, and bridges the rest as over HTTP.
#[test]
fn modern_sdk_clients_are_served_by_a_legacy_stdio_child() {
    let node = node22();
    let server = peers().join("ts1_server.mjs");
    let text = format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.kid]
command = [{node:?}, {server:?}, "--stdio"]
protocol = "legacy"
timeout = "10s"

[profiles.all]
upstream = "kid"
allow = ["*"]

[[routes]]
listen = "main"
path = "/all"
profile = "all"
auth = "none"
"#
    );
    let gw = Gateway::start(&text);
    let check = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .args(["check", "--config"])
        .arg(gw.config_path())
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&check.stdout);
    assert!(
        printed.contains("protocol: legacy (sessions only; 2026-07-28 clients bridged)"),
        "{printed}"
    );
    let ts = ts2_client(&gw.url("/all"), None, "full");
    assert_full(&ts);
    assert_eq!(ts["slow"]["progress"], json!([1, 2, 3]), "{ts}");
    assert_eq!(ts["roots"], "roots: file:///modern", "{ts}");
    assert_eq!(
        ts["listen"],
        json!(["tools", "updated file:///public/readme.txt"]),
        "{ts}"
    );
    let out = run_client(
        Command::new(support::python())
            .current_dir(peers())
            .arg("py_bridge_client.py")
            .args([&gw.url("/all"), "auto", "-"]),
    );
    let py: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(py["version"], "2026-07-28", "{py}");
    assert_full(&py);
    assert_eq!(py["roots"], "roots: file:///py", "{py}");
}
