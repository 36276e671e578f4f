//! Upstreams with several endpoints (docs/configuration.md): balancing, sealed session ids, retries
//! only of what cannot have acted, health pings, ejection, 503 when none is left, state
//! kept across reloads, and one replica killed (SIGKILL) under load. The replicas are the
//! sample server in-process (to see what each received) or as processes of their own
//! (`mcpgate sample-upstream`, to kill); the gateway is the real binary.

mod support;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use support::{Gateway, free_port, json_upstream, post};

/// 32 bytes, base64: `openssl rand -base64 32`.
const KEY_A: &str = "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80=";
const KEY_B: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// A gateway with one route (`/mcp`, no auth) to an upstream `kb` with `endpoints`, the
/// extra `kb` keys given, and an admin listener.
fn config(endpoints: &[String], kb: &str) -> String {
    let list = endpoints
        .iter()
        .map(|e| format!("\"{e}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[admin]
addr = "127.0.0.1:0"

[upstreams.kb]
endpoints = [{list}]
connect_timeout = "1s"
timeout = "5s"
{kb}

[profiles.all]
upstream = "kb"
allow = ["*"]

[[routes]]
listen = "main"
path = "/mcp"
profile = "all"
auth = "none"
"#
    )
}

async fn metrics(gw: &Gateway) -> String {
    support::send(http::Method::GET, &gw.admin_url("/metrics"), &[], "")
        .await
        .body
}

/// The value of the series `name` for `endpoint`, 0 if absent.
fn series(metrics: &str, name: &str, endpoint: &str) -> i64 {
    metrics
        .lines()
        .find(|l| l.starts_with(name) && l.contains(&format!("endpoint=\"{endpoint}\"")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as i64)
}

fn session(reply: &support::Reply) -> String {
    reply.header("mcp-session-id").to_string()
}

fn calls_received(server: &mcpgate::cli::sample::SampleServer) -> usize {
    server
        .received()
        .iter()
        .filter(|r| String::from_utf8_lossy(&r.body).contains("tools/call"))
        .count()
}

/// Sessions are spread round robin, each sealed: the client never sees the upstream's
/// id, the upstream never sees the sealed one, and every later request of a session goes
/// to the endpoint that made it. A second gateway with the same key routes the same ids;
/// one whose keys list the old key second still opens them; forged ids, ids of another
/// key, and ids of an endpoint that left the set are 404 with -32001.
#[tokio::test]
async fn sealed_sessions_stay_on_their_endpoint_through_any_gateway_with_the_key() {
    let a = json_upstream().await;
    let b = json_upstream().await;
    let endpoints = [a.url(), b.url()];
    let kb = format!("balance = \"round_robin\"\nsession_key = \"{KEY_A}\"");
    let one = Gateway::start(&config(&endpoints, &kb));
    let two = Gateway::start(&config(&endpoints, &kb));

    let mut sessions = Vec::new();
    for _ in 0..4 {
        let r = post(&one.url("/mcp"), &[], INIT).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let id = session(&r);
        assert!(!id.starts_with("sample-"), "the upstream's id leaked: {id}");
        assert!(
            id.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
        sessions.push(id);
    }
    assert_eq!(a.received().len() + b.received().len(), 4);
    assert_eq!(a.received().len(), 2, "round robin: two sessions each");

    // Each session's calls, through either gateway, reach the endpoint that made it,
    // with the upstream's own id.
    for (n, id) in sessions.iter().enumerate() {
        let gw = if n % 2 == 0 { &two } else { &one };
        let r = post(
            &gw.url("/mcp"),
            &[("mcp-session-id", id)],
            &support::call(7, "get_document"),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.json()["result"].is_object(), "{}", r.body);
    }
    for server in [&a, &b] {
        let received = server.received();
        let made_here = received
            .iter()
            .filter(|r| r.headers.get("mcp-session-id").is_none())
            .count();
        assert_eq!(made_here, 2);
        let calls: Vec<&str> = received
            .iter()
            .filter_map(|r| r.headers.get("mcp-session-id"))
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(calls.len(), 2, "two calls, one per session made here");
        for c in calls {
            assert!(c.starts_with("sample-"), "the upstream got its own id: {c}");
        }
    }
    let m = metrics(&one).await;
    assert_eq!(series(&m, "mcpgate_endpoint_open_sessions", &a.url()), 2);
    assert_eq!(series(&m, "mcpgate_endpoint_open_sessions", &b.url()), 2);
    assert_eq!(series(&m, "mcpgate_endpoint_healthy", &a.url()), 1);

    // Forged, foreign and plain ids: 404, the MCP signal to initialize again, and the
    // upstreams see nothing.
    let before = a.received().len() + b.received().len();
    let mut forged = sessions[0].clone().into_bytes();
    forged[20] = if forged[20] == b'A' { b'B' } else { b'A' };
    let other_key = Gateway::start(&config(&endpoints, &format!("session_key = \"{KEY_B}\"")));
    for (gw, id) in [
        (&one, String::from_utf8(forged).unwrap()),
        (&one, "sample-0".to_string()),
        (&one, "x".repeat(3000)),
        (&other_key, sessions[0].clone()),
    ] {
        let r = post(
            &gw.url("/mcp"),
            &[("mcp-session-id", &id)],
            &support::call(8, "get_document"),
        )
        .await;
        assert_eq!(r.status, 404, "{}", r.body);
        assert_eq!(r.json()["error"]["code"], -32001);
        // The answer does not echo the id back.
        assert!(!r.body.contains(&id), "{}", r.body);
    }
    assert_eq!(a.received().len() + b.received().len(), before);

    // Rotation: the new key first, the old one second: old ids still open.
    let rotated = Gateway::start(&config(
        &endpoints,
        &format!("session_key = [\"{KEY_B}\", \"{KEY_A}\"]"),
    ));
    let r = post(
        &rotated.url("/mcp"),
        &[("mcp-session-id", &sessions[1])],
        &support::call(9, "get_document"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // And a session it makes is sealed with the new key: the old-key-only gateway refuses it.
    let fresh = session(&post(&rotated.url("/mcp"), &[], INIT).await);
    let r = post(
        &one.url("/mcp"),
        &[("mcp-session-id", &fresh)],
        &support::call(10, "get_document"),
    )
    .await;
    assert_eq!(r.status, 404);

    // An endpoint that left the set: its sessions are 404 after the reload, the others'
    // go on.
    std::fs::write(
        one.config_path(),
        config(std::slice::from_ref(&b.url()), &kb),
    )
    .unwrap();
    one.signal("HUP");
    one.log_with("configuration reloaded", 1).await;
    let on_a = &sessions[0];
    let on_b = &sessions[1];
    let r = post(
        &one.url("/mcp"),
        &[("mcp-session-id", on_a)],
        &support::call(11, "get_document"),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = post(
        &one.url("/mcp"),
        &[("mcp-session-id", on_b)],
        &support::call(12, "get_document"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let m = metrics(&one).await;
    assert!(
        !m.contains(&format!("endpoint=\"{}\"", a.url())),
        "the endpoint's series left with it"
    );
    // No log line holds a sealed id or an upstream one.
    for gw in [&one, &two] {
        let log = gw.log();
        for id in &sessions {
            assert!(!log.contains(id.as_str()));
        }
    }
}

/// least_requests sends new requests away from a busy endpoint (power of two choices over
/// requests in flight); round_robin takes each in turn whatever their load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_requests_avoids_the_busy_endpoint_and_round_robin_does_not() {
    for (balance, slow_share) in [("least_requests", 0.25), ("round_robin", 0.5)] {
        let slow = support::upstream(mcpgate::cli::sample::Options {
            call_delay: Some(Duration::from_millis(400)),
            ..Default::default()
        })
        .await;
        let fast = json_upstream().await;
        let kb = format!("balance = \"{balance}\"\nsession_key = \"{KEY_A}\"");
        let gw = Gateway::start(&config(&[slow.url(), fast.url()], &kb));
        let url = gw.url("/mcp");
        let mut tasks = Vec::new();
        for id in 0..40u64 {
            let url = url.clone();
            tasks.push(tokio::spawn(async move {
                let r = post(&url, &[], &support::call(id, "get_document")).await;
                assert_eq!(r.status, 200, "{}", r.body);
            }));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for t in tasks {
            t.await.unwrap();
        }
        let (s, f) = (calls_received(&slow), calls_received(&fast));
        assert_eq!(s + f, 40);
        let share = s as f64 / 40.0;
        eprintln!("{balance}: {s} slow, {f} fast");
        match balance {
            "round_robin" => assert!(
                (share - slow_share).abs() < 0.05,
                "{balance}: {s} slow, {f} fast"
            ),
            _ => assert!(share < slow_share, "{balance}: {s} slow, {f} fast"),
        }
    }
}

/// A request that cannot have acted (no connection) goes to the other endpoint; one that
/// may have (written, then the connection closed without an answer) is never sent twice:
/// 502, and the healthy endpoint never sees it.
#[tokio::test]
async fn only_requests_that_cannot_have_acted_are_retried_elsewhere() {
    let good = json_upstream().await;
    // Nothing listens on this port.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/mcp", l.local_addr().unwrap())
    };
    let kb = format!(
        "balance = \"round_robin\"\nsession_key = \"{KEY_A}\"\noutlier = {{ consecutive_failures = 100 }}"
    );
    let gw = Gateway::start(&config(&[closed.clone(), good.url()], &kb));
    for id in 0..6 {
        let r = post(&gw.url("/mcp"), &[], &support::call(id, "get_document")).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(
        calls_received(&good),
        6,
        "each went to the live endpoint once"
    );
    let m = metrics(&gw).await;
    assert_eq!(series(&m, "mcpgate_endpoint_requests_total", &closed), 3);
    assert_eq!(
        series(&m, "mcpgate_endpoint_requests_total", &good.url()),
        6
    );

    // An endpoint that reads the request and hangs up: it may have acted.
    let hangs_up = support::raw_upstream(Vec::new());
    let good = json_upstream().await;
    let gw = Gateway::start(&config(&[hangs_up.clone(), good.url()], &kb));
    let mut failed = 0;
    for id in 0..6 {
        let r = post(&gw.url("/mcp"), &[], &support::call(id, "delete_document")).await;
        if r.status == 502 {
            assert_eq!(r.json()["error"]["code"], -32006);
            failed += 1;
        } else {
            assert_eq!(r.status, 200, "{}", r.body);
        }
    }
    assert_eq!(
        failed, 3,
        "every request sent to the endpoint that hung up failed"
    );
    assert_eq!(calls_received(&good), 3, "and none of them was sent again");
}

/// Ejection: failures in a row take an endpoint out for `eject_for` (no request tries it
/// meanwhile); with every endpoint out the answer is 503 -32003; state survives a reload
/// that keeps the endpoints' settings.
#[tokio::test]
async fn ejected_endpoints_get_nothing_and_none_left_is_503() {
    let port = free_port();
    let mut good = Replica::start(port);
    let good_url = format!("http://127.0.0.1:{port}/mcp");
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/mcp", l.local_addr().unwrap())
    };
    let kb = format!(
        "balance = \"round_robin\"\nsession_key = \"{KEY_A}\"\noutlier = {{ consecutive_failures = 2, eject_for = \"1h\" }}"
    );
    let gw = Gateway::start(&config(&[closed.clone(), good_url.clone()], &kb));
    for id in 0..10 {
        let r = post(&gw.url("/mcp"), &[], &support::call(id, "get_document")).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let m = metrics(&gw).await;
    assert_eq!(series(&m, "mcpgate_endpoint_requests_total", &closed), 2);
    assert_eq!(series(&m, "mcpgate_endpoint_ejections_total", &closed), 1);
    assert_eq!(series(&m, "mcpgate_endpoint_healthy", &closed), 0);
    assert!(gw.log().contains("endpoint ejected"));

    // A reload that keeps the endpoints (a longer timeout) keeps the ejection.
    std::fs::write(
        gw.config_path(),
        config(&[closed.clone(), good_url.clone()], &kb)
            .replace("timeout = \"5s\"", "timeout = \"6s\""),
    )
    .unwrap();
    gw.signal("HUP");
    gw.log_with("configuration reloaded", 1).await;
    for id in 0..4 {
        let r = post(&gw.url("/mcp"), &[], &support::call(id, "get_document")).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let m = metrics(&gw).await;
    assert_eq!(
        series(&m, "mcpgate_endpoint_requests_total", &closed),
        2,
        "still out"
    );

    // The good one goes away too: its failures eject it, then nothing is left.
    good.kill();
    let mut statuses = Vec::new();
    for id in 0..4 {
        let r = post(&gw.url("/mcp"), &[], &support::call(id, "get_document")).await;
        statuses.push(r.status.as_u16());
        if r.status == 503 {
            assert_eq!(r.json()["error"]["code"], -32003, "{}", r.body);
        }
    }
    assert_eq!(statuses, [502, 502, 503, 503]);
}

/// `mcpgate sample-upstream` as a process of its own, on `port`.
struct Replica(Child);

impl Replica {
    fn start(port: u16) -> Replica {
        let child = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
            .args(["sample-upstream", "--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let started = Instant::now();
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(started.elapsed() < Duration::from_secs(10), "no replica");
            std::thread::sleep(Duration::from_millis(20));
        }
        Replica(child)
    }

    fn kill(&mut self) {
        let _ = self.0.kill(); // SIGKILL
        let _ = self.0.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Load from `clients` tasks until `stop`; counts answers by kind.
#[derive(Default)]
struct Tally {
    ok: AtomicUsize,
    /// 502s whose message says the request reached an endpoint.
    reached: AtomicUsize,
    /// Any other failure: a request that never reached an endpoint, and still failed.
    other: AtomicUsize,
}

async fn load(url: String, clients: usize, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (url, stop, tally) = (url.clone(), stop.clone(), tally.clone());
            tokio::spawn(async move {
                let mut id = c as u64 * 1_000_000;
                while !stop.load(Ordering::Relaxed) {
                    id += 1;
                    let r = post(&url, &[], &support::call(id, "get_document")).await;
                    if r.status == 200 && r.json()["result"].is_object() {
                        tally.ok.fetch_add(1, Ordering::Relaxed);
                    } else if r.status == 502 && r.body.contains("before a complete answer") {
                        tally.reached.fetch_add(1, Ordering::Relaxed);
                    } else {
                        eprintln!("failed: {} {}", r.status, r.body);
                        tally.other.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

/// One of two replicas killed with SIGKILL under load: no request that had not been
/// written to it fails (those go to the other), at most the ones in flight on it do. The
/// health check takes it out, and once it is back, in again: it serves requests anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_under_load_fails_only_what_was_written_to_it() {
    let (port_a, port_b) = (free_port(), free_port());
    let mut a = Replica::start(port_a);
    let _b = Replica::start(port_b);
    let (url_a, url_b) = (
        format!("http://127.0.0.1:{port_a}/mcp"),
        format!("http://127.0.0.1:{port_b}/mcp"),
    );
    let kb = format!(
        "session_key = \"{KEY_A}\"\nhealth = {{ interval = \"200ms\", timeout = \"100ms\", unhealthy_after = 1, healthy_after = 1 }}\noutlier = {{ eject_for = \"500ms\" }}"
    );
    let gw = Gateway::start(&config(&[url_a.clone(), url_b.clone()], &kb));
    let clients = 8;
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let running = tokio::spawn(load(gw.url("/mcp"), clients, stop.clone(), tally.clone()));
    support::eventually(Duration::from_secs(10), "load on both replicas", || async {
        let before = metrics(&gw).await;
        (series(&before, "mcpgate_endpoint_requests_total", &url_a) > 50).then_some(())
    })
    .await;
    a.kill();
    let killed_at = tally.ok.load(Ordering::Relaxed);
    let down = support::eventually(
        Duration::from_secs(10),
        "the killed replica out, the other serving",
        || async {
            let down = metrics(&gw).await;
            let out = series(&down, "mcpgate_endpoint_healthy", &url_a) == 0;
            (out && tally.ok.load(Ordering::Relaxed) > killed_at + 100).then_some(down)
        },
    )
    .await;

    // Back in, it serves again.
    let _a = Replica::start(port_a);
    support::eventually(Duration::from_secs(10), "the replica back in", || async {
        let after = metrics(&gw).await;
        let back = series(&after, "mcpgate_endpoint_healthy", &url_a) == 1
            && series(&after, "mcpgate_endpoint_requests_total", &url_a)
                > series(&down, "mcpgate_endpoint_requests_total", &url_a) + 20;
        back.then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    running.await.unwrap();
    let (ok, reached, other) = (
        tally.ok.load(Ordering::Relaxed),
        tally.reached.load(Ordering::Relaxed),
        tally.other.load(Ordering::Relaxed),
    );
    eprintln!("ok {ok}, failed after reaching the killed replica {reached}, other {other}");
    assert_eq!(
        other, 0,
        "every failure was a request the killed replica had"
    );
    assert!(
        reached <= clients,
        "at most the requests in flight at the kill"
    );
}

/// Config errors for replicas name the line and say what is wrong, never a key.
#[test]
fn replica_settings_are_checked() {
    let e = |kb: &str, endpoints: &[&str]| {
        let endpoints: Vec<String> = endpoints.iter().map(|s| s.to_string()).collect();
        let text = config(&endpoints, kb);
        match Gateway::try_start(&text) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err((code, log)) => {
                assert_eq!(code, Some(1), "{log}");
                log
            }
        }
    };
    let two = ["http://127.0.0.1:9/mcp", "http://127.0.0.1:10/mcp"];
    for (kb, endpoints, says) in [
        ("", &two[..], "several endpoints need session_key"),
        (
            "session_key = \"c2hvcnQ=\"",
            &two[..],
            "5 bytes; a key is 32",
        ),
        ("session_key = \"not base64!\"", &two[..], "not base64"),
        (
            "session_key = [\"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\", \"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\"]",
            &two[..],
            "listed twice",
        ),
        ("", &[][..], "endpoints lists no url"),
        (
            "",
            &["http://127.0.0.1:9/mcp", "http://127.0.0.1:9/mcp"][..],
            "listed twice",
        ),
        ("balance = \"random\"", &two[..1], "least_requests"),
        (
            "health = { interval = \"1s\", timeout = \"2s\" }",
            &two[..1],
            "timeout is at most the interval",
        ),
        ("health = { unhealthy_after = 0 }", &two[..1], "at least 1"),
        (
            "outlier = { consecutive_failures = 0 }",
            &two[..1],
            "at least 1",
        ),
        ("url = \"http://127.0.0.1:9/mcp\"", &two[..1], "not both"),
    ] {
        let log = e(kb, endpoints);
        assert!(log.contains(says), "{kb}: {log}");
        assert!(
            !log.contains("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"),
            "a key was printed"
        );
    }
}
