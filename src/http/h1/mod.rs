//! HTTP/1.1, served to clients (`server`) and spoken to upstreams (`client`). Both read
//! heads (`head`) and bodies by the same framing rules (`framing`), so the two sides
//! cannot disagree on where a message ends.

pub mod client;
pub mod framing;
pub mod head;
pub mod server;

#[cfg(test)]
mod scripted;
