//! stdio upstreams (docs/stdio.md) through the real gateway: the reference server-everything and
//! a Python SDK server in stdio mode with the Python and TypeScript SDK clients, the sample
//! server in shared mode, and `tests/peers/bad_stdio.py`, a server that misbehaves on
//! purpose. Every test counts the processes it started (by a marker in their command
//! line) and checks none is left once the gateway is done with them.

mod support;

use http_body_util::BodyExt;
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};
use support::{Gateway, eventually, node22, peers, post, python, run_client, ts2_client};

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"sampling":{}},"clientInfo":{"name":"t","version":"1"}}}"#;

/// A marker no other test's processes carry.
fn marker(what: &str) -> String {
    format!(
        "mcpgate-test-{what}-{}-{}",
        std::process::id(),
        fastrand_u32()
    )
}

fn fastrand_u32() -> u32 {
    let mut b = [0u8; 4];
    getrandom::fill(&mut b).unwrap();
    u32::from_le_bytes(b)
}

/// Processes whose command line (its words joined by spaces) holds `marker`.
fn processes_with(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|cmd| {
            String::from_utf8_lossy(cmd)
                .replace('\0', " ")
                .contains(marker)
        })
        .count()
}

/// Children of `parent` that exited and were not reaped (zombies keep no command line,
/// so `processes_with` does not see them).
fn zombies_of(parent: u32) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            // pid (comm) state ppid …; comm may hold spaces, so read after the last ')'.
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let mut f = rest.split_whitespace();
            f.next() == Some("Z") && f.next() == Some(parent.to_string().as_str())
        })
        .count()
}

/// Waits (up to `limit`) until `processes_with(marker)` is `n`.
fn wait_processes(marker: &str, n: usize, limit: Duration) {
    let started = Instant::now();
    while processes_with(marker) != n {
        assert!(
            started.elapsed() < limit,
            "{} processes with {marker}, not {n}: {}",
            processes_with(marker),
            String::from_utf8_lossy(
                &std::process::Command::new("ps")
                    .args(["-eo", "pid,ppid,stat,args"])
                    .output()
                    .unwrap()
                    .stdout
            )
            .lines()
            .filter(|l| l.contains(marker))
            .collect::<Vec<_>>()
            .join("\n")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The sample server over stdio, run through a link whose name holds `marker` (its
/// arguments are checked, so the marker cannot be one).
fn sample(marker: &str, dir: &std::path::Path) -> String {
    let link = dir.join(format!("{marker}-mcpgate"));
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_mcpgate"), &link).unwrap();
    command(&[link.to_str().unwrap(), "sample-upstream", "--stdio"])
}

/// A gateway with stdio upstreams: `upstreams` holds their tables (`[upstreams.NAME]` and
/// keys); each gets a profile allowing every tool but `move_document`, and a route
/// `/NAME` without auth.
fn gateway(upstreams: &[(&str, String)]) -> Gateway {
    let mut text = String::from(
        "[[listen]]\nname = \"main\"\naddr = \"127.0.0.1:0\"\n[admin]\naddr = \"127.0.0.1:0\"\n[tools]\nhidden = [\"move_document\", \"get-env\"]\n",
    );
    for (name, table) in upstreams {
        text.push_str(&format!(
            "[upstreams.{name}]\n{table}\n[profiles.{name}]\nupstream = \"{name}\"\nallow = [\"*\"]\n[[routes]]\nlisten = \"main\"\npath = \"/{name}\"\nprofile = \"{name}\"\nauth = \"none\"\n"
        ));
    }
    Gateway::start(&text)
}

fn command(words: &[&str]) -> String {
    let list: Vec<String> = words.iter().map(|w| format!("{w:?}")).collect();
    format!("command = [{}]", list.join(", "))
}

fn bad(mode: &str, marker: &str) -> String {
    let script = peers().join("bad_stdio.py");
    command(&[
        python().to_str().unwrap(),
        script.to_str().unwrap(),
        mode,
        marker,
    ])
}

/// Stops the gateway as an operator would (SIGTERM) and waits for it.
fn stop(mut gw: Gateway) {
    gw.signal("TERM");
    assert!(
        gw.wait_exit(Duration::from_secs(30)).is_some(),
        "the gateway did not stop"
    );
}

async fn initialize(url: &str) -> String {
    let r = post(url, &[], INIT).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.header("mcp-session-id").to_string()
}

fn call(id: u64, tool: &str, args: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{args}}}}}"#
    )
}

/// The SDK clients through the reference server and a Python SDK server, each run as a
/// stdio process, per client and shared: they list, call and are refused the hidden tool,
/// and every process is gone once the gateway stops.
#[test]
fn sdk_clients_reach_stdio_servers_per_client_and_shared() {
    let mark = marker("sdk");
    let everything =
        peers().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let py = peers().join("py_server.py");
    let ev = command(&[
        node22().to_str().unwrap(),
        everything.to_str().unwrap(),
        "stdio",
        &mark,
    ]);
    let pyc = command(&[
        python().to_str().unwrap(),
        py.to_str().unwrap(),
        "stdio",
        "sse",
        &mark,
    ]);
    let gw = gateway(&[
        ("ev", ev.clone()),
        ("evshared", format!("{ev}\nsessions = \"shared\"")),
        ("py", pyc.clone()),
        ("pyshared", format!("{pyc}\nsessions = \"shared\"")),
    ]);
    let cases = [
        (
            "ev",
            "echo",
            r#"{"message":"over stdio"}"#,
            "Echo: over stdio",
            "get-env",
        ),
        (
            "evshared",
            "echo",
            r#"{"message":"over stdio"}"#,
            "Echo: over stdio",
            "get-env",
        ),
        (
            "py",
            "get_document",
            r#"{"id":"welcome"}"#,
            "This store holds the team's notes.",
            "move_document",
        ),
        (
            "pyshared",
            "get_document",
            r#"{"id":"welcome"}"#,
            "This store holds the team's notes.",
            "move_document",
        ),
    ];
    for (route, tool, args, expect, hidden) in cases {
        let url = gw.url(&format!("/{route}"));
        let outs = [
            run_client(
                Command::new(python())
                    .arg(peers().join("py_client.py"))
                    .args([&url, "legacy", "-", tool, args, hidden]),
            ),
            run_client(
                Command::new(node22())
                    .arg(peers().join("ts_client.mjs"))
                    .args([&url, "-", tool, args, hidden]),
            ),
        ];
        for out in outs {
            let v: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
            assert_eq!(v["call"][0], expect, "{route}: {out}");
            assert!(
                !v["tools"].as_array().unwrap().iter().any(|t| t == hidden),
                "{route}: {out}"
            );
            assert!(
                v["refused"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("Unknown tool: {hidden}")),
                "{route}: {out}"
            );
        }
    }
    // Shared: one process each however many clients came.
    assert!(processes_with(&mark) >= 2);
    let log = gw.log();
    for (upstream, clients) in [("evshared", 1), ("pyshared", 1), ("ev", 2), ("py", 2)] {
        let started = log
            .lines()
            .filter(|l| {
                l.contains("\"stdio server started\"")
                    && l.contains(&format!("\"upstream\":\"{upstream}\""))
            })
            .count();
        assert_eq!(started, clients, "{upstream}");
    }
    stop(gw);
    wait_processes(&mark, 0, Duration::from_secs(15));
}

/// Shared mode: one process, initialized once; two clients' equal ids never meet, each
/// gets its own answers with its own id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_mode_keeps_clients_apart() {
    let mark = marker("shared");
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(&[(
        "docs",
        format!("{}\nsessions = \"shared\"", sample(&mark, dir.path())),
    )]);
    let url = gw.url("/docs");
    let a = initialize(&url).await;
    let b = initialize(&url).await;
    assert_ne!(a, b);
    assert_eq!(
        gw.log_with("\"stdio server started\"", 1)
            .await
            .matches("\"stdio server started\"")
            .count(),
        1
    );
    assert_eq!(processes_with(&mark), 1);
    let mut tasks = Vec::new();
    for n in 0..40 {
        for (session, doc, text) in [
            (&a, "welcome", "team's notes"),
            (&b, "onboarding", "ask for access"),
        ] {
            let (url, session) = (url.clone(), session.clone());
            tasks.push(tokio::spawn(async move {
                let r = support::send(
                    http::Method::POST,
                    &url,
                    &[
                        ("content-type", "application/json"),
                        ("accept", "application/json"),
                        ("mcp-session-id", &session),
                    ],
                    call(1, "get_document", &format!(r#"{{"id":"{doc}"}}"#)),
                )
                .await;
                assert_eq!(r.status, 200, "{}", r.body);
                let v = r.json();
                assert_eq!(v["id"], 1);
                assert!(
                    v["result"]["content"][0]["text"]
                        .as_str()
                        .unwrap()
                        .contains(text),
                    "{n}: {}",
                    r.body
                );
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    // An initialize without an id (a notification) starts nothing: 400, and all goes on.
    let r = post(
        &url,
        &[],
        r#"{"jsonrpc":"2.0","method":"initialize","params":{}}"#,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    // A's GET stream ends when A's session does, though the process goes on for B.
    let (u, session) = (url.clone(), a.clone());
    let stream = tokio::spawn(async move {
        let started = Instant::now();
        let (reply, ended) = support::send_stream(
            http::Method::GET,
            &u,
            &[
                ("accept", "text/event-stream"),
                ("mcp-session-id", &session),
            ],
            "",
            Duration::from_secs(8),
        )
        .await;
        (reply.status, ended, started.elapsed())
    });
    eventually(Duration::from_secs(5), "A's stream open", || async {
        let m = support::send(http::Method::GET, &gw.admin_url("/metrics"), &[], "").await;
        m.body.contains("mcpgate_open_streams 1").then_some(())
    })
    .await;
    // A second stream for A is a conflict, answered as every error mcpgate makes.
    let r = support::send(
        http::Method::GET,
        &url,
        &[("accept", "text/event-stream"), ("mcp-session-id", &a)],
        "",
    )
    .await;
    assert_eq!(r.status, 409, "{}", r.body);
    // One SSE event, as the client accepts only SSE.
    let v = r.messages().pop().unwrap();
    assert_eq!(v["error"]["code"], -32600, "{}", r.body);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already open")
    );
    assert_eq!(v["error"]["data"]["request_id"], r.header("x-request-id"));
    let r = support::send(http::Method::DELETE, &url, &[("mcp-session-id", &a)], "").await;
    assert_eq!(r.status, 200);
    let (status, ended, took) = stream.await.unwrap();
    assert_eq!(status, 200);
    assert!(ended && took < Duration::from_secs(5), "{ended} {took:?}");
    let r = post(
        &url,
        &[("mcp-session-id", &b)],
        &call(2, "get_document", r#"{"id":"welcome"}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    stop(gw);
    wait_processes(&mark, 0, Duration::from_secs(15));
}

/// What the process says during a call (progress, a log message, a sampling request)
/// reaches the client on the call's stream, and the client's answer reaches the process.
#[tokio::test]
async fn a_stdio_server_s_messages_during_a_call_reach_the_client_and_back() {
    let mark = marker("talk");
    let gw = gateway(&[("talk", bad("talk", &mark))]);
    let url = gw.url("/talk");
    let session = initialize(&url).await;
    let body = r#"{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"name":"echo","arguments":{},"_meta":{"progressToken":"p-1"}}}"#;
    let resp = support::request(
        http::Method::POST,
        &url,
        &[
            ("content-type", "application/json"),
            ("accept", support::SDK_ACCEPT),
            ("mcp-session-id", &session),
        ],
        bytes::Bytes::from(body),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut seen = String::new();
    let mut answered = false;
    while let Some(frame) = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("events within 10 s")
    {
        if let Ok(data) = frame.unwrap().into_data() {
            seen.push_str(&String::from_utf8_lossy(&data));
        }
        if !answered && seen.contains("sampling/createMessage") {
            let r = post(
                &url,
                &[("mcp-session-id", &session)],
                r#"{"jsonrpc":"2.0","id":"s1","result":{"role":"assistant","content":{"type":"text","text":"hi"},"model":"m"}}"#,
            )
            .await;
            assert_eq!(r.status, 202, "{}", r.body);
            answered = true;
        }
    }
    assert!(seen.contains("\"progressToken\":\"p-1\""), "{seen}");
    assert!(seen.contains("notifications/message"), "{seen}");
    assert!(seen.contains("client said: hi"), "{seen}");
    assert!(
        seen.contains("\"id\":\"c1\""),
        "the client's own id: {seen}"
    );
    stop(gw);
    wait_processes(&mark, 0, Duration::from_secs(15));
}

/// Misbehaving processes change nothing for clients: junk on stdout never reaches them; a
/// crash is a 502 and ends the session (404 after), and the next initialize starts anew; a
/// process that stops reading fails calls at once rather than queueing without end; a
/// stderr flood is logged at a bounded rate; a process that ignores SIGTERM is killed; a
/// program that cannot start is one log line and a 502; more sessions than
/// `max_processes` is 503; the child's environment holds nothing of the gateway's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misbehaving_stdio_servers_change_nothing_for_their_clients() {
    let mark = marker("bad");
    let gw = gateway(&[
        ("garbage", bad("garbage", &mark)),
        ("crash", bad("crash", &mark)),
        ("deaf", format!("{}\ntimeout = \"10s\"", bad("deaf", &mark))),
        ("flood", bad("flood", &mark)),
        ("stubborn", bad("stubborn", &mark)),
        (
            "few",
            format!(
                "{}\nmax_processes = 2\nenv = {{ GIVEN = \"yes\" }}",
                bad("garbage", &mark)
            ),
        ),
        ("missing", command(&["/nonexistent/mcp-server", &mark])),
    ]);

    // Junk lines are logged and dropped; the answer comes through.
    let url = gw.url("/garbage");
    let s = initialize(&url).await;
    let r = post(
        &url,
        &[("mcp-session-id", &s)],
        &call(2, "echo", r#"{"a":1}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("echo: {\\\"a\\\": 1}"), "{}", r.body);
    assert!(!r.body.contains("not json") && !r.body.contains("hello") && !r.body.contains("xxxx"));
    let log = gw.log_with("over the limit", 1).await;
    assert!(log.contains("not JSON-RPC"), "{log}");

    // A crash: 502, then the session is gone; a new one works.
    let url = gw.url("/crash");
    let s = initialize(&url).await;
    let r = post(&url, &[("mcp-session-id", &s)], &call(3, "echo", "{}")).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], -32006);
    let r = post(&url, &[("mcp-session-id", &s)], &call(4, "echo", "{}")).await;
    assert_eq!(r.status, 404, "{}", r.body);
    let again = initialize(&url).await;
    assert_ne!(again, s);

    // A process that stops reading: calls queue up to a bound, then fail at once.
    let url = gw.url("/deaf");
    let s = initialize(&url).await;
    let big = format!(r#"{{"pad":"{}"}}"#, "p".repeat(60_000));
    let mut tasks = Vec::new();
    for n in 0..90 {
        let (url, s, big) = (url.clone(), s.clone(), big.clone());
        tasks.push(tokio::spawn(async move {
            let started = Instant::now();
            let r = post(&url, &[("mcp-session-id", &s)], &call(n, "echo", &big)).await;
            (r.status.as_u16(), r.body, started.elapsed())
        }));
    }
    let mut not_reading = 0;
    for t in tasks {
        let (status, body, took) = t.await.unwrap();
        match status {
            502 => {
                assert!(body.contains("not reading its input"), "{body}");
                assert!(
                    took < Duration::from_secs(5),
                    "failed soon (the wait for room is 1 s), not at the deadline (10 s): {took:?}"
                );
                not_reading += 1;
            }
            504 => {}
            other => panic!("{other}: {body}"),
        }
    }
    assert!(not_reading > 0, "the queue is bounded");

    // A stderr flood: calls go on; the log gets at most 50 lines a second and a count.
    let url = gw.url("/flood");
    let s = initialize(&url).await;
    let r = post(&url, &[("mcp-session-id", &s)], &call(5, "echo", "{}")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let log = gw.log_with("stderr lines not logged", 1).await;
    let lines = log.matches("flood line").count();
    assert!(lines < 1000, "{lines} stderr lines logged");

    // At most two processes; the third session waits for none: 503.
    let url = gw.url("/few");
    let one = initialize(&url).await;
    let _two = initialize(&url).await;
    let r = post(&url, &[], INIT).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], -32003);
    // Its environment: PATH, HOME, LANG and what the config gives; not the gateway's.
    let r = support::send(
        http::Method::POST,
        &url,
        &[
            ("content-type", "application/json"),
            ("accept", "application/json"),
            ("mcp-session-id", &one),
        ],
        call(6, "env", "{}"),
    )
    .await;
    let names: Vec<String> =
        serde_json::from_str(r.json()["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert!(names.contains(&"GIVEN".to_string()), "{names:?}");
    for name in &names {
        assert!(
            ["PATH", "HOME", "LANG", "GIVEN", "LC_CTYPE", "PWD"].contains(&name.as_str()),
            "{name} leaked into the child: {names:?}"
        );
    }
    // DELETE ends it: one process fewer, and the third session can start.
    let r = support::send(http::Method::DELETE, &url, &[("mcp-session-id", &one)], "").await;
    assert_eq!(r.status, 200);
    let started = Instant::now();
    loop {
        let r = post(&url, &[], INIT).await;
        if r.status == 200 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{}", r.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // One that ignores SIGTERM and its stdin's end: killed after the grace.
    let url = gw.url("/stubborn");
    let s = initialize(&url).await;
    let stubborn = format!("stubborn {mark}");
    assert_eq!(processes_with(&stubborn), 1);
    let r = support::send(http::Method::DELETE, &url, &[("mcp-session-id", &s)], "").await;
    assert_eq!(r.status, 200);
    tokio::task::spawn_blocking(move || wait_processes(&stubborn, 0, Duration::from_secs(15)))
        .await
        .unwrap();
    // Killed, and reaped: the crashed, closed and killed ones alike.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(zombies_of(gw.pid()), 0);

    // A program that cannot start: 502 and one clear line.
    let r = post(&gw.url("/missing"), &[], INIT).await;
    assert_eq!(r.status, 502, "{}", r.body);
    // The line is written a moment after the answer.
    gw.log_with("stdio server could not be started", 1).await;

    stop(gw);
    let mark2 = mark.clone();
    tokio::task::spawn_blocking(move || wait_processes(&mark2, 0, Duration::from_secs(20)))
        .await
        .unwrap();
}

/// A session with no request for `idle_timeout` ends with its process; a reload that
/// removes the upstream closes the processes it ran.
#[tokio::test]
async fn idle_sessions_and_removed_upstreams_close_their_processes() {
    let mark = marker("idle");
    let dir = tempfile::tempdir().unwrap();
    let sample = sample(&mark, dir.path());
    let gw = gateway(&[
        ("idle", format!("{sample}\nidle_timeout = \"1s\"")),
        ("kept", sample.clone()),
    ]);
    let s = initialize(&gw.url("/idle")).await;
    let _k = initialize(&gw.url("/kept")).await;
    assert_eq!(processes_with(&mark), 2);
    let m = mark.clone();
    tokio::task::spawn_blocking(move || wait_processes(&m, 1, Duration::from_secs(10)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(zombies_of(gw.pid()), 0);
    let metrics = support::send(http::Method::GET, &gw.admin_url("/metrics"), &[], "")
        .await
        .body;
    assert!(
        metrics.contains("mcpgate_stdio_processes{upstream=\"idle\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("mcpgate_stdio_processes{upstream=\"kept\"} 1"),
        "{metrics}"
    );
    let r = post(
        &gw.url("/idle"),
        &[("mcp-session-id", &s)],
        &call(1, "get_document", r#"{"id":"welcome"}"#),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    // The reload keeps only `idle`: `kept`'s process goes.
    let text = std::fs::read_to_string(gw.config_path()).unwrap();
    let cut = text.find("[upstreams.kept]").unwrap();
    std::fs::write(gw.config_path(), &text[..cut]).unwrap();
    gw.signal("HUP");
    gw.log_with("configuration reloaded", 1).await;
    let m = mark.clone();
    tokio::task::spawn_blocking(move || wait_processes(&m, 0, Duration::from_secs(10)))
        .await
        .unwrap();
    stop(gw);
}

/// Keys of HTTP upstreams are refused beside `command`, and stdio keys beside `url`.
#[test]
fn stdio_settings_are_checked() {
    for (table, says) in [
        ("command = []", "command names no program"),
        (
            "command = [\"x\"]\nurl = \"http://127.0.0.1:1/mcp\"",
            "url does not apply to a stdio upstream",
        ),
        ("command = [\"x\"]\nsessions = \"pooled\"", "per_client"),
        ("command = [\"x\"]\nmax_processes = 0", "at least 1"),
        (
            "url = \"http://127.0.0.1:1/mcp\"\ncwd = \"/\"",
            "cwd applies to stdio upstreams",
        ),
        (
            "command = [\"x\"]\nenv = { \"A=B\" = \"1\" }",
            "not a variable name",
        ),
    ] {
        let text = format!(
            "[[listen]]\nname = \"main\"\naddr = \"127.0.0.1:0\"\n[upstreams.u]\n{table}\n[profiles.p]\nupstream = \"u\"\nallow = [\"*\"]\n"
        );
        match Gateway::try_start(&text) {
            Ok(_) => panic!("accepted: {table}"),
            Err((_, log)) => assert!(log.contains(says), "{table}: {log}"),
        }
    }
}

/// MCP 2026-07-28 over stdio (docs/protocol.md): the SDK v2 client reaches an SDK v2 stdio server
/// without `initialize` or a session, per caller (one process per token, kept for that
/// token's next client) and shared (one modern process, apart from the legacy one), with
/// the elicitation round, progress, mirrored parameters and listen streams working as
/// over HTTP; a legacy client of the same upstream still gets its own initialized process.
#[test]
fn modern_clients_reach_stdio_servers_without_sessions() {
    const ALICE: &str = "tok-alice-stdio-3Fh8Kq2Lm6Np0Rs4Tv8Wx2Yz";
    const BOB: &str = "tok-bob-stdio-9Gj3Hk5Lm7Np9Qr1St3Uv5Wx7";
    let mark = marker("modern");
    let server = peers().join("ts2_server.mjs");
    let ts2 = command(&[
        node22().to_str().unwrap(),
        server.to_str().unwrap(),
        "--stdio",
        &mark,
    ]);
    let text = format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.each]
{ts2}
sessions = "per_caller"

[upstreams.one]
{ts2}
sessions = "shared"

[profiles.each]
upstream = "each"
allow = ["*"]

[profiles.one]
upstream = "one"
allow = ["*"]

[[routes]]
listen = "main"
path = "/each"
profile = "each"

[[routes]]
listen = "main"
path = "/one"
profile = "one"
auth = "none"

[[tokens]]
id = "alice"
sha256 = "{alice}"
profiles = ["each"]

[[tokens]]
id = "bob"
sha256 = "{bob}"
profiles = ["each"]
"#,
        alice = support::hash(ALICE),
        bob = support::hash(BOB),
    );
    let gw = Gateway::start(&text);
    for (url, bearer) in [(gw.url("/each"), Some(ALICE)), (gw.url("/one"), None)] {
        let out = ts2_client(&url, "basic", bearer);
        assert_eq!(
            out["discover"]["versions"],
            serde_json::json!(["2026-07-28"]),
            "{out}"
        );
        assert_eq!(out["echo"], "echo: hi", "{out}");
        assert_eq!(out["grusse"], "grüße, Welt", "{out}");
        assert_eq!(out["where"], "rain in eu-west 1 ü", "{out}");
        assert_eq!(out["elicited"], "Delete note n1?", "{out}");
        assert_eq!(out["confirm"], "deleted n1", "{out}");
        assert_eq!(
            out["progress"]["progress"],
            serde_json::json!([1, 2, 3]),
            "{out}"
        );
        assert_eq!(
            out["read"], "contents of file:///public/readme.txt",
            "{out}"
        );
        assert_eq!(out["prompt"], "Say hello to Ada", "{out}");
        let out = ts2_client(&url, "listen", bearer);
        assert_eq!(out["listen"].as_array().map(Vec::len), Some(4), "{out}");
    }
    // alice's two clients used one process, and the shared upstream one: two so far.
    wait_processes(&mark, 2, Duration::from_secs(10));
    ts2_client(&gw.url("/each"), "denied", Some(BOB));
    wait_processes(&mark, 3, Duration::from_secs(10));
    // The Python SDK 2.3 client in its modern mode (server/discover first) uses bob's
    // process; in legacy mode, the shared upstream starts one of that generation.
    let python_client = |url: &str, mode: &str, bearer: &str| {
        let out = run_client(
            Command::new(python())
                .arg(peers().join("py_client.py"))
                .args([url, mode, bearer, "echo", r#"{"text":"py"}"#, "delete_note"]),
        );
        serde_json::from_str::<Value>(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
    };
    let py = python_client(&gw.url("/each"), "auto", BOB);
    assert_eq!(py["call"], serde_json::json!(["echo: py"]), "{py}");
    wait_processes(&mark, 3, Duration::from_secs(10));
    let py = python_client(&gw.url("/one"), "legacy", "-");
    assert_eq!(py["call"], serde_json::json!(["echo: py"]), "{py}");
    wait_processes(&mark, 4, Duration::from_secs(10));
    stop(gw);
    wait_processes(&mark, 0, Duration::from_secs(15));
}

const MODERN_META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}"#;

fn modern(id: &str, method: &str, params: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{{params}{sep}{MODERN_META}}}}}"#,
        sep = if params.is_empty() { "" } else { "," }
    )
}

/// What the recording server read, one message a line.
fn recorded(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The cancels (their request ids) the recording server read.
fn cancels(path: &std::path::Path) -> Vec<Value> {
    recorded(path)
        .into_iter()
        .filter(|m| m["method"] == "notifications/cancelled")
        .map(|m| m["params"]["requestId"].clone())
        .collect()
}

/// When mcpgate is the stdio server's HTTP server it does what a 2026-07-28 server must:
/// `Mcp-Param-*` headers are checked against the tool's `x-mcp-header` marks (a mismatch
/// is 400 -32020 and reaches no process); a client that leaves mid-call, or closes a
/// listen stream, has the call cancelled at the child under the child's own id; listen
/// notifications come back under the client's id; a client's own cancel is renumbered,
/// and one naming another session's call is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_children_are_told_of_cancels_and_mirrored_headers_are_checked() {
    let mark = marker("cancel");
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("read.jsonl");
    let table = format!(
        "{}\nsessions = \"shared\"\nenv = {{ RECORD = {:?} }}",
        bad("record", &mark),
        record.to_str().unwrap()
    );
    let gw = gateway(&[("rec", table)]);
    let url = gw.url("/rec");
    let headers = |method: &'static str, name: &'static str| {
        let mut h = vec![
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", method),
        ];
        if !name.is_empty() {
            h.push(("mcp-name", name));
        }
        h
    };
    // The list teaches mcpgate the tool's marks.
    let r = post(
        &url,
        &headers("tools/list", ""),
        &modern("1", "tools/list", ""),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("x-mcp-header"), "{}", r.body);
    let query = |region: &str| {
        modern(
            "2",
            "tools/call",
            &format!(r#""name":"query","arguments":{{"region":"{region}","sql":"select 1"}}"#),
        )
    };
    let mut h = headers("tools/call", "query");
    h.push(("mcp-param-region", "=?base64?ZXUtd2VzdA==?="));
    let r = post(&url, &h, &query("eu-west")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("ran "), "{}", r.body);
    let before = recorded(&record).len();
    for bad_header in [Some("us-east"), None, Some("=?base64?not base64?=")] {
        let mut h = headers("tools/call", "query");
        if let Some(v) = bad_header {
            h.push(("mcp-param-region", v));
        }
        let r = post(&url, &h, &query("eu-west")).await;
        assert_eq!(r.status, 400, "{bad_header:?}: {}", r.body);
        assert_eq!(r.json()["error"]["code"], -32020, "{}", r.body);
        assert!(r.body.contains("Mcp-Param-region"), "{}", r.body);
    }
    assert_eq!(
        recorded(&record).len(),
        before,
        "a refused call reached the child"
    );

    // As the process's HTTP server, mcpgate answers what a 2026-07-28 server must: a
    // revision it does not serve, and an envelope without capabilities, never reach it.
    let odd = r#"{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"v999.0.0","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let r = post(
        &url,
        &[
            ("mcp-protocol-version", "v999.0.0"),
            ("mcp-method", "tools/list"),
        ],
        odd,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let error = &r.json()["error"];
    assert_eq!(error["code"], -32022, "{}", r.body);
    assert_eq!(error["data"]["requested"], "v999.0.0", "{}", r.body);
    assert_eq!(
        error["data"]["supported"],
        serde_json::json!(["2026-07-28"]),
        "{}",
        r.body
    );
    let bare = r#"{"jsonrpc":"2.0","id":10,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
    let r = post(&url, &headers("tools/list", ""), bare).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], -32602, "{}", r.body);
    assert_eq!(
        r.json()["error"]["data"]["reason"],
        "invalid_meta",
        "{}",
        r.body
    );
    assert_eq!(
        recorded(&record).len(),
        before,
        "a refused request reached the child"
    );
    // A method the process does not have is a 404, as the transport says.
    let r = post(
        &url,
        &headers("nothing/here", ""),
        &modern("11", "nothing/here", ""),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], -32601, "{}", r.body);

    // A client that leaves mid-call: the child is told, under its own number.
    let addr = gw.listeners["main"];
    let wait = modern("\"w-1\"", "tools/call", r#""name":"wait","arguments":{}"#);
    support::post_and_hang_up(
        addr,
        "/rec",
        "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: wait\r\n",
        &wait,
        Duration::from_millis(300),
    )
    .await;
    let waited = eventually(Duration::from_secs(10), "the wait call", || async {
        recorded(&record)
            .into_iter()
            .find(|m| m["params"]["name"] == "wait")
            .map(|m| m["id"].clone())
    })
    .await;
    assert_ne!(waited, "w-1", "the child sees its own numbers");
    eventually(Duration::from_secs(10), "the cancel", || async {
        cancels(&record).contains(&waited).then_some(())
    })
    .await;

    // A listen stream: notifications carry the client's id; closing it cancels.
    let listen = modern(
        "\"L1\"",
        "subscriptions/listen",
        r#""notifications":{"resourceSubscriptions":["file:///a"]}"#,
    );
    let (reply, _) = support::send_stream(
        http::Method::POST,
        &url,
        &[
            ("content-type", "application/json"),
            ("accept", support::SDK_ACCEPT),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "subscriptions/listen"),
        ],
        listen,
        Duration::from_secs(1),
    )
    .await;
    let events = reply.messages();
    assert_eq!(events.len(), 2, "{}", reply.body);
    for e in &events {
        assert_eq!(
            e["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L1",
            "{e}"
        );
    }
    let listened = recorded(&record)
        .into_iter()
        .find(|m| m["method"] == "subscriptions/listen")
        .map(|m| m["id"].clone())
        .unwrap();
    eventually(Duration::from_secs(10), "the listen cancel", || async {
        cancels(&record).contains(&listened).then_some(())
    })
    .await;

    // Legacy sessions on the shared process: a cancel is renumbered among its own calls.
    let a = initialize(&url).await;
    let b = initialize(&url).await;
    let a_url = url.clone();
    let a_session = a.clone();
    let held = tokio::spawn(async move {
        post(
            &a_url,
            &[("mcp-session-id", &a_session)],
            &call(7, "wait", "{}"),
        )
        .await
    });
    let child_id = eventually(Duration::from_secs(10), "the legacy wait call", || async {
        recorded(&record)
            .into_iter()
            .filter(|m| m["params"]["name"] == "wait")
            .nth(1)
            .map(|m| m["id"].clone())
    })
    .await;
    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#;
    let r = post(&url, &[("mcp-session-id", &b)], cancel).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let r = post(&url, &[("mcp-session-id", &a)], cancel).await;
    assert_eq!(r.status, 202, "{}", r.body);
    eventually(Duration::from_secs(10), "the renumbered cancel", || async {
        cancels(&record).contains(&child_id).then_some(())
    })
    .await;
    let all = cancels(&record);
    assert!(!all.contains(&serde_json::json!(7)), "{all:?}");
    assert_eq!(all.len(), 3, "one cancel each, b's dropped: {all:?}");
    held.abort();
    stop(gw);
    wait_processes(&mark, 0, Duration::from_secs(15));
}
