//! A caller revoked while a call of theirs is held (docs/operations.md): a reload that
//! removes the token ends every held approval, bridged question and held call of theirs.
//! Nothing of theirs runs after it, the approval leaves `/status`, the audit trail says
//! why. Real parts: the Python SDK server that writes down what it runs
//! (`py_approvals.py`), the TypeScript SDK 2026-07-28 server that asks before deleting
//! (`ts2_server.mjs`), raw clients of both generations.

mod support;

use bytes::Bytes;
use http::Method;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use support::{Gateway, hash, next_message, post};

const ALICE: &str = "alice-revoked-token-0123456789ab";
const BOB: &str = "bob-kept-token-0123456789abcdef";

/// The config: a bearer route to `url` for both callers, `rules` (TOML) after it; without
/// Alice's `[[tokens]]` entry when `alice` is false.
fn config(url: &str, rules: &str, audit: &Path, alice: bool) -> String {
    let alice = if alice {
        format!(
            "[[tokens]]\nid = \"alice\"\nsha256 = \"{}\"\nprofiles = [\"team\"]\n",
            hash(ALICE)
        )
    } else {
        String::new()
    };
    support::with_admin(format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.up]
url = "{url}"
timeout = "10s"

[profiles.team]
upstream = "up"
allow = ["*"]

[[routes]]
listen = "main"
path = "/team"
profile = "team"

{alice}
[[tokens]]
id = "bob"
sha256 = "{bob}"
profiles = ["team"]

[audit]
path = {audit:?}

{rules}
"#,
        bob = hash(BOB),
    ))
}

/// Rewrites the config without Alice's token and reloads.
async fn revoke_alice(gw: &Gateway, url: &str, rules: &str, audit: &Path) {
    std::fs::write(gw.config_path(), config(url, rules, audit, false)).unwrap();
    gw.signal("HUP");
    gw.log_with("configuration reloaded", 1).await;
}

fn records(audit: &Path) -> Vec<Value> {
    std::fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn approval_steps(audit: &Path) -> Vec<String> {
    records(audit)
        .iter()
        .filter(|r| r["phase"] == "approval")
        .map(|r| format!("{} {}", r["decision"].as_str().unwrap(), r["reason"]))
        .collect()
}

/// The approval steps once a `revoked` one is among them: its record is queued as the
/// wait is withdrawn, and the trail's writer writes it a moment later.
async fn revoked_steps(audit: &Path) -> Vec<String> {
    support::eventually(
        Duration::from_secs(10),
        "the revoked step's record",
        || async {
            let steps = approval_steps(audit);
            steps
                .iter()
                .any(|s| s.starts_with("revoked "))
                .then_some(steps)
        },
    )
    .await
}

async fn status(gw: &Gateway) -> Value {
    let s = support::send(Method::GET, &gw.admin_url("/status"), &[], "").await;
    serde_json::from_str(&s.body).unwrap()
}

/// The notes server, and its URL.
fn notes_server(dir: &Path) -> (support::Peer, String, std::path::PathBuf) {
    let (peer, port, ran) = support::notes_server(dir);
    (peer, format!("http://127.0.0.1:{port}/mcp"), ran)
}

const MODERN_META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}"#;

/// A call waiting for an operator ends when its caller's token is removed: 401 -32001,
/// gone from `/status`, never run (an operator's late approval finds nothing), and the
/// audit trail records `revoked`. Another caller's waiting call is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_callers_call_waiting_for_an_operator_never_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, url, ran) = notes_server(dir.path());
    let audit = dir.path().join("audit.jsonl");
    let rules = "[[approvals]]\nprofiles = [\"team\"]\ntools = [\"archive_*\"]\napprover = \"admin\"\ntimeout = \"60s\"\n";
    let gw = Gateway::start(&config(&url, rules, &audit, true));
    let call = |token: &'static str, path: &'static str| {
        let at = gw.url("/team");
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"archive_note","arguments":{{"path":"{path}"}},{MODERN_META}}}}}"#
        );
        tokio::spawn(async move {
            let auth = format!("Bearer {token}");
            post(
                &at,
                &[
                    ("authorization", &auth),
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "archive_note"),
                ],
                &body,
            )
            .await
        })
    };
    let alices = call(ALICE, "alice-plans");
    let bobs = call(BOB, "bob-plans");
    let listed = support::eventually(Duration::from_secs(10), "both calls wait", || async {
        let s = status(&gw).await;
        (s["approvals"].as_array().map_or(0, Vec::len) == 2).then_some(s)
    })
    .await;
    let alice_id = listed["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["caller"] == "alice")
        .map(|a| a["id"].as_str().unwrap().to_string())
        .expect("alice's call is listed");

    revoke_alice(&gw, &url, rules, &audit).await;
    let r = tokio::time::timeout(Duration::from_secs(10), alices)
        .await
        .expect("the revoked call ends at the reload")
        .unwrap();
    assert_eq!(r.status, 401, "{}", r.body);
    let m = &r.messages()[0];
    assert_eq!(m["error"]["code"], -32001, "{m}");
    assert_eq!(m["error"]["data"]["reason"], "revoked", "{m}");
    let left = status(&gw).await;
    let waiting: Vec<&Value> = left["approvals"].as_array().unwrap().iter().collect();
    assert_eq!(waiting.len(), 1, "{left}");
    assert_eq!(waiting[0]["caller"], "bob");
    // The operator's approval comes too late: nothing waits under that id.
    let late = support::send(
        Method::POST,
        &gw.admin_url(&format!("/approvals/{alice_id}")),
        &[("content-type", "application/x-www-form-urlencoded")],
        "decision=approve",
    )
    .await;
    assert_eq!(late.status, 404, "{}", late.body);
    // Bob's call is approved (with curl, as docs/approvals.md shows it, answered
    // `approved`) and runs; Alice's never did.
    let bob_id = waiting[0]["id"].as_str().unwrap().to_string();
    let at = gw.admin_url(&format!("/approvals/{bob_id}"));
    let curl = tokio::task::spawn_blocking(move || {
        Command::new("curl")
            .args([
                "-s",
                "-w",
                " %{http_code}",
                "-X",
                "POST",
                "-d",
                "approve",
                &at,
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&curl.stdout), "approved\n 200");
    let r = bobs.await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let ran_text = std::fs::read_to_string(&ran).unwrap_or_default();
    assert!(ran_text.contains("bob-plans"), "{ran_text}");
    assert!(!ran_text.contains("alice-plans"), "{ran_text}");
    revoked_steps(&audit).await;
    let revoked = records(&audit)
        .into_iter()
        .find(|r| r["decision"] == "revoked")
        .unwrap();
    assert_eq!(revoked["token"], "alice", "{revoked}");
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"raw","version":"1"}}}"#;

/// A legacy session of `token` on the gateway's `/team`, declaring elicitation.
async fn legacy_session(gw: &Gateway, token: &str) -> (String, String) {
    let auth = format!("Bearer {token}");
    let r = post(&gw.url("/team"), &[("authorization", &auth)], INIT).await;
    assert_eq!(r.status, 200, "{}", r.body);
    (auth, r.header("mcp-session-id").to_string())
}

/// A legacy call of `tool` on `session`, read as an event stream.
async fn legacy_call(
    gw: &Gateway,
    (auth, session): &(String, String),
    tool: &str,
    args: Value,
) -> hyper::body::Incoming {
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": tool, "arguments": args}});
    let answer = support::request(
        Method::POST,
        &gw.url("/team"),
        &[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("authorization", auth),
            ("mcp-session-id", session),
            ("mcp-protocol-version", "2025-06-18"),
        ],
        Bytes::from(body.to_string()),
    )
    .await;
    assert_eq!(answer.headers()["content-type"], "text/event-stream");
    answer.into_body()
}

/// A legacy client asked for its approval on its call's stream: the reload that removes
/// its token withdraws the question (a final -32001 on the stream), the call never runs,
/// and the audit trail records `revoked`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_legacy_clients_question_is_withdrawn() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, url, ran) = notes_server(dir.path());
    let audit = dir.path().join("audit.jsonl");
    let rules = "[[approvals]]\nprofiles = [\"team\"]\ntools = [\"delete_*\"]\napprover = \"client\"\ntimeout = \"60s\"\n";
    let gw = Gateway::start(&config(&url, rules, &audit, true));
    let alice = legacy_session(&gw, ALICE).await;
    let mut body = legacy_call(&gw, &alice, "delete_note", json!({"path": "alice-notes"})).await;
    let mut seen = String::new();
    let question = next_message(&mut body, &mut seen).await.unwrap();
    assert_eq!(question["method"], "elicitation/create", "{question}");

    revoke_alice(&gw, &url, rules, &audit).await;
    let ended = next_message(&mut body, &mut seen)
        .await
        .expect("a last event");
    assert_eq!(ended["id"], 5, "{ended}");
    assert_eq!(ended["error"]["code"], -32001, "{ended}");
    assert!(
        next_message(&mut body, &mut seen).await.is_none(),
        "the stream ends"
    );
    // An answer sent now is refused at the door, and nothing ran.
    let reply = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"approve": true}}});
    let late = post(
        &gw.url("/team"),
        &[("authorization", &alice.0), ("mcp-session-id", &alice.1)],
        &reply.to_string(),
    )
    .await;
    assert_eq!(late.status, 401);
    assert!(std::fs::read_to_string(&ran).unwrap_or_default().is_empty());
    let steps = revoked_steps(&audit).await;
    assert!(
        !steps.iter().any(|s| s.starts_with("cancelled ")),
        "{steps:?}"
    );
}

/// A legacy client bridged to a 2026-07-28 server that asks before deleting: the reload
/// that removes its token ends the call where it waits for the client's answer, with a
/// final -32001 on the stream; the server never gets the retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_bridged_callers_question_ends_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("received.jsonl");
    let (_server, port) = support::ts2_server(&record);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let audit = dir.path().join("audit.jsonl");
    let gw = Gateway::start(&config(&url, "", &audit, true));
    let alice = legacy_session(&gw, ALICE).await;
    let mut body = legacy_call(&gw, &alice, "delete_note", json!({"id": "n5"})).await;
    let mut seen = String::new();
    let question = next_message(&mut body, &mut seen).await.unwrap();
    assert_eq!(question["method"], "elicitation/create", "{question}");

    revoke_alice(&gw, &url, "", &audit).await;
    let ended = next_message(&mut body, &mut seen)
        .await
        .expect("a last event");
    assert_eq!(ended["id"], 5, "{ended}");
    assert_eq!(ended["error"]["code"], -32001, "{ended}");
    assert!(next_message(&mut body, &mut seen).await.is_none());
    let received = std::fs::read_to_string(&record).unwrap_or_default();
    assert!(!received.contains("inputResponses"), "no retry: {received}");
    assert!(!received.contains(r#""ran":"delete_note""#), "{received}");
}

/// A token that expires while its call waits for an operator (`not_after`, as an OAuth
/// access token's `exp`) ends that call at the instant, without a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_past_its_tokens_expiry_ends_then() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, url, ran) = notes_server(dir.path());
    let audit = dir.path().join("audit.jsonl");
    let rules = "[[approvals]]\nprofiles = [\"team\"]\ntools = [\"archive_*\"]\napprover = \"admin\"\ntimeout = \"60s\"\n";
    let at = rfc3339(std::time::SystemTime::now() + Duration::from_secs(3));
    let text = config(&url, rules, &audit, true).replace(
        "id = \"alice\"\n",
        &format!("id = \"alice\"\nnot_after = \"{at}\"\n"),
    );
    let gw = Gateway::start(&text);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"archive_note","arguments":{{"path":"late"}},{MODERN_META}}}}}"#
    );
    let auth = format!("Bearer {ALICE}");
    let started = std::time::Instant::now();
    let r = post(
        &gw.url("/team"),
        &[
            ("authorization", &auth),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "archive_note"),
        ],
        &body,
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(r.messages()[0]["error"]["data"]["reason"], "revoked");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "ended at the expiry"
    );
    assert!(
        status(&gw).await["approvals"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert!(std::fs::read_to_string(&ran).unwrap_or_default().is_empty());
}

/// RFC 3339 in UTC, seconds, for a `not_after`.
fn rfc3339(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}
