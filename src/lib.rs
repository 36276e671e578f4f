//! mcpgate: a reverse proxy for MCP servers (Streamable HTTP) that reads the JSON-RPC
//! traffic so it can decide per token and per tool. The binary in `main.rs` is only the
//! command line; everything it runs lives here so tests and the demo share one code path.
//!
//! The folders are the layers, and imports run one way (`tests/layers.rs` checks it):
//! `cli` → `pipeline` → `gateway` → `upstream`, `oauth`, `mcp`, `observe` → `http`,
//! `runtime` → `config` → `error`.
#![forbid(unsafe_code)]

pub mod cli;
pub mod config;
pub mod error;
pub mod gateway;
pub mod http;
pub mod mcp;
pub mod oauth;
pub mod observe;
pub mod pipeline;
pub mod runtime;
pub mod upstream;
