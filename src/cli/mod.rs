//! What the commands run beyond parsing their arguments (that stays in `main.rs`): the
//! demo and the sample MCP server it and the tests put behind the gateway.

pub mod demo;
pub mod sample;
