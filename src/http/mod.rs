//! HTTP, not MCP: listeners and connections (`server`), TLS (`tls`), HTTP/1.1 in both
//! directions (`h1`), the request as the pipeline gets it (`request`) with its header
//! fields (`fields`), answer bodies (`body`) and header value grammar (`headval`).

pub mod body;
pub mod fields;
pub mod h1;
pub mod headval;
pub mod request;
pub mod server;
pub mod tls;
pub mod traceparent;
