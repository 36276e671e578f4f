//! The audit trail's unit tests: staging, the writer, the chain and verify, rotation and
//! reopening, redaction, and record lines read back as serde_json reads them.

use super::chain::*;
use super::record::*;
use super::redact::*;
use super::stage::*;
use super::verify::*;
use super::writer::*;
use super::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

#[test]
fn redaction_hashes_values_at_any_depth() {
    let raw = serde_json::value::RawValue::from_string(
        r#"{"id":"a","content":"secret text","nested":{"content":[1,2]}}"#.into(),
    )
    .unwrap();
    let v: Value =
        serde_json::from_str(&redact_arguments(Some(raw.get()), &["content".to_string()]).unwrap())
            .unwrap();
    assert_eq!(v["id"], "a");
    assert_eq!(v["content"]["len"], 11);
    assert_eq!(v["content"]["sha256"], hex_sha256(b"secret text"));
    assert_eq!(v["nested"]["content"]["len"], 5);
    assert!(!v.to_string().contains("secret"));
}

fn test_settings(path: &Path, queue: usize) -> AuditSettings {
    AuditSettings {
        path: path.to_path_buf(),
        durable: Vec::new(),
        redact: Vec::new(),
        max_size: None,
        keep: 1,
        queue,
    }
}

/// A writer on a fresh file in a folder of its own (kept while the tuple lives).
fn started() -> (
    tempfile::TempDir,
    PathBuf,
    Audit,
    tokio::task::JoinHandle<()>,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let (audit, task) = Audit::start(test_settings(&path, 8192), Counter::default()).unwrap();
    (dir, path, audit, task)
}

fn test_record(n: usize) -> Record {
    let base = Arc::new(Base::new(
        format!("r-{n}").into(),
        "main",
        None,
        Some("tok"),
        "127.0.0.1".parse().unwrap(),
        "tools/call",
    ));
    Record::new(base, None)
}

fn request_ids(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["request_id"].as_str().map(str::to_string)
        })
        .collect()
}

/// Records made on worker threads and on others, while the writer waits and while it
/// gathers, all reach the file at close, each area's in the order made, one chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_from_every_thread_are_written_by_close() {
    let (_dir, path, audit, task) = started();
    let workers = crate::runtime::workers::Workers::start().unwrap();
    let mut done = Vec::new();
    for w in 0..crate::runtime::workers::count() {
        let (tx, rx) = oneshot::channel();
        let audit = audit.clone();
        workers.spawn(async move {
            for i in 0..300 {
                audit.record(test_record(w * 1000 + i));
                if i % 100 == 0 {
                    // Long enough for the writer to go back to waiting.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            let _ = tx.send(());
        });
        done.push(rx);
    }
    for i in 0..300 {
        audit.record(test_record(100_000 + i));
    }
    for rx in done {
        rx.await.unwrap();
    }
    audit.close().await;
    // Closed: a record made now is dropped and counted, not left waiting.
    audit.record(test_record(7));
    assert_eq!(audit.dropped.get(), 1);
    drop(audit);
    task.await.unwrap();
    workers.stop().await;

    assert_eq!(
        verify(&path).unwrap().lines,
        1 + 300 * (crate::runtime::workers::count() + 1)
    );
    let ids = request_ids(&path);
    for first in (0..crate::runtime::workers::count())
        .map(|w| w * 1000)
        .chain([100_000])
    {
        let ours: Vec<&String> = ids
            .iter()
            .filter(|id| {
                let n: usize = id[2..].parse().unwrap();
                (first..first + 300).contains(&n)
            })
            .collect();
        let expected: Vec<String> = (first..first + 300).map(|n| format!("r-{n}")).collect();
        assert_eq!(ours, expected.iter().collect::<Vec<_>>());
    }
}

/// A waiting writer is woken by one record: it reaches the file without a close.
#[tokio::test]
async fn a_lone_record_wakes_the_writer() {
    let (_dir, path, audit, task) = started();
    for n in 0..3 {
        // Let the writer go back to waiting between records.
        tokio::time::sleep(Duration::from_millis(20)).await;
        audit.record(test_record(n));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while request_ids(&path).len() <= n {
            assert!(
                std::time::Instant::now() < deadline,
                "record {n} never written"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    drop(audit);
    task.await.unwrap();
    assert_eq!(verify(&path).unwrap().lines, 4);
}

/// When the last handle goes, the writer writes what is staged and stops.
#[tokio::test]
async fn the_writer_stops_with_the_last_handle_and_loses_nothing() {
    let (_dir, path, audit, task) = started();
    for n in 0..50 {
        audit.record(test_record(n));
    }
    drop(audit);
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the writer stopped")
        .unwrap();
    assert_eq!(verify(&path).unwrap().lines, 51);
}

/// The queue bound: `queue` records wait in all, shared out among the areas; past
/// that a record is dropped and counted, and the rest are kept.
#[test]
fn a_full_area_drops_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let areas = crate::runtime::workers::count() + 1;
    let (tx, _rx) = mpsc::channel(1);
    let dropped = Counter::default();
    // No writer runs: nothing is taken from the areas.
    let audit = Audit(Arc::new(Shared {
        tx,
        stage: Arc::new(Stage::new(4 * areas)),
        dropped: dropped.clone(),
        durable: Matcher::new(std::iter::empty()),
        settings: test_settings(&path, 4 * areas),
    }));
    for n in 0..10 {
        audit.record(test_record(n));
    }
    assert_eq!(dropped.get(), 6);
    let kept: Vec<String> = audit
        .stage
        .area(0)
        .each()
        .map(|(head, tail)| {
            let line = format!("{head}\"prev\":\"x\",{tail}");
            let v: Value = serde_json::from_str(&line).unwrap();
            v["request_id"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(kept, ["r-0", "r-1", "r-2", "r-3"]);
}

/// Size rotation holds for a batch of many records (as the writer gathers under
/// load): every file ends at most one record past `max_size`, and each verifies.
#[test]
fn a_large_batch_rotates_where_the_file_fills() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let max = 2048;
    let settings = AuditSettings {
        path: path.clone(),
        durable: Vec::new(),
        redact: Vec::new(),
        max_size: Some(max),
        keep: 20,
        queue: 1024,
    };
    let mut writer = Writer::open(&settings).unwrap();
    let base = Arc::new(Base::new(
        "r-1".into(),
        "main",
        None,
        Some("tok"),
        "127.0.0.1".parse().unwrap(),
        "tools/call",
    ));
    let call = Arc::new(Call {
        rpc_id: Some("1".into()),
        tool: "move_document".into(),
        arguments: Some(r#"{"from":"a","to":"b"}"#.into()),
        durable: false,
    });
    let stage = Stage::new(settings.queue);
    let mut staged = Lines::new();
    for _ in 0..40 {
        staged.push(&Record::new(base.clone(), Some(call.clone())));
    }
    let mut lines = vec![staged];
    assert!(writer.write_batch(&stage, &mut lines, &mut Vec::new(), &Counter::default()));
    let mut files = vec![path.clone()];
    files.extend(
        (1..=20)
            .map(|n| dir.path().join(format!("audit.jsonl.{n}")))
            .filter(|p| p.exists()),
    );
    assert!(files.len() >= 5, "rotated {} times", files.len() - 1);
    let longest = std::fs::read_to_string(&files[1])
        .unwrap()
        .lines()
        .map(|l| l.len() as u64 + 1)
        .max()
        .unwrap();
    for f in &files {
        let len = std::fs::metadata(f).unwrap().len();
        assert!(len < max + longest, "{}: {len} bytes", f.display());
        assert!(verify(f).is_ok(), "{}", f.display());
    }
}

/// The hand-written line is serde_json's text for the same object, byte for byte: the
/// keys in name order, the same escapes and number digits, `null` where it belongs.
#[test]
fn lines_are_serde_json_text() {
    use serde_json::json;
    use std::collections::BTreeMap;
    let snapshot = crate::config::load_str(
        r#"
        [[listen]]
        name = "main"
        addr = "127.0.0.1:0"
        [upstreams.u]
        url = "http://127.0.0.1:9/mcp"
        [profiles."p \"quoted\""]
        upstream = "u"
        allow = ["*"]
        [[routes]]
        listen = "main"
        path = "/mcp"
        profile = "p \"quoted\""
        auth = "none"
        "#,
        "test.toml",
    )
    .unwrap();
    let route = snapshot.routes[0].clone();
    let time = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_790_000_000_123);
    let base = |route: Option<&crate::config::Route>, token: Option<&str>| {
        Arc::new(Base::new(
            "r-1".into(),
            "main\n",
            route,
            token,
            "::1".parse().unwrap(),
            "tools/call",
        ))
    };
    let call = Arc::new(Call {
        rpc_id: Some("\"id \\u00e9\"".into()),
        tool: "delete_\u{1}doc".into(),
        arguments: Some("{\"a\": \"é\\t\" , \"b\":[1,  2.5,\r\n\tnull]}".into()),
        durable: true,
    });
    let mut full = Record::new(base(Some(&route), Some("tok")), Some(call.clone()));
    full.time = time;
    full.phase = Some("end");
    full.decision = Some("allow");
    full.reason = Some(Some("why \"not\"".into()));
    full.status = Some(200);
    full.upstream_ms = Some(Some(0.125));
    full.gateway_ms = Some(0.013904999999999945);
    full.outcome = Some(Some("ok"));
    full.total_ms = Some(12345.678);
    full.pin = Some(Box::new(PinNote {
        kind: "tool",
        mode: "enforce",
        old: Some("ab".repeat(32)),
        new: "cd".repeat(32),
    }));
    full.approval = Some(Box::new(ApprovalNote {
        rule: 3,
        approver: "admin",
        by: Some("admin \"ops\" from 127.0.0.1".into()),
    }));
    let mut nulls = Record::new(
        base(None, None),
        Some(Arc::new(Call {
            rpc_id: None,
            ..(*call).clone()
        })),
    );
    nulls.time = time;
    nulls.reason = Some(None);
    nulls.upstream_ms = Some(None);
    nulls.outcome = Some(None);
    nulls.gateway_ms = Some(f64::NAN);
    let mut bare = Record::new(
        Arc::new(
            Base::new(
                "r-1".into(),
                "main\n",
                None,
                Some("t"),
                "::1".parse().unwrap(),
                "tools/call",
            )
            .with_first_request(Some("first \"1\"")),
        ),
        None,
    );
    bare.time = time;
    let mut v4 = bare.clone();
    v4.base = Arc::new(Base::new(
        "r-2".into(),
        "main",
        None,
        None,
        "10.0.200.7".parse().unwrap(),
        "POST",
    ));

    let expected = |r: &Record| -> String {
        let b = &r.base;
        let mut m: BTreeMap<&str, serde_json::Value> = BTreeMap::new();
        m.insert("client", json!(b.client.to_string()));
        m.insert("listener", json!(b.listener()));
        m.insert("method", json!(b.method()));
        m.insert("prev", json!("ab12"));
        m.insert("request_id", json!(&*b.request_id));
        m.insert("profile", json!(b.profile()));
        m.insert("route", json!(b.route()));
        m.insert(
            "time",
            json!(humantime::format_rfc3339_millis(r.time).to_string()),
        );
        m.insert("token", json!(b.token()));
        if let Some(f) = &b.first_request_id {
            m.insert("first_request_id", json!(&**f));
        }
        if let Some(c) = &r.call {
            let args = c.arguments.as_deref().map(serde_json::from_str).transpose();
            m.insert("arguments", args.unwrap().unwrap_or(json!(null)));
            m.insert("rpc_id", json!(null));
            m.insert("tool", json!(&*c.tool));
        }
        let mut put = |k, v: Option<serde_json::Value>| {
            if let Some(v) = v {
                m.insert(k, v);
            }
        };
        put("phase", r.phase.map(|p| json!(p)));
        put("decision", r.decision.map(|d| json!(d)));
        put("reason", r.reason.clone().map(|x| json!(x)));
        put("status", r.status.map(|x| json!(x)));
        // Times are written to the microsecond.
        let ms = wire::json::text::to_microsecond;
        put("upstream_ms", r.upstream_ms.map(|x| json!(x.map(ms))));
        put("gateway_ms", r.gateway_ms.map(|x| json!(ms(x))));
        put("outcome", r.outcome.map(|x| json!(x)));
        put("total_ms", r.total_ms.map(|x| json!(ms(x))));
        put(
            "pin",
            r.pin
                .as_ref()
                .map(|p| json!({"kind": p.kind, "mode": p.mode, "new": p.new, "old": p.old})),
        );
        put(
            "approval",
            r.approval
                .as_ref()
                .map(|a| json!({"approver": a.approver, "by": a.by, "rule": a.rule})),
        );
        // The id goes in as the client wrote it, not re-encoded.
        let mut raw: BTreeMap<&str, Box<serde_json::value::RawValue>> = m
            .into_iter()
            .map(|(k, v)| (k, serde_json::value::to_raw_value(&v).unwrap()))
            .collect();
        if let Some(id) = r.call.as_ref().and_then(|c| c.rpc_id.clone()) {
            raw.insert(
                "rpc_id",
                serde_json::value::RawValue::from_string(id).unwrap(),
            );
        }
        serde_json::to_string(&raw).unwrap()
    };
    // As staged, then linked as the writer links it.
    let ours = |r: &Record| {
        let mut staged = Lines::new();
        staged.push(r);
        let (head, tail) = staged.each().next().unwrap();
        format!("{head}\"prev\":\"ab12\",{tail}")
    };
    assert!(ours(&full).contains(r#""gateway_ms":0.014,"#));
    for r in [&full, &nulls, &bare, &v4] {
        assert_eq!(ours(r), expected(r));
    }
}

/// A file a crash left ending mid-line is continued as `recovered`: the torn bytes stay
/// as they were, a record names their length and hash, the chain goes on from the last
/// complete line, and `verify` accepts exactly that, whether the torn line follows
/// complete ones or is all the file holds.
#[tokio::test]
async fn a_torn_last_line_is_marked_and_the_chain_continues() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let run = |records: usize| {
        let path = path.clone();
        async move {
            let (audit, task) =
                Audit::start(test_settings(&path, 8192), Counter::default()).unwrap();
            for n in 0..records {
                audit.record(test_record(n));
            }
            audit.close().await;
            drop(audit);
            task.await.unwrap();
        }
    };
    let append = |bytes: &[u8]| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(bytes).unwrap();
    };
    run(3).await;
    assert_eq!(verify(&path).unwrap().lines, 4);
    let complete = std::fs::read(&path).unwrap();
    // Cut short in the middle of a record, and once more right before a newline.
    append(br#"{"type":"call","request_id":"r-torn","#);
    // Before a gateway starts on it, the cut line is a torn tail, not a break.
    let before = verify(&path).unwrap();
    assert_eq!((before.lines, before.torn_tail), (4, Some(37)));
    run(2).await;
    let text = std::fs::read(&path).unwrap();
    assert!(
        text.starts_with(&complete),
        "complete records are never rewritten"
    );
    assert_eq!(verify(&path).unwrap().lines, 4 + 1 + 1 + 2);
    let last = text
        .split(|&b| b == b'\n')
        .rfind(|l| !l.is_empty())
        .unwrap()
        .to_vec();
    append(&last);
    run(1).await;
    assert_eq!(verify(&path).unwrap().lines, 8 + 1 + 1 + 1);
    let lines: Vec<Value> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &Value| v["type"] == "recovered")
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["torn_bytes"], 37);

    // Any other break still fails: the torn bytes changed, the recovery record gone, or
    // one standing where no torn line is.
    let good = std::fs::read_to_string(&path).unwrap();
    let broken = [
        good.replacen("r-torn", "r-tore", 1),
        good.lines()
            .filter(|l| !l.contains("\"recovered\""))
            .map(|l| format!("{l}\n"))
            .collect(),
        good.replacen(r#"{"type":"call","request_id":"r-torn","#, "", 1),
    ];
    for (i, text) in broken.iter().enumerate() {
        std::fs::write(&path, text).unwrap();
        assert!(verify(&path).is_err(), "case {i}");
    }

    // A file holding nothing but a torn line: the recovery record starts the chain.
    std::fs::write(&path, br#"{"type":"gen"#).unwrap();
    run(1).await;
    assert_eq!(verify(&path).unwrap().lines, 3);
}
