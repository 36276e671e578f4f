//! A load generator for MCP sessions, for the stdio bridge benchmark (bench/stdio.py):
//! each of N clients initializes its own session (as an SDK client does: initialize,
//! notifications/initialized), then sends small tools/call requests one after another for
//! the given time. wrk cannot hold a session per connection; this can.
//!
//! usage: mcpload URL CLIENTS SECONDS [TOOL ARGS_JSON]
//!        mcpload --stdio SECONDS COMMAND [ARGS...]   (the server alone, over its pipes: the
//!        baseline every bridge adds to; one client)
//! prints one JSON line: requests, failed, rps, p50_ms, p99_ms.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::time::{Duration, Instant};

type Http = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"mcpload","version":"1"}}}"#;

async fn post(
    http: &Http,
    url: &str,
    session: Option<&str>,
    body: String,
) -> Result<(u16, Option<String>, Bytes), String> {
    let mut req = hyper::Request::post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(s) = session {
        req = req.header("mcp-session-id", s);
    }
    let req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = http.request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let session = resp
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, session, body))
}

/// Calls a stdio server straight over its pipes, one at a time, for `seconds`.
fn stdio_baseline(seconds: f64, command: &[String]) {
    use std::io::{BufRead, Write};
    let mut child = std::process::Command::new(&command[0])
        .args(&command[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the server starts");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut ask = |body: String, line: &mut String| {
        stdin.write_all(body.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
        line.clear();
        stdout.read_line(line).unwrap();
    };
    ask(INIT.to_string(), &mut line);
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut all = Vec::new();
    let mut id = 1u64;
    while Instant::now() < until {
        id += 1;
        let t = Instant::now();
        ask(
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"get_document","arguments":{{"id":"welcome"}}}}}}"#
            ),
            &mut line,
        );
        all.push(t.elapsed());
    }
    let took = started.elapsed().as_secs_f64();
    drop(stdin);
    let _ = child.wait();
    report(all, 0, took);
}

fn report(mut all: Vec<Duration>, failed: usize, took: f64) {
    all.sort();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "{{\"requests\":{},\"failed\":{},\"rps\":{:.1},\"p50_ms\":{:.3},\"p99_ms\":{:.3}}}",
        all.len(),
        failed,
        all.len() as f64 / took,
        pct(0.5),
        pct(0.99)
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--stdio") {
        return stdio_baseline(args[2].parse().expect("SECONDS"), &args[3..]);
    }
    let url = args[1].clone();
    let clients: usize = args[2].parse().expect("CLIENTS");
    let seconds: f64 = args[3].parse().expect("SECONDS");
    let tool = args
        .get(4)
        .cloned()
        .unwrap_or_else(|| "get_document".into());
    let tool_args = args
        .get(5)
        .cloned()
        .unwrap_or_else(|| r#"{"id":"welcome"}"#.into());
    let http: Http = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(clients)
        .build_http();
    // Sessions first, all of them, then the timed calls.
    let mut sessions = Vec::new();
    for _ in 0..clients {
        let (status, session, body) = post(&http, &url, None, INIT.into())
            .await
            .expect("initialize");
        assert_eq!(
            status,
            200,
            "initialize: {}",
            String::from_utf8_lossy(&body)
        );
        let session = session.expect("a session id");
        let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_string();
        let (status, _, _) = post(&http, &url, Some(&session), note)
            .await
            .expect("initialized");
        assert!(status == 202 || status == 200, "initialized: {status}");
        sessions.push(session);
    }
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let tasks: Vec<_> = sessions
        .into_iter()
        .map(|session| {
            let (http, url, tool, tool_args) = (http.clone(), url.clone(), tool.clone(), tool_args.clone());
            tokio::spawn(async move {
                let mut times = Vec::new();
                let mut failed = 0usize;
                let mut id = 1u64;
                while Instant::now() < until {
                    id += 1;
                    let body = format!(
                        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{tool_args}}}}}"#
                    );
                    let t = Instant::now();
                    match post(&http, &url, Some(&session), body).await {
                        Ok((200, _, b)) if b.windows(8).any(|w| w == b"\"result\"") => {
                            times.push(t.elapsed())
                        }
                        _ => failed += 1,
                    }
                }
                (times, failed)
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut failed = 0;
    for t in tasks {
        let (times, f) = t.await.unwrap();
        all.extend(times);
        failed += f;
    }
    let took = started.elapsed().as_secs_f64();
    report(all, failed, took);
}
