//! A client's request as the pipeline receives it: who sent it ([`Peer`]), its method,
//! target, header fields (`http::fields`) and body.

use bytes::Bytes;
use http::Method;
use std::net::SocketAddr;
use wire::fields::Fields;
pub use wire::target::Target;

/// The client at the other end of a connection, as every request on it needs it.
#[derive(Clone)]
pub struct Peer {
    pub addr: SocketAddr,
    /// The client's address as the `X-Forwarded-For` value, made once per connection.
    pub forwarded_for: http::HeaderValue,
}

impl Peer {
    pub fn new(addr: SocketAddr) -> Peer {
        let text = addr.ip().to_string();
        Peer {
            addr,
            forwarded_for: http::HeaderValue::from_maybe_shared(bytes::Bytes::from(text))
                .expect("an IP address is a valid header value"),
        }
    }
}

/// A client's request body, as the pipeline receives it.
pub enum ClientBody {
    /// Read whole by the HTTP/1.1 connection (`h1`) before the request was handed on.
    Read(Bytes),
    /// Not read: it declares, or grew to, more than `max_body` bytes.
    TooLarge,
    /// An HTTP/2 request's body, read as the pipeline asks for it.
    H2(hyper::body::Incoming),
}

/// A client's request: the HTTP/1.1 connection (`h1`) makes it from the head it parsed,
/// the HTTP/2 one from hyper's request.
pub struct ClientRequest {
    pub method: Method,
    pub target: Target,
    pub fields: Fields,
    pub body: ClientBody,
}

impl ClientRequest {
    /// An HTTP/2 request from hyper, its fields copied into a list.
    pub fn from_h2(req: http::Request<hyper::body::Incoming>) -> ClientRequest {
        let (parts, body) = req.into_parts();
        ClientRequest {
            method: parts.method,
            target: Target::Uri(parts.uri),
            fields: Fields::from_map(&parts.headers),
            body: ClientBody::H2(body),
        }
    }
}
