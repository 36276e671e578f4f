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

/// How much of a chunked body's framing is not chunk sizes and data: its chunk
/// extensions and trailer fields, which carry nothing mcpgate passes on. Bounded, as
/// hyper and nginx bound them, so a body cannot be made of little else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overhead {
    used: usize,
    limit: usize,
}

/// What [`Overhead`] allows by default: 16 KiB of extensions and trailers per body.
pub const DEFAULT_CHUNK_OVERHEAD: usize = 16 << 10;

impl Overhead {
    pub fn new(limit: usize) -> Overhead {
        Overhead { used: 0, limit }
    }

    fn take(&mut self, n: usize) -> Result<(), ChunkError> {
        self.used += n;
        if self.used > self.limit {
            return Err(ChunkError("chunk extensions and trailers too large"));
        }
        Ok(())
    }
}

/// One step of chunked decoding over what `buf` holds. Chunk-size lines and trailer
/// fields are read by RFC 9112's grammar, not leniently: a proxy that reads framing more
/// loosely than the next hop can be made to see two messages where it sees one.
pub fn step_chunk(
    buf: &mut BytesMut,
    state: Chunk,
    overhead: &mut Overhead,
) -> Result<ChunkStep, ChunkError> {
    Ok(match state {
        Chunk::Size => match line(buf, overhead)? {
            Some(end) => {
                let (size, extension) = chunk_size(&buf[..end])?;
                overhead.take(extension)?;
                buf.advance(end + 2);
                ChunkStep::Moved(if size == 0 {
                    Chunk::Trailers
                } else {
                    Chunk::Data(size)
                })
            }
            None => ChunkStep::NeedMore,
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
        Chunk::Trailers => match line(buf, overhead)? {
            // An empty line ends the trailers (and the body); trailer fields are checked
            // and dropped.
            Some(0) => {
                buf.advance(2);
                ChunkStep::Ended
            }
            Some(end) => {
                if !is_field_line(&buf[..end]) {
                    return Err(ChunkError("bad trailer field"));
                }
                overhead.take(end + 2)?;
                buf.advance(end + 2);
                ChunkStep::Moved(Chunk::Trailers)
            }
            None => ChunkStep::NeedMore,
        },
    })
}

/// Where the CRLF of the line at the start of `buf` begins, once it has come. A bare LF
/// ends no line here: it is refused. A line still open past what the overhead allows
/// is refused too, so a body cannot hold a line without end.
fn line(buf: &[u8], overhead: &Overhead) -> Result<Option<usize>, ChunkError> {
    match memchr::memchr(b'\n', buf) {
        Some(0) => Err(ChunkError("bare LF in chunked framing")),
        Some(lf) if buf[lf - 1] == b'\r' => Ok(Some(lf - 1)),
        Some(_) => Err(ChunkError("bare LF in chunked framing")),
        None if buf.len() > overhead.limit.saturating_sub(overhead.used) + MAX_SIZE_DIGITS => {
            Err(ChunkError("chunk line too long"))
        }
        None => Ok(None),
    }
}

/// Hex digits a chunk size may have: more could overflow a `u64`.
const MAX_SIZE_DIGITS: usize = 16;

/// A chunk-size line without its CRLF (RFC 9112 §7.1.1): `1*HEXDIG *( BWS ";" BWS
/// ext-name [ BWS "=" BWS ( token / quoted-string ) ] )`. The size, and how many bytes
/// its extensions took.
fn chunk_size(line: &[u8]) -> Result<(u64, usize), ChunkError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(ChunkError("chunk size without digits"));
    }
    let significant = line[..digits].iter().skip_while(|&&b| b == b'0').count();
    if significant > MAX_SIZE_DIGITS {
        return Err(ChunkError("chunk size too large"));
    }
    let size = line[..digits].iter().fold(0u64, |n, &b| {
        let d = (b as char).to_digit(16).unwrap_or(0);
        (n << 4) | u64::from(d)
    });
    let mut rest = &line[digits..];
    let extension = rest.len();
    let bad = ChunkError("bad chunk extension");
    loop {
        rest = skip_blanks(rest);
        let Some(after) = rest.strip_prefix(b";") else {
            break;
        };
        rest = skip_blanks(after);
        let name = token_len(rest);
        if name == 0 {
            return Err(bad);
        }
        rest = &rest[name..];
        let before_eq = skip_blanks(rest);
        if let Some(after) = before_eq.strip_prefix(b"=") {
            rest = skip_blanks(after);
            let value = match rest.first() {
                Some(b'"') => quoted_len(rest).ok_or(bad)?,
                _ => token_len(rest),
            };
            if value == 0 {
                return Err(bad);
            }
            rest = &rest[value..];
        }
    }
    if !rest.is_empty() {
        return Err(bad);
    }
    Ok((size, extension))
}

fn skip_blanks(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&b| b == b' ' || b == b'\t').count();
    &s[n..]
}

/// RFC 9110 §5.6.2 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn token_len(s: &[u8]) -> usize {
    s.iter().take_while(|&&b| is_tchar(b)).count()
}

/// The length of the quoted-string (RFC 9110 §5.6.4) at the start of `s`, quotes
/// included; `None` if it is not one.
fn quoted_len(s: &[u8]) -> Option<usize> {
    let mut i = 1;
    while i < s.len() {
        match s[i] {
            b'"' => return Some(i + 1),
            b'\\' => {
                let next = *s.get(i + 1)?;
                if !(next == b'\t' || next == b' ' || next >= 0x21) || next == 0x7f {
                    return None;
                }
                i += 2;
            }
            b'\t' | b' ' | 0x21 | 0x23..=0x5b | 0x5d..=0x7e | 0x80..=0xff => i += 1,
            _ => return None,
        }
    }
    None
}

/// Whether `line` (without its CRLF) is a field line (RFC 9112 §5): a token name, a
/// colon, and a value of visible characters, spaces and tabs. No folding.
fn is_field_line(line: &[u8]) -> bool {
    let name = token_len(line);
    name > 0
        && line.get(name) == Some(&b':')
        && line[name + 1..]
            .iter()
            .all(|&b| b == b'\t' || b == b' ' || (0x21..=0x7e).contains(&b) || b >= 0x80)
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
        .flat_map(crate::headval::items)
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
        let mut overhead = Overhead::new(DEFAULT_CHUNK_OVERHEAD);
        let mut out = Vec::new();
        for piece in pieces {
            buf.extend_from_slice(piece);
            loop {
                match step_chunk(&mut buf, state, &mut overhead)? {
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

    /// Chunk-size lines and trailers are read by RFC 9112's grammar. Each refused case is
    /// one a lenient reader takes: the first is a request that such a reader ends early,
    /// leaving the rest to be read as a second request.
    #[test]
    fn framing_outside_the_grammar_is_refused() {
        for wire in [
            &b"2;\nxx\r\nff\r\n0\r\n\r\n"[..],
            b"2\nxx\r\n0\r\n\r\n",
            b"2;a\x00b\r\nxx\r\n0\r\n\r\n",
            b";x\r\nxx\r\n0\r\n\r\n",
            b"\r\n0\r\n\r\n",
            b"2;\r\nxx\r\n0\r\n\r\n",
            b"2;a=\r\nxx\r\n0\r\n\r\n",
            b"2;a=\"open\r\nxx\r\n0\r\n\r\n",
            b"2 x\r\nxx\r\n0\r\n\r\n",
            b"-2\r\nxx\r\n0\r\n\r\n",
            b"2\r\nxx\r\n0\r\n\r\r\n",
            b"2\r\nxx\r\n0\r\nno colon\r\n\r\n",
            b"2\r\nxx\r\n0\r\n folded: x\r\n\r\n",
            b"2\r\nxx\r\n0\r\nx: a\x00b\r\n\r\n",
            b"2\r\nxx\r\n0\r\nx: 1\n\r\n",
            b"10000000000000000\r\n",
        ] {
            assert!(
                dechunk(&[wire]).is_err(),
                "{:?}",
                String::from_utf8_lossy(wire)
            );
        }
        for (wire, body) in [
            (&b"2;name=value\r\nxx\r\n0\r\n\r\n"[..], &b"xx"[..]),
            (b"2 ; a = \"q\\\"x;y\" ; b\t;c=d\r\nxx\r\n0\r\n\r\n", b"xx"),
            (b"0002\r\nxx\r\n0\r\nx-t: 1\r\ny:\r\n\r\n", b"xx"),
            (b"00000000000000000002\r\nxx\r\n0\r\n\r\n", b"xx"),
            (b"A\r\n0123456789\r\n0;last\r\n\r\n", b"0123456789"),
        ] {
            let (out, clean) = dechunk(&[wire])
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(wire)));
            assert_eq!(out, body);
            assert!(clean);
        }
    }

    /// Extensions and trailers together are bounded per body (the class of Node's
    /// CVE-2024-22019): 96 one-byte chunks with 7,000-byte extensions, or 80,000 trailer
    /// lines, are refused; the same bytes under the bound pass.
    #[test]
    fn extensions_and_trailers_are_bounded() {
        let extension = format!(";e={}", "v".repeat(7000));
        let mut wire = String::new();
        for _ in 0..96 {
            wire.push_str(&format!("1{extension}\r\nx\r\n"));
        }
        wire.push_str("0\r\n\r\n");
        assert!(dechunk(&[wire.as_bytes()]).is_err());
        let mut trailers = String::from("1\r\nx\r\n0\r\n");
        for i in 0..80_000 {
            trailers.push_str(&format!("t{i}: 1\r\n"));
        }
        trailers.push_str("\r\n");
        assert!(dechunk(&[trailers.as_bytes()]).is_err());
        // Under the bound: two chunks with 7,000-byte extensions.
        let two = format!("1{extension}\r\nx\r\n1{extension}\r\ny\r\n0\r\n\r\n");
        assert_eq!(dechunk(&[two.as_bytes()]).unwrap().0, b"xy");
        // A line without end is refused once it is past the bound, not buffered.
        let endless = format!("1;e={}", "v".repeat(DEFAULT_CHUNK_OVERHEAD + 64));
        let mut buf = BytesMut::from(endless.as_bytes());
        let mut overhead = Overhead::new(DEFAULT_CHUNK_OVERHEAD);
        assert!(step_chunk(&mut buf, Chunk::Size, &mut overhead).is_err());
    }
}
