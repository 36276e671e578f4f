//! The threads a request runs on (`workers`), the timers its deadlines use (`deadline`)
//! and the open streams a reload may have to end (`streams`).

pub mod deadline;
pub mod streams;
pub mod workers;
