//! The threads a request runs on (`workers`), the timers its deadlines use (`deadline`),
//! the state behind rate limits and concurrency caps (`limiter`, with its shared Redis
//! counters in `store`) and the open streams a reload may have to end (`streams`).

pub mod deadline;
pub mod limiter;
pub mod store;
pub mod streams;
pub mod waits;
pub mod workers;
