//! `[limits.store]` end to end (docs/scaling.md): two `mcpgate run` processes share a real
//! `redis-server` on loopback. Together they let through what one rule allows, not twice
//! that; the retry hint is exact across replicas; one round trip per request; Redis killed,
//! stopped and restarted mid-run takes each `on_error` path without a request hanging,
//! with one warning, and sharing comes back by itself.

mod support;

use http::Method;
use std::time::{Duration, Instant};
use support::*;

/// The test deployment with `rules` under `[limits]` and, when `store` is set, a
/// `[limits.store]` with those lines.
fn with_store(up: &str, rules: &str, store: Option<&str>) -> String {
    let store = store.map_or(String::new(), |s| format!("\n[limits.store]\n{s}\n"));
    config(up, "10s").replace(
        "max_body = \"64KiB\"\n",
        &format!("max_body = \"64KiB\"\n{rules}\n{store}"),
    )
}

async fn metrics(gw: &Gateway) -> String {
    send(Method::GET, &gw.admin_url("/metrics"), &[], "")
        .await
        .body
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

fn admin() -> &'static str {
    "\n[admin]\naddr = \"127.0.0.1:0\"\n"
}

/// `n` calls with the gpt token, alternating between the replicas two at a time;
/// how many passed, and the retry hints of the refused ones.
async fn calls_on_both(a: &Gateway, b: &Gateway, n: u64) -> (u64, Vec<u64>) {
    let (ua, ub) = (
        a.url(&format!("/gpt-mcp/{GPT}/mcp")),
        b.url(&format!("/gpt-mcp/{GPT}/mcp")),
    );
    let mut passed = 0;
    let mut hints = Vec::new();
    for i in 0..n / 2 {
        let (ca, cb) = (call(2 * i, "get_document"), call(2 * i + 1, "get_document"));
        let (ra, rb) = tokio::join!(post(&ua, &[], &ca), post(&ub, &[], &cb));
        for r in [ra, rb] {
            match r.status.as_u16() {
                200 => passed += 1,
                429 => hints.push(
                    r.messages()[0]["error"]["data"]["retry_after_ms"]
                        .as_u64()
                        .unwrap(),
                ),
                other => panic!("{other}: {}", r.body),
            }
        }
    }
    (passed, hints)
}

const SIX_A_MINUTE: &str = "rate = [ { key = \"token\", rate = \"6/m\" } ]";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_never_let_through_more_than_the_rule() {
    let up = json_upstream().await;
    let redis = Redis::start();
    let shared = with_store(
        &up.url(),
        SIX_A_MINUTE,
        Some(&format!("redis = \"{}\"", redis.url())),
    ) + admin();
    let (a, b) = (Gateway::start(&shared), Gateway::start(&shared));
    wait_store_up(&a, true).await;
    wait_store_up(&b, true).await;
    let started = Instant::now();
    let (passed, hints) = calls_on_both(&a, &b, 40).await;
    // 6/m: a burst of 6, then one call every 10 s.
    let refills = started.elapsed().as_secs() / 10;
    assert!(
        passed >= 6 && passed <= 6 + refills,
        "{passed} passed in {:?}",
        started.elapsed()
    );
    assert_eq!(up.called_tools().len() as u64, passed);
    // Both replicas read the same state: every hint is the time to the same next cell.
    let (low, high) = (hints.iter().min().unwrap(), hints.iter().max().unwrap());
    assert!(*high <= 10_000 && high - low < 2_000, "{hints:?}");

    // The same two replicas without a store each allow the rule: what the store prevents.
    let apart = with_store(&up.url(), SIX_A_MINUTE, None);
    let (c, d) = (Gateway::start(&apart), Gateway::start(&apart));
    let (passed, _) = calls_on_both(&c, &d, 40).await;
    assert_eq!(passed, 12);
}

/// The hint one replica gives is exact for the other: waiting `retry_after_ms` is enough,
/// and less is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_hint_is_exact_across_replicas() {
    let up = json_upstream().await;
    let redis = Redis::start();
    let text = with_store(
        &up.url(),
        "rate = [ { key = \"token\", rate = \"2/s\", burst = 1 } ]",
        Some(&format!("redis = \"{}\"", redis.url())),
    ) + admin();
    let (a, b) = (Gateway::start(&text), Gateway::start(&text));
    wait_store_up(&a, true).await;
    wait_store_up(&b, true).await;
    let (ua, ub) = (
        a.url(&format!("/gpt-mcp/{GPT}/mcp")),
        b.url(&format!("/gpt-mcp/{GPT}/mcp")),
    );
    for round in 0..3 {
        assert_eq!(post(&ua, &[], &call(1, "get_document")).await.status, 200);
        let r = post(&ub, &[], &call(2, "get_document")).await;
        assert_eq!(r.status, 429, "{}", r.body);
        assert_eq!(r.header("retry-after"), "1");
        let ms = r.messages()[0]["error"]["data"]["retry_after_ms"]
            .as_u64()
            .unwrap();
        assert!(ms > 0 && ms <= 500, "round {round}: {ms}");
        // Half the hint is too early (on either replica)…
        tokio::time::sleep(Duration::from_millis(ms / 2)).await;
        assert_eq!(post(&ua, &[], &call(3, "get_document")).await.status, 429);
        // …the hint itself is enough, on the other replica.
        tokio::time::sleep(Duration::from_millis(ms - ms / 2)).await;
        assert_eq!(post(&ub, &[], &call(4, "get_document")).await.status, 200);
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
}

/// One EVALSHA per request (alone), whatever the number of rules and calls; keys are hashed names
/// under the prefix that expire by themselves, and show nothing of the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_round_trip_per_request_and_keys_that_tell_nothing() {
    let up = json_upstream().await;
    let redis = Redis::start();
    let text = with_store(
        &up.url(),
        "rate = [ { key = \"token\", rate = \"10/m\" }, { key = \"token+tool\", tools = [\"delete_*\"], rate = \"2/m\" }, { key = \"global\", rate = \"1000/m\" }, { key = \"client_ip\", rate = \"100/m\" } ]",
        Some(&format!(
            "redis = \"{}\"\nprefix = \"gw-test:\"",
            redis.url()
        )),
    ) + admin();
    let gw = Gateway::start(&text);
    wait_store_up(&gw, true).await;
    let url = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    let before = redis.calls("evalsha");
    assert_eq!(post(&url, &[], &call(1, "get_document")).await.status, 200);
    // A batch calling the same limited tool twice takes both cells in the one trip.
    let two_deletes = format!(
        "[{},{}]",
        call(2, "delete_document"),
        call(3, "delete_document")
    );
    let r = post(&url, &[], &two_deletes).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.messages().len(), 2);
    let r = post(&url, &[], &call(4, "delete_document")).await;
    assert_eq!(r.status, 429, "2/m of delete_*: used up by the batch");
    // Refused whole: the other rules' cells were not taken either (all or none), so a
    // non-delete call passes, and so does the next one.
    assert_eq!(post(&url, &[], &call(5, "get_document")).await.status, 200);
    assert_eq!(redis.calls("evalsha"), before + 4, "one round trip each");
    assert_eq!(up.called_tools().len(), 4, "the refused call never went up");

    let keys = redis.cli(&["--scan", "--pattern", "*"]);
    let keys: Vec<&str> = keys.lines().collect();
    // token, token+tool (get_document does not count: only delete_*), global, client_ip.
    assert_eq!(keys.len(), 4, "{keys:?}");
    for key in &keys {
        let name = key.strip_prefix("gw-test:").expect("the prefix");
        assert!(
            name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit()),
            "{key}"
        );
        for secret in [GPT, &hash(GPT), &hash(GPT)[..16], "delete", "127.0.0.1"] {
            assert!(!key.contains(secret), "{key} holds {secret}");
        }
        // -2: already gone; -1 (no expiry) never.
        let ttl: i64 = redis.cli(&["PTTL", key]).trim().parse().unwrap();
        assert!(
            ttl == -2 || (ttl > 0 && ttl <= 60_000),
            "{key} expires by itself: {ttl}"
        );
    }
}

/// Requests that arrive together share script calls (a batch judges them in order, each
/// with all its keys): 64 at once against 20 a minute let exactly 20 through, in fewer
/// round trips than requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_are_batched_and_still_exact() {
    let up = json_upstream().await;
    let redis = Redis::start();
    let text = with_store(
        &up.url(),
        "rate = [ { key = \"token\", rate = \"20/m\" }, { key = \"global\", rate = \"1000/m\" } ]",
        Some(&format!("redis = \"{}\"", redis.url())),
    ) + admin();
    let gw = Gateway::start(&text);
    wait_store_up(&gw, true).await;
    let url = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    let before = redis.calls("evalsha");
    let calls = (0..64).map(|i| {
        let url = url.clone();
        tokio::spawn(async move { post(&url, &[], &call(i, "get_document")).await.status })
    });
    let mut passed = 0;
    for c in calls.collect::<Vec<_>>() {
        match c.await.unwrap().as_u16() {
            200 => passed += 1,
            429 => {}
            other => panic!("{other}"),
        }
    }
    assert_eq!(passed, 20);
    let trips = redis.calls("evalsha") - before;
    assert!(trips < 64, "fewer script calls than requests: {trips}");
    eprintln!("64 concurrent requests took {trips} script calls");
}

/// Redis killed mid-run: requests go on at once with each replica's own counters
/// (on_error = "local"), one warning per replica, metrics count it; restarted (empty, on
/// the same port): the replicas reconnect by themselves and share again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_mid_run() {
    let up = json_upstream().await;
    let mut redis = Redis::start();
    let text = with_store(
        &up.url(),
        SIX_A_MINUTE,
        Some(&format!(
            "redis = \"{}\"\non_error = \"local\"\ntimeout = \"50ms\"",
            redis.url()
        )),
    ) + admin();
    let (a, b) = (Gateway::start(&text), Gateway::start(&text));
    wait_store_up(&a, true).await;
    wait_store_up(&b, true).await;
    let (passed, _) = calls_on_both(&a, &b, 20).await;
    assert_eq!(passed, 6, "shared");

    redis.kill();
    let started = Instant::now();
    let (passed, _) = calls_on_both(&a, &b, 30).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "30 calls without Redis took {:?}",
        started.elapsed()
    );
    assert_eq!(passed, 12, "each replica's own 6/m");
    for gw in [&a, &b] {
        let m = metrics(gw).await;
        assert_eq!(metric(&m, "mcpgate_limit_store_up "), 0.0);
        let failed = metric(&m, "mcpgate_limit_store_errors_total{reason=\"error\"} ")
            + metric(
                &m,
                "mcpgate_limit_store_errors_total{reason=\"unavailable\"} ",
            );
        assert!(failed >= 15.0, "every call without the store counted: {m}");
        let warnings = gw
            .log()
            .lines()
            .filter(|l| l.contains("\"WARN\"") && l.contains("rate-limit store"))
            .count();
        assert_eq!(warnings, 1, "at most one warning a minute:\n{}", gw.log());
    }

    redis.restart();
    wait_store_up(&a, true).await;
    wait_store_up(&b, true).await;
    let (passed, _) = calls_on_both(&a, &b, 20).await;
    assert_eq!(passed, 6, "shared again, from an empty Redis");
    assert!(a.log().contains("rate-limit store connected"));
}

/// A Redis that stops answering (SIGSTOP keeps its socket open) costs a request at most
/// the timeout, then nothing: `deny` answers 503 -32003 with Retry-After, `allow` lets
/// through; both come back when it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redis_takes_deny_and_allow_within_the_timeout() {
    let up = json_upstream().await;
    let redis = Redis::start();
    let with = |on_error: &str| {
        with_store(
            &up.url(),
            "rate = [ { key = \"token\", rate = \"1/m\" } ]",
            Some(&format!(
                "redis = \"{}\"\non_error = \"{on_error}\"\ntimeout = \"100ms\"",
                redis.url()
            )),
        ) + admin()
    };
    let (deny, allow) = (
        Gateway::start(&with("deny")),
        Gateway::start(&with("allow")),
    );
    wait_store_up(&deny, true).await;
    wait_store_up(&allow, true).await;
    let (d, a) = (
        deny.url(&format!("/gpt-mcp/{GPT}/mcp")),
        allow.url(&format!("/gpt-mcp/{GPT}/mcp")),
    );
    assert_eq!(post(&d, &[], &call(1, "get_document")).await.status, 200);
    assert_eq!(
        post(&a, &[], &call(1, "get_document")).await.status,
        429,
        "shared: the one call a minute is used"
    );

    redis.signal("STOP");
    // Sixteen at once, on both workers, the moment Redis hangs: the first call is in
    // flight with the connection still up and the rest queue behind it. No request has
    // a timer of its own, so this shows the lane answers the queued ones too, in time.
    let together = (0..16).map(|i| {
        let d = d.clone();
        async move {
            let started = Instant::now();
            let r = post(&d, &[], &call(100 + i, "get_document")).await;
            (r.status, started.elapsed())
        }
    });
    for (status, took) in futures_util::future::join_all(together).await {
        assert_eq!(status, 503);
        assert!(
            took < Duration::from_secs(1),
            "a queued request waited {took:?}"
        );
    }
    let mut slowest = Duration::ZERO;
    for i in 0..10 {
        let started = Instant::now();
        let r = post(&d, &[], &call(10 + i, "get_document")).await;
        slowest = slowest.max(started.elapsed());
        assert_eq!(r.status, 503, "{}", r.body);
        assert_eq!(r.header("retry-after"), "1");
        let m = &r.messages()[0];
        assert_eq!(m["error"]["code"], -32003);
        assert_eq!(m["error"]["data"]["retry_after_ms"], 1000);
        assert!(
            m["error"]["message"]
                .as_str()
                .unwrap()
                .contains("rate-limit store")
        );
        let started = Instant::now();
        assert_eq!(
            post(&a, &[], &call(10 + i, "get_document")).await.status,
            200
        );
        slowest = slowest.max(started.elapsed());
    }
    assert!(
        slowest < Duration::from_secs(2),
        "a request waited {slowest:?}"
    );
    let m = metrics(&deny).await;
    assert!(
        metric(&m, "mcpgate_limit_store_errors_total{reason=\"timeout\"} ") >= 1.0,
        "{m}"
    );
    let refusals = metric(
        &m,
        "mcpgate_refusals_total{reason=\"limit_store_unavailable\"} ",
    );
    assert_eq!(refusals, 26.0, "{m}");

    redis.signal("CONT");
    wait_store_up(&deny, true).await;
    wait_store_up(&allow, true).await;
    assert_eq!(
        post(&d, &[], &call(30, "get_document")).await.status,
        429,
        "counted in Redis again"
    );
    assert_eq!(post(&a, &[], &call(30, "get_document")).await.status, 429);
}

/// A password-protected Redis: the password comes from a `${file:…}` secret and never
/// shows in a log line, an error or `check`; a wrong one is the store failing (on_error),
/// warned once; a reload with the same store keeps its connections, another address
/// moves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_reload_and_no_secret_in_logs() {
    const PASSWORD: &str = "redis-secret-Qw8Er6Ty4Ui2";
    let up = json_upstream().await;
    let redis = Redis::start_with(&["--requirepass", PASSWORD]);
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("redis-password");
    let store = |password: &str, url: &str| {
        std::fs::write(&secret, format!("{password}\n")).unwrap();
        with_store(
            &up.url(),
            SIX_A_MINUTE,
            Some(&format!(
                "redis = \"{url}\"\npassword = \"${{file:{}}}\"",
                secret.display()
            )),
        ) + admin()
    };
    let path = dir.path().join("mcpgate.toml");
    std::fs::write(&path, store(PASSWORD, &redis.url())).unwrap();
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .args(["check", "-c"])
        .arg(&path)
        .env("MCPGATE_TEST_API_KEY", API_KEY)
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&check.stdout);
    assert!(
        printed.contains("password=<set>") && !printed.contains(PASSWORD),
        "{printed}{}",
        String::from_utf8_lossy(&check.stderr)
    );

    let gw = Gateway::start_at(&path);
    wait_store_up(&gw, true).await;
    let url = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    let before = redis.calls("evalsha");
    assert_eq!(post(&url, &[], &call(1, "get_document")).await.status, 200);
    assert_eq!(redis.calls("evalsha"), before + 1);
    let clients = || -> u64 {
        let info = redis.cli(&["INFO", "clients"]);
        info.lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let connected = clients();

    // Reloads that keep the store keep its connections (and its counts: they are in Redis).
    for i in 0..3 {
        let text = store(PASSWORD, &redis.url())
            .replace("deny_code = -32602", &format!("deny_code = -3260{i}"));
        std::fs::write(&path, text).unwrap();
        let r = send(Method::POST, &gw.admin_url("/reload"), &[], "").await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(clients(), connected, "no new connection");
    assert_eq!(gw.log().matches("rate-limit store connected").count(), 1);

    // A wrong password: the new store cannot log in; calls take on_error (local) and pass.
    std::fs::write(&path, store("wrong-password-Zx1Cv3", &redis.url())).unwrap();
    let r = send(Method::POST, &gw.admin_url("/reload"), &[], "").await;
    assert_eq!(r.status, 200, "{}", r.body);
    wait_store_up(&gw, false).await;
    assert_eq!(post(&url, &[], &call(2, "get_document")).await.status, 200);
    let log = gw
        .log_with("cannot connect to the rate-limit store", 1)
        .await;

    // Another Redis: the store moves there.
    let other = Redis::start_with(&["--requirepass", PASSWORD]);
    std::fs::write(&path, store(PASSWORD, &other.url())).unwrap();
    assert_eq!(
        send(Method::POST, &gw.admin_url("/reload"), &[], "")
            .await
            .status,
        200
    );
    wait_store_up(&gw, true).await;
    assert_eq!(post(&url, &[], &call(3, "get_document")).await.status, 200);
    assert_eq!(other.calls("evalsha"), 1);

    for text in [log, gw.log(), metrics(&gw).await] {
        assert!(
            !text.contains(PASSWORD) && !text.contains("wrong-password"),
            "{text}"
        );
        assert!(!text.contains(GPT));
    }
}
