//! HTTP/1.1 framing rules both directions share (RFC 9112 §6, §7): how a body's length
//! is read from `Content-Length`, chunked bodies and their trailers step by step, which
//! fields are hop-by-hop (RFC 9110 §7.6.1).
//! The server (`h1::server`) and the upstream client (`h1::client`) both read bodies and
//! lengths here, so the two sides cannot disagree on where a message ends.

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName};

/// Decimal digits a `Content-Length` may have: more could overflow a `u64`.
const MAX_LENGTH_DIGITS: usize = 19;

/// A `Content-Length` value: one or more ASCII digits and nothing else (RFC 9110 §8.6).
/// A sign, spaces inside, a list or an empty value is no length.
pub fn content_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > MAX_LENGTH_DIGITS || !value.iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    Some(value.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

/// The framing bytes of a chunked body are not what RFC 9112 §7.1 allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ChunkError(pub &'static str);

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Chunk {
    /// Before a chunk-size line.
    Size,
    /// Inside a chunk: this many data bytes are left.
    Data(u64),
    /// After a chunk's data: its CRLF.
    End,
    /// After the last chunk: trailer lines up to an empty one.
    Trailers,
}

/// Up to `left` bytes off the front of `buf`, and how many are left after them.
pub fn take_up_to(buf: &mut BytesMut, left: u64) -> (Bytes, u64) {
    let n = (buf.len() as u64).min(left) as usize;
    (buf.split_to(n).freeze(), left - n as u64)
}

pub enum ChunkStep {
    Data(Bytes, Chunk),
    /// Framing bytes taken; go on.
    Moved(Chunk),
    Ended,
    NeedMore,
}

/// One step of chunked decoding over what `buf` holds.
pub fn step_chunk(buf: &mut BytesMut, state: Chunk) -> Result<ChunkStep, ChunkError> {
    Ok(match state {
        Chunk::Size => match httparse::parse_chunk_size(buf) {
            Ok(httparse::Status::Complete((len, 0))) => {
                buf.advance(len);
                ChunkStep::Moved(Chunk::Trailers)
            }
            Ok(httparse::Status::Complete((len, size))) => {
                buf.advance(len);
                ChunkStep::Moved(Chunk::Data(size))
            }
            Ok(httparse::Status::Partial) => ChunkStep::NeedMore,
            Err(_) => return Err(ChunkError("bad chunk size")),
        },
        Chunk::Data(left) if !buf.is_empty() => {
            let (data, left) = take_up_to(buf, left);
            let next = if left == 0 {
                Chunk::End
            } else {
                Chunk::Data(left)
            };
            ChunkStep::Data(data, next)
        }
        Chunk::Data(_) => ChunkStep::NeedMore,
        Chunk::End => match buf.get(..2) {
            Some(b"\r\n") => {
                buf.advance(2);
                ChunkStep::Moved(Chunk::Size)
            }
            Some(_) => return Err(ChunkError("chunk without its CRLF")),
            None => ChunkStep::NeedMore,
        },
        Chunk::Trailers => match buf.iter().position(|&b| b == b'\n') {
            // An empty line ends the trailers (and the body); other lines are dropped.
            Some(end) => {
                let empty = buf[..end].iter().all(|&b| b == b'\r');
                buf.advance(end + 1);
                if empty {
                    ChunkStep::Ended
                } else {
                    ChunkStep::Moved(Chunk::Trailers)
                }
            }
            None => ChunkStep::NeedMore,
        },
    })
}

/// Whether `name` is a hop-by-hop field (RFC 9110 §7.6.1, and the legacy ones). Compared
/// as header names: a standard name is one small number, so most comparisons are one
/// byte, with no text compared.
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    static HOP_BY_HOP: [HeaderName; 9] = [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::TE,
        header::TRAILER,
        header::UPGRADE,
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
    ];
    HOP_BY_HOP.contains(name)
}

/// The names `Connection` values list (fields hop-by-hop by declaration), but for the
/// `close` and `keep-alive` options, which name no field.
pub fn named_by_connection<'a>(
    values: impl Iterator<Item = &'a str>,
) -> impl Iterator<Item = &'a str> {
    values
        .flat_map(crate::http::headval::items)
        .filter(|n| !n.eq_ignore_ascii_case("close") && !n.eq_ignore_ascii_case("keep-alive"))
}

/// The header names an answer's `Connection` headers list, but for the hop-by-hop names,
/// which go anyway: the usual `keep-alive` or `close` costs no name made and nothing
/// allocated.
fn connection_listed(headers: &HeaderMap) -> Vec<HeaderName> {
    let values = headers.get_all(header::CONNECTION).iter();
    named_by_connection(values.filter_map(|v| v.to_str().ok()))
        .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
        .filter(|n| !is_hop_by_hop(n))
        .collect()
}

/// Removes hop-by-hop headers, including any the `Connection` header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in connection_listed(headers) {
        headers.remove(name);
    }
    // Most answers carry none, or `connection` or `transfer-encoding` alone: remove the
    // ones present (a removal by a name given as text would parse and hash it first).
    while let Some(name) = headers.keys().find(|n| is_hop_by_hop(n)).cloned() {
        headers.remove(&name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_digits_only() {
        assert_eq!(content_length(b"0"), Some(0));
        assert_eq!(content_length(b"0012"), Some(12));
        assert_eq!(
            content_length(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        for bad in [
            &b""[..],
            b"+5",
            b"-5",
            b" 5",
            b"5 ",
            b"5,5",
            b"0x1",
            b"\xd9\xa3",
            b"99999999999999999999",
        ] {
            assert_eq!(content_length(bad), None, "{bad:?}");
        }
    }

    /// Decodes all of `wire` in the given pieces, as reads would deliver them.
    fn dechunk(pieces: &[&[u8]]) -> Result<(Vec<u8>, bool), ChunkError> {
        let mut buf = BytesMut::new();
        let mut state = Chunk::Size;
        let mut out = Vec::new();
        for piece in pieces {
            buf.extend_from_slice(piece);
            loop {
                match step_chunk(&mut buf, state)? {
                    ChunkStep::Data(d, next) => {
                        out.extend_from_slice(&d);
                        state = next;
                    }
                    ChunkStep::Moved(next) => state = next,
                    ChunkStep::Ended => return Ok((out, buf.is_empty())),
                    ChunkStep::NeedMore => break,
                }
            }
        }
        Err(ChunkError("not ended"))
    }

    #[test]
    fn chunked_bodies_decode_however_they_are_split() {
        let wire = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nx-trailer: t\r\n\r\n";
        for cut in 0..wire.len() {
            let (a, b) = wire.split_at(cut);
            let (out, clean) = dechunk(&[a, b]).unwrap();
            assert_eq!(out, b"hello world", "cut at {cut}");
            assert!(clean);
        }
        let bytewise: Vec<&[u8]> = wire.chunks(1).collect();
        assert_eq!(dechunk(&bytewise).unwrap().0, b"hello world");
        assert!(dechunk(&[b"zz\r\n"]).is_err());
        assert!(dechunk(&[b"2\r\nabXY"]).is_err());
    }

    #[test]
    fn connection_listed_headers_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            http::HeaderValue::from_static("keep-alive, X-Secret-Hop"),
        );
        h.insert("x-secret-hop", http::HeaderValue::from_static("1"));
        h.insert("mcp-session-id", http::HeaderValue::from_static("s"));
        h.insert("te", http::HeaderValue::from_static("trailers"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("mcp-session-id"));
    }
}
