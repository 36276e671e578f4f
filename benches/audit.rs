//! Audit-trail cost, reported rather than asserted: how many records per second the writer
//! sustains, and the latency a durable record (write + fsync, before forwarding) adds.
//! Run: `cargo bench --bench audit` (the file goes to the system temp folder).

use mcpgate::observe::audit::{Audit, AuditSettings, Base, Call, Record};
use prometheus_client::metrics::counter::Counter;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A typical record: an allowed tools/call with its outcome and timings.
fn record(i: u64) -> Record {
    let base = Arc::new(Base::new(
        format!("{i:032x}").into(),
        "public",
        None,
        Some("chatgpt-app"),
        [127, 0, 0, 1].into(),
        "tools/call",
    ));
    let call = Arc::new(Call {
        rpc_id: Some(i.to_string()),
        tool: "get_document".into(),
        arguments: Some(r#"{"id": "welcome"}"#.into()),
        durable: false,
    });
    let mut r = Record::new(base, Some(call));
    r.decision = Some("allow");
    r.reason = Some(None);
    r.status = Some(200);
    r.outcome = Some(Some("ok"));
    r.total_ms = Some(1.2);
    r.upstream_ms = Some(Some(0.9));
    r.gateway_ms = Some(0.3);
    r
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        const N: u64 = 200_000;
        let settings = AuditSettings {
            path: dir.path().join("throughput.jsonl"),
            durable: vec![],
            redact: vec![],
            max_size: None,
            keep: 1,
            // The queue is shared out among the staging areas (one per worker thread,
            // one for other threads): room for all N in the one this thread uses.
            queue: (N as usize + 1) * (mcpgate::runtime::workers::count() + 1),
        };
        let dropped = Counter::default();
        let (audit, task) = Audit::start(settings, dropped.clone()).unwrap();
        let started = Instant::now();
        for i in 0..N {
            audit.record(record(i));
        }
        audit.close().await;
        let _ = task.await;
        let took = started.elapsed();
        let bytes = std::fs::metadata(dir.path().join("throughput.jsonl")).unwrap().len();
        println!(
            "writer: {N} records in {:.2} s = {:.0} records/s ({:.0} bytes/record, {} dropped)",
            took.as_secs_f64(),
            N as f64 / took.as_secs_f64(),
            bytes as f64 / N as f64,
            dropped.get()
        );

        const D: usize = 300;
        let settings = AuditSettings {
            path: dir.path().join("durable.jsonl"),
            durable: vec!["*".into()],
            redact: vec![],
            max_size: None,
            keep: 1,
            queue: 8192,
        };
        let (audit, _task) = Audit::start(settings, Counter::default()).unwrap();
        let mut lat = Vec::with_capacity(D);
        for i in 0..D as u64 {
            let t = Instant::now();
            audit.durable(record(i)).await.unwrap();
            lat.push(t.elapsed());
        }
        lat.sort();
        println!(
            "durable record (write + fsync) added before forwarding: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({D} records)",
            percentile(&lat, 0.5).as_secs_f64() * 1000.0,
            percentile(&lat, 0.99).as_secs_f64() * 1000.0,
            lat.last().unwrap().as_secs_f64() * 1000.0
        );
        audit.close().await;
    });
    println!(
        "temp folder filesystem: {}",
        std::process::Command::new("df")
            .args(["-T"])
            .arg(dir.path())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout)
                .lines()
                .nth(1)
                .unwrap_or("")
                .split_whitespace()
                .nth(1)
                .unwrap_or("?")
                .to_string())
            .unwrap_or_default()
    );
}
