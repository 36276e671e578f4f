//! What the commands run beyond parsing their arguments (that stays in `main.rs`): the
//! gateway itself (`run`), the demo, `pin`, and the sample MCP server the demo and the tests put
//! behind the gateway.

pub mod check;
pub mod demo;
pub mod pin;
pub mod run;
pub mod sample;
