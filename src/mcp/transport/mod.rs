//! Wire formats between mcpgate and its peers. `sse` decodes and encodes Server-Sent
//! Events incrementally; nothing here knows about policy.

pub mod accept;
pub mod lines;
pub mod relay;
pub mod sse;
