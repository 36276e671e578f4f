//! MCP 2026-07-28 (docs/protocol.md, up to the bridge): real clients and servers of the stateless
//! protocol through mcpgate. The TypeScript SDK v2 server (`ts2_server.mjs`, modern only:
//! `legacy: 'reject'`) records every request it gets, so each test can show what reached
//! it; the TypeScript SDK v2 client (`ts2_client.mjs`) pins 2026-07-28.

mod support;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::{
    Gateway, Peer, free_port, hash, node22, peers, post, start_peer, ts2_client, ts2_server,
};

const ALICE: &str = "tok-alice-3Fh8Kq2Lm6Np0Rs4Tv8Wx2Yz6Ab0CdE";
const BOB: &str = "tok-bob-9Gj3Hk5Lm7Np9Qr1St3Uv5Wx7Yz9AbCd";

/// Every request the server recorded, its body parsed.
fn received(record: &Path) -> Vec<Value> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter_map(|r| {
            r["body"]
                .as_str()
                .and_then(|b| serde_json::from_str::<Value>(b).ok())
        })
        .collect()
}

/// Two profiles over the server: `all`, open, and `careful`, which may not delete, read
/// only public resources and use no prompts; each on an open route and a bearer route.
fn config(port: u16) -> String {
    format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.ts2]
url = "http://127.0.0.1:{port}/mcp"
timeout = "10s"

[profiles.all]
upstream = "ts2"
allow = ["*"]

[profiles.careful]
upstream = "ts2"
allow = ["*"]
deny = ["delete_note"]
resources = {{ allow = ["file:///public/*"] }}
prompts = {{ allow = [] }}

[[routes]]
listen = "main"
path = "/all"
profile = "all"
auth = "none"

[[routes]]
listen = "main"
path = "/careful"
profile = "careful"
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
    )
}

struct Setup {
    _server: Peer,
    _dir: tempfile::TempDir,
    record: PathBuf,
    port: u16,
    gw: Gateway,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("received.jsonl");
    let (server, port) = ts2_server(&record);
    let gw = Gateway::start(&config(port));
    Setup {
        _server: server,
        _dir: dir,
        record,
        port,
        gw,
    }
}

/// The audit trail at `path` once `done` holds of its records (they are written as each
/// answer ends, by a writer of their own), or as it is after 5 s.
fn audit_records(path: &Path, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let records: Vec<Value> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if done(&records) || std::time::Instant::now() > deadline {
            return records;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}"#;

fn call(id: u64, tool: &str, extra: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"id":"n9","text":"t","who":"Welt"}},{META}{extra}}}}}"#
    )
}

fn modern_headers<'a>(method: &'a str, name: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
        ("mcp-name", name),
    ]
}

#[test]
fn the_sdk_v2_client_and_server_work_through_the_gateway() {
    let s = setup();
    let out = ts2_client(&s.gw.url("/all"), "basic", None);
    assert_eq!(out["discover"]["versions"], json!(["2026-07-28"]));
    assert_eq!(out["echo"], "echo: hi");
    // A name that is not ASCII travels base64-encoded in Mcp-Name.
    assert_eq!(out["grusse"], "grüße, Welt");
    // A mirrored parameter passes to the upstream as the client wrote it.
    assert_eq!(out["where"], "rain in eu-west 1 ü");
    let mirrored: Vec<Value> = std::fs::read_to_string(&s.record)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter_map(|r| r["headers"].get("mcp-param-region").cloned())
        .collect();
    assert_eq!(mirrored, [json!("=?base64?ZXUtd2VzdCAxIMO8?=")]);
    // The elicitation round trip, through a sealed requestState.
    assert_eq!(out["elicited"], "Delete note n1?");
    assert_eq!(out["confirm"], "deleted n1");
    assert_eq!(out["progress"]["progress"], json!([1, 2, 3]));
    assert_eq!(out["read"], "contents of file:///public/readme.txt");
    assert_eq!(out["prompt"], "Say hello to Ada");
    let got = received(&s.record);
    let names: Vec<_> = got
        .iter()
        .filter(|b| b["method"] == "tools/call")
        .map(|b| b["params"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(names.contains(&"grüße".to_string()), "{names:?}");
    // The upstream got its own state back on the retry, never mcpgate's seal.
    let states: Vec<_> = got
        .iter()
        .filter_map(|b| b["params"]["requestState"].as_str())
        .collect();
    assert_eq!(states, ["state-for-n1"]);
}

#[test]
fn a_profile_holds_for_modern_clients_and_nothing_refused_reaches_the_upstream() {
    let s = setup();
    let out = ts2_client(&s.gw.url("/careful"), "denied", None);
    let tools = out["tools"].as_array().unwrap();
    assert!(!tools.contains(&json!("delete_note")), "{tools:?}");
    assert_eq!(out["delete"]["message"], "Tool not allowed: delete_note");
    assert!(
        out["secret"]["message"]
            .as_str()
            .unwrap()
            .contains("Resource not allowed"),
        "{out}"
    );
    assert_eq!(out["echo"], "echo: still fine");
    let got = received(&s.record);
    assert!(
        !got.iter().any(|b| b["params"]["name"] == "delete_note"
            || b["params"]["uri"] == "file:///secret/keys.txt"),
        "{got:?}"
    );

    // Listening, the denied resource is not subscribed to: only the public one reports.
    let out = ts2_client(&s.gw.url("/careful"), "listen", None);
    assert_eq!(
        out["listen"],
        json!(["tools", "tools", "updated file:///public/readme.txt"])
    );
    let listen = received(&s.record)
        .into_iter()
        .find(|b| b["method"] == "subscriptions/listen")
        .unwrap();
    assert_eq!(
        listen["params"]["notifications"]["resourceSubscriptions"],
        json!(["file:///public/readme.txt"])
    );
    // The open profile subscribes to both.
    let out = ts2_client(&s.gw.url("/all"), "listen", None);
    assert_eq!(out["listen"].as_array().unwrap().len(), 4, "{out}");
}

/// (How `ttlMs` is capped is held by `tools_list`'s unit test: this server says 0.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_and_lists_are_narrowed_to_the_profile() {
    let s = setup();
    let discover =
        format!(r#"{{"jsonrpc":"2.0","id":"d","method":"server/discover","params":{{{META}}}}}"#);
    let headers = vec![
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "server/discover"),
    ];
    let r = post(&s.gw.url("/careful"), &headers, &discover).await;
    let result = &r.messages()[0]["result"];
    let caps = result["capabilities"].as_object().unwrap();
    assert!(!caps.contains_key("prompts"), "{result}");
    assert_eq!(caps["tools"]["listChanged"], true);
    assert_eq!(result["cacheScope"], "private");
    let r = post(&s.gw.url("/all"), &headers, &discover).await;
    assert!(r.messages()[0]["result"]["capabilities"]["prompts"].is_object());

    let list = format!(r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{{{META}}}}}"#);
    let headers = vec![
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/list"),
    ];
    let r = post(&s.gw.url("/careful"), &headers, &list).await;
    let result = &r.messages()[0]["result"];
    assert_eq!(result["cacheScope"], "private");
    assert!(result["ttlMs"].as_u64().unwrap() <= 60_000, "{result}");
}

/// Header rules: every hostile shape is refused with HeaderMismatch (-32020) and none
/// reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrored_headers_that_do_not_say_what_the_body_says_are_refused() {
    let s = setup();
    let url = s.gw.url("/all");
    let echo = call(1, "echo", "");
    let grusse = call(2, "grüße", "");
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "doubled Mcp-Name",
            vec![
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "echo"),
                ("mcp-name", "delete_note"),
            ],
            &echo,
        ),
        (
            "doubled Mcp-Method",
            vec![
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-method", "tools/list"),
                ("mcp-name", "echo"),
            ],
            &echo,
        ),
        (
            "no Mcp-Name",
            modern_headers("tools/call", "echo")[..2].to_vec(),
            &echo,
        ),
        (
            "no Mcp-Method",
            vec![("mcp-protocol-version", "2026-07-28"), ("mcp-name", "echo")],
            &echo,
        ),
        (
            "no version header",
            vec![("mcp-method", "tools/call"), ("mcp-name", "echo")],
            &echo,
        ),
        (
            "another name",
            modern_headers("tools/call", "delete_note"),
            &echo,
        ),
        // base64 of "grüße" is Z3LDvMOfZQ==; the raw bytes, broken base64, another name.
        (
            "wrong base64",
            modern_headers("tools/call", "=?base64?Z3LDvMOfZQ?="),
            &grusse,
        ),
        (
            "base64 of another",
            modern_headers("tools/call", "=?base64?ZWNobw==?="),
            &grusse,
        ),
        (
            "upper-case marker",
            modern_headers("tools/call", "=?BASE64?Z3LDvMOfZQ==?="),
            &grusse,
        ),
        (
            "versions disagree",
            vec![
                ("mcp-protocol-version", "2025-11-25"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "echo"),
            ],
            &echo,
        ),
    ];
    for (what, headers, body) in &cases {
        let r = post(&url, headers, body).await;
        assert_eq!(r.status, 400, "{what}: {}", r.body);
        let v = r.json();
        assert_eq!(v["error"]["code"], -32020, "{what}: {v}");
        assert_eq!(v["error"]["data"]["reason"], "header_mismatch", "{what}");
    }
    // Odd versions in _meta: a date after 2026-07-28 is modern too, and held to the same
    // rules; a version that is not a date is legacy and passes to the upstream's judgment.
    let future = echo.replace("\"2026-07-28\"", "\"2031-01-01\"");
    let r = post(&url, &modern_headers("tools/call", "echo"), &future).await;
    assert_eq!(r.json()["error"]["code"], -32020, "{}", r.body);
    // An envelope without its required fields is invalid params, as a server would say.
    for (what, meta) in [
        (
            "no version",
            r#""_meta":{"io.modelcontextprotocol/clientCapabilities":{}}"#,
        ),
        (
            "no capabilities",
            r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#,
        ),
        (
            "capabilities not an object",
            r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":[]}"#,
        ),
    ] {
        let body = echo.replace(META, meta);
        let r = post(&url, &modern_headers("tools/call", "echo"), &body).await;
        assert_eq!(r.status, 400, "{what}: {}", r.body);
        assert_eq!(r.json()["error"]["code"], -32602, "{what}: {}", r.body);
        assert_eq!(
            r.json()["error"]["data"]["reason"],
            "invalid_meta",
            "{what}"
        );
    }
    assert!(received(&s.record).is_empty(), "{:?}", received(&s.record));

    // The same requests with the right headers pass; the encoded name decodes.
    let r = post(
        &url,
        &modern_headers("tools/call", "=?base64?Z3LDvMOfZQ==?="),
        &grusse,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.messages()[0]["result"]["content"][0]["text"],
        "grüße, Welt"
    );
    let r = post(&url, &modern_headers("tools/call", "echo"), &echo).await;
    assert_eq!(r.messages()[0]["result"]["content"][0]["text"], "echo: t");
    assert_eq!(received(&s.record).len(), 2);
}

/// requestState: sealed for the caller and the request; forged, another token's, another
/// request's are refused before the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_state_serves_only_its_caller_and_its_request() {
    let s = setup();
    let url = s.gw.url("/team");
    let alice = support::bearer(ALICE);
    let bob = support::bearer(BOB);
    let with = |who: &'static str| {
        let mut h = modern_headers("tools/call", "delete_note");
        h.push(("authorization", who));
        h
    };
    let alice: &'static str = Box::leak(alice.into_boxed_str());
    let bob: &'static str = Box::leak(bob.into_boxed_str());
    let (ha, hb) = (with(alice), with(bob));
    let r = post(&url, &ha, &call(1, "delete_note", "")).await;
    let asked = r.messages()[0]["result"].clone();
    assert_eq!(asked["resultType"], "input_required", "{}", r.body);
    let state = asked["requestState"].as_str().unwrap().to_string();
    assert_ne!(
        state, "state-for-n9",
        "the upstream's own state never reaches the client"
    );
    let answer = r#","inputResponses":{"confirm":{"action":"accept","content":{"confirm":true}}}"#;
    let retry = |state: &str| {
        call(
            2,
            "delete_note",
            &format!(r#"{answer},"requestState":{}"#, json!(state)),
        )
    };
    let before = received(&s.record).len();
    // Bob holds Alice's state: refused. So is a forged one, and one for another tool.
    let r = post(&url, &hb, &retry(&state)).await;
    assert_eq!(r.json()["error"]["code"], -32602, "{}", r.body);
    assert_eq!(r.json()["error"]["data"]["reason"], "bad_request_state");
    let mut forged = state.clone().into_bytes();
    forged[20] = if forged[20] == b'A' { b'B' } else { b'A' };
    let r = post(&url, &ha, &retry(&String::from_utf8(forged).unwrap())).await;
    assert_eq!(r.json()["error"]["code"], -32602);
    let r = post(&url, &ha, &retry("state-for-n9")).await;
    assert_eq!(r.json()["error"]["code"], -32602);
    let mut echo_h = modern_headers("tools/call", "echo");
    echo_h.push(("authorization", alice));
    let r = post(
        &url,
        &echo_h,
        &call(3, "echo", &format!(r#","requestState":{}"#, json!(state))),
    )
    .await;
    assert_eq!(r.json()["error"]["code"], -32602);
    assert_eq!(
        received(&s.record).len(),
        before,
        "nothing refused was forwarded"
    );
    // Alice's own retry runs, with the upstream's state restored.
    let r = post(&url, &ha, &retry(&state)).await;
    assert_eq!(
        r.messages()[0]["result"]["content"][0]["text"],
        "deleted n9",
        "{}",
        r.body
    );
    let last = received(&s.record).pop().unwrap();
    assert_eq!(last["params"]["requestState"], "state-for-n9");

    // Another gateway with its own key (no session_key) cannot open it.
    let other = Gateway::start(&config(s.port));
    let r = post(&other.url("/team"), &ha, &retry(&state)).await;
    assert_eq!(r.json()["error"]["code"], -32602, "{}", r.body);

    // With an audit trail: the round that asks has outcome `input_required`, and the
    // retry's record names the first round's request id.
    let trail = s._dir.path().join("rounds.jsonl");
    let audited = Gateway::start(&format!("[audit]\npath = {trail:?}\n{}", config(s.port)));
    let url = audited.url("/team");
    let mut first = ha.clone();
    first.push(("x-request-id", "ask-1"));
    let r = post(&url, &first, &call(5, "delete_note", "")).await;
    let state = r.messages()[0]["result"]["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", r.body))
        .to_string();
    let mut second = ha.clone();
    second.push(("x-request-id", "retry-1"));
    let r = post(&url, &second, &retry(&state)).await;
    assert_eq!(
        r.messages()[0]["result"]["content"][0]["text"],
        "deleted n9",
        "{}",
        r.body
    );
    let records = audit_records(&trail, |rs| {
        rs.iter()
            .any(|r| r["request_id"] == "retry-1" && r["outcome"].is_string())
    });
    let of = |rid: &str| {
        records
            .iter()
            .find(|r| r["request_id"] == rid && r["outcome"].is_string())
            .unwrap_or_else(|| panic!("no record of {rid}: {records:?}"))
    };
    assert_eq!(of("ask-1")["outcome"], "input_required");
    assert_eq!(of("ask-1")["first_request_id"], Value::Null);
    assert_eq!(of("retry-1")["outcome"], "ok");
    assert_eq!(of("retry-1")["first_request_id"], "ask-1");
}

/// mcpgate's own list changes (a reload) reach a listen stream that opted in, tagged with
/// its subscription id, after the upstream's acknowledgement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_reaches_listen_streams_that_opted_in() {
    let s = setup();
    let url = s.gw.url("/careful");
    let listen = format!(
        r#"{{"jsonrpc":"2.0","id":"listen:7","method":"subscriptions/listen","params":{{"notifications":{{"toolsListChanged":true}},{META}}}}}"#
    );
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "subscriptions/listen"),
    ];
    let path = s.gw.config_path().to_path_buf();
    let reload = tokio::spawn({
        let gw_pid = s.gw.pid();
        async move {
            // Once the stream is open, the careful profile may also not call `touch`.
            tokio::time::sleep(Duration::from_millis(700)).await;
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(
                &path,
                text.replace(
                    "deny = [\"delete_note\"]",
                    "deny = [\"delete_note\", \"touch\"]",
                ),
            )
            .unwrap();
            let _ = Command::new("kill")
                .args(["-HUP", &gw_pid.to_string()])
                .status();
        }
    });
    let (r, _) = support::send_stream(
        http::Method::POST,
        &url,
        &headers,
        listen,
        Duration::from_secs(3),
    )
    .await;
    reload.await.unwrap();
    let events = r.messages();
    let methods: Vec<_> = events.iter().map(|e| e["method"].clone()).collect();
    assert_eq!(
        methods,
        [
            json!("notifications/subscriptions/acknowledged"),
            json!("notifications/tools/list_changed")
        ],
        "{}",
        r.body
    );
    assert_eq!(
        events[1]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        "listen:7"
    );
}

/// A modern-only server behind annotation rules and health checks: mcpgate learns its
/// era with `server/discover`, checks it that way (a legacy ping would be refused), and
/// reads its tool annotations with stateless requests, so the rules judge at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_only_server_is_probed_checked_and_read_without_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("received.jsonl");
    let (_server, port) = ts2_server(&record);
    let text = support::with_admin(format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.ts2]
url = "http://127.0.0.1:{port}/mcp"
health = {{ interval = "300ms", timeout = "250ms", unhealthy_after = 1 }}

[profiles.safe]
upstream = "ts2"
allow = ["*"]
deny_annotations = {{ destructiveHint = true }}

[[routes]]
listen = "main"
path = "/safe"
profile = "safe"
auth = "none"
"#
    ));
    let gw = Gateway::start(&text);
    let status = support::eventually(Duration::from_secs(10), "the era is known", || {
        let url = gw.admin_url("/status");
        async move {
            let r = support::send(http::Method::GET, &url, &[], "").await;
            let v = r.json();
            let e = &v["upstreams"][0]["endpoints"][0];
            (e["protocol"] == "modern").then(|| v.clone())
        }
    })
    .await;
    // Checked a while, it stays in: nothing in its checks is refused.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let r = support::send(http::Method::GET, &gw.admin_url("/status"), &[], "").await;
    assert_eq!(
        r.json()["upstreams"][0]["endpoints"][0]["health"],
        "up",
        "{status}"
    );
    // Its annotations were read without a session: a read-only tool passes the rule,
    // a destructive one (and one that says nothing, so may destroy) does not.
    let url = gw.url("/safe");
    let r = post(
        &url,
        &modern_headers("tools/call", "echo"),
        &call(1, "echo", ""),
    )
    .await;
    assert_eq!(
        r.messages()[0]["result"]["content"][0]["text"],
        "echo: t",
        "{}",
        r.body
    );
    let r = post(
        &url,
        &modern_headers("tools/call", "delete_note"),
        &call(2, "delete_note", ""),
    )
    .await;
    assert_eq!(r.json()["error"]["code"], -32602, "{}", r.body);
    // Its era known from its checks, and that it keeps no legacy sessions from mcpgate's
    // own `initialize` (refused): a legacy client is bridged at once, its initialize not
    // sent to be refused.
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let r = post(&url, &[], init).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let session = r.header("mcp-session-id").to_string();
    let r = post(
        &url,
        &[("mcp-session-id", &session), ("mcp-protocol-version", "2025-06-18")],
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"t"}}}"#,
    )
    .await;
    assert_eq!(
        r.messages()[0]["result"]["content"][0]["text"],
        "echo: t",
        "{}",
        r.body
    );
    let got = received(&record);
    // One initialize reached it: the second half of mcpgate's era probe, never a client's.
    let inits: Vec<&Value> = got.iter().filter(|b| b["method"] == "initialize").collect();
    assert_eq!(inits.len(), 1, "{got:?}");
    assert_eq!(inits[0]["id"], "mcpgate-era");
    assert!(got.iter().all(|b| b["method"] != "ping"), "{got:?}");
    assert!(got.iter().any(|b| b["method"] == "tools/list"));
}

/// Two processes of the tasks fixture (`conformance2_server.mjs`, tasks of `tasks_ext.mjs`),
/// each keeping its own tasks, as replicas behind bearer routes, taken in turn; with a
/// session key so that replicas of mcpgate share the seals.
fn tasks_config(port: u16, port2: u16, key: &str, audit: &Path) -> String {
    format!(
        r#"
[audit]
path = {audit:?}
[[listen]]
name = "main"
addr = "127.0.0.1:0"
[upstreams.jobs]
endpoints = ["http://127.0.0.1:{port}/mcp", "http://127.0.0.1:{port2}/mcp"]
balance = "round_robin"
timeout = "10s"
session_key = "{key}"
[profiles.all]
upstream = "jobs"
allow = ["*"]
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
    )
}

const TASKS_META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#;

/// Task ids: the client holds mcpgate's seal of the server's id, which takes each task
/// request to the endpoint that holds its task (the other one does not know it), with the
/// server's id (body and `Mcp-Name`), from any mcpgate with the key. Forged ids, another token's, one from a gateway of another key, the server's own,
/// and a request without the extension are refused before the upstream; a listen stream
/// asks only for the caller's tasks and shows their ids as the client holds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_ids_serve_only_their_caller_and_reach_their_task() {
    const KEY: &str = "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80=";
    const OTHER_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("received.jsonl");
    let fixture = |port: u16| {
        start_peer(
            Command::new(node22())
                .current_dir(peers())
                .arg("conformance2_server.mjs")
                .args(["--port", &port.to_string(), "--record"])
                .arg(&record),
            port,
        )
    };
    let (port, port2) = (free_port(), free_port());
    let _servers = (fixture(port), fixture(port2));
    let trail = dir.path().join("audit.jsonl");
    let config = |key: &str, audit: &str| tasks_config(port, port2, key, &dir.path().join(audit));
    let gw = Gateway::start(&config(KEY, "audit.jsonl"));
    let replica = Gateway::start(&config(KEY, "r.jsonl"));
    let stranger = Gateway::start(&config(OTHER_KEY, "s.jsonl"));
    let (alice, bob) = (support::bearer(ALICE), support::bearer(BOB));
    let seen = || -> Vec<(Value, Value)> {
        std::fs::read_to_string(&record)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let r: Value = serde_json::from_str(l).unwrap();
                (
                    r["name"].clone(),
                    serde_json::from_str(r["body"].as_str().unwrap()).unwrap(),
                )
            })
            .collect()
    };
    let task_request = |id: u64, method: &str, task: &str, meta: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{"taskId":{},{meta}}}}}"#,
            json!(task)
        )
    };
    let ask = |url: String, who: String, method: &'static str, task: String, meta: &'static str| async move {
        let mut h = modern_headers(method, &task);
        h.push(("authorization", &who));
        post(&url, &h, &task_request(9, method, &task, meta)).await
    };

    // Alice's call makes a task; she holds a sealed id, the server's stays with mcpgate.
    let mut h = modern_headers("tools/call", "slow_compute");
    h.push(("authorization", &alice));
    h.push(("x-request-id", "make-task-1"));
    let made = post(
        &gw.url("/team"),
        &h,
        &format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"slow_compute","arguments":{{"seconds":30,"label":"x"}},{TASKS_META}}}}}"#
        ),
    )
    .await;
    let result = made.messages()[0]["result"].clone();
    assert_eq!(result["resultType"], "task", "{}", made.body);
    let task = result["taskId"].as_str().unwrap().to_string();
    let get = |g: &Gateway, who: &str, task: &str| {
        ask(
            g.url("/team"),
            who.to_string(),
            "tasks/get",
            task.to_string(),
            TASKS_META,
        )
    };
    let r = get(&gw, &alice, &task).await;
    let got = r.messages()[0]["result"].clone();
    assert_eq!(got["taskId"], task.as_str(), "{}", r.body);
    assert_eq!(got["status"], "working");
    let (name, body) = seen().pop().unwrap();
    let original = body["params"]["taskId"].as_str().unwrap().to_string();
    assert_ne!(original, task, "the server never sees the client's id");
    assert_eq!(name, original.as_str(), "Mcp-Name is the server's id too");
    assert!(!made.body.contains(&original) && !r.body.contains(&original));

    // A replica with the same key serves it; one with another key does not.
    let r = get(&replica, &alice, &task).await;
    assert_eq!(
        r.messages()[0]["result"]["taskId"],
        task.as_str(),
        "{}",
        r.body
    );
    let before = seen().len();
    let r = get(&stranger, &alice, &task).await;
    assert_eq!(r.json()["error"]["code"], -32602, "{}", r.body);
    assert_eq!(r.json()["error"]["data"]["reason"], "unknown_task");
    // Bob holds Alice's id; a forged one; the server's own id; an id of no shape.
    let r = get(&gw, &bob, &task).await;
    assert_eq!(
        r.json()["error"]["data"]["reason"],
        "unknown_task",
        "{}",
        r.body
    );
    let mut forged = task.clone().into_bytes();
    forged[20] = if forged[20] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    for bad in [forged.as_str(), original.as_str(), "gate-test", ""] {
        let r = get(&gw, &alice, bad).await;
        assert_eq!(r.json()["error"]["code"], -32602, "{bad}: {}", r.body);
    }
    // Without the extension: MissingRequiredClientCapability, naming it.
    let r = ask(
        gw.url("/team"),
        alice.clone(),
        "tasks/cancel",
        task.clone(),
        META,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], -32021);
    assert_eq!(
        r.json()["error"]["data"]["requiredCapabilities"],
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    );
    // Mcp-Name must name the task the body names.
    let mut h = modern_headers("tasks/get", "someone-else");
    h.push(("authorization", &alice));
    let r = post(
        &gw.url("/team"),
        &h,
        &task_request(9, "tasks/get", &task, TASKS_META),
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), r.json()["error"]["code"].clone()),
        (400, json!(-32020))
    );
    assert_eq!(seen().len(), before, "nothing refused was forwarded");

    // A listen stream for Alice's task and a forged one: only hers is asked for; the
    // acknowledgement and the task's notifications name it as she holds it.
    let listen = format!(
        r#"{{"jsonrpc":"2.0","id":"listen:1","method":"subscriptions/listen","params":{{"notifications":{{"taskIds":[{},{}]}},{TASKS_META}}}}}"#,
        json!(task),
        json!(forged)
    );
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "subscriptions/listen"),
        ("authorization", &alice),
    ];
    let cancel = tokio::spawn({
        let (url, alice, task) = (gw.url("/team"), alice.clone(), task.clone());
        async move {
            tokio::time::sleep(Duration::from_millis(700)).await;
            let mut h = modern_headers("tasks/cancel", &task);
            h.push(("authorization", &alice));
            post(
                &url,
                &h,
                &task_request(10, "tasks/cancel", &task, TASKS_META),
            )
            .await
        }
    });
    let (stream, _) = support::send_stream(
        http::Method::POST,
        &gw.url("/team"),
        &headers,
        listen,
        Duration::from_secs(3),
    )
    .await;
    let ack = cancel.await.unwrap();
    assert_eq!(
        ack.messages()[0]["result"]["resultType"],
        "complete",
        "{}",
        ack.body
    );
    let events = stream.messages();
    assert_eq!(
        events[0]["params"]["notifications"]["taskIds"],
        json!([task]),
        "{}",
        stream.body
    );
    let note = events
        .iter()
        .find(|e| e["method"] == "notifications/tasks")
        .unwrap_or_else(|| panic!("no task notification: {}", stream.body));
    assert_eq!(note["params"]["taskId"], task.as_str());
    assert_eq!(note["params"]["status"], "cancelled");
    assert!(!stream.body.contains(&original));
    let asked = seen()
        .into_iter()
        .find(|(_, b)| b["method"] == "subscriptions/listen")
        .unwrap()
        .1;
    assert_eq!(
        asked["params"]["notifications"]["taskIds"],
        json!([original])
    );

    // The audit trail: the call that made the task (outcome `task`), then each request
    // about it under its tool, linked to that call. Refused ones name no task.
    let records = audit_records(&trail, |rs| {
        rs.iter()
            .filter(|r| r["first_request_id"] == "make-task-1")
            .count()
            >= 2
    });
    let made = records
        .iter()
        .find(|r| r["request_id"] == "make-task-1")
        .unwrap_or_else(|| panic!("no record of the call: {records:?}"));
    assert_eq!(
        (&made["method"], &made["tool"], &made["outcome"]),
        (&json!("tools/call"), &json!("slow_compute"), &json!("task"))
    );
    let about: Vec<&Value> = records
        .iter()
        .filter(|r| r["first_request_id"] == "make-task-1")
        .collect();
    let what: Vec<(&Value, &Value)> = about
        .iter()
        .map(|r| (&r["method"], &r["outcome"]))
        .collect();
    assert_eq!(
        what,
        [
            (&json!("tasks/get"), &json!("ok")),
            (&json!("tasks/cancel"), &json!("ok"))
        ],
        "{records:?}"
    );
    for r in about {
        assert_eq!(
            (&r["tool"], &r["token"]),
            (&json!("slow_compute"), &json!("alice")),
            "{r}"
        );
    }
}

/// The Python SDK 2.3 server (`py_server.py`, which serves both generations) as a modern
/// server behind mcpgate, over HTTP and as a stdio process: the TypeScript SDK v2 client
/// and the Python SDK client in its modern mode use it without sessions, with the profile
/// holding (the deprecated tool hidden and refused); the Python client in legacy mode still
/// gets a session, from the same upstreams.
#[test]
fn python_sdk_servers_serve_modern_clients_over_http_and_stdio() {
    let port = free_port();
    let _server = start_peer(
        Command::new(support::python())
            .arg(peers().join("py_server.py"))
            .arg(port.to_string()),
        port,
    );
    let py = support::python();
    let script = peers().join("py_server.py");
    let gw = Gateway::start(&format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"
[upstreams.py_http]
url = "http://127.0.0.1:{port}/mcp"
timeout = "10s"
[upstreams.py_stdio]
command = [{py:?}, {script:?}, "stdio"]
sessions = "per_caller"
[tools]
hidden = ["move_document"]
[profiles.http]
upstream = "py_http"
allow = ["*"]
[profiles.stdio]
upstream = "py_stdio"
allow = ["*"]
[[routes]]
listen = "main"
path = "/http"
profile = "http"
auth = "none"
[[routes]]
listen = "main"
path = "/stdio"
profile = "stdio"
auth = "none"
"#,
        py = py.to_str().unwrap(),
        script = script.to_str().unwrap(),
    ));
    let python_client = |url: &str, mode: &str| {
        let out = support::run_client(
            Command::new(support::python())
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
        serde_json::from_str::<Value>(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
    };
    let listed = json!(["delete_document", "get_document", "search_knowledge"]);
    for path in ["/http", "/stdio"] {
        let url = gw.url(path);
        let ts = ts2_client(&url, "docs", None);
        assert_eq!(ts["discover"], json!(["2026-07-28"]), "{path}: {ts}");
        assert_eq!(ts["tools"], listed, "{path}: {ts}");
        assert_eq!(
            ts["get"], "This store holds the team's notes.",
            "{path}: {ts}"
        );
        // A hidden tool is refused as one the server does not have.
        assert_eq!(ts["move"]["error"], -32602, "{path}: {ts}");
        assert_eq!(ts["move"]["message"], "Unknown tool: move_document");
        for (mode, version) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
            let out = python_client(&url, mode);
            assert_eq!(out["version"], version, "{path} {mode}: {out}");
            let mut tools: Vec<Value> = out["tools"].as_array().unwrap().clone();
            tools.sort_by_key(|t| t.to_string());
            assert_eq!(Value::from(tools), listed, "{path} {mode}: {out}");
            assert_eq!(
                out["call"],
                json!(["This store holds the team's notes."]),
                "{path} {mode}: {out}"
            );
            assert!(out["refused"].is_string(), "{path} {mode}: {out}");
        }
    }
}

/// A server that answers `subscriptions/listen` as the conformance suite's reference
/// server does (`application/json`, a message per line, never ending): each message is
/// relayed as it comes, as an event to a client that takes events and as a line to one
/// that takes only JSON; nothing waits for the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_answered_as_json_lines_is_relayed_message_by_message() {
    let port = free_port();
    let _server = start_peer(
        Command::new(node22())
            .current_dir(peers())
            .arg("json_lines_server.mjs")
            .args(["--port", &port.to_string()]),
        port,
    );
    let gw = Gateway::start(&format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.lines]
url = "http://127.0.0.1:{port}/mcp"
protocol = "modern"

[profiles.all]
upstream = "lines"
allow = ["*"]

[[routes]]
listen = "main"
path = "/mcp"
profile = "all"
auth = "none"
"#
    ));
    let listen = format!(
        r#"{{"jsonrpc":"2.0","id":"listen:1","method":"subscriptions/listen","params":{{"notifications":{{"toolsListChanged":true}},{META}}}}}"#
    );
    let headers = |accept: &'static str| {
        [
            ("content-type", "application/json"),
            ("accept", accept),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "subscriptions/listen"),
        ]
    };
    let url = gw.url("/mcp");
    let (r, ended) = support::send_stream(
        http::Method::POST,
        &url,
        &headers("application/json, text/event-stream"),
        listen.clone(),
        Duration::from_millis(1500),
    )
    .await;
    assert!(!ended, "a listen stream goes on: {}", r.body);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), "text/event-stream");
    let events = r.messages();
    assert_eq!(
        events[0]["method"], "notifications/subscriptions/acknowledged",
        "{}",
        r.body
    );
    let changes = events
        .iter()
        .filter(|e| e["method"] == "notifications/tools/list_changed")
        .count();
    assert!(changes >= 3, "the changes come as they happen: {}", r.body);
    // A client that takes only JSON gets the lines as they come.
    let (r, ended) = support::send_stream(
        http::Method::POST,
        &url,
        &headers("application/json"),
        listen,
        Duration::from_millis(1000),
    )
    .await;
    assert!(!ended);
    assert_eq!(r.header("content-type"), "application/json");
    let lines: Vec<Value> = r
        .body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() >= 3, "{}", r.body);
    assert_eq!(
        lines[0]["method"],
        "notifications/subscriptions/acknowledged"
    );
}
