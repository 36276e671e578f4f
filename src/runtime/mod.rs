//! The threads a request runs on (`workers`), the timers its deadlines use (`deadline`),
//! the state behind rate limits and concurrency caps (`limiter`, with its shared Redis
//! counters in `store`), the open streams a reload may have to end (`streams`), and what
//! the bridge between MCP's generations keeps between requests (`waits`, `held`,
//! `legacy_sessions`).

pub mod approvals;
pub mod deadline;
pub mod held;
pub mod legacy_sessions;
pub mod limiter;
pub mod store;
pub mod streams;
pub mod waits;
pub mod workers;
