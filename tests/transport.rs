//! docs/behaviour.md end to end: Accept negotiation and JSON↔SSE conversion in every direction,
//! SSE headers, keepalives, errors after a stream started, client disconnects, GET streams,
//! long-lived subscriptions, Host/Origin checks.

mod support;

use http::Method;
use mcpgate::cli::sample::{self, Mode};
use serde_json::Value;
use std::time::Duration;
use support::*;

fn with_transport(config: String, extra_listen: &str, transport: &str) -> String {
    config.replacen(
        "addr = \"127.0.0.1:0\"\n",
        &format!("addr = \"127.0.0.1:0\"\n{extra_listen}"),
        1,
    ) + transport
}

async fn post_accept(url: &str, accept: &str, body: &str) -> Reply {
    send(
        Method::POST,
        url,
        &[("content-type", "application/json"), ("accept", accept)],
        body.to_string(),
    )
    .await
}

fn assert_sse_headers(r: &Reply) {
    assert_eq!(
        r.header("content-type"),
        "text/event-stream",
        "{:?}",
        r.headers
    );
    assert_eq!(r.header("cache-control"), "no-cache, no-transform");
    assert_eq!(r.header("x-accel-buffering"), "no");
    assert!(r.headers.get("content-length").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_upstream_answers_in_the_clients_format() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let url = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));

    // SSE preferred: one `event: message` frame, then the stream ends.
    let r = post_accept(&url, "text/event-stream", &call(1, "get_document")).await;
    assert_eq!(r.status, 200);
    assert_sse_headers(&r);
    assert!(r.body.starts_with("event: message\ndata: {"), "{}", r.body);
    assert!(
        r.body.ends_with("}\n\n") && r.body.matches("\n\n").count() == 1,
        "{}",
        r.body
    );
    assert_eq!(r.messages()[0]["result"]["isError"], false);

    // The same with a tools/list: filtered, then framed.
    let r = post_accept(&url, "application/json;q=0.5, text/event-stream", &list(2)).await;
    assert_sse_headers(&r);
    assert_eq!(r.tool_names(), GPT_TOOLS);

    // JSON preferred, equal, wildcard or absent: JSON as the upstream sent it.
    for accept in [
        "application/json",
        "application/json, text/event-stream",
        "*/*",
        "*",
    ] {
        let r = post_accept(&url, accept, &list(3)).await;
        assert_eq!(r.header("content-type"), "application/json", "{accept}");
        assert_eq!(r.tool_names(), GPT_TOOLS);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_upstream_answers_in_the_clients_format() {
    let up = sse_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let url = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));

    // JSON preferred: the stream is read until the answer; the log notification is dropped.
    let r = post_accept(&url, "application/json", &call(1, "get_document")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), "application/json");
    let v = r.json();
    assert_eq!(v["id"], 1);
    assert_eq!(
        v["result"]["content"][0]["text"],
        "# Welcome\nThis store holds the team's notes."
    );

    // A batch comes back as an array of its answers, tools/list filtered.
    let batch = format!("[{},{}]", call(2, "list_documents"), list(3));
    let r = post_accept(&url, "application/json, text/event-stream;q=0.1", &batch).await;
    let v = r.json();
    let items = v.as_array().unwrap();
    assert_eq!(items.len(), 2, "{v}");
    let by_id = |id: u64| items.iter().find(|m| m["id"] == id).unwrap().clone();
    assert!(
        by_id(2)["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("welcome")
    );
    let listed = by_id(3);
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, GPT_TOOLS);

    // Equal preference: the upstream's SSE passes, priming event and notification included.
    let r = post_accept(&url, SDK_ACCEPT, &call(4, "get_document")).await;
    assert_sse_headers(&r);
    assert!(r.body.starts_with("id: "));
    assert_eq!(r.messages().len(), 2);
    let r = post_accept(&url, "text/event-stream", &call(5, "get_document")).await;
    assert_sse_headers(&r);
    assert_eq!(r.messages().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neither_type_is_406_and_errors_follow_the_preference() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let url = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    for accept in [
        "text/html",
        "application/json;q=0, text/event-stream;q=0",
        "image/*",
    ] {
        let r = post_accept(&url, accept, &list(1)).await;
        assert_eq!(r.status, 406, "{accept}");
        let v = r.json();
        assert_eq!(v["error"]["code"], -32600);
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("application/json") && message.contains("text/event-stream"),
            "{message}"
        );
    }
    // A client that prefers SSE gets mcpgate's own errors as one SSE frame.
    let r = post_accept(&url, "text/event-stream", &call(2, "move_document")).await;
    assert_eq!(r.status, 200);
    assert_sse_headers(&r);
    assert_eq!(
        r.messages()[0]["error"]["message"],
        "Unknown tool: move_document"
    );
    let r = post_accept(&gw.url("/gpt-mcp/nope/mcp"), "text/event-stream", &list(3)).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.messages()[0]["error"]["code"], -32001);
    assert!(up.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_streams_get_keepalives_at_event_boundaries() {
    let up = upstream(sample::Options {
        mode: Mode::Sse,
        call_delay: Some(Duration::from_millis(1200)),
        ..Default::default()
    })
    .await;
    let gw = Gateway::start(&with_transport(
        config(&up.url(), "10s"),
        "",
        "\n[transport]\nsse_keepalive = \"250ms\"\n",
    ));
    let r = post(&gw.url("/mcp-gpt-full"), &[], &call(1, "get_document")).await;
    assert!(r.body.contains("\n\n: keepalive\n\n"), "{}", r.body);
    // Keepalives never split an event: every message still decodes.
    let m = r.messages();
    assert_eq!(m.last().unwrap()["id"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_after_the_stream_started_ends_it_with_an_error_event() {
    let up = upstream(sample::Options {
        mode: Mode::Sse,
        call_delay: Some(Duration::from_secs(3)),
        ..Default::default()
    })
    .await;
    let gw = Gateway::start(&config(&up.url(), "700ms"));
    let (r, ended) = send_stream(
        Method::POST,
        &gw.url("/mcp-gpt-full"),
        &[
            ("content-type", "application/json"),
            ("accept", SDK_ACCEPT),
            ("x-request-id", "deadline-1"),
        ],
        call(9, "get_document"),
        Duration::from_secs(5),
    )
    .await;
    assert!(ended, "the gateway ends the stream");
    assert_eq!(r.status, 200);
    let m = r.messages();
    assert_eq!(
        m[0]["method"], "notifications/message",
        "events before the failure pass"
    );
    let last = m.last().unwrap();
    assert_eq!(last["id"], 9);
    assert_eq!(last["error"]["code"], -32004);
    assert_eq!(last["error"]["data"]["request_id"], "deadline-1");
    // The upstream saw its request end before the tool finished.
    eventually(
        Duration::from_secs(5),
        "the upstream call was cancelled",
        || async { (up.cancelled() == 1).then_some(()) },
    )
    .await;

    // Before the head arrives, the same deadline is a plain 504.
    let up = upstream(sample::Options {
        call_delay: Some(Duration::from_secs(3)),
        ..Default::default()
    })
    .await;
    let gw = Gateway::start(&config(&up.url(), "300ms"));
    let r = post(&gw.url("/mcp-gpt-full"), &[], &call(10, "get_document")).await;
    assert_eq!(r.status, 504);
    eventually(
        Duration::from_secs(5),
        "the upstream request was cancelled",
        || async { (up.cancelled() == 1).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_cancels_the_upstream_request() {
    for mode in [Mode::Json, Mode::Sse] {
        let up = upstream(sample::Options {
            mode,
            call_delay: Some(Duration::from_secs(3)),
            ..Default::default()
        })
        .await;
        let gw = Gateway::start(&config(&up.url(), "30s"));
        // The client hangs up mid-call.
        post_and_hang_up(
            gw.listeners["main"],
            "/mcp-gpt-full",
            "",
            &call(1, "get_document"),
            Duration::from_millis(400),
        )
        .await;
        let mut waited = 0;
        while up.cancelled() == 0 && waited < 2500 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            waited += 50;
        }
        assert_eq!(
            up.cancelled(),
            1,
            "{mode:?}: the upstream call was cancelled, not run to the end"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_streams_outlive_the_request_deadline_and_end_when_idle() {
    let up = upstream(sample::Options {
        stream: Some((6, Duration::from_millis(150))),
        ..Default::default()
    })
    .await;
    let text = config(&up.url(), "300ms").replace(
        "timeout = \"300ms\"",
        "timeout = \"300ms\"\nstream_idle_timeout = \"600ms\"",
    );
    let gw = Gateway::start(&text);
    let url = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));

    let r = send(Method::GET, &url, &[("accept", "application/json")], "").await;
    assert_eq!(r.status, 406);

    let (r, ended) = send_stream(
        Method::GET,
        &url,
        &[
            ("accept", "text/event-stream"),
            ("last-event-id", "t2"),
            ("mcp-session-id", "s-9"),
        ],
        "",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_sse_headers(&r);
    assert!(ended, "the idle timeout ended the stream");
    let ticks = r
        .messages()
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .count();
    assert_eq!(
        ticks, 6,
        "900 ms of events flowed past a 300 ms request deadline: {}",
        r.body
    );
    let got = up.received();
    assert_eq!(got[0].headers["last-event-id"], "t2");
    assert_eq!(got[0].headers["mcp-session-id"], "s-9");

    // subscriptions/listen (2026-07-28) is long-lived in the same way.
    let listen = r#"{"jsonrpc":"2.0","id":"sub-1","method":"subscriptions/listen","params":{}}"#;
    let (r, ended) = send_stream(
        Method::POST,
        &url,
        &[
            ("content-type", "application/json"),
            ("accept", SDK_ACCEPT),
            ("mcp-method", "subscriptions/listen"),
        ],
        listen,
        Duration::from_secs(5),
    )
    .await;
    assert!(ended);
    let m = r.messages();
    assert_eq!(m[0]["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        m.iter()
            .filter(|m| m["method"] == "notifications/message")
            .count(),
        6
    );
    // Idle past the limit with the subscription unanswered: a final error event for it.
    assert_eq!(m.last().unwrap()["id"], "sub-1");
    assert_eq!(m.last().unwrap()["error"]["code"], -32004);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_and_origin_are_checked() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let url = gw.url("/mcp-gpt-full");
    let body = list(1);
    let base = [("content-type", "application/json"), ("accept", SDK_ACCEPT)];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut h = base.to_vec();
        h.extend_from_slice(extra);
        h
    };
    for (extra, status) in [
        (vec![("host", "evil.example.com")], 403),
        (vec![("host", "evil.example.com:8080")], 403),
        (vec![("origin", "http://evil.example.com")], 403),
        (vec![("origin", "null")], 403),
        (
            vec![
                ("host", "localhost:8080"),
                ("origin", "http://localhost:6274"),
            ],
            200,
        ),
        (
            vec![("host", "127.0.0.1"), ("origin", "http://127.0.0.1:3000")],
            200,
        ),
        (vec![("host", "[::1]:1")], 200),
    ] {
        let r = send(Method::POST, &url, &with(&extra), body.clone()).await;
        assert_eq!(r.status, status, "{extra:?}: {}", r.body);
        if status == 403 {
            assert_eq!(r.json()["error"]["code"], -32001);
        }
    }
    assert_eq!(up.received().len(), 3);

    // Configured lists replace the loopback defaults.
    let text = with_transport(
        config(&up.url(), "10s"),
        "allowed_hosts = [\"mcp.example.com\"]\nallowed_origins = [\"https://claude.ai\"]\n",
        "",
    );
    let gw = Gateway::start(&text);
    let url = gw.url("/mcp-gpt-full");
    let r = send(
        Method::POST,
        &url,
        &with(&[("host", "mcp.example.com"), ("origin", "https://claude.ai")]),
        body.clone(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = send(
        Method::POST,
        &url,
        &with(&[
            ("host", "mcp.example.com"),
            ("origin", "http://localhost:6274"),
        ]),
        body.clone(),
    )
    .await;
    assert_eq!(r.status, 403);
    let r = send(
        Method::POST,
        &url,
        &with(&[("host", "localhost")]),
        body.clone(),
    )
    .await;
    assert_eq!(r.status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_headers_pass_both_ways() {
    let up = sse_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let url = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let r = post(
        &url,
        &[
            ("mcp-protocol-version", "2025-11-25"),
            ("mcp-method", "initialize"),
            ("mcp-extra", "x"),
        ],
        init,
    )
    .await;
    assert!(r.header("mcp-session-id").starts_with("sample-"));
    let m = r.messages();
    assert_eq!(m[0]["result"]["protocolVersion"], "2025-11-25");
    let h = &up.received()[0].headers;
    assert_eq!(h["mcp-protocol-version"], "2025-11-25");
    assert_eq!(h["mcp-method"], "initialize");
    assert_eq!(h["mcp-extra"], "x");
    let discover = r#"{"jsonrpc":"2.0","id":1,"method":"server/discover"}"#;
    let r = post(&url, &[("mcp-method", "server/discover")], discover).await;
    let m: Vec<Value> = r.messages();
    assert_eq!(
        m[0]["error"]["code"], -32601,
        "unknown methods reach the upstream"
    );
}
