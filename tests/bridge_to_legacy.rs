//! The bridge between MCP's generations the other way (SPEC §15): 2026-07-28 clients (no
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
        .filter_map(|r| r["body"].as_str().and_then(|b| serde_json::from_str(b).ok()))
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
    assert_eq!(out["read"], "contents of file:///public/readme.txt", "{out}");
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
    assert_eq!(out["discover"]["instructions"], "A legacy fixture.", "{out}");
    assert_eq!(
        out["tools"],
        json!(["ask_twice", "delete_note", "echo", "hang", "roots", "slow", "summarize", "touch"]),
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
    let inits: Vec<&Value> = bodies.iter().filter(|b| b["method"] == "initialize").collect();
    assert_eq!(inits.len(), 1, "{bodies:?}");
    assert_eq!(inits[0]["params"]["clientInfo"]["name"], "ts2-bridge");
    assert!(inits[0]["params"]["capabilities"]["elicitation"].is_object());
    for r in record(&s.record).iter().filter(|r| r.get("headers").is_some()) {
        let h = &r["headers"];
        // The era probe (a server/discover, refused) and the initialize have no session.
        if h["user-agent"] == "mcpgate-health"
            || r["body"].as_str().is_some_and(|b| b.contains("\"initialize\""))
        {
            continue;
        }
        assert!(h["mcp-session-id"].is_string(), "{r}");
        assert_eq!(h["mcp-protocol-version"], "2025-11-25", "{r}");
        assert!(h.get("mcp-method").is_none(), "{r}");
        assert!(h.get("authorization").is_none(), "{r}");
    }
    let ran: Vec<Value> = notes(&s.record).into_iter().map(|n| n["ran"].clone()).collect();
    assert_eq!(ran.iter().filter(|r| **r == "delete_note").count(), 1, "{ran:?}");
}
