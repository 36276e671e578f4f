//! Test support, by what it starts: the real `mcpgate` binary on 127.0.0.1 with a config
//! written for the test (`gateway`), the sample MCP server in-process so a test can read
//! what it received (`upstreams`), the installed MCP peers (`peers`), a test CA (`pki`), a
//! real `redis-server` (`redis`), a real nginx in front (`nginx`), and a small HTTP client over real sockets (`client`).
//! Tests wait for a condition with [`eventually`], never for a fixed time.
#![allow(dead_code, unused_imports)]

mod client;
mod collector;
mod gateway;
mod idp;
mod nginx;
mod peers;
mod pki;
mod redis;
mod upstreams;

pub use client::*;
pub use collector::*;
pub use gateway::*;
pub use idp::*;
pub use nginx::*;
pub use peers::*;
pub use pki::*;
pub use redis::*;
pub use upstreams::*;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use mcpgate::cli::sample::{self, SampleServer};
use mcpgate::config::token::{Secret, to_hex};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

pub const GPT: &str = "tok-gpt-5Qd8xJv2LmN4pR7sT9uW1yZ3aB6cE0fH";
pub const READONLY: &str = "tok-readonly-Hk2Jm4Np6Qr8St0Uv2Wx4Yz6Ab8Cd0Ef";
pub const EXPIRED: &str = "tok-expired-Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp";
pub const FUTURE: &str = "tok-future-Aa1Bb2Cc3Dd4Ee5Ff6Gg7Hh8Ii9Jj0Kk";
pub const LIMITED: &str = "tok-limited-Mm1Nn2Oo3Pp4Qq5Rr6Ss7Tt8Uu9Vv0Ww";
pub const API_KEY: &str = "upstream-api-key-from-env";
pub const ALL_TOKENS: [&str; 5] = [GPT, READONLY, EXPIRED, FUTURE, LIMITED];

pub const GPT_TOOLS: [&str; 9] = [
    "search_knowledge",
    "list_documents",
    "get_document",
    "get_document_for_rewrite",
    "batch_read",
    "upload_document",
    "update_document",
    "patch_document",
    "delete_document",
];
pub const READONLY_TOOLS: [&str; 4] = [
    "search_knowledge",
    "list_documents",
    "get_document",
    "batch_read",
];

/// A loopback port free now, for a peer that must be told its port before it starts (an
/// external server, a gateway whose `[oauth] resource` names its own URL). Everything
/// that can bind port 0 and report the port it got does that instead.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `check` every 20 ms until it gives `Some`, and returns that; panics with `what`
/// once `limit` has passed. Tests wait for a condition with this, never for a fixed time.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not within {limit:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// [`eventually`] for tests without a runtime.
pub fn eventually_blocking<T>(
    limit: Duration,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not within {limit:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
