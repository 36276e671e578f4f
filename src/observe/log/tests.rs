//! Tests of the log lines: the request line, lines as the stock JSON formatter writes them, and lines inside a request's span.

use super::*;
use std::sync::{Arc, Mutex};
use tracing_subscriber::layer::SubscriberExt;

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Sink for Buffer {
    fn write_line(&self, line: &[u8], _urgent: bool) {
        self.0.lock().unwrap().extend_from_slice(line);
    }
}

impl std::io::Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The request line written directly is the one the event would give, byte for byte
/// but the timestamp, with escapes in the values.
#[test]
fn the_direct_request_line_is_the_events_line() {
    let fields = RequestLine {
        method: "POST",
        client: "2001:db8::7".parse().unwrap(),
        route: "/gpt-mcp/{token}/mcp",
        profile: "gpt \"full\"",
        token: "-",
        sub: "user \"7\"",
        client_id: "-",
        rpc: "tools/call",
        tool: "odd\ntool\\",
        status: 200,
        reason: "-",
        // Rounded to the microsecond, as the pipeline hands it over.
        ms: wire::json::text::to_microsecond(0.578144),
    };
    let via_event = Buffer::default();
    let subscriber = tracing_subscriber::registry().with(JsonLayer::new(via_event.clone()));
    let id: Arc<str> = Arc::from("r-9");
    tracing::subscriber::with_default(subscriber, || {
        let _in = enter_request(&id);
        let f = &fields;
        tracing::info!(
            target: "mcpgate::pipeline",
            method = f.method, client = %f.client, route = f.route, profile = f.profile, token = f.token,
            sub = f.sub, client_id = f.client_id, rpc = f.rpc, tool = f.tool, status = f.status, reason = f.reason, ms = f.ms,
            "request"
        );
    });
    let mut direct = String::new();
    {
        let _in = enter_request(&id);
        format_request_line(&mut direct, &fields, std::time::SystemTime::now());
    }
    let event = String::from_utf8(via_event.0.lock().unwrap().clone()).unwrap();
    let skip_time = |l: &str| l[l.find("\",\"level\"").unwrap()..].to_string();
    assert_eq!(skip_time(&direct), skip_time(&event));
    assert!(
        direct.contains("\"span\":{\"request_id\":\"r-9\""),
        "{direct}"
    );
}

fn emit() {
    tracing::info!(listener = "main", addr = %"127.0.0.1:1", "listening");
    let span = tracing::info_span!("request", request_id = %"r-1");
    let _e = span.enter();
    tracing::info!(
        method = %http::Method::POST, route = "/gpt-mcp/{token}/mcp", status = 200u16,
        ms = 0.25f64, big = u64::MAX, neg = -3i64, ok = true, odd = "quote \" and \\ and \n",
        nan = f64::NAN, "request"
    );
    tracing::warn!(error = ?std::io::Error::other("boom"), "upstream request failed");
}

fn lines(bytes: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Our lines are the stock JSON formatter's, field for field (timestamps aside).
#[test]
fn lines_match_the_stock_json_formatter() {
    let ours = Buffer::default();
    let subscriber = tracing_subscriber::registry().with(JsonLayer::new(ours.clone()));
    tracing::subscriber::with_default(subscriber, emit);

    let stock = Buffer::default();
    let writer = stock.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(true)
        .with_span_list(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, emit);

    let mut ours = lines(&ours.0.lock().unwrap());
    let mut stock = lines(&stock.0.lock().unwrap());
    assert_eq!(ours.len(), 3);
    for (a, b) in ours.iter_mut().zip(stock.iter_mut()) {
        let (ta, tb) = (a["timestamp"].take(), b["timestamp"].take());
        assert_eq!(ta.as_str().unwrap().len(), tb.as_str().unwrap().len());
        assert_eq!(a, b);
    }
    // Key order too: what a person reading the raw line sees first.
    let raw = String::from_utf8(ours_raw()).unwrap();
    assert!(raw.starts_with("{\"timestamp\":\""), "{raw}");
    assert!(
        raw.contains("\",\"level\":\"INFO\",\"message\":\"listening\",\"listener\":\"main\""),
        "{raw}"
    );
}

/// Lines of a request polled with [`in_request`] read as the stock formatter's lines
/// in a `request` span, also when two requests take turns on one thread; lines
/// outside any request have no span.
#[test]
fn request_lines_read_as_lines_in_a_request_span() {
    fn log(n: u32) {
        tracing::info!(n, status = 200u16, "request");
    }
    let ours = Buffer::default();
    let subscriber = tracing_subscriber::registry().with(JsonLayer::new(ours.clone()));
    tracing::subscriber::with_default(subscriber, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let request = |id: &'static str, n: u32| {
                in_request(Arc::from(id), tracing::Span::none(), async move {
                    log(n);
                    tokio::task::yield_now().await;
                    log(n + 1);
                })
            };
            tokio::join!(request("r-1", 1), request("r-2", 3));
            log(5);
        });
        let id: Arc<str> = Arc::from("r-3 \"odd\"");
        let _in = enter_request(&id);
        log(6);
    });

    let stock = Buffer::default();
    let writer = stock.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(true)
        .with_span_list(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        for (id, n) in [("r-1", 1), ("r-2", 3), ("r-1", 2), ("r-2", 4)] {
            tracing::info_span!("request", request_id = id).in_scope(|| log(n));
        }
        log(5);
        tracing::info_span!("request", request_id = "r-3 \"odd\"").in_scope(|| log(6));
    });

    let mut ours = lines(&ours.0.lock().unwrap());
    let mut stock = lines(&stock.0.lock().unwrap());
    assert_eq!(ours.len(), 6);
    assert_eq!(ours.len(), stock.len());
    // `join!` takes turns in an order of its own; each line's `n` tells which it is.
    ours.sort_by_key(|l| l["n"].as_u64());
    stock.sort_by_key(|l| l["n"].as_u64());
    for (a, b) in ours.iter_mut().zip(stock.iter_mut()) {
        a["timestamp"].take();
        b["timestamp"].take();
        assert_eq!(a, b);
    }
    assert!(ours[4].get("span").is_none(), "{}", ours[4]);
}

fn ours_raw() -> Vec<u8> {
    let ours = Buffer::default();
    let subscriber = tracing_subscriber::registry().with(JsonLayer::new(ours.clone()));
    tracing::subscriber::with_default(subscriber, emit);
    ours.0.lock().unwrap().clone()
}
