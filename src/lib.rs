//! mcpgate: a reverse proxy for MCP servers (Streamable HTTP) that reads the JSON-RPC
//! traffic so it can decide per token and per tool. The binary in `main.rs` is only the
//! command line; everything it runs lives here so tests and the demo share one code path.
#![forbid(unsafe_code)]

pub mod admin;
pub mod audit;
pub mod body;
pub mod config;
pub mod deadline;
pub mod demo;
pub mod error;
pub mod gateway;
pub mod h1;
pub mod headval;
pub mod jsonread;
pub mod jsontext;
pub mod logjson;
pub mod metrics;
pub mod pipeline;
pub mod pool;
pub mod request;
pub mod sample;
pub mod server;
pub mod streams;
pub mod tls;
pub mod token;
pub mod tools_list;
pub mod transport;
pub mod workers;
