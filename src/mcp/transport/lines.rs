//! An answer of `application/json` that is a stream of JSON messages, one per line, and
//! never ends (the conformance suite's reference server answers `subscriptions/listen`
//! so), turned into an event stream as it comes, for the relay to carry (docs/protocol.md).

use super::sse;
use crate::http::body::GateBody;
use crate::mcp::tools_list::MAX_REWRITE_BYTES;
use crate::upstream::stdio::lines::{Line, Lines};
use futures_util::TryStreamExt;
use http_body::Frame;
use http_body_util::{BodyDataStream, BodyExt};

/// `body` as an event stream: each line an event, as it comes, read by the line reader of
/// stdio upstreams. A line longer than `MAX_REWRITE_BYTES` is skipped and logged; a last
/// line without its newline is sent when the upstream ends.
pub fn json_lines_as_events(body: GateBody) -> GateBody {
    let bytes = BodyDataStream::new(body).map_err(std::io::Error::other);
    let lines = Lines::new(tokio_util::io::StreamReader::new(bytes), MAX_REWRITE_BYTES);
    let events = futures_util::stream::unfold(lines, |mut lines| async move {
        loop {
            match lines.next().await? {
                Line::Text(text) => {
                    let text = String::from_utf8_lossy(&text);
                    if text.trim().is_empty() {
                        continue;
                    }
                    let event = sse::encode_json(text.trim(), None);
                    return Some((
                        Ok::<_, crate::http::body::BoxError>(Frame::data(event)),
                        lines,
                    ));
                }
                Line::TooLong(len) => {
                    tracing::warn!(
                        len,
                        "a JSON line of the upstream's stream is too long: skipped"
                    );
                }
            }
        }
    });
    GateBody::Boxed(BodyExt::boxed_unsync(http_body_util::StreamBody::new(
        events,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[tokio::test]
    async fn each_line_is_an_event_blank_ones_skipped_and_a_last_one_kept() {
        let body = GateBody::full(Bytes::from_static(
            b"{\"jsonrpc\":\"2.0\",\"method\":\"a\"}\n\n  {\"jsonrpc\":\"2.0\",\"method\":\"b\"}\r\n{\"jsonrpc\":\"2.0\",\"method\":\"c\"}",
        ));
        let out = json_lines_as_events(body)
            .collect()
            .await
            .unwrap()
            .to_bytes();
        let expected: Vec<u8> = ["a", "b", "c"]
            .iter()
            .flat_map(|m| {
                sse::encode_json(&format!("{{\"jsonrpc\":\"2.0\",\"method\":\"{m}\"}}"), None)
                    .to_vec()
            })
            .collect();
        assert_eq!(out, expected);
    }
}
