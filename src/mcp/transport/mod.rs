//! Wire formats between mcpgate and its peers. `sse` decodes and encodes Server-Sent
//! Events incrementally, `events` is the one event stream body a client is sent, `relay`
//! moves JSON answers; nothing here knows about policy.

pub mod accept;
pub mod events;
pub mod lines;
pub mod relay;
pub mod sse;
