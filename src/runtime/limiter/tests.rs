//! Tests of the limiter: rate rules by key and tool, their caps, concurrency permits, per-tool timeouts, state kept across reloads.

use super::*;

use crate::config::compile::parse_rate;
use futures_util::FutureExt;

/// `Limits::check` without a store never waits.
fn check(
    limits: &Limits,
    caller: &Caller,
    tools: &[&str],
) -> Result<Vec<OwnedSemaphorePermit>, GateError> {
    limits
        .check(caller, tools)
        .now_or_never()
        .expect("no store: answered at once")
}

fn spec(key: KeyKind, rate: &str, tools: Option<&[&str]>) -> RateSpec {
    RateSpec {
        signature: format!("{}|{rate}|{tools:?}", key.name()),
        key,
        tools: tools.map(|t| Matcher::new(t.iter().copied())),
        auth_failure: false,
        quota: parse_rate(rate, None).unwrap(),
        rate_text: rate.into(),
    }
}

fn rule(key: KeyKind, rate: &str, tools: Option<&[&str]>) -> Arc<RateRule> {
    Arc::new(RateRule::new(spec(key, rate, tools)))
}

#[test]
fn token_rule_counts_per_token() {
    let limits = Limits {
        rate: vec![rule(KeyKind::Token, "2/m", None)],
        ..Default::default()
    };
    let profile = "p";
    let a = Caller {
        token: Some(&[1; 32]),
        profile,
        ip: [127, 0, 0, 1].into(),
    };
    let b = Caller {
        token: Some(&[2; 32]),
        profile,
        ip: [127, 0, 0, 1].into(),
    };
    assert!(check(&limits, &a, &[]).is_ok());
    assert!(check(&limits, &a, &[]).is_ok());
    let err = check(&limits, &a, &[]).unwrap_err();
    assert!(
        matches!(err, GateError::RateLimited { retry_after } if retry_after > Duration::from_secs(20))
    );
    assert!(
        check(&limits, &b, &[]).is_ok(),
        "other tokens are unaffected"
    );
    // No token (auth = "none"): a token rule does not apply.
    let open = Caller {
        token: None,
        profile,
        ip: [127, 0, 0, 1].into(),
    };
    for _ in 0..5 {
        assert!(check(&limits, &open, &[]).is_ok());
    }
}

/// A rule refuses new keys once it holds `MAX_KEYS_PER_RULE` that are not back to
/// full, noticing within `KEY_COUNT_EVERY` takes; keys it already holds still count.
#[test]
fn a_rule_stops_taking_new_keys_at_its_cap() {
    let r = rule(KeyKind::Token, "1/h", None);
    let key = |n: usize| {
        let mut t = [0u8; 32];
        t[..8].copy_from_slice(&n.to_le_bytes());
        RateKey::Token(t)
    };
    for n in 0..MAX_KEYS_PER_RULE {
        assert!(r.take(&key(n)).is_ok());
    }
    let refused = (MAX_KEYS_PER_RULE..MAX_KEYS_PER_RULE + 2 * KEY_COUNT_EVERY as usize)
        .position(|n| r.take(&key(n)).is_err())
        .expect("refused once full");
    assert!(refused <= KEY_COUNT_EVERY as usize, "{refused}");
    assert!(r.keys() <= MAX_KEYS_PER_RULE + KEY_COUNT_EVERY as usize);
    // Every take is checked from now on.
    assert_eq!(r.take(&key(usize::MAX)), Err(Duration::from_secs(1)));
}

#[test]
fn tool_rules_count_only_their_tools() {
    let limits = Limits {
        rate: vec![rule(KeyKind::TokenTool, "1/m", Some(&["delete_*"]))],
        ..Default::default()
    };
    let profile = "p";
    let a = Caller {
        token: Some(&[1; 32]),
        profile,
        ip: [127, 0, 0, 1].into(),
    };
    for _ in 0..3 {
        assert!(check(&limits, &a, &["get_document"]).is_ok());
    }
    assert!(check(&limits, &a, &["delete_document"]).is_ok());
    assert!(check(&limits, &a, &["delete_document"]).is_err());
    assert!(
        check(&limits, &a, &["delete_other"]).is_ok(),
        "a separate key per tool"
    );
}

#[test]
fn concurrency_refuses_at_once_and_frees_on_drop() {
    let limits = Limits {
        concurrency: vec![Arc::new(ConcurrencyRule::new(ConcurrencySpec {
            signature: "c".into(),
            tools: Matcher::new(["ingest"]),
            max: 1,
        }))],
        ..Default::default()
    };
    let profile = "p";
    let c = Caller {
        token: None,
        profile,
        ip: [127, 0, 0, 1].into(),
    };
    let held = check(&limits, &c, &["ingest"]).unwrap();
    assert!(matches!(
        check(&limits, &c, &["ingest"]),
        Err(GateError::ConcurrencyLimited { max: 1 })
    ));
    assert!(check(&limits, &c, &["other"]).is_ok());
    drop(held);
    assert!(check(&limits, &c, &["ingest"]).is_ok());
}

#[test]
fn per_tool_timeouts() {
    let limits = Limits {
        timeouts: vec![
            (
                Matcher::new(["search"]),
                "search".into(),
                Duration::from_secs(10),
            ),
            (
                Matcher::new(["ingest"]),
                "ingest".into(),
                Duration::from_secs(120),
            ),
        ],
        ..Default::default()
    };
    let d = Duration::from_secs(60);
    assert_eq!(limits.timeout_for(&["search"], d), Duration::from_secs(10));
    assert_eq!(limits.timeout_for(&["ingest"], d), Duration::from_secs(120));
    assert_eq!(limits.timeout_for(&["other"], d), d);
    assert_eq!(limits.timeout_for(&[], d), d);
    assert_eq!(
        limits.timeout_for(&["search", "other"], d),
        d,
        "the longest wins in a batch"
    );
}

/// Rules whose signature is unchanged keep their state across a rebuild; a changed
/// one starts afresh.
#[test]
fn unchanged_rules_keep_their_state() {
    let text = |rate: &str| {
        format!(
            "[[listen]]\nname = \"m\"\naddr = \"127.0.0.1:0\"\n[upstreams.u]\nurl = \"http://127.0.0.1:9/mcp\"\n[profiles.p]\nupstream = \"u\"\nallow = [\"*\"]\n[limits]\nrate = [ {{ key = \"token\", rate = \"{rate}\" }}, {{ key = \"global\", rate = \"5/s\" }} ]\nconcurrency = [ {{ tools = [\"ingest\"], max_in_flight = 1 }} ]\n"
        )
    };
    let load = |rate: &str| crate::config::load_str(&text(rate), "f.toml").unwrap();
    let first = Limits::build(&load("20/s").limits, None, None);
    let second = Limits::build(&load("20/s").limits, Some(&first), None);
    assert!(Arc::ptr_eq(&first.rate[0], &second.rate[0]));
    assert!(Arc::ptr_eq(&first.concurrency[0], &second.concurrency[0]));
    let third = Limits::build(&load("30/s").limits, Some(&second), None);
    assert!(!Arc::ptr_eq(&second.rate[0], &third.rate[0]));
    assert!(Arc::ptr_eq(&second.rate[1], &third.rate[1]));
}
