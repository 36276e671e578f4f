//! MCP's two generations (SPEC §15). A request is *modern* when it names 2026-07-28 or
//! later (in `params._meta` or the `MCP-Protocol-Version` header) and carries no session
//! id; everything else is *legacy*, the session protocol of 2025-11-25 and before.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use std::borrow::Cow;

pub use crate::config::generation::{Era, MODERN, is_modern};

/// The revision `params._meta` names (its JSON text given), if it names one as a string.
pub fn meta_version(meta: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(rename = "io.modelcontextprotocol/protocolVersion")]
        version: Option<String>,
    }
    serde_json::from_str::<Meta>(meta).ok()?.version
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_order_by_date() {
        assert!(is_modern("2026-07-28"));
        assert!(is_modern("2027-01-01"));
        assert!(!is_modern("2025-11-25"));
        assert!(!is_modern("2026-07-2"));
        assert!(!is_modern("2026-07-28x"));
        assert!(!is_modern("9999-99-9x"));
        assert!(!is_modern("latest"));
    }

    #[test]
    fn meta_names_its_version() {
        let meta = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","x":[1]}"#;
        assert_eq!(meta_version(meta).as_deref(), Some("2026-07-28"));
        assert_eq!(
            meta_version(r#"{"io.modelcontextprotocol/protocolVersion":7}"#),
            None
        );
        assert_eq!(meta_version("{}"), None);
        assert_eq!(meta_version("[]"), None);
    }

    #[test]
    fn header_values_decode_as_the_transport_writes_them() {
        // The transport page's own examples.
        assert_eq!(decode_header(b"us-west1").as_deref(), Some("us-west1"));
        assert_eq!(
            decode_header(b"=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(),
            Some("Hello, 世界")
        );
        assert_eq!(
            decode_header(b"=?base64?IHBhZGRlZCA=?=").as_deref(),
            Some(" padded ")
        );
        assert_eq!(
            decode_header(b"=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=").as_deref(),
            Some("=?base64?literal?=")
        );
        // The markers are lower case only; anything else is read as it is.
        assert_eq!(
            decode_header(b"=?BASE64?SGk=?=").as_deref(),
            Some("=?BASE64?SGk=?=")
        );
        // Broken base64, base64 of bytes that are not UTF-8, raw bytes past ASCII.
        assert_eq!(decode_header(b"=?base64?SGk?="), None);
        assert_eq!(decode_header(b"=?base64?/w==?="), None);
        assert_eq!(decode_header("grüße".as_bytes()), None);
    }
}
