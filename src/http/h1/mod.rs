//! HTTP/1.1, served to clients (`server`) and spoken to upstreams (`client`).

pub mod client;
pub mod framing;
pub mod server;
