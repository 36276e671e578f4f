//! MCP's two generations (docs/protocol.md). A request is *modern* when it names 2026-07-28 or
//! later (in `params._meta` or the `MCP-Protocol-Version` header) and carries no session
//! id; everything else is *legacy*, the session protocol of 2025-11-25 and before.

pub use crate::config::generation::{Era, MODERN, decode_header, is_modern};

/// What `params._meta` (its JSON text given) says of the request's envelope.
#[derive(Debug, Default, PartialEq)]
pub struct Envelope {
    /// The revision it names, if it names one as a string.
    pub version: Option<String>,
    /// Whether it holds `io.modelcontextprotocol/clientCapabilities` as an object, as a
    /// 2026-07-28 request must.
    pub capabilities: bool,
}

pub fn envelope(meta: &str) -> Envelope {
    #[derive(serde::Deserialize)]
    struct Meta<'a> {
        #[serde(rename = "io.modelcontextprotocol/protocolVersion")]
        version: Option<serde_json::Value>,
        #[serde(rename = "io.modelcontextprotocol/clientCapabilities", borrow)]
        capabilities: Option<&'a serde_json::value::RawValue>,
    }
    let Ok(m) = serde_json::from_str::<Meta>(meta) else {
        return Envelope::default();
    };
    Envelope {
        version: match m.version {
            Some(serde_json::Value::String(v)) => Some(v),
            _ => None,
        },
        capabilities: m.capabilities.is_some_and(|c| c.get().starts_with('{')),
    }
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
        assert_eq!(envelope(meta).version.as_deref(), Some("2026-07-28"));
        assert!(!envelope(meta).capabilities);
        let number = envelope(r#"{"io.modelcontextprotocol/protocolVersion":7}"#);
        assert_eq!(number.version, None);
        assert_eq!(envelope("{}"), Envelope::default());
        assert_eq!(envelope("[]"), Envelope::default());
        let full = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;
        assert!(envelope(full).capabilities);
        let listed = r#"{"io.modelcontextprotocol/clientCapabilities":[]}"#;
        assert!(!envelope(listed).capabilities);
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

    #[test]
    fn header_values_encode_so_they_decode_back() {
        use crate::config::generation::encode_header;
        assert_eq!(encode_header("786512e2-9e0d"), "786512e2-9e0d");
        assert_eq!(
            encode_header("Hello, 世界"),
            "=?base64?SGVsbG8sIOS4lueVjA==?="
        );
        for text in [
            "plain",
            " padded ",
            "=?base64?literal?=",
            "tab\there",
            "grüße",
            "",
        ] {
            let encoded = encode_header(text);
            assert_eq!(decode_header(encoded.as_bytes()).as_deref(), Some(text));
        }
    }
}
