//! `params._meta.traceparent` (MCP 2026-07-28 reserves `traceparent`, `tracestate` and
//! `baggage` in `_meta` for W3C trace context). With traces on, mcpgate treats it like the
//! `traceparent` header: a request without the header continues the trace its `_meta`
//! names, and the upstream gets mcpgate's span in `_meta` as it does in the header.

use std::ops::Range;

/// Where `_meta.traceparent`'s value (a JSON string, quotes included) lies in `body`, and
/// the text it holds. `meta` is the `_meta` object's text, a part of `body` (else `None`).
pub fn traceparent_in(body: &[u8], meta: &str) -> Option<(Range<usize>, String)> {
    #[derive(serde::Deserialize)]
    struct Meta<'a> {
        #[serde(borrow)]
        traceparent: Option<&'a serde_json::value::RawValue>,
    }
    let start = (meta.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    if start + meta.len() > body.len() {
        return None;
    }
    let raw = serde_json::from_str::<Meta>(meta).ok()?.traceparent?;
    let text: String = serde_json::from_str(raw.get()).ok()?;
    let at = start + (raw.get().as_ptr() as usize - meta.as_ptr() as usize);
    Some((at..at + raw.get().len(), text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_value_inside_the_body() {
        let body = r#"{"params":{"_meta":{"x":"traceparent","traceparent" : "00-abc"}}}"#;
        let meta = &body[19..body.len() - 2];
        assert!(meta.starts_with('{') && meta.ends_with('}'));
        let (range, text) = traceparent_in(body.as_bytes(), meta).unwrap();
        assert_eq!(&body[range], "\"00-abc\"");
        assert_eq!(text, "00-abc");
        let other = r#"{"a":1,"traceparent":1}"#;
        assert_eq!(traceparent_in(other.as_bytes(), other), None);
        // A `_meta` that is not part of the body is not edited there.
        let elsewhere = String::from(r#"{"traceparent":"00-abc"}"#);
        assert_eq!(traceparent_in(body.as_bytes(), &elsewhere), None);
    }
}
