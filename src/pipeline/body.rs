//! The body stage: a POST's `Content-Type` must be JSON and its body not encoded (a body
//! mcpgate did not inspect is never forwarded), and the body is read whole within
//! `max_body`. HTTP/1.1 bodies arrive read already (`http::h1::server` stops at the limit);
//! an HTTP/2 body is read here.

use crate::error::GateError;
use crate::http::request::ClientBody;
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use wire::fields::{FieldKind, Fields};

/// The request body, once its headers are checked, and never more than `limit` bytes.
pub async fn read(fields: &Fields, body: &mut ClientBody, limit: u64) -> Result<Bytes, GateError> {
    check_content_headers(fields)?;
    let declared = fields
        .get_str(FieldKind::ContentLength)
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(GateError::BodyTooLarge { limit });
    }
    match std::mem::replace(body, ClientBody::Read(Bytes::new())) {
        ClientBody::Read(bytes) if bytes.len() as u64 <= limit => Ok(bytes),
        ClientBody::Read(_) | ClientBody::TooLarge => Err(GateError::BodyTooLarge { limit }),
        ClientBody::H2(body) => Ok(Limited::new(body, limit as usize)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    GateError::BodyTooLarge { limit }
                } else {
                    GateError::InvalidRequest("the request body could not be read".into())
                }
            })?
            .to_bytes()),
    }
}

/// A body nested deeper than `[limits] max_json_depth` is refused before it is parsed, so
/// it reaches no parser that recurses, here or upstream (docs/limits.md).
pub fn check_depth(bytes: &[u8], limit: u32) -> Result<(), GateError> {
    if wire::json::read::deeper_than(bytes, limit) {
        return Err(GateError::InvalidRequest(format!(
            "the body nests objects and arrays more than {limit} deep ([limits] max_json_depth)"
        )));
    }
    Ok(())
}

/// `Content-Type` must be JSON (any parameters), and the body must not be encoded: a body
/// mcpgate did not inspect is never forwarded.
fn check_content_headers(fields: &Fields) -> Result<(), GateError> {
    let media = fields
        .get_str(FieldKind::ContentType)
        .map(wire::headval::media_type);
    if !media.is_some_and(|m| m.eq_ignore_ascii_case("application/json")) {
        return Err(GateError::UnsupportedMediaType(
            "Content-Type must be application/json",
        ));
    }
    for v in fields.all(FieldKind::ContentEncoding) {
        let ok = wire::fields::visible(v).is_some_and(|v| {
            wire::headval::items(v).all(|e| e.is_empty() || e.eq_ignore_ascii_case("identity"))
        });
        if !ok {
            return Err(GateError::UnsupportedMediaType(
                "Content-Encoding is not supported; send the body uncompressed",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue};

    #[test]
    fn content_headers() {
        let mut h = HeaderMap::new();
        assert!(check_content_headers(&Fields::from_map(&h)).is_err());
        h.insert(
            "content-type",
            HeaderValue::from_static("Application/JSON; charset=utf-8"),
        );
        assert!(check_content_headers(&Fields::from_map(&h)).is_ok());
        h.insert("content-encoding", HeaderValue::from_static("identity"));
        assert!(check_content_headers(&Fields::from_map(&h)).is_ok());
        h.insert("content-encoding", HeaderValue::from_static("gzip"));
        assert_eq!(
            check_content_headers(&Fields::from_map(&h))
                .unwrap_err()
                .status(),
            415
        );
        h.remove("content-encoding");
        h.insert("content-type", HeaderValue::from_static("text/plain"));
        assert_eq!(
            check_content_headers(&Fields::from_map(&h))
                .unwrap_err()
                .status(),
            415
        );
    }
}
