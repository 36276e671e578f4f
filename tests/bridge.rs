//! The bridge between MCP's generations (docs/protocol.md): legacy clients (sessions, 2025-11-25)
//! in front of a 2026-07-28 server through mcpgate. The server is the TypeScript SDK v2
//! fixture in modern-only mode (`legacy: 'reject'`), recording what reaches it; the
//! clients are the TypeScript SDK v1 client and the Python SDK 2.3 client in legacy mode,
//! each able to answer elicitation, sampling and roots, and raw HTTP for the hostile cases.

mod support;

use bytes::Bytes;
use http::Method;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use support::{Gateway, Peer, hash, node22, peers, post, python, run_client, ts2_server};

const ALICE: &str = "tok-alice-Br1dGe5eSs10nK3y0000000000000";
const BOB: &str = "tok-bob-Br1dGe5eSs10nK3y00000000000000";

/// Every request the server recorded: headers and body (not the notes of what it ran).
fn received(record: &Path) -> Vec<Value> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r.get("headers").is_some())
        .collect()
}

fn bodies(record: &Path) -> Vec<Value> {
    received(record)
        .iter()
        .filter_map(|r| {
            r["body"]
                .as_str()
                .and_then(|b| serde_json::from_str(b).ok())
        })
        .collect()
}

/// The server behind an open route and a bearer route, its era left to the probe
/// (`auto`); questions wait `input_timeout`.
fn config(port: u16, input_timeout: &str) -> String {
    support::with_admin(format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[transport]
input_timeout = "{input_timeout}"

[upstreams.ts2]
url = "http://127.0.0.1:{port}/mcp"
timeout = "10s"

[profiles.all]
upstream = "ts2"
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

fn setup(input_timeout: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("received.jsonl");
    let (server, port) = ts2_server(&record);
    let gw = Gateway::start(&config(port, input_timeout));
    Setup {
        _server: server,
        _dir: dir,
        record,
        gw,
    }
}

fn ts1_client(url: &str, bearer: Option<&str>, scenario: &str) -> Value {
    let out = run_client(
        Command::new(node22())
            .current_dir(peers())
            .arg("ts1_bridge_client.mjs")
            .args([url, bearer.unwrap_or("-"), scenario]),
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn py_client(url: &str, mode: &str, bearer: Option<&str>) -> Value {
    let out = run_client(
        Command::new(python())
            .current_dir(peers())
            .arg("py_bridge_client.py")
            .args([url, mode, bearer.unwrap_or("-")]),
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// What both legacy clients must see of the full scenario.
fn full_scenario_holds(out: &Value, roots: &str) {
    assert_eq!(out["version"], "2025-11-25", "{out}");
    assert_eq!(out["echo"], "echo: hi");
    assert_eq!(out["slow"], "slept 150");
    assert_eq!(out["progress"].as_array().unwrap().len(), 3, "{out}");
    assert_eq!(out["read"], "contents of file:///public/readme.txt");
    assert_eq!(out["prompt"], "Say hello to Ada");
    assert_eq!(out["delete"], "deleted n1");
    assert_eq!(out["summary"], "summary: short (22)");
    assert_eq!(out["roots"], format!("roots: {roots}"));
    // A server that asks twice: both questions reach the client, in order.
    assert_eq!(out["twice"], "confirmed by Ada");
    assert_eq!(
        out["asked"],
        json!(["Delete note n1?", "Your name?", "Sure, Ada?"])
    );
    let tools = out["tools"].as_array().unwrap();
    assert!(tools.contains(&json!("delete_note")), "{out}");
}

/// What the TypeScript SDK v1 client must see of what a session keeps at mcpgate: its log
/// level (none set: no log messages; `info`: from there up) and its subscription to a
/// resource (updates only while subscribed, on the GET stream).
fn session_state_holds(ts: &Value) {
    assert_eq!(ts["quiet"], "chatted", "{ts}");
    assert_eq!(ts["quiet_logs"], json!([]), "{ts}");
    assert_eq!(ts["chatty"], "chatted", "{ts}");
    assert_eq!(ts["logs"], json!(["info", "warning"]), "{ts}");
    assert_eq!(ts["updated_unsubscribed"], json!([]), "{ts}");
    assert_eq!(ts["updated"], json!(["file:///public/readme.txt"]), "{ts}");
    assert_eq!(ts["updated_after"], json!([]), "{ts}");
}

#[test]
fn legacy_sdk_clients_are_served_by_a_modern_only_server() {
    let s = setup("30s");
    // The TypeScript SDK v1 client, on the open route.
    let ts = ts1_client(&s.gw.url("/all"), None, "full");
    full_scenario_holds(&ts, "file:///work");
    assert_eq!(ts["server"]["name"], "ts2-fixture");
    assert_eq!(ts["session"], true);
    // What the client was told it may use: what the server declared, subscriptions and
    // log levels included (mcpgate keeps them for the session).
    assert_eq!(
        ts["capabilities"]["resources"],
        json!({"subscribe": true, "listChanged": true})
    );
    assert!(ts["capabilities"]["logging"].is_object(), "{ts}");
    // The list change reached its GET stream, served by a subscriptions/listen.
    assert_eq!(ts["changed"], 1, "{ts}");
    session_state_holds(&ts);

    // The Python SDK 2.3 client in legacy mode, with a token.
    let py = py_client(&s.gw.url("/team"), "legacy", Some(ALICE));
    full_scenario_holds(&py, "file:///py");

    // What reached the server: the first client's initialize, which it refused as a server
    // of 2026-07-28 only does (that is how mcpgate learnt it: nothing was sent that a
    // client did not ask for), then 2026-07-28 requests only, never a session.
    let got = received(&s.record);
    let first: Value = serde_json::from_str(got[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(first["method"], "initialize", "{first}");
    assert_eq!(first["params"]["clientInfo"]["name"], "ts1-bridge");
    let got = &got[1..];
    assert!(!got.is_empty());
    for r in got {
        let h = &r["headers"];
        assert!(h.get("mcp-session-id").is_none(), "{r}");
        assert!(h.get("authorization").is_none(), "{r}");
        let body: Value = serde_json::from_str(r["body"].as_str().unwrap()).unwrap();
        assert_ne!(body["method"], "initialize", "{r}");
        assert_ne!(body["method"], "ping", "{r}");
        assert_eq!(h["mcp-protocol-version"], "2026-07-28", "{r}");
        assert_eq!(h["mcp-method"], body["method"], "{r}");
        let meta = &body["params"]["_meta"];
        assert_eq!(
            meta["io.modelcontextprotocol/protocolVersion"], "2026-07-28",
            "{r}"
        );
        assert!(
            meta["io.modelcontextprotocol/clientCapabilities"].is_object(),
            "{r}"
        );
    }
    let sent: Vec<&Value> = got.iter().map(|r| &r["body"]).collect();
    let bodies: Vec<Value> = sent
        .iter()
        .map(|b| serde_json::from_str(b.as_str().unwrap()).unwrap())
        .collect();
    // Each client's info and capabilities went with its requests.
    let infos: Vec<&str> = bodies
        .iter()
        .filter_map(|b| b["params"]["_meta"]["io.modelcontextprotocol/clientInfo"]["name"].as_str())
        .collect();
    assert!(infos.contains(&"ts1-bridge"), "{infos:?}");
    assert!(infos.contains(&"mcp"), "{infos:?}");
    let call = bodies
        .iter()
        .find(|b| b["params"]["name"] == "echo")
        .unwrap();
    assert!(
        call["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]["elicitation"]
            .is_object()
    );
    // The retries carried the client's answers and the server's own state.
    let retried: Vec<&Value> = bodies
        .iter()
        .filter(|b| b["params"]["name"] == "ask_twice" && b["params"]["requestState"] == "Ada")
        .collect();
    assert_eq!(retried.len(), 2, "one per client");
    assert_eq!(
        retried[0]["params"]["inputResponses"]["confirm"]["content"]["confirm"],
        true
    );
    // Each round of a call is a request of its own: per client, no two rounds of its call
    // share an id (the clients got their answers under their own ids all the same).
    for client in ["ts1-bridge", "mcp"] {
        let ids: Vec<String> = bodies
            .iter()
            .filter(|b| {
                b["params"]["name"] == "ask_twice"
                    && b["params"]["_meta"]["io.modelcontextprotocol/clientInfo"]["name"] == client
            })
            .map(|b| b["id"].to_string())
            .collect();
        let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
        assert!(ids.len() >= 2, "{client}: {ids:?}");
        assert_eq!(distinct.len(), ids.len(), "{client}: an id reused: {ids:?}");
    }
    // The probe found the era, and /status shows it.
    let status = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(support::send(
            Method::GET,
            &s.gw.admin_url("/status"),
            &[],
            "",
        ));
    assert_eq!(
        status.json()["upstreams"][0]["endpoints"][0]["protocol"],
        "modern"
    );
}

#[test]
fn declined_and_refused_questions_end_the_call_as_the_client_said() {
    let s = setup("30s");
    let declined = ts1_client(&s.gw.url("/all"), None, "decline");
    assert_eq!(declined["delete"], "kept n2", "{declined}");
    let refused = ts1_client(&s.gw.url("/all"), None, "error");
    let error = refused["error"].as_str().unwrap();
    assert!(error.contains("-32600"), "{error}");
    assert!(
        error.contains("refused the server's `elicitation/create`"),
        "{error}"
    );
    assert!(error.contains("the user walked away"), "{error}");
    // Neither ran the delete.
    assert!(
        !bodies(&s.record).is_empty()
            && !std::fs::read_to_string(&s.record)
                .unwrap()
                .contains(r#""ran":"delete_note""#)
    );
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"raw","version":"1"}}}"#;

/// Initializes a bridged session on `path` and returns its id.
async fn session(gw: &Gateway, path: &str, extra: &[(&str, &str)]) -> String {
    let r = post(&gw.url(path), extra, INIT).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let m = &r.messages()[0];
    assert_eq!(m["result"]["protocolVersion"], "2025-06-18", "{m}");
    r.header("mcp-session-id").to_string()
}

/// The next JSON-RPC message of the event stream `body`.
async fn next_message(body: &mut hyper::body::Incoming, seen: &mut String) -> Value {
    support::next_message(body, seen)
        .await
        .expect("the stream goes on")
}

fn delete_call(id: u64, note: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"delete_note","arguments":{{"id":"{note}"}}}}}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_are_answered_only_by_their_session_and_in_time() {
    let s = setup("1s");
    let gw = &s.gw;
    let alice = session(
        gw,
        "/team",
        &[("authorization", &format!("Bearer {ALICE}"))],
    )
    .await;
    let alice_auth = format!("Bearer {ALICE}");
    let bob_auth = format!("Bearer {BOB}");
    let as_alice = [
        ("authorization", alice_auth.as_str()),
        ("mcp-session-id", alice.as_str()),
    ];

    // Another caller holding Alice's session id, and a forged one: 404, initialize anew.
    let stolen = post(
        &gw.url("/team"),
        &[("authorization", &bob_auth), ("mcp-session-id", &alice)],
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    )
    .await;
    assert_eq!(stolen.status, 404, "{}", stolen.body);
    let mut forged = alice.clone();
    forged.replace_range(10..12, if &alice[10..12] == "AA" { "BB" } else { "AA" });
    let forged = post(
        &gw.url("/team"),
        &[("authorization", &alice_auth), ("mcp-session-id", &forged)],
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    )
    .await;
    assert_eq!(forged.status, 404, "{}", forged.body);

    // A call that needs input, from a client that accepts only JSON: a clear refusal.
    let json_only = support::send(
        Method::POST,
        &gw.url("/team"),
        &[
            ("content-type", "application/json"),
            ("accept", "application/json"),
            as_alice[0],
            as_alice[1],
        ],
        delete_call(2, "j1"),
    )
    .await;
    let m = json_only.json();
    assert_eq!(m["error"]["code"], -32600, "{m}");
    assert_eq!(m["error"]["data"]["reason"], "input_not_bridged", "{m}");

    // A batch: a clear error, nothing forwarded.
    let batch = post(
        &gw.url("/team"),
        &as_alice,
        &format!("[{}]", delete_call(3, "b1")),
    )
    .await;
    assert_eq!(batch.status, 400, "{}", batch.body);
    // A subscription and a log level are kept by mcpgate for the session; wrong ones get
    // the errors a server would give; without a session there is nothing to keep them in.
    let sub = |params: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":4,"method":"resources/subscribe","params":{params}}}"#)
    };
    let ok = post(
        &gw.url("/team"),
        &as_alice,
        &sub(r#"{"uri":"file:///public/readme.txt"}"#),
    )
    .await;
    assert_eq!(ok.json()["result"], json!({}), "{}", ok.body);
    let no_uri = post(&gw.url("/team"), &as_alice, &sub(r#"{"uri":7}"#)).await;
    assert_eq!(no_uri.json()["error"]["code"], -32602, "{}", no_uri.body);
    let loud = post(
        &gw.url("/team"),
        &as_alice,
        r#"{"jsonrpc":"2.0","id":5,"method":"logging/setLevel","params":{"level":"loud"}}"#,
    )
    .await;
    let m = loud.json();
    assert_eq!(m["error"]["code"], -32602, "{m}");
    assert!(
        m["error"]["message"]
            .as_str()
            .unwrap()
            .contains("debug, info"),
        "{m}"
    );
    let sessionless = post(
        &gw.url("/team"),
        &as_alice[..1],
        &sub(r#"{"uri":"file:///public/readme.txt"}"#),
    )
    .await;
    assert_eq!(sessionless.status, 400, "{}", sessionless.body);
    assert!(
        sessionless.body.contains("needs the session"),
        "{}",
        sessionless.body
    );

    // A call asked for input: the question arrives on the call's stream.
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        as_alice[0],
        as_alice[1],
    ];
    let answer = support::request(
        Method::POST,
        &gw.url("/team"),
        &headers,
        Bytes::from(delete_call(5, "n5")),
    )
    .await;
    assert_eq!(answer.headers()["content-type"], "text/event-stream");
    let mut body = answer.into_body();
    let mut seen = String::new();
    let question = next_message(&mut body, &mut seen).await;
    assert_eq!(question["method"], "elicitation/create", "{question}");
    assert_eq!(question["params"]["message"], "Delete note n5?");
    let qid = question["id"].clone();
    let reply = json!({"jsonrpc": "2.0", "id": qid, "result": {"action": "accept", "content": {"confirm": true}}}).to_string();
    // Bob's session cannot answer it; an id nobody asked cannot be answered.
    let bob = session(gw, "/team", &[("authorization", &bob_auth)]).await;
    let wrong = post(
        &gw.url("/team"),
        &[("authorization", &bob_auth), ("mcp-session-id", &bob)],
        &reply,
    )
    .await;
    assert_eq!(wrong.status, 400, "{}", wrong.body);
    let unknown = json!({"jsonrpc": "2.0", "id": "mcpgate-999999", "result": {"action": "accept"}})
        .to_string();
    let unknown = post(&gw.url("/team"), &as_alice, &unknown).await;
    assert_eq!(unknown.status, 400, "{}", unknown.body);
    // Alice's answer is taken once; the call ends with the server's result.
    let taken = post(&gw.url("/team"), &as_alice, &reply).await;
    assert_eq!(taken.status, 202, "{}", taken.body);
    let again = post(&gw.url("/team"), &as_alice, &reply).await;
    assert_eq!(again.status, 400, "{}", again.body);
    let result = next_message(&mut body, &mut seen).await;
    assert_eq!(result["id"], 5);
    assert_eq!(
        result["result"]["content"][0]["text"], "deleted n5",
        "{result}"
    );

    // A client that never answers: after input_timeout the call ends with an error, and
    // the server never ran it.
    let answer = support::request(
        Method::POST,
        &gw.url("/team"),
        &headers,
        Bytes::from(delete_call(6, "n6")),
    )
    .await;
    let mut body = answer.into_body();
    let mut seen = String::new();
    let question = next_message(&mut body, &mut seen).await;
    assert_eq!(question["method"], "elicitation/create");
    let ended = next_message(&mut body, &mut seen).await;
    assert_eq!(ended["id"], 6, "{ended}");
    assert_eq!(ended["error"]["code"], -32004, "{ended}");
    assert!(
        ended["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did not answer"),
        "{ended}"
    );
    let late = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"confirm": true}}}).to_string();
    assert_eq!(post(&gw.url("/team"), &as_alice, &late).await.status, 400);
    let ran = std::fs::read_to_string(&s.record).unwrap();
    assert!(
        ran.contains(r#""ran":"delete_note","id":"n5""#),
        "the answered one ran"
    );
    for never in ["j1", "b1", "n6"] {
        assert!(
            !ran.contains(&format!(r#""ran":"delete_note","id":"{never}""#)),
            "{never} ran"
        );
    }
    // ping and DELETE are answered here.
    let ping = post(
        &gw.url("/team"),
        &as_alice,
        r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#,
    )
    .await;
    assert_eq!(ping.messages()[0]["result"], json!({}));
    let bye = support::send(Method::DELETE, &gw.url("/team"), &as_alice, "").await;
    assert_eq!(bye.status, 200);
    assert!(!bodies(&s.record).iter().any(|b| b["method"] == "ping"));
    // Nor the session's subscription or level: a 2026-07-28 server has no such methods.
    assert!(
        !bodies(&s.record)
            .iter()
            .any(|b| b["method"] == "resources/subscribe" || b["method"] == "logging/setLevel")
    );
}

/// The same clients in front of the SDK v2 server run as a stdio child that speaks only
/// 2026-07-28 (`protocol = "modern"`): the bridge is the same, the child runs without
/// `initialize`, one process per caller.
#[test]
fn legacy_sdk_clients_are_served_by_a_modern_stdio_child() {
    let node = node22();
    let server = peers().join("ts2_server.mjs");
    let text = format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.kid]
command = [{node:?}, {server:?}, "--stdio"]
protocol = "modern"
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
        printed.contains("protocol: modern (2026-07-28; legacy clients bridged)"),
        "{printed}"
    );
    let ts = ts1_client(&gw.url("/all"), None, "full");
    full_scenario_holds(&ts, "file:///work");
    assert_eq!(ts["changed"], 1, "{ts}");
    session_state_holds(&ts);
    let py = py_client(&gw.url("/all"), "legacy", None);
    full_scenario_holds(&py, "file:///py");
    // Left at `auto`, a child that refuses a legacy `initialize` (-32022) is learnt as an
    // HTTP server is: the legacy clients are bridged, not handed the refusal.
    let auto = Gateway::start(
        &text
            .replace(r#"protocol = "modern""#, r#"protocol = "auto""#)
            .replace(r#""--stdio"]"#, r#""--stdio", "--legacy", "reject"]"#),
    );
    let ts = ts1_client(&auto.url("/all"), None, "full");
    full_scenario_holds(&ts, "file:///work");
    let py = py_client(&auto.url("/all"), "legacy", None);
    full_scenario_holds(&py, "file:///py");
    // A value that names no generation is refused with the three that do.
    let refused =
        Gateway::try_start(&text.replace(r#"protocol = "modern""#, r#"protocol = "old""#))
            .err()
            .expect("refused");
    assert!(
        refused
            .1
            .contains(r#"protocol is "auto", "modern" or "legacy" on a stdio upstream"#),
        "{}",
        refused.1
    );
}
