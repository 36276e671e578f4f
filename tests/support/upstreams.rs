//! Upstreams for the gateway: the sample MCP server in-process (it records what it
//! receives) and a raw one that answers every request with fixed bytes.
use super::*;

/// A sample upstream that records what it receives, for the tests to look at.
pub async fn upstream(opts: sample::Options) -> SampleServer {
    let opts = sample::Options {
        record: true,
        ..opts
    };
    sample::start(SocketAddr::from(([127, 0, 0, 1], 0)), opts)
        .await
        .unwrap()
}

pub async fn json_upstream() -> SampleServer {
    upstream(sample::Options::default()).await
}

pub async fn sse_upstream() -> SampleServer {
    upstream(sample::Options {
        mode: sample::Mode::Sse,
        ..Default::default()
    })
    .await
}

/// An upstream that answers every request with `reply` and closes the connection.
pub fn raw_upstream(reply: impl Into<Vec<u8>>) -> String {
    let reply = reply.into();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { break };
            use std::io::{Read, Write};
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            // Read the head and the body its Content-Length announces, then answer.
            while let Ok(n) = conn.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&seen).to_ascii_lowercase();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if seen.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            let _ = conn.write_all(&reply);
        }
    });
    format!("http://{addr}/mcp")
}
