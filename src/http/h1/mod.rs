//! HTTP/1.1, served to clients (`server`) and spoken to upstreams (`client`, over TCP or a
//! unix socket: `stream`). Both read heads (`wire::h1::head`) and bodies by the same
//! framing rules (`wire::h1::framing`), so the two sides cannot disagree on where a
//! message ends.

pub mod client;
mod drain;
pub mod server;
pub mod stream;

#[cfg(test)]
mod scripted;
