//! How a request reaches an MCP server: the request as it is sent (`encode`), per-worker
//! pools of kept connections (`pool`), the order of one session's requests (`order`),
//! kept across reloads by the gateway's `registry`.

pub mod encode;
pub mod order;
pub mod pool;
pub mod registry;
