//! Bytes on the wire, read and written by code mcpgate owns because the request path
//! needs it faster or stricter than the general crates give it: HTTP/1.1 request and
//! answer heads and the framing each implies (`h1`), the request target (`target`), header
//! fields and their value grammar (`fields`, `headval`), a strict one-pass JSON reader and
//! JSON text writers (`json`). Each is held to the crate it stands in for (httparse and
//! hyper, `http`'s `Uri`, serde_json) by the differential tests in `tests/` and fuzzed by
//! the targets in `fuzz/`. This crate knows nothing of MCP or of the gateway: the proxy
//! crate uses it, never the other way.
#![forbid(unsafe_code)]

pub mod fields;
pub mod h1;
pub mod headval;
pub mod json;
pub mod target;
