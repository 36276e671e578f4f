//! HTTP, not MCP: listeners and connections (`server`), TLS (`tls`), HTTP/1.1 in both
//! directions (`h1`), the request as the pipeline gets it (`request`) and answer bodies
//! (`body`). The bytes themselves (heads, chunked framing, header fields and their value
//! grammar) are read and written by the `wire` crate.

pub mod body;
pub mod forwarded;
pub mod h1;
pub mod request;
pub mod server;
pub mod tls;
pub mod traceparent;
