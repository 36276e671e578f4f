//! HTTP/1.1 heads (`head`, on httparse) and the framing rules both directions share
//! (`framing`): `Content-Length`, the chunk stepper, hop-by-hop fields.

pub mod framing;
pub mod head;
