//! docs/operations.md end to end: the status page (read by Debian's headless Chromium after real
//! traffic), traces exported to an OTLP/HTTP receiver running in the test (the spans
//! decoded with the OTLP protobuf types), and the combined access log.

mod support;

use http::Method;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::Value;
use std::collections::HashMap;
use std::time::Duration;
use support::*;

/// The test config with a delete rate of 1 a minute, so a second delete is refused.
fn config_with_rate(upstream: &str) -> String {
    config(upstream, "10s").replace(
        "max_body = \"64KiB\"",
        "max_body = \"64KiB\"\nrate = [ { key = \"token+tool\", tools = [\"delete_*\"], rate = \"1/m\" } ]",
    )
}

async fn status(gw: &Gateway) -> Value {
    let r = send(Method::GET, &gw.admin_url("/status"), &[], "").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), "application/json");
    r.json()
}

fn row<'a>(s: &'a Value, method: &str, tool: Option<&str>) -> &'a Value {
    s["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["profile"] == "gpt" && r["method"] == method && r["tool"].as_str() == tool)
        .unwrap_or_else(|| panic!("no row {method} {tool:?} in {s:#}"))
}

/// Real traffic, then the page: its data, its plain render, and Chromium's render after
/// the script polled `/status`; a bad reload shows with its position; no token anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_what_the_gateway_did() {
    let up = json_upstream().await;
    let text = with_admin(config_with_rate(&up.url()));
    let gw = Gateway::start(&text);
    let gpt = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    for i in 0..5 {
        assert_eq!(post(&gpt, &[], &call(i, "get_document")).await.status, 200);
    }
    post(&gpt, &[], &call(10, "move_document")).await;
    post(&gpt, &[], &call(11, "delete_document")).await;
    assert_eq!(
        post(&gpt, &[], &call(12, "delete_document")).await.status,
        429
    );
    post(&gpt, &[], &list(13)).await;
    // A tool name is the client's text: the page shows it, never runs it.
    post(&gpt, &[], &call(14, "<img src=x onerror=alert(1)>")).await;

    let s = status(&gw).await;
    assert_eq!(s["requests"], 10, "{s:#}");
    assert_eq!(s["refused"], 3, "{s:#}");
    let get = row(&s, "tools/call", Some("get_document"));
    assert_eq!(get["requests"], 5);
    assert_eq!(get["refused"], 0);
    assert!(get["p50_ms"].as_f64().unwrap() > 0.0);
    assert!(get["p99_ms"].as_f64().unwrap() >= get["p50_ms"].as_f64().unwrap());
    let delete = row(&s, "tools/call", Some("delete_document"));
    assert_eq!(delete["requests"], 2);
    assert_eq!(delete["refusals"][0]["reason"], "rate_limited");
    assert_eq!(delete["refusals"][0]["count"], 1);
    let hidden = row(&s, "tools/call", Some("move_document"));
    assert_eq!(hidden["refused"], 1);
    assert_eq!(row(&s, "tools/list", None)["requests"], 1);
    let endpoint = &s["upstreams"][0]["endpoints"][0];
    assert_eq!(endpoint["health"], "up");
    assert_eq!(endpoint["url"], up.url());
    assert_eq!(s["upstreams"][0]["name"], "docs");
    assert_eq!(s["reload"], Value::Null);
    let decisions = s["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 9);
    assert_eq!(decisions[0]["tool"], "<img src=x onerror=alert(1)>");
    let decisions = &decisions[1..];
    assert_eq!(decisions[0]["tool"], "delete_document");
    assert_eq!(decisions[0]["outcome"], "rejected");
    assert_eq!(decisions[0]["reason"], "rate_limited");
    assert!(decisions.iter().all(|d| d["caller"] == "chatgpt-app"));

    // A bad file: the running configuration stays, and the page says where it went wrong.
    std::fs::write(
        gw.config_path(),
        format!("{text}\n[server]\nidle_timeout = 5\n"),
    )
    .unwrap();
    let r = send(Method::POST, &gw.admin_url("/reload"), &[], "").await;
    assert_eq!(r.status, 422);
    let s = status(&gw).await;
    assert_eq!(s["reload"]["result"], "error");
    // The file watcher may have seen the change first (it fails the same way).
    assert!(["admin", "file change"].contains(&s["reload"]["trigger"].as_str().unwrap()));
    let error = s["reload"]["error"].as_str().unwrap();
    // file:line:column, then what is wrong there.
    let at = format!("mcpgate.toml:{}:16: invalid type", text.lines().count() + 3);
    assert!(error.contains(&at), "{error}");

    // Without JavaScript: the page as served has the numbers.
    let page = send(Method::GET, &gw.admin_url("/"), &[], "").await;
    assert_eq!(page.status, 200);
    assert_eq!(page.header("content-type"), "text/html; charset=utf-8");
    let csp = page.header("content-security-policy");
    assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'sha256-"));
    assert!(page.body.contains("<b id=requests>10</b>"), "{}", page.body);
    assert!(
        !page.body.contains("<img") && page.body.contains("&#60;img src=x onerror=alert(1)&#62;")
    );
    assert!(page.body.contains("rate_limited 1"));
    // Nothing from elsewhere: one inline script, no link, image or frame.
    assert_eq!(page.body.matches("<script").count(), 1);
    assert!(page.body.contains("<script>"));
    for tag in ["<link", "<img", "<iframe", "<object", "@import", "url("] {
        assert!(!page.body.contains(tag), "{tag}");
    }
    for t in ALL_TOKENS {
        assert!(!page.body.contains(t) && !s.to_string().contains(t));
    }
    // What the script redraws with is the same markup, from the same renderer: the page's
    // status block and the fragment agree up to the footer's clock.
    let fragment = send(Method::GET, &gw.admin_url("/status/fragment"), &[], "").await;
    assert_eq!(fragment.status, 200);
    assert!(
        fragment
            .header("content-security-policy")
            .contains("default-src 'none'")
    );
    let (fragment_body, _) = fragment.body.split_once("<p class=dim>mcpgate").unwrap();
    let (_, in_page) = page.body.split_once("<div id=status>").unwrap();
    assert!(
        in_page.starts_with(fragment_body),
        "{}\n---\n{in_page}",
        fragment.body
    );

    // More traffic after the page was served: Chromium's render must show it, which
    // only the script's poll of /status can bring.
    post(&gpt, &[], &call(20, "get_document")).await;
    let dom = chromium(
        &gw.admin_url("/"),
        &["--virtual-time-budget=6000", "--dump-dom"],
    );
    assert!(dom.contains("<span id=\"live\">live</span>"), "{dom}");
    assert!(dom.contains("<b id=\"requests\">11</b>"), "{dom}");
    assert!(dom.contains("<b id=\"refused\">3</b>"), "{dom}");
    assert!(!dom.contains("<img") && dom.contains("&lt;img src=x onerror=alert(1)&gt;"));
    let get_row = dom
        .split("<tr>")
        .find(|r| r.contains("get_document</td>"))
        .unwrap();
    assert!(get_row.contains("<td class=\"n\">6</td>"), "{get_row}");
    assert!(dom.contains("rate_limited 1"));
    assert!(dom.contains("<span class=\"error\">error</span>"));
    assert!(dom.contains("chatgpt-app"));
    assert!(!ALL_TOKENS.iter().any(|t| dom.contains(t)));

    // A phone-sized screenshot, kept as the test's artifact.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    let png = dir.join("status-page.png");
    let _ = std::fs::remove_file(&png);
    chromium(
        &gw.admin_url("/"),
        &[
            "--virtual-time-budget=3000",
            "--window-size=412,1600",
            "--hide-scrollbars",
            &format!("--screenshot={}", png.display()),
        ],
    );
    let bytes = std::fs::read(&png).expect("the screenshot");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 10_000);
}

/// Runs Debian's Chromium headless on `url` (as the machine's own checks start it: no
/// sandbox as root, nothing fetched but the page) and returns its stdout.
fn chromium(url: &str, extra: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .output()
        .expect("chromium (Debian's package; scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn attrs(span: &Span) -> HashMap<String, String> {
    span.attributes
        .iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Any::StringValue(s)) => s.clone(),
                Some(Any::IntValue(i)) => i.to_string(),
                Some(Any::DoubleValue(f)) => f.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// The client's trace goes on through the gateway's span to the upstream, and the span
/// reaches the collector with what the request learned; new traces follow `sampling`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_go_from_the_client_through_the_gateway_to_the_upstream() {
    let up = json_upstream().await;
    let collector = Collector::start(Some(Duration::ZERO)).await;
    let text = format!(
        "{}\n[telemetry]\notlp = \"http://{}\"\nsampling = 0.0\nservice_name = \"gate-test\"\n",
        with_admin(config(&up.url(), "10s")),
        collector.addr
    );
    let gw = Gateway::start(&text);
    let gpt = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    let parent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");

    // Continued: the client sampled it, so it is recorded whatever `sampling` says.
    let r = post(
        &gpt,
        &[("traceparent", &parent), ("tracestate", "vendor=opaque")],
        &call(1, "get_document"),
    )
    .await;
    assert_eq!(r.status, 200);
    let got = up.received().pop().unwrap();
    let sent = got.headers["traceparent"].to_str().unwrap().to_string();
    assert_eq!(got.headers.get_all("traceparent").iter().count(), 1);
    assert_eq!(&sent[..36], &format!("00-{CLIENT_TRACE}-"));
    assert!(sent.ends_with("-01"));
    let our_span = sent[36..52].to_string();
    assert_ne!(our_span, CLIENT_SPAN);
    assert_eq!(got.headers["tracestate"], "vendor=opaque");

    let spans = collector.wait_spans(1).await;
    assert_eq!(spans.len(), 1);
    let span = &spans[0];
    assert_eq!(hex(&span.trace_id), CLIENT_TRACE);
    assert_eq!(hex(&span.span_id), our_span);
    assert_eq!(hex(&span.parent_span_id), CLIENT_SPAN);
    assert_eq!(span.kind, 2, "SERVER");
    assert_eq!(span.name, "POST /gpt-mcp/{token}/mcp");
    assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
    let a = attrs(span);
    assert_eq!(a["http.route"], "/gpt-mcp/{token}/mcp");
    assert_eq!(a["mcpgate.profile"], "gpt");
    assert_eq!(a["mcpgate.token_id"], "chatgpt-app");
    assert_eq!(a["gen_ai.tool.name"], "get_document");
    assert_eq!(a["mcp.method.name"], "tools/call");
    assert_eq!(a["mcpgate.outcome"], "ok");
    assert_eq!(a["http.response.status_code"], "200");
    // The total is the span's duration; the stages add up to it.
    let total = (span.end_time_unix_nano - span.start_time_unix_nano) as f64 / 1e6;
    let upstream: f64 = a["mcpgate.upstream_ms"].parse().unwrap();
    let gateway: f64 = a["mcpgate.gateway_ms"].parse().unwrap();
    assert!(upstream > 0.0 && (upstream + gateway - total).abs() < 0.01);
    assert_eq!(
        collector.exports.lock().unwrap()[0],
        (
            "/v1/traces".to_string(),
            "application/x-protobuf".to_string()
        )
    );

    // Refused by policy: a span all the same, with why; the upstream never saw it.
    let before = up.received().len();
    post(&gpt, &[("traceparent", &parent)], &call(2, "move_document")).await;
    assert_eq!(up.received().len(), before);
    let spans = collector.wait_spans(2).await;
    assert_eq!(attrs(&spans[1])["mcpgate.outcome"], "policy");

    // No context, and `sampling = 0`: a new trace the upstream can join, not recorded.
    post(&gpt, &[], &call(3, "get_document")).await;
    let fresh = up.received().pop().unwrap().headers["traceparent"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(fresh.starts_with("00-") && fresh.ends_with("-00") && fresh.len() == 55);
    assert!(!fresh.contains(CLIENT_TRACE));

    // A malformed context is not continued, and its tracestate does not go on; two
    // traceparent fields are as bad.
    for bad in [
        vec![(
            "traceparent",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        )],
        vec![
            ("traceparent", parent.as_str()),
            ("traceparent", parent.as_str()),
        ],
    ] {
        let mut headers = bad.clone();
        headers.push(("tracestate", "vendor=opaque"));
        post(&gpt, &headers, &call(4, "get_document")).await;
        let got = up.received().pop().unwrap();
        let sent = got.headers["traceparent"].to_str().unwrap();
        assert!(!sent.to_lowercase().contains(CLIENT_TRACE), "{sent}");
        assert!(got.headers.get("tracestate").is_none());
    }

    // The context in `params._meta` (MCP 2026-07-28) is one too: without the header it is
    // continued, and the upstream gets this request's span there as in the header.
    let with_meta = |id: u64, tp: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"get_document","arguments":{{}},"_meta":{{"progressToken":"p","traceparent":"{tp}"}}}}}}"#
        )
    };
    let r = post(&gpt, &[], &with_meta(5, &parent)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let got = up.received().pop().unwrap();
    let header = got.headers["traceparent"].to_str().unwrap().to_string();
    let body: serde_json::Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(body["params"]["_meta"]["traceparent"], header.as_str());
    assert_eq!(body["params"]["_meta"]["progressToken"], "p");
    assert_eq!(&header[..36], &format!("00-{CLIENT_TRACE}-"));
    assert!(header.ends_with("-01") && &header[36..52] != CLIENT_SPAN);
    let spans = collector.wait_spans(3).await;
    assert_eq!(hex(&spans[2].parent_span_id), CLIENT_SPAN);
    // With both, the header's context wins and `_meta` names the same span.
    let other = format!("00-{}-{CLIENT_SPAN}-01", "1".repeat(32));
    post(&gpt, &[("traceparent", &parent)], &with_meta(6, &other)).await;
    let got = up.received().pop().unwrap();
    let header = got.headers["traceparent"].to_str().unwrap().to_string();
    let body: serde_json::Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(body["params"]["_meta"]["traceparent"], header.as_str());
    assert!(header.contains(CLIENT_TRACE), "{header}");

    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(collector.spans.lock().unwrap().len(), 4);
    let m = send(Method::GET, &gw.admin_url("/metrics"), &[], "")
        .await
        .body;
    assert!(
        m.contains("mcpgate_trace_spans_total{result=\"exported\"} 4"),
        "{m}"
    );
    for t in ALL_TOKENS {
        assert!(!format!("{spans:?}").contains(t));
    }
}

/// A collector that does not answer holds the exporter: the queue fills and the spans
/// past it are dropped and counted, while requests go on at once. One that refuses
/// connections fails the export: counted, and warned of.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_the_collector_cannot_take_are_counted() {
    let up = json_upstream().await;
    let stuck = Collector::start(None).await;
    let text = format!(
        "{}\n[telemetry]\notlp = \"http://{}/v1/traces\"\nqueue = 2\n",
        with_admin(config(&up.url(), "10s")),
        stuck.addr
    );
    let gw = Gateway::start(&text);
    let gpt = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    post(&gpt, &[], &call(1, "get_document")).await;
    // The first span is in an export that never ends.
    for _ in 0..100 {
        if !stuck.exports.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(stuck.exports.lock().unwrap().len(), 1);
    let started = std::time::Instant::now();
    for i in 0..10 {
        assert_eq!(post(&gpt, &[], &call(i, "get_document")).await.status, 200);
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    let m = send(Method::GET, &gw.admin_url("/metrics"), &[], "")
        .await
        .body;
    assert!(
        m.contains("mcpgate_trace_spans_total{result=\"dropped\"} 8"),
        "{m}"
    );

    let closed = free_port();
    let text = format!(
        "{}\n[telemetry]\notlp = \"http://127.0.0.1:{closed}\"\n",
        with_admin(config(&up.url(), "10s")),
    );
    let gw = Gateway::start(&text);
    let gpt = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    for i in 0..3 {
        assert_eq!(post(&gpt, &[], &call(i, "get_document")).await.status, 200);
    }
    gw.log_with("the trace collector did not take spans", 1)
        .await;
    // The three may have gone in one export or two.
    let mut m = String::new();
    for _ in 0..100 {
        m = send(Method::GET, &gw.admin_url("/metrics"), &[], "")
            .await
            .body;
        if m.contains("mcpgate_trace_spans_total{result=\"failed\"} 3") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        m.contains("mcpgate_trace_spans_total{result=\"failed\"} 3"),
        "{m}"
    );
    let warnings = gw
        .log()
        .matches("the trace collector did not take spans")
        .count();
    assert_eq!(warnings, 1);
}

/// `[log] format = "combined"`: one nginx combined line per request on stdout, with the
/// route's template for a path and the token id for the user; no JSON request lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_can_be_nginx_combined() {
    let up = json_upstream().await;
    let text = format!(
        "{}\n[log]\nformat = \"combined\"\n",
        config(&up.url(), "10s")
    );
    let gw = Gateway::start(&text);
    let gpt = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    post(
        &gpt,
        &[
            ("user-agent", "probe/1.0 \"quoted\""),
            ("referer", "https://chat.example/"),
        ],
        &call(1, "get_document"),
    )
    .await;
    post(&gw.url(&format!("/gpt-mcp/{READONLY}/mcp")), &[], &list(2)).await;
    post(&gw.url("/nowhere/tok-secret-in-path"), &[], &list(3)).await;
    let mut out = String::new();
    for _ in 0..100 {
        out = gw.stdout();
        if out.lines().count() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    // nginx's combined: $remote_addr - $remote_user [$time_local] "$request" $status
    // $body_bytes_sent "$http_referer" "$http_user_agent"
    let shape = |l: &str| -> Vec<String> {
        let (addr, rest) = l.split_once(" - ").unwrap();
        let (user, rest) = rest.split_once(" [").unwrap();
        let (time, rest) = rest.split_once("] \"").unwrap();
        let (request, rest) = rest.split_once("\" ").unwrap();
        let (status, rest) = rest.split_once(' ').unwrap();
        let (bytes, rest) = rest.split_once(" \"").unwrap();
        let (referer, agent) = rest.split_once("\" \"").unwrap();
        assert_eq!(time.len(), 26, "{time}");
        assert!(time.ends_with(" +0000"));
        [
            addr,
            user,
            request,
            status,
            bytes,
            referer,
            agent.trim_end_matches('"'),
        ]
        .map(str::to_string)
        .to_vec()
    };
    let first = shape(lines[0]);
    assert_eq!(first[0], "127.0.0.1");
    assert_eq!(first[1], "chatgpt-app");
    assert_eq!(first[2], "POST /gpt-mcp/{token}/mcp HTTP/1.1");
    assert_eq!(first[3], "200");
    assert!(first[4].parse::<u64>().unwrap() > 0);
    assert_eq!(first[5], "https://chat.example/");
    assert_eq!(first[6], "probe/1.0 \\x22quoted\\x22");
    assert_eq!(shape(lines[1])[2], "POST /gpt-mcp/{token}/mcp HTTP/1.1");
    let lost = shape(lines[2]);
    assert_eq!(
        (lost[1].as_str(), lost[2].as_str(), lost[3].as_str()),
        ("-", "POST - HTTP/1.1", "404")
    );
    for t in ALL_TOKENS.iter().chain(&["tok-secret-in-path"]) {
        assert!(!out.contains(t) && !gw.log().contains(t));
    }
    assert!(!gw.log().contains("\"message\":\"request\""));
}

/// The metric names `/metrics` serves: each family's name, and the sample names its type
/// gives it (`_total` for a counter; `_bucket`, `_sum`, `_count` for a histogram).
fn served_names(metrics: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for line in metrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            names.insert(name.to_string());
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[],
            };
            for s in suffixes {
                names.insert(format!("{name}{s}"));
            }
        }
    }
    names
}

/// Every `mcpgate_…` name in `text`.
fn names_used(text: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("mcpgate_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

fn promtool(args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new("promtool")
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; scripts/test.sh installs it)");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

/// The alert rules pass promtool's check and their unit tests; `/metrics` passes
/// `promtool check metrics`; every metric the dashboard and the rules name is served;
/// the certificate expiry follows the certificate through a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboards_and_alerts_match_the_metrics() {
    assert!(promtool(&["check", "rules", "alerts.yaml"], None).contains("SUCCESS"));
    assert!(promtool(&["test", "rules", "alerts.test.yaml"], None).contains("SUCCESS"));

    let up = json_upstream().await;
    let pki = Pki::new();
    pki.issue_expired("server", &["localhost"]);
    let text = format!(
        "{}\n[[listen]]\nname = \"public\"\naddr = \"127.0.0.1:0\"\ntls = {{ cert = \"{}\", key = \"{}\" }}\n\n[telemetry]\notlp = \"http://127.0.0.1:{}\"\n",
        with_admin(config(&up.url(), "10s")),
        pki.path("server.pem"),
        pki.path("server.key"),
        free_port(),
    );
    let gw = Gateway::start(&text);
    let gpt = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    post(&gpt, &[], &call(1, "get_document")).await;
    post(&gpt, &[], &call(2, "move_document")).await;
    let metrics = send(Method::GET, &gw.admin_url("/metrics"), &[], "")
        .await
        .body;
    assert!(
        metrics.contains(
            "mcpgate_tls_certificate_expiry_timestamp_seconds{listener=\"public\"} 1609459200"
        ),
        "{metrics}"
    );
    promtool(&["check", "metrics"], Some(&metrics));
    // A scraper that asks for OpenMetrics (Prometheus does) gets it.
    let accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
    let om = send(
        Method::GET,
        &gw.admin_url("/metrics"),
        &[("accept", accept)],
        "",
    )
    .await;
    assert!(
        om.header("content-type")
            .starts_with("application/openmetrics-text")
    );
    assert!(om.body.ends_with("# EOF\n") && om.body.contains("# TYPE mcpgate_refusals counter"));

    let served = served_names(&metrics);
    let dashboard = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/grafana/mcpgate.json"
    ))
    .unwrap();
    let parsed: Value = serde_json::from_str(&dashboard).unwrap();
    let exprs: Vec<String> = parsed["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect();
    assert!(exprs.len() > 20);
    let alerts = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/prometheus/alerts.yaml"
    ))
    .unwrap();
    for (file, text) in [("dashboard", exprs.join("\n")), ("alerts", alerts)] {
        let used = names_used(&text);
        assert!(used.len() > 8, "{file}: {used:?}");
        let unknown: Vec<_> = used.difference(&served).collect();
        assert!(
            unknown.is_empty(),
            "{file} names metrics /metrics does not serve: {unknown:?}"
        );
    }

    // A renewed certificate: the metric moves with the reload that takes it.
    pki.issue("server", &["localhost"], false);
    for _ in 0..100 {
        let m = send(Method::GET, &gw.admin_url("/metrics"), &[], "")
            .await
            .body;
        if !m.contains("1609459200") {
            let line = m
                .lines()
                .find(|l| l.starts_with("mcpgate_tls_certificate_expiry_timestamp_seconds"))
                .unwrap();
            let at: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            assert!(at > now + 86400, "{line}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the expiry never followed the new certificate");
}
