//! The audit trail end to end: records for allowed, refused and auth-failed calls,
//! durable begin/end pairs, redaction, the hash chain and `audit verify`, reopening on
//! SIGUSR1, size rotation, no lost record under concurrency, and failing closed when
//! the file cannot be written.

mod support;

use mcpgate::cli::sample;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::*;

fn with_audit(up: &str, path: &Path, extra: &str) -> String {
    format!(
        "{}\n[audit]\npath = \"{}\"\ndurable = [\"delete_*\", \"update_document\"]\nredact = [\"content\"]\n{extra}",
        config(up, "10s"),
        path.display()
    )
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Waits until `path` holds at least `n` records besides the first (genesis) line.
async fn wait_records(path: &Path, n: usize) -> Vec<Value> {
    for _ in 0..100 {
        let r = records(path);
        if r.len() > n {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    records(path)
}

fn verify(path: &Path) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .args(["audit", "verify"])
        .arg(path)
        .output()
        .unwrap();
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

fn upload(id: u64, content: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"upload_document","arguments":{{"id":"n{id}","title":"T","content":"{content}"}}}}}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_for_allowed_refused_and_failed_calls() {
    let up = json_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let gw = Gateway::start(&with_audit(&up.url(), &path, ""));
    let gpt = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));

    post(
        &gpt,
        &[("x-request-id", "r-allowed")],
        &upload(1, "the secret draft"),
    )
    .await;
    post(
        &gpt,
        &[("x-request-id", "r-hidden")],
        &call(2, "move_document"),
    )
    .await;
    post(
        &gw.url("/gpt-mcp/not-a-token/mcp"),
        &[("x-request-id", "r-authfail")],
        &call(3, "get_document"),
    )
    .await;
    let reader = bearer(READONLY);
    post(
        &gw.url("/mcp-readonly"),
        &[("authorization", &reader), ("x-request-id", "r-deny")],
        &call(4, "delete_document"),
    )
    .await;
    post(
        &gw.url("/mcp-gpt-full"),
        &[("x-request-id", "r-tool-error")],
        &call(5, "nope_document"),
    )
    .await;
    // Plain successful non-tool requests are not audited.
    post(&gpt, &[], &list(6)).await;

    let all = wait_records(&path, 5).await;
    assert_eq!(all[0]["type"], "genesis");
    let by = |rid: &str| {
        all.iter()
            .find(|r| r["request_id"] == rid)
            .unwrap_or_else(|| panic!("no record {rid}: {all:?}"))
            .clone()
    };

    let a = by("r-allowed");
    for (k, v) in [
        ("decision", "allow"),
        ("outcome", "ok"),
        ("tool", "upload_document"),
        ("method", "tools/call"),
        ("route", "/gpt-mcp/{token}/mcp"),
        ("profile", "gpt"),
        ("token", "chatgpt-app"),
        ("listener", "main"),
        ("client", "127.0.0.1"),
    ] {
        assert_eq!(a[k], v, "{k}: {a}");
    }
    assert_eq!(a["rpc_id"], 1);
    assert_eq!(a["status"], 200);
    assert_eq!(a["arguments"]["id"], "n1");
    assert_eq!(a["arguments"]["content"]["len"], 16, "redacted: {a}");
    assert!(a["arguments"]["content"]["sha256"].as_str().unwrap().len() == 64);
    for k in ["total_ms", "upstream_ms", "gateway_ms"] {
        assert!(a[k].as_f64().is_some_and(|v| v >= 0.0), "{k}: {a}");
    }
    assert!(a["time"].as_str().unwrap().ends_with('Z'));

    let h = by("r-hidden");
    assert_eq!(
        (h["decision"].as_str(), h["reason"].as_str()),
        (Some("refuse"), Some("Unknown tool: move_document"))
    );
    assert_eq!(h["outcome"], Value::Null);
    let f = by("r-authfail");
    assert_eq!(
        (
            f["decision"].as_str(),
            f["reason"].as_str(),
            f["status"].as_u64()
        ),
        (Some("refuse"), Some("bad_path_token"), Some(404))
    );
    assert_eq!(f["token"], Value::Null);
    let d = by("r-deny");
    assert_eq!(d["reason"], "Tool not allowed: delete_document");
    assert_eq!(d["token"], "reader");
    assert_eq!(
        by("r-tool-error")["outcome"],
        "jsonrpc_error",
        "the upstream's own error"
    );

    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        !text.contains("the secret draft"),
        "redacted values never appear in clear"
    );
    for t in ALL_TOKENS {
        assert!(!text.contains(t));
    }
    assert!(
        !text.contains("not-a-token"),
        "no request path in the audit trail"
    );
    let (ok, out) = verify(&path);
    assert!(ok, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_tools_get_begin_and_end_records() {
    for mode in [sample::Mode::Json, sample::Mode::Sse] {
        let up = upstream(sample::Options {
            mode,
            ..Default::default()
        })
        .await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let gw = Gateway::start(&with_audit(&up.url(), &path, ""));
        let r = post(
            &gw.url("/mcp-gpt-full"),
            &[("x-request-id", "del-1")],
            &call(9, "delete_document"),
        )
        .await;
        assert_eq!(r.status, 200);
        let all = wait_records(&path, 2).await;
        let mine: Vec<&Value> = all.iter().filter(|r| r["request_id"] == "del-1").collect();
        assert_eq!(mine.len(), 2, "{mode:?}: {all:?}");
        assert_eq!(mine[0]["phase"], "begin");
        assert_eq!(mine[0]["decision"], "allow");
        assert_eq!(mine[1]["phase"], "end");
        assert_eq!(mine[1]["outcome"], "ok");
        assert_eq!(mine[1]["tool"], "delete_document");
        assert!(verify(&path).0);
    }
}

/// A client that hangs up while the upstream works still leaves a record of its calls
/// (outcome `client_gone`), including the `end` of a durable one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_mid_call_is_recorded() {
    for (tool, id) in [("get_document", "gone-1"), ("delete_document", "gone-2")] {
        let up = upstream(sample::Options {
            call_delay: Some(Duration::from_secs(3)),
            ..Default::default()
        })
        .await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let gw = Gateway::start(&with_audit(&up.url(), &path, ""));
        // The client hangs up while the upstream still works.
        let rid = format!("X-Request-Id: {id}\r\n");
        post_and_hang_up(
            gw.listeners["main"],
            "/mcp-gpt-full",
            &rid,
            &call(5, tool),
            Duration::from_millis(400),
        )
        .await;
        let durable = tool == "delete_document";
        let all = wait_records(&path, 1 + usize::from(durable)).await;
        let mine: Vec<&Value> = all.iter().filter(|r| r["request_id"] == id).collect();
        assert_eq!(mine.len(), 1 + usize::from(durable), "{all:?}");
        let last = mine.last().unwrap();
        assert_eq!(last["outcome"], "client_gone", "{last}");
        assert_eq!(last["decision"], "allow");
        assert_eq!(last["status"], 499);
        assert_eq!(last["tool"], tool);
        assert_eq!(last["rpc_id"], 5);
        if durable {
            assert_eq!(mine[0]["phase"], "begin");
            assert_eq!(last["phase"], "end");
        }
        assert!(verify(&path).0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_the_first_tampered_line() {
    let up = json_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let gw = Gateway::start(&with_audit(&up.url(), &path, ""));
    for i in 0..5 {
        post(&gw.url("/mcp-gpt-full"), &[], &call(i, "delete_document")).await;
    }
    let all = wait_records(&path, 10).await;
    drop(gw);
    assert!(verify(&path).0);
    assert_eq!(all.len(), 11);

    // Change who did it on line 4: line 5 no longer links to it.
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    lines[3] = lines[3].replace("\"client\":\"127.0.0.1\"", "\"client\":\"10.9.9.9\"");
    let tampered = dir.path().join("tampered.jsonl");
    std::fs::write(&tampered, lines.join("\n") + "\n").unwrap();
    let (ok, out) = verify(&tampered);
    assert!(!ok);
    assert!(out.contains("tampered.jsonl:5: chain broken"), "{out}");

    // A deleted line breaks the chain too.
    let mut cut = text.lines().map(String::from).collect::<Vec<_>>();
    cut.remove(6);
    std::fs::write(&tampered, cut.join("\n") + "\n").unwrap();
    let (ok, out) = verify(&tampered);
    assert!(!ok && out.contains(":7: chain broken"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_after_a_move_writes_a_new_file_and_the_chain_goes_on() {
    let up = json_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let gw = Gateway::start(&with_audit(&up.url(), &path, ""));
    post(&gw.url("/mcp-gpt-full"), &[], &call(1, "move_document")).await;
    wait_records(&path, 1).await;
    let moved = dir.path().join("audit.jsonl.1");
    std::fs::rename(&path, &moved).unwrap();
    gw.signal("USR1");
    for _ in 0..50 {
        if path.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    post(
        &gw.url("/mcp-gpt-full"),
        &[("x-request-id", "after")],
        &call(2, "move_document"),
    )
    .await;
    let fresh = wait_records(&path, 1).await;
    assert_eq!(fresh[0]["type"], "continued");
    assert!(fresh.iter().any(|r| r["request_id"] == "after"));
    // The new file's first line carries the hash of the old file's last line.
    let old = std::fs::read_to_string(&moved).unwrap();
    let last = old.lines().last().unwrap();
    let digest =
        mcpgate::config::token::to_hex(&<sha2::Sha256 as sha2::Digest>::digest(last.as_bytes()));
    assert_eq!(fresh[0]["prev"], digest);
    assert!(verify(&moved).0 && verify(&path).0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_rotation_keeps_files_and_the_chain() {
    let up = json_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let gw = Gateway::start(&with_audit(
        &up.url(),
        &path,
        "max_size = \"2KiB\"\nkeep = 2\n",
    ));
    for i in 0..30 {
        post(&gw.url("/mcp-gpt-full"), &[], &call(i, "move_document")).await;
    }
    let rotated: Vec<PathBuf> = (1..=3)
        .map(|n| dir.path().join(format!("audit.jsonl.{n}")))
        .collect();
    // Rotated twice, and every file whole (the writer may still be at its last lines).
    support::eventually(
        Duration::from_secs(5),
        "two rotated, whole files",
        || async {
            let whole = [&path, &rotated[0], &rotated[1]]
                .iter()
                .all(|p| p.exists() && verify(p).0);
            whole.then_some(())
        },
    )
    .await;
    assert!(!rotated[2].exists(), "keep = 2");
    for p in [&path, &rotated[0], &rotated[1]] {
        assert!(verify(p).0, "{}", p.display());
        assert!(std::fs::metadata(p).unwrap().len() < 4096);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_hundred_calls_from_four_clients_give_four_hundred_records() {
    let up = json_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let gw = std::sync::Arc::new(Gateway::start(&with_audit(&up.url(), &path, "")));
    let mut clients = Vec::new();
    for c in 0..4u64 {
        let gw = gw.clone();
        clients.push(tokio::spawn(async move {
            for i in 0..100u64 {
                // A mix: allowed, durable (two records each: count ends only), refused.
                let body = match i % 3 {
                    0 => call(c * 1000 + i, "get_document"),
                    1 => call(c * 1000 + i, "update_document"),
                    _ => call(c * 1000 + i, "move_document"),
                };
                assert_eq!(post(&gw.url("/mcp-gpt-full"), &[], &body).await.status, 200);
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    let durable_calls = 4 * (0..100).filter(|i| i % 3 == 1).count();
    let all = wait_records(&path, 400 + durable_calls).await;
    let finals: Vec<&Value> = all
        .iter()
        .filter(|r| r["tool"].is_string() && r["phase"] != "begin")
        .collect();
    assert_eq!(finals.len(), 400, "one final record per call");
    assert_eq!(
        all.iter().filter(|r| r["phase"] == "begin").count(),
        durable_calls
    );
    let ids: std::collections::HashSet<String> =
        finals.iter().map(|r| r["rpc_id"].to_string()).collect();
    assert_eq!(ids.len(), 400);
    drop(gw);
    assert!(verify(&path).0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_audit_file_refuses_durable_calls_and_serves_the_rest() {
    let up = json_upstream().await;
    // /dev/full opens, but every write fails.
    let gw = Gateway::start(&with_audit(&up.url(), Path::new("/dev/full"), ""));
    let r = post(
        &gw.url("/mcp-gpt-full"),
        &[("x-request-id", "durable-1")],
        &call(1, "delete_document"),
    )
    .await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], -32003);
    assert_eq!(r.json()["id"], 1);
    let r = post(&gw.url("/mcp-gpt-full"), &[], &call(2, "get_document")).await;
    assert_eq!(r.status, 200, "non-durable calls are still served");
    assert_eq!(
        up.called_tools(),
        ["get_document"],
        "the durable call never reached the upstream"
    );
    let log = gw.log_with("durable audit record failed", 1).await;
    // Logged while the request was being handled, so it carries the request's id.
    let line = log
        .lines()
        .find(|l| l.contains("durable audit record failed"))
        .unwrap();
    let v: Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["span"]["request_id"], "durable-1", "{line}");
    assert!(
        log.contains("audit record could not be written"),
        "lost records are logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_requests_log_their_timing_split() {
    let up = upstream(sample::Options {
        call_delay: Some(Duration::from_millis(300)),
        ..Default::default()
    })
    .await;
    let text = format!(
        "{}\n[log]\nslow_request = \"100ms\"\n",
        config(&up.url(), "10s")
    );
    let gw = Gateway::start(&text);
    post(
        &gw.url("/mcp-gpt-full"),
        &[("x-request-id", "slow-1")],
        &call(1, "get_document"),
    )
    .await;
    let line = gw
        .log_with("slow request", 1)
        .await
        .lines()
        .find(|l| l.contains("slow request"))
        .map(String::from)
        .expect("a slow-request warning");
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["level"], "WARN");
    assert_eq!(v["span"]["request_id"], "slow-1");
    let request: Value = eventually(Duration::from_secs(5), "a request line", || async {
        gw.log()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|l| l["message"] == "request")
    })
    .await;
    assert_eq!(request["span"]["request_id"], "slow-1", "{request}");
    assert_eq!(request["tool"], "get_document");
    assert!(v["upstream_ms"].as_f64().unwrap() >= 250.0, "{v}");
    assert!(v["gateway_ms"].as_f64().is_some() && v["total_ms"].as_f64().is_some());
}

/// A tools/call answer too large to keep whole (over 256 KiB) streams through, and its
/// record still gets the outcome, read from the answer's tail: `is_error` when the result
/// ends with `"isError": true`, `ok` otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_answers_get_their_outcome_from_the_tail() {
    for (is_error, outcome) in [(true, "is_error"), (false, "ok")] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"content":[{{"type":"text","text":"{}"}}],"isError": {is_error}}}}}"#,
            "x".repeat(300 << 10)
        );
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let gw = Gateway::start(&with_audit(&raw_upstream(reply), &path, ""));
        let r = post(&gw.url("/mcp-gpt-full"), &[], &call(1, "get_document")).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), body.len(), "the answer passes whole");
        let recs = wait_records(&path, 1).await;
        assert_eq!(recs.len(), 2, "{recs:?}");
        assert_eq!(recs[1]["tool"], "get_document");
        assert_eq!(recs[1]["outcome"], outcome, "{:?}", recs[1]);
    }
}

/// Killed (SIGKILL) while records are being written, round after round: every restart
/// continues the chain, and `audit verify` passes after each. Every other round also
/// leaves half a record at the end of the file, as a kill in the middle of a write does,
/// so the restart's recovery (the torn bytes kept, a `recovered` record naming them) is
/// met whether or not a kill happens to land inside a write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_write_the_chain_verifies_after_every_restart() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = json_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let conf = dir.path().join("mcpgate.toml");
    std::fs::write(&conf, with_audit(&up.url(), &path, "")).unwrap();
    let body = call(1, "get_document");
    let request = format!(
        "POST /mcp-gpt-full HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    for round in 0..6u64 {
        let mut gw = Gateway::start_at(&conf);
        let addr = gw.listeners["main"];
        let clients: Vec<_> = (0..6)
            .map(|_| {
                let request = request.clone();
                tokio::spawn(async move {
                    // Keep-alive calls until the gateway is gone.
                    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
                        return;
                    };
                    let mut buf = vec![0u8; 16 << 10];
                    loop {
                        if s.write_all(request.as_bytes()).await.is_err() {
                            return;
                        }
                        match s.read(&mut buf).await {
                            Ok(n) if n > 0 => {}
                            _ => return,
                        }
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(200 + 37 * round)).await;
        gw.signal("KILL");
        assert_eq!(
            gw.wait_exit(Duration::from_secs(5)),
            None,
            "killed, no exit code"
        );
        for c in clients {
            let _ = c.await;
        }
        let (ok, out) = verify(&path);
        assert!(ok, "round {round}: {out}");
        if round % 2 == 0 {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            f.write_all(br#"{"type":"call","request_id":"cut-"#)
                .unwrap();
        }
    }
    let gw = Gateway::start_at(&conf);
    assert_eq!(
        post(&gw.url("/mcp-gpt-full"), &[], &list(1)).await.status,
        200
    );
    drop(gw);
    let (ok, out) = verify(&path);
    assert!(ok, "{out}");
    // The torn fragments are no records: count the recovery records among the rest.
    let recovered = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["type"] == "recovered")
        .count();
    assert!(recovered >= 3, "{recovered} recoveries");
}
