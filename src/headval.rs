//! Reading header values a byte at a time: comma-separated lists and media types. The
//! values are a few dozen bytes, so `str::split` and its generic searcher cost more than
//! the reading itself; these loops do not.

/// The items of a comma-separated value (RFC 9110 §5.6.1), with the spaces and tabs
/// around each taken off. Empty items are kept (the list syntax allows them).
pub fn items(value: &str) -> impl DoubleEndedIterator<Item = &str> {
    // A one-char array is searched char by char, not with the memchr setup of `','`.
    value.split([',']).map(str::trim_ascii)
}

/// Whether a comma-separated value lists `token`, compared without case.
pub fn lists(value: &str, token: &str) -> bool {
    items(value).any(|t| t.eq_ignore_ascii_case(token))
}

/// The media type of a `Content-Type` value: what comes before its parameters, trimmed.
pub fn media_type(value: &str) -> &str {
    let end = value.bytes().position(|b| b == b';').unwrap_or(value.len());
    value[..end].trim_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_media_types() {
        assert_eq!(
            items(" a ,b,, \tc\t").collect::<Vec<_>>(),
            ["a", "b", "", "c"]
        );
        assert_eq!(items("gzip, chunked").next_back(), Some("chunked"));
        assert!(lists("keep-alive, Close", "close"));
        assert!(!lists("closed", "close"));
        assert_eq!(
            media_type(" application/json ; charset=utf-8"),
            "application/json"
        );
        assert_eq!(media_type("text/event-stream"), "text/event-stream");
        assert_eq!(media_type(";x"), "");
    }
}
