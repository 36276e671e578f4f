//! How a request reaches an MCP server: per-worker pools of kept connections (`pool`).

pub mod pool;
