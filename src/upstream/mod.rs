//! How a request reaches an MCP server: the request as it is sent (`encode`), per-worker
//! pools of kept connections (`pool`), kept across reloads by the gateway's `registry`.

pub mod encode;
pub mod pool;
pub mod registry;
