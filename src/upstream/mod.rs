//! How a request reaches an MCP server: the request as it is sent (`encode`), per-worker
//! pools of kept connections (`pool`), the order of one session's requests (`order`), an
//! upstream's endpoints with their health (`endpoint`, `health`), sealed session ids
//! (`session`), stdio servers run as processes (`stdio`), what each says of its tools
//! (`hints`), the sessions it holds for bridged clients (`bridged`), all kept across
//! reloads by the gateway's `registry`.

pub mod bridged;
pub mod encode;
pub mod endpoint;
pub mod health;
pub mod hints;
pub mod identity;
pub mod order;
pub mod pins;
pub mod pool;
pub mod registry;
pub mod session;
pub mod stdio;
