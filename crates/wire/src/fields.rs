//! A request's header fields: a list of name and value spans over the bytes they arrived
//! in, each name sorted once, when it is read, into the [`FieldKind`] the gateway acts on. An
//! `http::HeaderMap` hashes every name put in it and every name looked up, and allocates
//! its table; a request has a handful of fields and the gateway asks after a dozen names,
//! most of them absent, so a list and one bit per kind present cost far less. HTTP/1.1
//! heads are read into it where they were parsed; HTTP/2's map is copied into one. This
//! module only holds the fields: what they mean is the pipeline's business.

use bytes::{Bytes, BytesMut};
use http::HeaderMap;

/// The header fields the gateway reads or treats specially; every other name is `Other`.
/// Hop-by-hop ones (RFC 9110 §7.6.1, and the legacy ones) are never forwarded; `Host`,
/// the credentials and the fields mcpgate sets itself are not forwarded either.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FieldKind {
    Other,
    Host,
    ContentLength,
    ContentType,
    ContentEncoding,
    TransferEncoding,
    Connection,
    Expect,
    Accept,
    AcceptEncoding,
    Authorization,
    Cookie,
    Origin,
    XRequestId,
    XForwardedFor,
    XForwardedProto,
    XForwardedHost,
    McpMethod,
    McpName,
    McpSessionId,
    McpProtocolVersion,
    Te,
    Trailer,
    Upgrade,
    ProxyAuthenticate,
    ProxyAuthorization,
    KeepAlive,
    ProxyConnection,
    Traceparent,
    Tracestate,
    Forwarded,
}

impl FieldKind {
    /// Every kind but `Other`, with its name as HTTP/2 writes it (lower case).
    pub const NAMED: [(FieldKind, &'static str); 30] = [
        (FieldKind::Host, "host"),
        (FieldKind::ContentLength, "content-length"),
        (FieldKind::ContentType, "content-type"),
        (FieldKind::ContentEncoding, "content-encoding"),
        (FieldKind::TransferEncoding, "transfer-encoding"),
        (FieldKind::Connection, "connection"),
        (FieldKind::Expect, "expect"),
        (FieldKind::Accept, "accept"),
        (FieldKind::AcceptEncoding, "accept-encoding"),
        (FieldKind::Authorization, "authorization"),
        (FieldKind::Cookie, "cookie"),
        (FieldKind::Origin, "origin"),
        (FieldKind::XRequestId, "x-request-id"),
        (FieldKind::XForwardedFor, "x-forwarded-for"),
        (FieldKind::XForwardedProto, "x-forwarded-proto"),
        (FieldKind::XForwardedHost, "x-forwarded-host"),
        (FieldKind::McpMethod, "mcp-method"),
        (FieldKind::McpName, "mcp-name"),
        (FieldKind::McpSessionId, "mcp-session-id"),
        (FieldKind::McpProtocolVersion, "mcp-protocol-version"),
        (FieldKind::Te, "te"),
        (FieldKind::Trailer, "trailer"),
        (FieldKind::Upgrade, "upgrade"),
        (FieldKind::ProxyAuthenticate, "proxy-authenticate"),
        (FieldKind::ProxyAuthorization, "proxy-authorization"),
        (FieldKind::KeepAlive, "keep-alive"),
        (FieldKind::ProxyConnection, "proxy-connection"),
        (FieldKind::Traceparent, "traceparent"),
        (FieldKind::Tracestate, "tracestate"),
        (FieldKind::Forwarded, "forwarded"),
    ];

    /// The kind of a field name, in any case: the name is put in lower case on the stack
    /// and matched whole, which costs less than comparing it without case to each name of
    /// its length.
    pub fn of(name: &[u8]) -> FieldKind {
        // The longest name of a kind has 20 bytes; a longer one is of none.
        let mut low = [0u8; 20];
        let Some(low) = low.get_mut(..name.len()) else {
            return FieldKind::Other;
        };
        for (l, b) in low.iter_mut().zip(name) {
            *l = b.to_ascii_lowercase();
        }
        match &*low {
            b"te" => FieldKind::Te,
            b"host" => FieldKind::Host,
            b"accept" => FieldKind::Accept,
            b"cookie" => FieldKind::Cookie,
            b"origin" => FieldKind::Origin,
            b"expect" => FieldKind::Expect,
            b"trailer" => FieldKind::Trailer,
            b"upgrade" => FieldKind::Upgrade,
            b"mcp-name" => FieldKind::McpName,
            b"connection" => FieldKind::Connection,
            b"tracestate" => FieldKind::Tracestate,
            b"traceparent" => FieldKind::Traceparent,
            b"forwarded" => FieldKind::Forwarded,
            b"keep-alive" => FieldKind::KeepAlive,
            b"mcp-method" => FieldKind::McpMethod,
            b"content-type" => FieldKind::ContentType,
            b"x-request-id" => FieldKind::XRequestId,
            b"authorization" => FieldKind::Authorization,
            b"content-length" => FieldKind::ContentLength,
            b"mcp-session-id" => FieldKind::McpSessionId,
            b"accept-encoding" => FieldKind::AcceptEncoding,
            b"x-forwarded-for" => FieldKind::XForwardedFor,
            b"content-encoding" => FieldKind::ContentEncoding,
            b"x-forwarded-host" => FieldKind::XForwardedHost,
            b"proxy-connection" => FieldKind::ProxyConnection,
            b"transfer-encoding" => FieldKind::TransferEncoding,
            b"x-forwarded-proto" => FieldKind::XForwardedProto,
            b"proxy-authenticate" => FieldKind::ProxyAuthenticate,
            b"proxy-authorization" => FieldKind::ProxyAuthorization,
            b"mcp-protocol-version" => FieldKind::McpProtocolVersion,
            _ => FieldKind::Other,
        }
    }

    /// Whether the field belongs to one connection only (RFC 9110 §7.6.1).
    pub fn is_hop_by_hop(self) -> bool {
        matches!(
            self,
            FieldKind::Connection
                | FieldKind::TransferEncoding
                | FieldKind::Te
                | FieldKind::Trailer
                | FieldKind::Upgrade
                | FieldKind::ProxyAuthenticate
                | FieldKind::ProxyAuthorization
                | FieldKind::KeepAlive
                | FieldKind::ProxyConnection
        )
    }

    fn bit(self) -> u32 {
        1 << self as u32
    }
}

/// One field: where its name and value are in the text, and the name's kind.
#[derive(Clone, Copy, Debug)]
struct Field {
    name: (u32, u32),
    value: (u32, u32),
    kind: FieldKind,
}

/// A request's header fields in the order they came, over the bytes that hold them.
/// Names are kept as they were written (any case); values are checked already (by the
/// HTTP/1.1 parser, or by hyper for HTTP/2) to hold no control bytes but tab.
#[derive(Debug)]
pub struct Fields {
    text: Bytes,
    list: Vec<Field>,
    /// One bit per kind present, so asking after an absent field reads no list.
    kinds: u32,
}

impl Fields {
    pub fn new() -> Fields {
        Fields {
            text: Bytes::new(),
            list: Vec::new(),
            kinds: 0,
        }
    }

    /// The fields of a parsed HTTP/1.1 head: `text` is the head, `spans` where each
    /// field's name and value are in it.
    pub(crate) fn from_spans(text: Bytes, spans: &[Span]) -> Fields {
        let mut kinds = 0;
        let list = spans
            .iter()
            .map(|s| {
                let kind = FieldKind::of(&text[s.name()]);
                kinds |= kind.bit();
                Field {
                    name: s.name,
                    value: s.value,
                    kind,
                }
            })
            .collect();
        Fields { text, list, kinds }
    }

    /// The fields of a header map (an HTTP/2 request's), copied into one buffer.
    pub fn from_map(map: &HeaderMap) -> Fields {
        let size = map.iter().map(|(n, v)| n.as_str().len() + v.len()).sum();
        let mut text = BytesMut::with_capacity(size);
        let mut list = Vec::with_capacity(map.len());
        let mut kinds = 0;
        let mut put = |bytes: &[u8]| {
            let at = text.len() as u32;
            text.extend_from_slice(bytes);
            (at, text.len() as u32)
        };
        for (name, value) in map {
            let kind = FieldKind::of(name.as_str().as_bytes());
            kinds |= kind.bit();
            list.push(Field {
                name: put(name.as_str().as_bytes()),
                value: put(value.as_bytes()),
                kind,
            });
        }
        Fields {
            text: text.freeze(),
            list,
            kinds,
        }
    }

    /// The fields of an HTTP/1.1 head given as text, for tests (here and in the crates
    /// that use this one: feature `testing`).
    #[cfg(any(test, feature = "testing"))]
    pub fn from_head(text: &str) -> Fields {
        let mut slots = [httparse::EMPTY_HEADER; 32];
        let mut head = httparse::Request::new(&mut slots);
        let len = match head.parse(text.as_bytes()) {
            Ok(httparse::Status::Complete(len)) => len,
            other => panic!("not a whole head: {other:?}"),
        };
        let spans = header_spans(text.as_bytes(), head.headers);
        Fields::from_spans(
            Bytes::copy_from_slice(&text.as_bytes()[..len]),
            spans.as_slice(),
        )
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Whether a field of this kind is present.
    pub fn has(&self, kind: FieldKind) -> bool {
        self.kinds & kind.bit() != 0
    }

    fn bytes(&self, span: (u32, u32)) -> &[u8] {
        &self.text[span.0 as usize..span.1 as usize]
    }

    /// The first value of this kind, as `HeaderMap::get` gives it.
    pub fn get(&self, kind: FieldKind) -> Option<&[u8]> {
        if !self.has(kind) {
            return None;
        }
        let field = self.list.iter().find(|f| f.kind == kind)?;
        Some(self.bytes(field.value))
    }

    /// The first value of this kind when it is all visible ASCII (what
    /// `HeaderValue::to_str` accepts), else `None`.
    pub fn get_str(&self, kind: FieldKind) -> Option<&str> {
        self.get(kind).and_then(visible)
    }

    /// Every value of this kind, in order.
    pub fn all(&self, kind: FieldKind) -> impl Iterator<Item = &[u8]> {
        // An absent kind (and `Other`, which has no bit of its own) walks no list.
        let list = match kind != FieldKind::Other && self.has(kind) {
            true => &self.list[..],
            false => &[],
        };
        list.iter()
            .filter(move |f| f.kind == kind)
            .map(|f| self.bytes(f.value))
    }

    /// Every field in order: its kind, its name as written, its value.
    pub fn iter(&self) -> impl Iterator<Item = (FieldKind, &[u8], &[u8])> {
        self.list
            .iter()
            .map(|f| (f.kind, self.bytes(f.name), self.bytes(f.value)))
    }
}

impl Default for Fields {
    fn default() -> Self {
        Fields::new()
    }
}

/// `bytes` as text when every byte is visible ASCII or a space or tab.
pub fn visible(bytes: &[u8]) -> Option<&str> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let one = |b: u8| (b' '..=b'~').contains(&b) || b == b'\t';
    // Eight bytes at a time: a byte below a space or above `~` sets its high bit in
    // `odd` (and, by a borrow, maybe a higher one: the bytes are then looked at one by one).
    let mut words = bytes.chunks_exact(8);
    for word in words.by_ref() {
        let w = u64::from_ne_bytes(word.try_into().unwrap_or([0; 8]));
        let odd = (w.wrapping_sub(ONES * 0x20) & !w) | w | w.wrapping_add(ONES);
        if odd & HIGH != 0 && !word.iter().all(|&b| one(b)) {
            return None;
        }
    }
    if !words.remainder().iter().all(|&b| one(b)) {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

/// Where a header's name and value sit in the buffer it was parsed from. Offsets are
/// `u32`: heads are bounded far below that (16 MiB for a request, the read buffer for an
/// answer), and a smaller span keeps [`Spans`] cheap to make and to return.
#[derive(Clone, Copy, Default)]
pub struct Span {
    pub name: (u32, u32),
    pub value: (u32, u32),
}

impl Span {
    pub fn name(self) -> std::ops::Range<usize> {
        self.name.0 as usize..self.name.1 as usize
    }

    pub fn value(self) -> std::ops::Range<usize> {
        self.value.0 as usize..self.value.1 as usize
    }
}

/// The spans of `headers`, parsed by httparse from `buf`, so a header map can share the
/// buffer's bytes (once frozen) rather than copy them. Up to [`INLINE_SPANS`] of them (any
/// ordinary head) are kept on the stack, more on the heap.
pub fn header_spans(buf: &[u8], headers: &[httparse::Header<'_>]) -> Spans {
    debug_assert!(buf.len() <= u32::MAX as usize || headers.is_empty());
    let base = buf.as_ptr() as usize;
    let span = |h: &httparse::Header<'_>| {
        let (n, v) = (
            h.name.as_ptr() as usize - base,
            h.value.as_ptr() as usize - base,
        );
        Span {
            name: (n as u32, (n + h.name.len()) as u32),
            value: (v as u32, (v + h.value.len()) as u32),
        }
    };
    Spans(headers.iter().map(span).collect())
}

const INLINE_SPANS: usize = 16;

/// See [`header_spans`]. Its inline slots are not written until used, so a head with a
/// few fields costs no clearing of sixteen.
pub struct Spans(smallvec::SmallVec<[Span; INLINE_SPANS]>);

impl Spans {
    pub fn as_slice(&self) -> &[Span] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{HeaderName, HeaderValue};

    /// Each kind is found from its name in any case, and only from its name: the kind of a
    /// name is the kind whose name equals it as `HeaderName` compares names.
    #[test]
    fn kinds_are_their_names() {
        let mut names: Vec<String> = Vec::new();
        for (kind, name) in FieldKind::NAMED {
            assert_eq!(FieldKind::of(name.as_bytes()), kind, "{name}");
            assert_eq!(
                FieldKind::of(name.to_uppercase().as_bytes()),
                kind,
                "{name}"
            );
            names.push(name.to_string());
            // Near misses: a byte more, a byte less, one changed.
            names.push(format!("{name}s"));
            names.push(name[1..].to_string());
            names.push(format!("x{}", &name[1..]));
        }
        names.extend(["", "user-agent", "mcp-protocol-version"].map(String::from));
        for n in &names {
            let parsed = HeaderName::from_bytes(n.as_bytes());
            let expected = FieldKind::NAMED
                .iter()
                .find(|(_, name)| parsed.as_ref().is_ok_and(|p| p == name))
                .map_or(FieldKind::Other, |(k, _)| *k);
            assert_eq!(FieldKind::of(n.as_bytes()), expected, "{n:?}");
        }
        // Every kind has its own bit.
        let bits = FieldKind::NAMED.iter().fold(0u32, |all, (k, _)| {
            assert_eq!(all & k.bit(), 0, "{k:?}");
            all | k.bit()
        });
        assert_eq!(bits.count_ones() as usize, FieldKind::NAMED.len());
    }

    /// The list answers as the header map it was made from: the first value of a kind, all
    /// of them in order, none for an absent one; every field, in order, when iterated.
    #[test]
    fn fields_answer_as_their_map() {
        let mut map = HeaderMap::new();
        for (n, v) in [
            ("host", "a"),
            ("connection", "keep-alive"),
            ("x-custom", "1"),
            ("connection", "x-custom"),
            ("accept", "text/event-stream"),
            ("content-type", "caf\u{e9}"),
        ] {
            map.append(
                HeaderName::from_static(n),
                HeaderValue::from_bytes(v.as_bytes()).unwrap(),
            );
        }
        let fields = Fields::from_map(&map);
        assert_eq!(fields.len(), map.len());
        for (kind, name) in FieldKind::NAMED {
            let got: Vec<&[u8]> = fields.all(kind).collect();
            let want: Vec<&[u8]> = map.get_all(name).iter().map(|v| v.as_bytes()).collect();
            assert_eq!(got, want, "{name}");
            assert_eq!(fields.has(kind), !want.is_empty(), "{name}");
            assert_eq!(
                fields.get_str(kind),
                map.get(name).and_then(|v| v.to_str().ok()),
                "{name}"
            );
        }
        assert_eq!(fields.all(FieldKind::Other).count(), 0);
        let listed: Vec<(FieldKind, &[u8], &[u8])> = fields.iter().collect();
        let mapped: Vec<(FieldKind, &[u8], &[u8])> = map
            .iter()
            .map(|(n, v)| {
                (
                    FieldKind::of(n.as_str().as_bytes()),
                    n.as_str().as_bytes(),
                    v.as_bytes(),
                )
            })
            .collect();
        assert_eq!(listed, mapped);
        assert!(Fields::new().is_empty() && !Fields::new().has(FieldKind::Host));
    }

    /// Every byte value, alone and at each place in texts that fill words and do not,
    /// reads as the byte-by-byte rule says.
    #[test]
    fn visible_is_the_byte_rule() {
        let rule = |t: &[u8]| t.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b));
        for b in 0..=255u8 {
            for len in [1usize, 7, 8, 9, 16, 19] {
                for at in 0..len {
                    let mut text = vec![b'a'; len];
                    text[at] = b;
                    assert_eq!(
                        visible(&text).is_some(),
                        rule(&text),
                        "{b:#x} at {at} of {len}"
                    );
                }
            }
        }
    }

    #[test]
    fn visible_text() {
        assert_eq!(visible(b"a b\tc~"), Some("a b\tc~"));
        assert_eq!(visible(b""), Some(""));
        assert_eq!(visible(b"caf\xc3\xa9"), None);
        assert_eq!(visible(b"a\x7f"), None);
        assert_eq!(visible(b"a\x01"), None);
    }
}
