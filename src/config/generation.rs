//! MCP's two generations as the configuration and the upstream side name them (docs/protocol.md):
//! which an upstream speaks, which revision is the first without sessions. What a request
//! says of itself is read in `mcp::era`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use std::borrow::Cow;

/// The first revision without sessions.
pub const MODERN: &str = "2026-07-28";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Era {
    #[default]
    Legacy,
    Modern,
}

impl Era {
    pub fn name(self) -> &'static str {
        match self {
            Era::Legacy => "legacy",
            Era::Modern => "modern",
        }
    }
}

/// Whether `version` (a revision date, `YYYY-MM-DD`) is 2026-07-28 or later. Revision
/// names are dates, so their order is the text's; anything not shaped like a date is not
/// a modern revision.
pub fn is_modern(version: &str) -> bool {
    let b = version.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        })
        && version >= MODERN
}

/// A header value as the 2026-07-28 transport writes names and mirrored parameters: as is
/// when it is printable ASCII, else `=?base64?…?=` around the UTF-8 text's base64
/// (RFC 4648 §4, padded). `None` when it is neither: bytes outside printable ASCII, or a
/// sentinel that does not decode to UTF-8.
pub fn decode_header(value: &[u8]) -> Option<Cow<'_, str>> {
    if let Some(inner) = value
        .strip_prefix(b"=?base64?")
        .and_then(|v| v.strip_suffix(b"?="))
    {
        let bytes = STANDARD.decode(inner).ok()?;
        return String::from_utf8(bytes).ok().map(Cow::Owned);
    }
    if value
        .iter()
        .all(|c| (0x20..0x7f).contains(c) || *c == b'\t')
    {
        return std::str::from_utf8(value).ok().map(Cow::Borrowed);
    }
    None
}

/// `text` as a mirrored header carries it (the inverse of [`decode_header`]): as it is when
/// it is printable ASCII without space at either end, else `=?base64?…?=`.
pub fn encode_header(text: &str) -> Cow<'_, str> {
    let plain = text.bytes().all(|c| (0x21..0x7f).contains(&c) || c == b' ')
        && !text.starts_with(' ')
        && !text.ends_with(' ')
        && !text.starts_with("=?base64?");
    if plain {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(format!("=?base64?{}?=", STANDARD.encode(text)))
    }
}
