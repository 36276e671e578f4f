//! Bad input gets a clear, spec-shaped error and changes nothing: every case here checks
//! the status, the JSON-RPC envelope, and that the upstream received nothing.

mod support;

use http::Method;
use serde_json::Value;
use support::*;

fn assert_envelope(r: &Reply, status: u16, code: i64) -> Value {
    assert_eq!(r.status, status, "{}", r.body);
    assert_eq!(r.header("content-type"), "application/json");
    let v = r.json();
    assert_eq!(v["jsonrpc"], "2.0");
    assert_eq!(v["error"]["code"], code, "{v}");
    assert_eq!(v["error"]["data"]["request_id"], r.header("x-request-id"));
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let url = gw.url("/mcp-gpt-full");
    for (body, code) in [
        ("{", -32700),
        ("not json", -32700),
        (r#"{"jsonrpc":"2.0","id":1,"method":"ping"}{}"#, -32700),
        ("", -32700),
        ("[]", -32600),
        ("17", -32600),
        (r#"{"jsonrpc":"2.0","id":1}"#, -32600),
        (r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#, -32600),
        (r#"{"id":1,"method":"ping"}"#, -32600),
        (r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}, 5]"#, -32600),
    ] {
        let r = post(&url, &[], body).await;
        let v = assert_envelope(&r, 400, code);
        assert_eq!(v["id"], Value::Null, "{body}");
    }
    let r = send(
        Method::POST,
        &url,
        &[("content-type", "application/json")],
        &b"\xff\xfe{}"[..],
    )
    .await;
    assert_envelope(&r, 400, -32700);
    assert!(up.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_keys_are_refused() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let url = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    for body in [
        // Which method runs depends on the parser: never forward it.
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"move_document"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_document","name":"delete_document"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_document","n\u0061me":"move_document"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping","params":{},"params":{}}]"#,
    ] {
        let r = post(&url, &[], body).await;
        assert_envelope(&r, 400, -32600);
        assert!(
            r.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains("duplicate key"),
            "{}",
            r.body
        );
    }
    assert!(up.received().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_type_and_encoding() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let url = gw.url("/mcp-gpt-full");
    let body = list(1);
    for headers in [
        vec![("content-type", "text/plain")],
        vec![("content-type", "application/x-www-form-urlencoded")],
        vec![],
        vec![
            ("content-type", "application/json"),
            ("content-encoding", "gzip"),
        ],
        vec![
            ("content-type", "application/json"),
            ("content-encoding", "identity, br"),
        ],
    ] {
        let r = send(Method::POST, &url, &headers, body.clone()).await;
        assert_envelope(&r, 415, -32600);
    }
    // A gzip body that really is gzip is refused too: it was not inspected.
    let gz =
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xab\xae\x05\x00\x43\xbf\xa6\xa3\x02\x00\x00\x00";
    let r = send(
        Method::POST,
        &url,
        &[
            ("content-type", "application/json"),
            ("content-encoding", "gzip"),
        ],
        &gz[..],
    )
    .await;
    assert_envelope(&r, 415, -32600);
    // Parameters and case do not matter.
    let r = send(
        Method::POST,
        &url,
        &[
            ("content-type", "Application/JSON; charset=utf-8"),
            ("accept", SDK_ACCEPT),
        ],
        body.clone(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(up.received().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_are_refused_before_forwarding() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"upload_document","arguments":{{"content":"{}"}}}}}}"#,
        "x".repeat(70 * 1024)
    );
    let r = post(&gw.url("/mcp-gpt-full"), &[], &big).await;
    let v = assert_envelope(&r, 413, -32600);
    assert!(v["error"]["message"].as_str().unwrap().contains("65536"));

    // Without Content-Length (chunked), the limit holds while reading.
    let addr = gw.listeners["main"];
    let mut req = format!(
        "POST /mcp-gpt-full HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{big}\r\n0\r\n\r\n",
        big.len()
    );
    req.push_str("");
    let answer = raw(addr, req.as_bytes()).await;
    assert!(
        answer.starts_with("HTTP/1.1 413"),
        "{}",
        &answer[..answer.len().min(300)]
    );
    // Just under the limit passes.
    let fits = big.replace(&"x".repeat(70 * 1024), &"x".repeat(60 * 1024));
    assert_eq!(post(&gw.url("/mcp-gpt-full"), &[], &fits).await.status, 200);
    assert_eq!(up.received().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_headers_must_match_the_body() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let url = gw.url("/mcp-gpt-full");
    let body = call(1, "get_document");
    for headers in [
        vec![("mcp-method", "tools/list")],
        vec![
            ("mcp-method", "tools/call"),
            ("mcp-name", "search_knowledge"),
        ],
        vec![("mcp-name", "move_document")],
    ] {
        let r = post(&url, &headers, &body).await;
        let v = assert_envelope(&r, 400, -32020);
        assert_eq!(v["error"]["data"]["reason"], "header_mismatch");
    }
    let batch = format!("[{body}]");
    assert_envelope(
        &post(&url, &[("mcp-method", "tools/call")], &batch).await,
        400,
        -32020,
    );
    assert!(up.received().is_empty());

    let r = post(
        &url,
        &[("mcp-method", "tools/call"), ("mcp-name", "get_document")],
        &body,
    )
    .await;
    assert_eq!(r.status, 200);
    let read =
        r#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"doc://welcome"}}"#;
    let r = post(
        &url,
        &[
            ("mcp-method", "resources/read"),
            ("mcp-name", "doc://welcome"),
        ],
        read,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(up.received().len(), 2);
    // The headers reach the upstream as sent.
    assert_eq!(up.received()[0].headers["mcp-name"], "get_document");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_and_routes() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let body = list(1);

    // Path-token routes: every bad token looks exactly like a missing route.
    let no_route = post(&gw.url("/nowhere"), &[], &body).await;
    let v = assert_envelope(&no_route, 404, -32001);
    for token in [
        "wrong",
        EXPIRED,
        FUTURE,
        READONLY,
        &GPT[..GPT.len() - 1],
        &format!("{GPT}x"),
    ] {
        let r = post(&gw.url(&format!("/gpt-mcp/{token}/mcp")), &[], &body).await;
        let w = assert_envelope(&r, 404, -32001);
        assert_eq!(w["error"]["message"], v["error"]["message"]);
        assert_eq!(r.headers.get("www-authenticate"), None);
    }
    // Near misses of the template are no route.
    for path in [
        format!("/gpt-mcp/{GPT}/mcp/"),
        format!("/gpt-mcp/{GPT}"),
        "/gpt-mcp//mcp".to_string(),
        format!("/GPT-MCP/{GPT}/mcp"),
    ] {
        assert_envelope(&post(&gw.url(&path), &[], &body).await, 404, -32001);
    }

    // Bearer routes: 401 with a challenge.
    for auth in [
        None,
        Some("Bearer wrong".to_string()),
        Some(bearer(GPT)),
        Some(format!("Basic {READONLY}")),
        Some(bearer(EXPIRED)),
    ] {
        let headers: Vec<(&str, &str)> = auth
            .as_deref()
            .map(|a| vec![("authorization", a)])
            .unwrap_or_default();
        let r = post(&gw.url("/mcp-readonly"), &headers, &body).await;
        assert_envelope(&r, 401, -32001);
        assert_eq!(r.header("www-authenticate"), "Bearer realm=\"mcpgate\"");
    }
    assert!(up.received().is_empty());

    // Tokens never appear in the log, not even the bad ones or the path: read once all 16
    // request lines are in.
    let log = gw.log_with("\"message\":\"request\"", 16).await;
    for t in ALL_TOKENS {
        assert!(!log.contains(t), "token in log");
    }
    assert!(log.contains("\"route\":\"/gpt-mcp/{token}/mcp\""), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_methods() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    for method in [Method::PUT, Method::PATCH, Method::OPTIONS, Method::HEAD] {
        let r = send(method.clone(), &gw.url("/mcp-gpt-full"), &[], "").await;
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), "POST, GET, DELETE");
        if method != Method::HEAD {
            assert_eq!(r.json()["error"]["code"], -32600);
        }
    }
    // A wrong token still answers 404 first: the method reveals nothing.
    let r = send(Method::PUT, &gw.url("/gpt-mcp/wrong/mcp"), &[], "").await;
    assert_eq!(r.status, 404);
    assert!(up.received().is_empty());
}

/// A method a client invents is refused, and counted as "(other)": it never becomes a
/// metric label, so a client cannot grow the series without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invented_methods_are_not_metric_labels() {
    let up = json_upstream().await;
    let gw = Gateway::start(&format!(
        "{}\n[admin]\naddr = \"127.0.0.1:0\"\n",
        config(&up.url(), "10s")
    ));
    let brew = Method::from_bytes(b"BREW-COFFEE").unwrap();
    let r = send(brew, &gw.url("/mcp-gpt-full"), &[], "").await;
    assert_eq!(r.status, 405);
    let metrics = send(Method::GET, &gw.admin_url("/metrics"), &[], "")
        .await
        .body;
    assert!(!metrics.contains("BREW"), "{metrics}");
    assert!(
        metrics.contains(
            "route=\"/mcp-gpt-full\",profile=\"gpt-full\",method=\"(other)\",status=\"405\"} 1"
        ),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_socket_does_not_hurt_the_gateway() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let addr = gw.listeners["main"];
    for junk in [
        &b"\x00\x01\x02garbage\r\n\r\n"[..],
        b"GET / HTTP/9.9\r\n\r\n",
        b"POST /mcp-gpt-full HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
    ] {
        let answer = raw(addr, junk).await;
        assert!(!answer.contains(" 500 "), "{answer}");
    }
    let r = post(&gw.url("/mcp-gpt-full"), &[], &list(1)).await;
    assert_eq!(r.status, 200);
}

/// A tools/call of a tool no request may reach, and a whole request carrying it: what a
/// smuggling attempt hides after a body a lenient reader ends early.
fn hidden_call() -> (String, String) {
    let smuggled = call(9, "delete_document");
    let hidden = format!(
        "POST /mcp-gpt-full HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{smuggled}",
        smuggled.len()
    );
    (smuggled, hidden)
}

/// Heads that frame a body two ways (how requests are smuggled past proxies), or that
/// break RFC 9112 otherwise, are refused before anything is forwarded, and the
/// connection is closed so nothing after them is read as a request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_framing_is_refused_and_never_forwarded() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let addr = gw.listeners["main"];
    let (smuggled, hidden) = hidden_call();
    for (head, status) in [
        ("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "400"),
        ("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "400"),
        ("Content-Length: 5\r\nContent-Length: 50\r\n", "400"),
        ("Transfer-Encoding: gzip, chunked\r\n", "501"),
        (
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
            "400",
        ),
    ] {
        let req = format!(
            "POST /mcp-gpt-full HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{head}\r\n0\r\n\r\n{hidden}"
        );
        let answer = raw(addr, req.as_bytes()).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{head:?}: {answer}"
        );
        assert_eq!(
            answer.matches("HTTP/1.1").count(),
            1,
            "nothing after it was read: {answer}"
        );
    }
    for req in [
        format!(
            "POST /mcp-gpt-full HTTP/1.1\r\nContent-Length: {}\r\n\r\n{smuggled}",
            smuggled.len()
        ),
        format!(
            "POST /mcp-gpt-full HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: {}\r\n\r\n{smuggled}",
            smuggled.len()
        ),
        format!(
            "POST /mcp-gpt-full HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{smuggled}\r\n0\r\n\r\n",
            smuggled.len()
        ),
        format!(
            "POST /mcp-gpt-full HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{smuggled}\r\n0\r\n\r\n"
        ),
    ] {
        let answer = raw(addr, req.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{req:?}: {answer}");
    }
    assert!(up.received().is_empty(), "{:?}", up.called_tools());
    // The gateway still serves.
    assert_eq!(
        post(&gw.url("/mcp-gpt-full"), &[], &list(1)).await.status,
        200
    );
}

/// Chunked framing outside RFC 9112's grammar is a 400 that closes the connection: a
/// lenient reader would take the first case as a body ending early and the rest as a
/// second request. Nothing is forwarded, and nothing after the refused head is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_lines_and_trailers_outside_the_grammar_are_refused() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let addr = gw.listeners["main"];
    let (_, hidden) = hidden_call();
    let list = list(1);
    let n = list.len();
    let mut long_extensions = String::new();
    for _ in 0..96 {
        long_extensions.push_str(&format!("1;e={}\r\n{{\r\n", "v".repeat(7000)));
    }
    let mut many_trailers = format!("{n:x}\r\n{list}\r\n0\r\n");
    for i in 0..80_000 {
        many_trailers.push_str(&format!("t{i}: 1\r\n"));
    }
    for body in [
        "2;\nxx\r\nff\r\n0\r\n\r\n".to_string(),
        format!("{n:x};a\0b\r\n{list}\r\n0\r\n\r\n"),
        format!(";x\r\n{list}\r\n0\r\n\r\n"),
        format!("{n:x}\r\n{list}\r\n0\r\n\r\r\n"),
        format!("{n:x}\r\n{list}\r\n0\r\nno colon here\r\n\r\n"),
        long_extensions,
        many_trailers,
    ] {
        let req = format!(
            "POST /mcp-gpt-full HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{body}{hidden}"
        );
        let answer = raw(addr, req.as_bytes()).await;
        let shown = &body[..body.len().min(40)];
        assert!(answer.starts_with("HTTP/1.1 400"), "{shown:?}: {answer}");
        assert_eq!(answer.matches("HTTP/1.1").count(), 1, "{shown:?}: {answer}");
    }
    assert!(up.received().is_empty(), "{:?}", up.called_tools());
    // Extensions and trailers within the grammar and the bound pass.
    let req = format!(
        "POST /mcp-gpt-full HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{n:x};name=\"a value\"\r\n{list}\r\n0\r\nx-trailer: 1\r\n\r\n"
    );
    let answer = raw(addr, req.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(up.received().len(), 1);
}

/// Request fields named with `_` are dropped (CGI, WSGI and PHP read `X_Forwarded_For`
/// as `X-Forwarded-For`), `Expect` is answered here and not passed on, and an
/// absolute-form target's authority is the host that is checked, not `Host`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_that_mean_something_else_upstream_do_not_pass() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let addr = gw.listeners["main"];
    let body = list(1);
    let req = format!(
        "POST /mcp-gpt-full HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX_Forwarded_For: 6.6.6.6\r\nContent_Length: 99\r\nX_Custom: 1\r\nExpect: 100-continue\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let answer = raw(addr, req.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let got = up.received();
    assert_eq!(got.len(), 1);
    let names: Vec<&str> = got[0].headers.keys().map(|n| n.as_str()).collect();
    for gone in ["x_forwarded_for", "content_length", "x_custom", "expect"] {
        assert!(!names.contains(&gone), "{gone} in {names:?}");
    }
    assert_eq!(got[0].headers["x-forwarded-for"], "127.0.0.1");

    let req = format!(
        "POST http://evil.example/mcp-gpt-full HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let answer = raw(addr, req.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let req = format!(
        "POST http://127.0.0.1/mcp-gpt-full HTTP/1.1\r\nHost: evil.example\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let answer = raw(addr, req.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(up.received().len(), 2);
}

/// Arguments nested past `[limits] max_json_depth` (default 64) are refused with 400
/// -32600 before anything is parsed or forwarded, however deep (200,000 levels, which a
/// parser that reads a value whole would take and the server's recursive one would not);
/// up to the limit they pass. The limit is configurable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_nested_past_the_limit_is_refused_before_forwarding() {
    let up = json_upstream().await;
    let gw = Gateway::start(
        &config(&up.url(), "10s").replace("max_body = \"64KiB\"", "max_body = \"1MiB\""),
    );
    let url = gw.url("/mcp-gpt-full");
    let call = |levels: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"search_knowledge","arguments":{{"q":{}1{}}}}}}}"#,
            "[".repeat(levels),
            "]".repeat(levels)
        )
    };
    // The arguments object is 3 deep: 61 levels inside it make 64.
    let r = post(&url, &[], &call(61)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(up.received().len(), 1);
    for levels in [62, 1_000, 200_000] {
        let r = post(&url, &[], &call(levels)).await;
        let v = assert_envelope(&r, 400, -32600);
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("max_json_depth"),
            "{v}"
        );
        assert_eq!(v["id"], Value::Null, "not parsed, so no id");
    }
    // A batch of deep calls, brackets inside strings ignored.
    let quoted = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"search_knowledge","arguments":{"q":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}}}"#;
    assert_eq!(post(&url, &[], quoted).await.status, 200);
    let batch = format!("[{},{}]", call(2), call(80));
    assert_envelope(&post(&url, &[], &batch).await, 400, -32600);
    assert_eq!(up.received().len(), 2, "only the two within the limit");

    let gw = Gateway::start(&config(&up.url(), "10s").replace(
        "max_body = \"64KiB\"",
        "max_body = \"64KiB\"\nmax_json_depth = 8",
    ));
    let url = gw.url("/mcp-gpt-full");
    assert_eq!(post(&url, &[], &call(5)).await.status, 200);
    assert_envelope(&post(&url, &[], &call(6)).await, 400, -32600);
}
