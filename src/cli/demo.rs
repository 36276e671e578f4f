//! `mcpgate demo`: the sample document store on a loopback port, the gateway in front of
//! it with the three profiles, two tokens made for this run, a second store with the
//! first behind one federated route, and curl commands that show a filtered tools/list, a
//! refused call, an allowed call and the federated route's list and a call on it.

use crate::cli::run as server;
use crate::cli::sample;
use crate::config::load_str;
use crate::config::token::{Secret, generate, to_hex};
use crate::gateway::Gateway;
use std::future::Future;
use std::net::SocketAddr;

const TEMPLATE: &str = include_str!("demo.toml");

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("cannot start the sample MCP server: {0}")]
    Sample(std::io::Error),
    #[error("cannot make a token: {0}")]
    Token(getrandom::Error),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("{0}")]
    Audit(crate::observe::audit::AuditError),
    #[error("{0} (is another program using it? try --listen 127.0.0.1:PORT)")]
    Bind(server::BindError),
}

/// Runs the demo until `shutdown` completes.
pub async fn run(listen: SocketAddr, shutdown: impl Future<Output = ()>) -> Result<(), DemoError> {
    let upstream = sample::start(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        sample::Options::default(),
    )
    .await
    .map_err(DemoError::Sample)?;
    let notes = sample::start(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        sample::Options::default(),
    )
    .await
    .map_err(DemoError::Sample)?;
    let gpt = generate().map_err(DemoError::Token)?;
    let readonly = generate().map_err(DemoError::Token)?;
    let text = TEMPLATE
        .replace("@LISTEN@", &listen.to_string())
        .replace("@UPSTREAM@", &upstream.url())
        .replace("@NOTES@", &notes.url())
        .replace("@GPT_SHA256@", &to_hex(&Secret(&gpt).hash()))
        .replace("@READONLY_SHA256@", &to_hex(&Secret(&readonly).hash()));
    let gw = Gateway::new(load_str(&text, "(demo config)")?, None).map_err(DemoError::Audit)?;
    let sockets = server::bind(&gw).await.map_err(DemoError::Bind)?;
    let base = format!("http://{}", sockets.listeners[0].addr);
    println!(
        "{}",
        instructions(&base, &upstream.url(), &notes.url(), &gpt, &readonly)
    );
    server::serve(gw, sockets, shutdown).await;
    Ok(())
}

fn instructions(base: &str, upstream: &str, notes: &str, gpt: &str, readonly: &str) -> String {
    let post = |url: &str, extra: &str, body: &str| {
        format!(
            "curl -s {url} -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream'{extra} -d '{body}'"
        )
    };
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let delete = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete_document","arguments":{"id":"old-plan"}}}"#;
    let get = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"get_document","arguments":{"id":"welcome"}}}"#;
    let moved = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"move_document","arguments":{"id":"welcome","new_id":"x"}}}"#;
    let federated = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"notes__get_document","arguments":{"id":"welcome"}}}"#;
    let bearer = format!(" -H 'Authorization: Bearer {readonly}'");
    format!(
        "mcpgate demo\n\
         \n  gateway:     {base}\
         \n  upstream:    {upstream} (sample document store, 10 tools, move_document deprecated)\
         \n  upstream:    {notes} (a second store, for the federated route)\
         \n  profiles:    gpt (path token), readonly (bearer token), gpt-full (no auth, loopback only),\
         \n               assistant (no auth: both stores behind one route, shared names prefixed)\
         \n  tokens (made for this run, gone when it ends):\
         \n    demo-chatgpt   {gpt}\
         \n    demo-readonly  {readonly}\
         \n\n# 1. tools/list as the gpt profile: 9 tools, the hidden move_document is gone\
         \n{}\
         \n\n# 2. the readonly profile may not delete: refused with -32602, never forwarded\
         \n{}\
         \n\n# 3. an allowed call through the readonly profile\
         \n{}\
         \n\n# 4. a hidden tool is unknown even to the allow-all profile\
         \n{}\
         \n\n# 5. a wrong path token looks like no route at all: 404\
         \ncurl -s -i {base}/gpt-mcp/not-a-token/mcp -H 'Content-Type: application/json' -d '{list}'\
         \n\n# 6. one route over both stores: 18 tools, docs__… and notes__… (move_document hidden)\
         \n{}\
         \n\n# 7. a call routed to the store its name names, with the store's own name\
         \n{}\
         \n\nPress Ctrl-C to stop.",
        post(&format!("{base}/gpt-mcp/{gpt}/mcp"), "", list),
        post(&format!("{base}/mcp-readonly"), &bearer, delete),
        post(&format!("{base}/mcp-readonly"), &bearer, get),
        post(&format!("{base}/mcp-gpt-full"), "", moved),
        post(&format!("{base}/mcp-assistant"), "", list),
        post(&format!("{base}/mcp-assistant"), "", federated),
    )
}
