//! Rate-limiter cost, reported rather than asserted: the memory 100,000 distinct keys take,
//! the time of one check on a known key and on a new key, and what pruning gives back.
//! Run: `cargo bench --bench limits`.

use futures_util::FutureExt;
use mcpgate::config::compile::{KeyKind, RateSpec, parse_rate};
use mcpgate::runtime::limiter::{Caller, Limits, RateRule};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn ip(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))
}

fn main() {
    const KEYS: u32 = 100_000;
    let rule = RateRule::new(RateSpec {
        signature: "bench".into(),
        key: KeyKind::ClientIp,
        tools: None,
        auth_failure: false,
        quota: parse_rate("1000/s", None).unwrap(),
        rate_text: "1000/s".into(),
    });
    let limits = Limits {
        rate: vec![Arc::new(rule)],
        ..Default::default()
    };
    let profile = "bench";

    let before = rss_kib();
    let started = Instant::now();
    for i in 0..KEYS {
        let caller = Caller {
            token: None,
            profile,
            ip: ip(i),
        };
        black_box(
            limits
                .check(&caller, &[])
                .now_or_never()
                .is_some_and(|r| r.is_ok()),
        );
    }
    let insert = started.elapsed();
    let after = rss_kib();

    const CHECKS: u32 = 1_000_000;
    let started = Instant::now();
    for i in 0..CHECKS {
        let caller = Caller {
            token: None,
            profile,
            ip: ip(i % KEYS),
        };
        black_box(
            limits
                .check(&caller, &[])
                .now_or_never()
                .is_some_and(|r| r.is_ok()),
        );
    }
    let known = started.elapsed();

    // Keys refill fully after 1 s at 1000/s with burst 1000: then pruning drops them all.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let started = Instant::now();
    limits.prune();
    let prune = started.elapsed();
    let pruned = rss_kib();

    println!("keys: {KEYS}, rate 1000/s, one keyed limiter (client_ip)");
    println!(
        "memory for {KEYS} keys: {} KiB RSS growth ({:.0} bytes/key)",
        after.saturating_sub(before),
        (after.saturating_sub(before) as f64 * 1024.0) / KEYS as f64
    );
    println!(
        "check, new key:   {:.0} ns",
        insert.as_nanos() as f64 / KEYS as f64
    );
    println!(
        "check, known key: {:.0} ns",
        known.as_nanos() as f64 / CHECKS as f64
    );
    println!(
        "prune of {KEYS} idle keys: {:.1} ms; keys left: {}; RSS after prune: {} KiB (was {} KiB)",
        prune.as_secs_f64() * 1000.0,
        limits.rate[0].keys(),
        pruned,
        after
    );
}
