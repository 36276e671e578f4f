//! Approvals (docs/approvals.md) with real parts: a Python SDK server whose tools write down every
//! call they run (`py_approvals.py`), TypeScript SDK clients of both generations whose
//! elicitation handler approves, declines or cancels (`approve_client.mjs`), an operator
//! clicking Approve on the status page in headless Chromium (`browser_click.mjs`), and two
//! gateways sharing a real `redis-server`. What was approved runs once, with the arguments
//! shown; what was declined, cancelled, timed out or forged never runs.

mod support;

use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use support::{
    Gateway, Redis, free_port, hash, node22, notes_server, peers, post, python, run_client,
    start_peer,
};

/// What the server ran, in order: `tool path` per call.
fn ran(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            format!(
                "{} {}",
                v["tool"].as_str().unwrap(),
                v["path"].as_str().unwrap()
            )
        })
        .collect()
}

/// The TypeScript SDK client of `generation` (`v1`, `v2`), answering each question with
/// `answer`: what it was asked and what each call gave.
async fn client(url: &str, generation: &str, answer: &str, calls: Value) -> Value {
    let args = [
        url.to_string(),
        generation.to_string(),
        answer.to_string(),
        calls.to_string(),
    ];
    tokio::task::spawn_blocking(move || {
        let out = run_client(
            Command::new(node22())
                .current_dir(peers())
                .arg("approve_client.mjs")
                .args(&args),
        );
        let last = out.trim().lines().last().unwrap_or_default();
        serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {out}"))
    })
    .await
    .unwrap()
}

const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}}}"#;

/// A 2026-07-28 call of `tool` by the holder of `token` (if any), with `more` params
/// (`requestState`, `inputResponses`) after the arguments: its JSON-RPC answer.
async fn modern(url: &str, token: Option<&str>, tool: &str, args: Value, more: &str) -> Value {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":{},"arguments":{args}{more},{META}}}}}"#,
        json!(tool)
    );
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut h = vec![
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
    ];
    if let Some(b) = &bearer {
        h.push(("authorization", b));
    }
    post(url, &h, &body).await.messages()[0].clone()
}

/// The params of a retry with `state` and the answer `content` (JSON text).
fn retry(state: &Value, answer: &str) -> String {
    format!(r#","requestState":{state},"inputResponses":{{"mcpgate_approval":{answer}}}"#)
}

const YES: &str = r#"{"action":"accept","content":{"approve":true}}"#;

fn records(audit: &Path) -> Vec<Value> {
    std::fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

fn approval_steps(audit: &Path) -> Vec<String> {
    records(audit)
        .iter()
        .filter(|r| r["phase"] == "approval")
        .map(|r| {
            format!(
                "{} {}",
                r["decision"].as_str().unwrap(),
                r["tool"].as_str().unwrap_or("-")
            )
        })
        .collect()
}

fn message(answer: &Value) -> String {
    answer["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

const ALICE: &str = "alice-approval-token-0123456789";
const BOB: &str = "bob-approval-token-0123456789ab";

/// Both generations of client, asked by mcpgate itself: approved calls run once with the
/// arguments shown; declined, rejected, cancelled ones never; a client that cannot be
/// asked is told why; the hostile retries of a 2026-07-28 client are refused without a
/// call; every step is an audit record and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_person_at_the_client_approves_or_declines_each_call() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port, ran_file) = notes_server(dir.path());
    let audit = dir.path().join("audit.jsonl");
    let gw = Gateway::start(&support::with_admin(format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.notes]
url = "http://127.0.0.1:{port}/mcp"

[profiles.full]
upstream = "notes"
allow = ["*"]
[profiles.reader]
upstream = "notes"
allow = ["*"]
[profiles.quick]
upstream = "notes"
allow = ["*"]

[[routes]]
listen = "main"
path = "/mcp"
profile = "full"
auth = "none"
[[routes]]
listen = "main"
path = "/tok"
profile = "full"
[[routes]]
listen = "main"
path = "/reader"
profile = "reader"
auth = "none"
[[routes]]
listen = "main"
path = "/quick"
profile = "quick"
auth = "none"

[[tokens]]
id = "alice"
sha256 = "{alice}"
profiles = ["full"]
[[tokens]]
id = "bob"
sha256 = "{bob}"
profiles = ["full"]

[[approvals]]
profiles = ["full"]
tools = ["delete_*"]
message = "Delete {{path}} of {{/owner/name}}?"

[[approvals]]
profiles = ["quick"]
annotations = {{ destructiveHint = true }}
timeout = "1s"

[transport]
sse_keepalive = "1s"

[audit]
path = {audit:?}
"#,
        alice = hash(ALICE),
        bob = hash(BOB),
    )));
    let url = gw.url("/mcp");

    // Approved, in both generations: asked once, run once, the read-only call not asked.
    let out = client(
        &url,
        "v2",
        "approve",
        json!([["delete_note", {"path": "a.md"}], ["read_note", {"path": "a.md"}]]),
    )
    .await;
    assert_eq!(out["asked"].as_array().unwrap().len(), 1, "{out}");
    let asked = out["asked"][0].as_str().unwrap();
    assert!(
        asked.starts_with("Delete \"a.md\" of (no /owner/name)?\n\nTool: delete_note\nArguments: {\"path\":\"a.md\"}"),
        "{asked}"
    );
    assert_eq!(out["calls"][0]["text"], "deleted a.md", "{out}");
    assert_eq!(out["calls"][1]["text"], "the text of a.md", "{out}");
    let out = client(
        &url,
        "v1",
        "approve",
        json!([["delete_note", {"path": "c.md"}]]),
    )
    .await;
    assert_eq!(out["asked"].as_array().unwrap().len(), 1, "{out}");
    assert_eq!(out["calls"][0]["text"], "deleted c.md", "{out}");

    // Declined in the form, by the decline button, cancelled: never run.
    for generation in ["v1", "v2"] {
        for (answer, reason) in [
            ("decline", "declined"),
            ("reject", "declined"),
            ("cancel", "cancelled"),
        ] {
            let path = format!("no-{generation}-{answer}");
            let out = client(
                &url,
                generation,
                answer,
                json!([["delete_note", {"path": path}]]),
            )
            .await;
            assert_eq!(out["asked"].as_array().unwrap().len(), 1, "{out}");
            let call = &out["calls"][0];
            assert_eq!(call["error"], -32007, "{generation} {answer}: {out}");
            assert!(
                call["message"].as_str().unwrap().contains("Call declined"),
                "{out}"
            );
            assert_eq!(
                call["data"]["reason"], reason,
                "{generation} {answer}: {out}"
            );
        }
        // A client that declared no elicitation is told why, and not asked.
        let out = client(
            &url,
            generation,
            "none",
            json!([["delete_note", {"path": "none"}]]),
        )
        .await;
        assert_eq!(out["asked"], json!([]), "{out}");
        assert_eq!(
            out["calls"][0]["data"]["reason"], "approval_not_askable",
            "{out}"
        );
        assert!(
            out["calls"][0]["message"]
                .as_str()
                .unwrap()
                .contains("did not declare elicitation"),
            "{out}"
        );
    }

    // Markup and hidden text in an argument reach the person inert, and the server gets
    // the argument exactly as sent.
    let hostile = "<img src=x onerror=alert(1)>\u{202e}txt.exe";
    let out = client(
        &url,
        "v2",
        "approve",
        json!([["delete_note", {"path": hostile}]]),
    )
    .await;
    let asked = out["asked"][0].as_str().unwrap();
    assert!(
        !asked.contains('<') && !asked.contains('\u{202e}'),
        "{asked}"
    );
    assert!(
        asked.contains("\\u003cimg src=x onerror=alert(1)\\u003e\\u202etxt.exe"),
        "{asked}"
    );
    assert_eq!(
        out["calls"][0]["text"],
        format!("deleted {hostile}"),
        "{out}"
    );

    // A profile no rule names is not asked; a rule by annotations asks about the
    // destructive tool only.
    let out = client(
        &gw.url("/reader"),
        "v2",
        "none",
        json!([["delete_note", {"path": "r.md"}]]),
    )
    .await;
    assert_eq!(out["calls"][0]["text"], "deleted r.md", "{out}");
    let out = client(
        &gw.url("/quick"),
        "v2",
        "approve",
        json!([["archive_note", {"path": "q1"}], ["delete_note", {"path": "q2"}]]),
    )
    .await;
    assert_eq!(out["asked"].as_array().unwrap().len(), 1, "{out}");
    assert!(
        out["asked"][0]
            .as_str()
            .unwrap()
            .contains("Tool: delete_note"),
        "{out}"
    );
    assert_eq!(out["calls"][1]["text"], "deleted q2", "{out}");

    // Raw 2026-07-28 retries, each hostile one refused before the server.
    let tok = gw.url("/tok");
    let first = modern(
        &tok,
        Some(ALICE),
        "delete_note",
        json!({"path": "h.md"}),
        "",
    )
    .await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let form = &result["inputRequests"]["mcpgate_approval"];
    assert_eq!(form["method"], "elicitation/create", "{first}");
    assert_eq!(
        form["params"]["requestedSchema"]["required"],
        json!(["approve"]),
        "{first}"
    );
    let state = result["requestState"].clone();
    let args = json!({"path": "h.md"});
    let r = modern(
        &tok,
        Some(ALICE),
        "delete_note",
        json!({"path": "other.md"}),
        &retry(&state, YES),
    )
    .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(message(&r).contains("another call"), "{r}");
    let r = modern(
        &tok,
        Some(BOB),
        "delete_note",
        args.clone(),
        &retry(&state, YES),
    )
    .await;
    assert!(message(&r).contains("another caller"), "{r}");
    for bad in [
        r#"{"action":"accept","content":{"approve":true,"path":"/etc/passwd"}}"#,
        r#"{"action":"accept","content":{"approve":"yes"}}"#,
        r#"{"action":"accept","content":{}}"#,
    ] {
        let r = modern(
            &tok,
            Some(ALICE),
            "delete_note",
            args.clone(),
            &retry(&state, bad),
        )
        .await;
        assert_eq!(r["error"]["code"], -32602, "{bad}: {r}");
    }
    let other_key = format!(
        r#","requestState":{state},"inputResponses":{{"mcpgate_approval":{YES},"x":{YES}}}"#
    );
    let r = modern(&tok, Some(ALICE), "delete_note", args.clone(), &other_key).await;
    assert!(message(&r).contains("was not asked"), "{r}");
    let forged = modern(
        &tok,
        Some(ALICE),
        "delete_note",
        args.clone(),
        &retry(&json!("forged"), YES),
    )
    .await;
    assert_eq!(forged["error"]["code"], -32602, "{forged}");
    // Approved: runs, once; the same retry again is refused.
    let r = modern(
        &tok,
        Some(ALICE),
        "delete_note",
        args.clone(),
        &retry(&state, YES),
    )
    .await;
    assert_eq!(r["result"]["content"][0]["text"], "deleted h.md", "{r}");
    let r = modern(
        &tok,
        Some(ALICE),
        "delete_note",
        args.clone(),
        &retry(&state, YES),
    )
    .await;
    assert!(message(&r).contains("used already"), "{r}");
    // Past the rule's timeout (1s on /quick): expired.
    let quick = gw.url("/quick");
    let first = modern(&quick, None, "delete_note", json!({"path": "late"}), "").await;
    let late = first["result"]["requestState"].clone();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let r = modern(
        &quick,
        None,
        "delete_note",
        json!({"path": "late"}),
        &retry(&late, YES),
    )
    .await;
    assert!(message(&r).contains("expired"), "{r}");
    // A batch with such a call, and an answer to a question never asked.
    let batch = format!(
        "[{},{}]",
        support::call(1, "read_note"),
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete_note","arguments":{"path":"b"}}}"#
    );
    let r = post(&url, &[], &batch).await;
    assert!(r.body.contains("cannot be sent in a batch"), "{}", r.body);
    let r = post(
        &url,
        &[("mcp-session-id", "whatever")],
        r#"{"jsonrpc":"2.0","id":"mcpgate-approval-99","result":{"action":"accept","content":{"approve":true}}}"#,
    )
    .await;
    assert!(r.body.contains("no approval question"), "{}", r.body);

    // A legacy client that is slow to answer: the question's stream says it is alive.
    let init = post(
        &url,
        &[],
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"raw","version":"1"}}}"#,
    )
    .await;
    let session = init.header("mcp-session-id").to_string();
    let (stream, _) = support::send_stream(
        http::Method::POST,
        &url,
        &[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-session-id", &session),
            ("mcp-protocol-version", "2025-11-25"),
        ],
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"delete_note","arguments":{"path":"slow"}}}"#,
        Duration::from_millis(2500),
    )
    .await;
    assert!(
        stream.body.contains(r#""method":"elicitation/create""#),
        "{}",
        stream.body
    );
    assert!(stream.body.contains(": keepalive\n\n"), "{}", stream.body);

    assert_eq!(
        ran(&ran_file),
        [
            "delete_note a.md".to_string(),
            "delete_note c.md".into(),
            format!("delete_note {hostile}"),
            "delete_note r.md".into(),
            "archive_note q1".into(),
            "delete_note q2".into(),
            "delete_note h.md".into(),
        ]
    );

    // Every step recorded, with the approver; an approved call's own record follows.
    let steps = support::eventually(Duration::from_secs(5), "the approval records", || async {
        let s = approval_steps(&audit);
        let cancelled = s.iter().filter(|s| s.starts_with("cancelled")).count();
        (cancelled == 3).then_some(s)
    })
    .await;
    let count = |d: &str| {
        steps
            .iter()
            .filter(|s| s.starts_with(&format!("{d} ")))
            .count()
    };
    assert_eq!(count("approved"), 5, "{steps:?}");
    assert_eq!(count("declined"), 4, "{steps:?}");
    assert_eq!(count("cancelled"), 3, "{steps:?}");
    let all = records(&audit);
    let approved = all
        .iter()
        .position(|r| {
            r["phase"] == "approval"
                && r["decision"] == "approved"
                && r["arguments"]["path"] == "h.md"
        })
        .unwrap();
    assert_eq!(
        all[approved]["approval"],
        json!({"approver": "client", "by": "client", "rule": 1})
    );
    assert_eq!(all[approved]["token"], "alice");
    assert!(
        all[approved..].iter().any(|r| r["decision"] == "allow"
            && r["arguments"]["path"] == "h.md"
            && r["outcome"] == "ok"),
        "the approved call's own record"
    );
    let metrics = support::send(http::Method::GET, &gw.admin_url("/metrics"), &[], "")
        .await
        .body;
    assert!(
        metrics.contains("mcpgate_approvals_total{profile=\"full\",decision=\"approved\"} 4"),
        "{metrics}"
    );
    assert!(!metrics.contains(ALICE) && !gw.log().contains(ALICE));
}

/// A legacy client's approved call goes on from where it was held, as it was judged
/// before its question: a rule of one call a minute counts it once (it is not sent
/// through the limits again), the next call is refused before anyone is asked, and the
/// approved call's records are written once, under the request that asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_clients_approved_call_goes_on_as_it_was_judged() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port, ran_file) = notes_server(dir.path());
    let audit = dir.path().join("audit.jsonl");
    let collector = support::Collector::start(Some(Duration::ZERO)).await;
    let gw = Gateway::start(&format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.notes]
url = "http://127.0.0.1:{port}/mcp"

[profiles.full]
upstream = "notes"
allow = ["*"]

[[routes]]
listen = "main"
path = "/mcp"
profile = "full"
auth = "none"

[limits]
rate = [ {{ key = "client_ip", tools = ["delete_note"], rate = "1/m" }} ]

[[approvals]]
tools = ["delete_*"]

[audit]
path = {audit:?}

[telemetry]
otlp = "http://{otlp}"
sampling = 1.0
"#,
        otlp = collector.addr,
    ));
    let url = gw.url("/mcp");
    let out = client(
        &url,
        "v1",
        "approve",
        json!([["delete_note", {"path": "a.md"}]]),
    )
    .await;
    assert_eq!(out["asked"].as_array().unwrap().len(), 1, "{out}");
    assert_eq!(out["calls"][0]["text"], "deleted a.md", "{out}");
    let out = client(
        &url,
        "v1",
        "approve",
        json!([["delete_note", {"path": "b.md"}]]),
    )
    .await;
    assert_eq!(out["asked"], json!([]), "refused before asking: {out}");
    // Refused by the limit, before anyone is asked: 429 with -32005, as the SDK reports it.
    assert_eq!(out["calls"][0]["error"], 429, "{out}");
    assert!(
        out["calls"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("-32005")),
        "{out}"
    );
    assert_eq!(ran(&ran_file), ["delete_note a.md"]);

    let all = support::eventually(Duration::from_secs(5), "the call's record", || async {
        let all = records(&audit);
        all.iter()
            .any(|r| r["decision"] == "allow" && r["outcome"].is_string())
            .then_some(all)
    })
    .await;
    let of_a: Vec<&Value> = all
        .iter()
        .filter(|r| r["arguments"]["path"] == "a.md")
        .collect();
    let steps: Vec<String> = of_a
        .iter()
        .map(|r| format!("{} {}", r["phase"], r["decision"]))
        .collect();
    assert_eq!(
        steps.iter().filter(|s| s.ends_with("\"allow\"")).count(),
        1,
        "{steps:?}"
    );
    let asked = of_a.iter().find(|r| r["decision"] == "asked").unwrap();
    let allowed = of_a.iter().find(|r| r["decision"] == "allow").unwrap();
    assert_eq!(asked["request_id"], allowed["request_id"], "{steps:?}");

    // The request that asked and the approved call going on are two spans, each with an
    // id of its own.
    let calls = support::eventually(Duration::from_secs(10), "both spans", || async {
        let spans = collector.spans.lock().unwrap().clone();
        let calls: Vec<_> = spans
            .into_iter()
            .filter(|s| {
                s.attributes.iter().any(|a| {
                    a.key == "gen_ai.tool.name" && format!("{:?}", a.value).contains("delete_note")
                })
            })
            .collect();
        (calls.len() >= 3).then_some(calls)
    })
    .await;
    let mut ids: Vec<&Vec<u8>> = calls.iter().map(|s| &s.span_id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), calls.len(), "a span id used twice: {calls:?}");
}

/// `approver = "admin"`: the call waits, listed on the status page, until an operator
/// clicks Approve in a real browser (headless Chromium), declines it over the API, or its
/// time is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_approves_on_the_status_page() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port, ran_file) = notes_server(dir.path());
    let audit = dir.path().join("audit.jsonl");
    let gw = Gateway::start(&support::with_admin(format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.notes]
url = "http://127.0.0.1:{port}/mcp"

[profiles.ops]
upstream = "notes"
allow = ["*"]
[profiles.hurried]
upstream = "notes"
allow = ["*"]

[[routes]]
listen = "main"
path = "/mcp"
profile = "ops"
auth = "none"
[[routes]]
listen = "main"
path = "/hurried"
profile = "hurried"
auth = "none"

[[approvals]]
profiles = ["ops"]
tools = ["archive_*", "delete_*"]
message = "Archive or delete {{path}}?"
approver = "admin"
timeout = "60s"

[[approvals]]
profiles = ["hurried"]
tools = ["*_note"]
approver = "admin"
timeout = "1s"

[audit]
path = {audit:?}
"#
    )));
    let url = gw.url("/mcp");
    let status = |gw: &Gateway| {
        let at = gw.admin_url("/status");
        async move {
            let s = support::send(http::Method::GET, &at, &[], "").await.body;
            serde_json::from_str::<Value>(&s).unwrap()
        }
    };

    // A call waits; the operator sees what it would do.
    let waiting = {
        let url = url.clone();
        tokio::spawn(async move {
            client(
                &url,
                "v2",
                "none",
                json!([["archive_note", {"path": "<b>plans</b>"}]]),
            )
            .await
        })
    };
    let listed = support::eventually(Duration::from_secs(10), "the waiting call", || async {
        let s = status(&gw).await;
        (s["approvals"].as_array().map_or(0, Vec::len) == 1).then_some(s)
    })
    .await;
    let item = &listed["approvals"][0];
    assert_eq!(item["tool"], "archive_note", "{listed}");
    assert_eq!(
        item["arguments"], r#"{"path":"\u003cb\u003eplans\u003c/b\u003e"}"#,
        "{listed}"
    );
    let metrics = support::send(http::Method::GET, &gw.admin_url("/metrics"), &[], "")
        .await
        .body;
    assert!(metrics.contains("mcpgate_approvals_waiting 1"), "{metrics}");
    assert!(ran(&ran_file).is_empty());

    // Chromium opens the status page and clicks Approve.
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts");
    std::fs::create_dir_all(&shots).unwrap();
    let shot = shots.join("approvals-page.png");
    let (page, debug_port) = (gw.admin_url("/"), free_port().to_string());
    let clicked = tokio::task::spawn_blocking(move || {
        run_client(
            Command::new(node22())
                .current_dir(peers())
                .arg("browser_click.mjs")
                .args([&page, "button.approve", &debug_port])
                .arg(&shot),
        )
    })
    .await
    .unwrap();
    let clicked: Value = serde_json::from_str(clicked.trim().lines().last().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {clicked}"));
    assert_eq!(clicked["clicked"], true, "{clicked}");
    assert!(
        clicked["url"].as_str().unwrap().ends_with('/'),
        "back on the page: {clicked}"
    );
    assert!(
        !clicked["text"]
            .as_str()
            .unwrap()
            .contains("Calls waiting for approval"),
        "{clicked}"
    );
    let out = waiting.await.unwrap();
    assert_eq!(out["calls"][0]["text"], "archived <b>plans</b>", "{out}");
    assert_eq!(ran(&ran_file), ["archive_note <b>plans</b>"]);
    let png = std::fs::read(shots.join("approvals-page.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000);

    // Declined over the API, from a legacy client's call.
    let waiting = {
        let url = url.clone();
        tokio::spawn(async move {
            client(
                &url,
                "v1",
                "none",
                json!([["delete_note", {"path": "keep"}]]),
            )
            .await
        })
    };
    let id = support::eventually(
        Duration::from_secs(10),
        "the second waiting call",
        || async {
            status(&gw).await["approvals"][0]["id"]
                .as_str()
                .map(str::to_string)
        },
    )
    .await;
    let answer =
        |path: String, body: &'static str, extra: &'static [(&'static str, &'static str)]| {
            let at = gw.admin_url(&path);
            async move { support::send(http::Method::POST, &at, extra, body).await }
        };
    let r = answer(
        format!("/approvals/{id}"),
        "approve",
        &[("origin", "http://elsewhere.example")],
    )
    .await;
    assert_eq!(r.status.as_u16(), 403, "{}", r.body);
    let r = answer(format!("/approvals/{id}"), "maybe", &[]).await;
    assert_eq!(r.status.as_u16(), 400, "{}", r.body);
    let r = answer("/approvals/0000".into(), "approve", &[]).await;
    assert_eq!(r.status.as_u16(), 404, "{}", r.body);
    let r = answer(format!("/approvals/{id}"), r#"{"decision":"decline"}"#, &[]).await;
    assert_eq!((r.status.as_u16(), r.body.as_str()), (200, "declined\n"));
    let r = answer(format!("/approvals/{id}"), "approve", &[]).await;
    assert_eq!(r.status.as_u16(), 404, "answered once: {}", r.body);
    let out = waiting.await.unwrap();
    assert_eq!(out["calls"][0]["data"]["reason"], "declined", "{out}");

    // A client that leaves while its call waits takes the call off the list.
    let addr = gw.listeners["main"];
    let leaving = tokio::spawn(support::post_and_hang_up(
        addr,
        "/mcp",
        "",
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"archive_note","arguments":{"path":"gone"}}}"#,
        Duration::from_millis(1500),
    ));
    support::eventually(
        Duration::from_secs(10),
        "the leaving call listed",
        || async {
            (status(&gw).await["approvals"]
                .as_array()
                .map_or(0, Vec::len)
                == 1)
                .then_some(())
        },
    )
    .await;
    leaving.await.unwrap();
    support::eventually(Duration::from_secs(10), "the leaving call gone", || async {
        (status(&gw).await["approvals"] == json!([])).then_some(())
    })
    .await;

    // Nobody answers in time.
    let out = client(
        &gw.url("/hurried"),
        "v2",
        "none",
        json!([["delete_note", {"path": "late"}]]),
    )
    .await;
    assert_eq!(out["calls"][0]["data"]["reason"], "expired", "{out}");
    assert_eq!(ran(&ran_file), ["archive_note <b>plans</b>"]);

    let steps = support::eventually(Duration::from_secs(5), "the approval records", || async {
        let s = approval_steps(&audit);
        (s.len() >= 8).then_some(s)
    })
    .await;
    assert_eq!(
        steps,
        [
            "asked archive_note",
            "approved archive_note",
            "asked delete_note",
            "declined delete_note",
            "asked archive_note",
            "cancelled archive_note",
            "asked delete_note",
            "expired delete_note"
        ]
    );
    let all = records(&audit);
    let by: Vec<&Value> = all
        .iter()
        .filter(|r| r["phase"] == "approval" && r["approval"]["by"].is_string())
        .map(|r| &r["approval"]["by"])
        .collect();
    assert_eq!(by, [&json!("admin@127.0.0.1"), &json!("admin@127.0.0.1")]);
    let s = status(&gw).await;
    assert_eq!(s["approvals"], json!([]));
}

/// Two gateways with one key and one Redis: an approval used on one is refused on the
/// other, and a state asked on one is good on the other once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_used_once_across_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port, ran_file) = notes_server(dir.path());
    let redis = Redis::start();
    let config = format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.notes]
url = "http://127.0.0.1:{port}/mcp"
session_key = "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80="

[profiles.full]
upstream = "notes"
allow = ["*"]

[[routes]]
listen = "main"
path = "/mcp"
profile = "full"

[[tokens]]
id = "alice"
sha256 = "{alice}"
profiles = ["full"]

[[approvals]]
tools = ["delete_note"]

[limits.store]
redis = "{redis}"
"#,
        alice = hash(ALICE),
        redis = redis.url(),
    );
    let (a, b) = (Gateway::start(&config), Gateway::start(&config));
    let (on_a, on_b) = (a.url("/mcp"), b.url("/mcp"));
    // Asked and used on A, replayed on B; then asked on B, used on A, replayed on B.
    for (asked, used, path) in [(&on_a, &on_a, "once"), (&on_b, &on_a, "twice")] {
        let args = json!({ "path": path });
        let state = modern(asked, Some(ALICE), "delete_note", args.clone(), "").await["result"]
            ["requestState"]
            .clone();
        let r = modern(
            used,
            Some(ALICE),
            "delete_note",
            args.clone(),
            &retry(&state, YES),
        )
        .await;
        assert_eq!(
            r["result"]["content"][0]["text"],
            format!("deleted {path}").as_str(),
            "{r}"
        );
        let r = modern(&on_b, Some(ALICE), "delete_note", args, &retry(&state, YES)).await;
        assert!(message(&r).contains("used already"), "{r}");
    }
    assert_eq!(ran(&ran_file), ["delete_note once", "delete_note twice"]);
    assert_eq!(
        redis
            .cli(&["--scan", "--pattern", "*approval:*"])
            .lines()
            .count(),
        2
    );
}

/// A federated profile: the rule names the tools as its clients see them (prefixed), and
/// by annotations judges each by what its own member says. Both generations are asked;
/// the other member's tools pass unasked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_federated_profile_asks_by_the_names_its_clients_see() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port, ran_file) = notes_server(dir.path());
    let other_port = free_port();
    let _other = start_peer(
        Command::new(python())
            .arg(peers().join("py_named.py"))
            .args([&other_port.to_string(), "other", "wipe", "open"]),
        other_port,
    );
    let audit = dir.path().join("audit.jsonl");
    let gw = Gateway::start(&format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.notes]
url = "http://127.0.0.1:{port}/mcp"
[upstreams.other]
url = "http://127.0.0.1:{other_port}/mcp"

[profiles.fed]
upstreams = ["notes", "other"]
prefix = "always"
allow = ["*"]

[[routes]]
listen = "main"
path = "/fed"
profile = "fed"
auth = "none"

[[approvals]]
tools = ["notes__delete_*", "other__wipe"]
message = "Really {{path}}?"

[audit]
path = {audit:?}
"#
    ));
    let fed = gw.url("/fed");
    let out = client(
        &fed,
        "v2",
        "approve",
        json!([["notes__delete_note", {"path": "f1"}], ["other__open", {}], ["notes__read_note", {"path": "f1"}]]),
    )
    .await;
    assert_eq!(out["asked"].as_array().unwrap().len(), 1, "{out}");
    assert!(
        out["asked"][0]
            .as_str()
            .unwrap()
            .contains("Tool: notes__delete_note"),
        "{out}"
    );
    assert_eq!(out["calls"][0]["text"], "deleted f1", "{out}");
    assert_eq!(out["calls"][1]["text"], "other:open", "{out}");
    let out = client(
        &fed,
        "v1",
        "decline",
        json!([["notes__delete_note", {"path": "f2"}], ["other__wipe", {}]]),
    )
    .await;
    assert_eq!(out["asked"].as_array().unwrap().len(), 2, "{out}");
    assert_eq!(out["calls"][0]["data"]["reason"], "declined", "{out}");
    assert_eq!(out["calls"][1]["data"]["reason"], "declined", "{out}");
    let out = client(
        &fed,
        "v1",
        "approve",
        json!([["notes__delete_note", {"path": "f3"}], ["other__wipe", {}]]),
    )
    .await;
    assert_eq!(out["calls"][0]["text"], "deleted f3", "{out}");
    assert_eq!(out["calls"][1]["text"], "other:wipe", "{out}");
    assert_eq!(ran(&ran_file), ["delete_note f1", "delete_note f3"]);
    // Every approval step names the member, as the call's own records do.
    let steps: Vec<Value> = records(&audit)
        .into_iter()
        .filter(|r| r["phase"] == "approval")
        .collect();
    assert!(steps.len() >= 8, "{steps:?}");
    for s in &steps {
        let member = if s["tool"] == "other__wipe" {
            "other"
        } else {
            "notes"
        };
        assert_eq!(s["upstream"], member, "{s}");
    }
}

/// A 2026-07-28 server that asks its own confirmation of the call mcpgate had approved
/// (the SDK v2 fixture's `delete_note`): its rounds are not asked about again, but bound
/// to the arguments approved; a legacy client bridged to that server is asked both
/// questions on its call's stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_own_questions_about_an_approved_call_keep_its_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let (_server, port) = support::ts2_server(&record);
    let gw = Gateway::start(&format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.modern]
url = "http://127.0.0.1:{port}/mcp"

[profiles.full]
upstream = "modern"
allow = ["*"]

[[routes]]
listen = "main"
path = "/mcp"
profile = "full"
auth = "none"

[[approvals]]
annotations = {{ destructiveHint = true }}
message = "Delete note {{id}}?"
"#
    ));
    let url = gw.url("/mcp");
    let deleted = || {
        std::fs::read_to_string(&record)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["ran"] == "delete_note")
            .map(|v| v["id"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    for (generation, id) in [("v2", "n1"), ("v1", "n2")] {
        let out = client(
            &url,
            generation,
            "approve",
            json!([["delete_note", {"id": id}], ["echo", {"text": "hi"}]]),
        )
        .await;
        let asked: Vec<&str> = out["asked"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap())
            .collect();
        assert_eq!(asked.len(), 2, "{generation}: {out}");
        assert!(
            asked[0].starts_with(&format!("Delete note \"{id}\"?")),
            "{out}"
        );
        assert_eq!(
            asked[1],
            format!("Delete note {id}?"),
            "the server's own: {out}"
        );
        assert_eq!(out["calls"][0]["text"], format!("deleted {id}"), "{out}");
        assert_eq!(out["calls"][1]["text"], "echo: hi", "{out}");
    }
    // Raw: approved, then the server's round retried with other arguments: refused.
    let args = json!({"id": "n3"});
    let first = modern(&url, None, "delete_note", args.clone(), "").await;
    let state = first["result"]["requestState"].clone();
    let server_asks = modern(&url, None, "delete_note", args.clone(), &retry(&state, YES)).await;
    let theirs = &server_asks["result"];
    assert_eq!(theirs["resultType"], "input_required", "{server_asks}");
    assert!(
        theirs["inputRequests"]["confirm"].is_object(),
        "{server_asks}"
    );
    let their_state = theirs["requestState"].clone();
    let confirm = format!(
        r#","requestState":{their_state},"inputResponses":{{"confirm":{{"action":"accept","content":{{"confirm":true}}}}}}"#
    );
    let r = modern(&url, None, "delete_note", json!({"id": "n4"}), &confirm).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["data"]["reason"], "bad_request_state", "{r}");
    let r = modern(&url, None, "delete_note", args.clone(), &confirm).await;
    assert_eq!(r["result"]["content"][0]["text"], "deleted n3", "{r}");
    assert_eq!(deleted(), ["n1", "n2", "n3"]);
}
