//! The answer tap: the records of forwarded calls are written when their answer ends,
//! with the outcome (`ok`, `error`, `timeout`, `client_gone`) read from the answer as it
//! streams by, JSON or SSE, without holding more than a bounded tail.

use super::Audit;
use super::record::Record;

#[derive(serde::Deserialize)]
pub(super) struct AnswerHead<'a> {
    #[serde(borrow)]
    pub(super) id: Option<&'a serde_json::value::RawValue>,
    pub(super) result: Option<ResultHead>,
    pub(super) error: Option<ErrorHead>,
}

#[derive(serde::Deserialize)]
pub(super) struct ResultHead {
    #[serde(rename = "isError", default)]
    pub(super) is_error: Option<bool>,
    /// MCP 2026-07-28: `complete`, `input_required` (a round of a multi round-trip
    /// request) or `task` (the tasks extension's call that goes on in the background).
    #[serde(rename = "resultType", default)]
    pub(super) result_type: Option<serde_json::Value>,
}

/// The outcome a result's `resultType` gives, if it is not a plain `complete`.
fn round_outcome(result_type: Option<&str>) -> Option<&'static str> {
    match result_type? {
        "input_required" => Some("input_required"),
        "task" => Some("task"),
        _ => None,
    }
}

#[derive(serde::Deserialize)]
pub(super) struct ErrorHead {
    #[serde(default)]
    pub(super) code: i64,
}

/// Calls `found` with the id (as JSON text) and outcome of each response in a JSON text
/// (a response or a batch of them). A single response is read without allocating.
pub(super) fn each_outcome(text: &str, mut found: impl FnMut(&str, &'static str)) {
    if !text.trim_start().starts_with('[')
        && let Some(read) = read_outcome(text)
    {
        if let Some((id, outcome)) = read {
            found(id, outcome);
        }
        return;
    }
    each_outcome_by_serde(text, found);
}

pub(super) fn each_outcome_by_serde(text: &str, mut found: impl FnMut(&str, &'static str)) {
    let mut one = |h: AnswerHead<'_>| {
        let outcome = match (&h.result, &h.error) {
            (_, Some(e)) => crate::error::code::outcome(e.code),
            (Some(r), None) if r.is_error == Some(true) => "is_error",
            (Some(r), None) => {
                round_outcome(r.result_type.as_ref().and_then(|t| t.as_str())).unwrap_or("ok")
            }
            (None, None) => return,
        };
        if let Some(id) = h.id {
            found(id.get().trim(), outcome);
        }
    };
    if text.trim_start().starts_with('[') {
        let many: Vec<AnswerHead<'_>> = serde_json::from_str(text).unwrap_or_default();
        many.into_iter().for_each(one);
    } else if let Ok(head) = serde_json::from_str(text) {
        one(head);
    }
}

/// The outcome of a single response, read in one pass with [`wire::json::read`]:
/// `Some(None)` when it has none (no id, or neither result nor error), `None` to leave
/// the text to serde_json (malformed, an escaped key, a repeated field, a `result` or
/// `error` or `isError` or `code` of a shape that is not the usual one). Where both
/// read it, they agree (`fast_and_serde_agree`).
pub(super) fn read_outcome(text: &str) -> Option<Option<(&str, &'static str)>> {
    use wire::json::read::Reader;
    let mut r = Reader::new(text);
    r.skip_ws();
    // Which of `id`, `result` and `error` were seen: a second of any makes it give up.
    let mut seen = [false; 3];
    let mut id = None;
    // `None` when absent or null; else `isError` (`None` when absent or null).
    let mut result: Option<Option<bool>> = None;
    // What `resultType` makes of the outcome (2026-07-28).
    let mut round: Option<&'static str> = None;
    let mut code: Option<i64> = None;
    r.object(0, |r, key| {
        let key = key.plain()?;
        let is_null = r.peek() == Some(b'n');
        let slot = match key {
            "id" => 0,
            "result" => 1,
            "error" => 2,
            _ => return r.skip(1),
        };
        first(&mut seen[slot])?;
        match key {
            "id" => id = Some(r.value(1)?).filter(|_| !is_null),
            _ if is_null => r.skip(1)?,
            "result" => {
                let mut is_error = None;
                let (mut once, mut once_type) = (false, false);
                r.object(1, |r, key| {
                    let key = key.plain()?;
                    if key == "resultType" {
                        first(&mut once_type)?;
                        let value = r.value(2)?;
                        round = match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
                            Some(v) if v.contains('\\') => return None,
                            Some(v) => round_outcome(Some(v)),
                            None => None,
                        };
                    } else if key == "isError" {
                        first(&mut once)?;
                        is_error = match r.value(2)? {
                            "true" => Some(true),
                            "false" => Some(false),
                            "null" => None,
                            _ => return None,
                        };
                    } else {
                        r.skip(2)?;
                    }
                    Some(())
                })?;
                result = Some(is_error);
            }
            _ => {
                let mut found = 0;
                let mut once = false;
                r.object(1, |r, key| {
                    let value = r.value(2)?;
                    if key.plain()? == "code" {
                        first(&mut once)?;
                        found = value.parse().ok()?;
                    }
                    Some(())
                })?;
                code = Some(found);
            }
        }
        Some(())
    })?;
    if !r.at_end() {
        return None;
    }
    let outcome = match (result, code) {
        (_, Some(code)) => crate::error::code::outcome(code),
        (Some(Some(true)), None) => "is_error",
        (Some(_), None) => round.unwrap_or("ok"),
        (None, None) => return Some(None),
    };
    Some(id.map(|id| (id, outcome)))
}

/// Notes a field as seen; `None` when it was already (a repeated field: serde_json decides).
pub(super) fn first(seen: &mut bool) -> Option<()> {
    (!std::mem::replace(seen, true)).then_some(())
}

/// Appends `data` to `tail` and keeps the last [`TAIL`] bytes of the two.
pub(super) fn keep_tail(tail: &mut Vec<u8>, data: &[u8]) {
    if data.len() >= TAIL {
        tail.clear();
        tail.extend_from_slice(&data[data.len() - TAIL..]);
    } else {
        let keep = (TAIL - data.len()).min(tail.len());
        tail.drain(..tail.len() - keep);
        tail.extend_from_slice(data);
    }
}

/// Largest JSON answer kept whole to learn outcomes. A bigger one (a large tool result)
/// is not held: only its last `TAIL` bytes are kept, and the outcome comes from them
/// (`"isError": true` there means `is_error`, otherwise `ok`), so memory stays flat.
pub(super) const MAX_OBSERVED_JSON: usize = 256 << 10;
pub(super) const TAIL: usize = 4 << 10;

pub(super) struct Pending {
    pub(super) record: Record,
    pub(super) outcome: Option<&'static str>,
}

/// The records of one answer's calls, waiting for the outcomes the answer holds.
pub(super) struct Outcomes {
    pub(super) pending: Vec<Pending>,
    pub(super) started: std::time::Instant,
}

impl Outcomes {
    pub(super) fn new(
        records: impl IntoIterator<Item = Record>,
        started: std::time::Instant,
    ) -> Self {
        Outcomes {
            pending: records
                .into_iter()
                .map(|record| Pending {
                    record,
                    outcome: None,
                })
                .collect(),
            started,
        }
    }

    /// Takes the outcome of each response in `text` for the calls with its id.
    pub(super) fn scan(&mut self, text: &str) {
        let pending = &mut self.pending;
        each_outcome(text, |id, outcome| {
            for p in pending
                .iter_mut()
                .filter(|p| p.outcome.is_none() && p.record.rpc_id() == Some(id))
            {
                p.outcome = Some(outcome);
            }
        });
    }

    /// Gives `outcome` to every call that has none yet.
    pub(super) fn settle_unknown(&mut self, outcome: &'static str) {
        for p in self.pending.iter_mut().filter(|p| p.outcome.is_none()) {
            p.outcome = Some(outcome);
        }
    }

    /// Writes one record per call; a call whose answer was not seen gets `otherwise`.
    pub(super) fn write(&mut self, audit: &Audit, otherwise: &'static str, total_ms: f64) {
        for p in self.pending.drain(..) {
            let mut r = p.record;
            r.outcome = Some(Some(p.outcome.unwrap_or(otherwise)));
            r.total_ms = Some(total_ms);
            audit.record(r);
        }
    }
}

/// Writes the records of calls answered by a JSON text already whole in memory: their
/// outcomes are read from it at once, so the answer needs no [`AuditTap`]. A call whose
/// response is not in it is `upstream_error`, as the tap would record it. `total_ms`: the
/// request's time so far, which the caller has just read.
pub fn record_whole_answer(
    audit: &Audit,
    records: impl IntoIterator<Item = Record>,
    json: &[u8],
    started: std::time::Instant,
    total_ms: f64,
) {
    let mut outcomes = Outcomes::new(records, started);
    outcomes.scan(&wire::json::text::lossy(json));
    outcomes.write(audit, "upstream_error", total_ms);
}

/// Wraps the answer to a request with tools/call elements: passes every byte on untouched,
/// reads along to learn each call's outcome, and writes the records when the answer ends,
/// fails, or the client goes away.
pub struct AuditTap {
    pub(super) inner: crate::http::body::GateBody,
    pub(super) audit: Audit,
    pub(super) outcomes: Outcomes,
    pub(super) sse: Option<crate::mcp::transport::sse::Decoder>,
    pub(super) json: Vec<u8>,
    /// Set once `json` outgrew `MAX_OBSERVED_JSON`: from then on it holds only a tail.
    pub(super) overflowed: bool,
    pub(super) finished: bool,
}

impl AuditTap {
    pub fn new(
        inner: crate::http::body::GateBody,
        audit: Audit,
        records: impl IntoIterator<Item = Record>,
        sse: bool,
        started: std::time::Instant,
    ) -> Self {
        AuditTap {
            inner,
            audit,
            outcomes: Outcomes::new(records, started),
            sse: sse.then(crate::mcp::transport::sse::Decoder::new),
            json: Vec::new(),
            overflowed: false,
            finished: false,
        }
    }

    pub(super) fn scan(&mut self, text: &str) {
        self.outcomes.scan(text);
    }

    pub(super) fn observe(&mut self, data: &[u8]) {
        match &mut self.sse {
            Some(decoder) => {
                decoder.feed(data);
                let mut texts = Vec::new();
                while let Some(ev) = decoder.next_event() {
                    if let Some(d) = ev.data {
                        texts.push(d);
                    }
                }
                for t in texts {
                    self.scan(&t);
                }
            }
            None if self.overflowed => keep_tail(&mut self.json, data),
            None if self.json.len() + data.len() > MAX_OBSERVED_JSON => {
                // Too big to keep whole: from here on only the tail, switched to before
                // the buffer grows past the limit.
                self.overflowed = true;
                keep_tail(&mut self.json, data);
                self.json.shrink_to(TAIL);
            }
            None => self.json.extend_from_slice(data),
        }
    }

    /// Writes one record per call; a call whose answer was not seen gets `otherwise`.
    pub(super) fn finish(&mut self, otherwise: &'static str) {
        if self.finished {
            return;
        }
        self.finished = true;
        if self.overflowed {
            let tail: Vec<u8> = self
                .json
                .iter()
                .copied()
                .filter(|b| !b.is_ascii_whitespace())
                .collect();
            const IS_ERROR: &[u8] = b"\"isError\":true";
            let outcome = if tail.windows(IS_ERROR.len()).any(|w| w == IS_ERROR) {
                "is_error"
            } else {
                "ok"
            };
            self.outcomes.settle_unknown(outcome);
        } else if !self.json.is_empty() {
            let json = std::mem::take(&mut self.json);
            self.scan(&wire::json::text::lossy(&json));
        }
        let total_ms = self.outcomes.started.elapsed().as_secs_f64() * 1000.0;
        self.outcomes.write(&self.audit, otherwise, total_ms);
    }
}

impl http_body::Body for AuditTap {
    type Data = bytes::Bytes;
    type Error = crate::http::body::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        use std::task::Poll;
        let this = &mut *self;
        match std::pin::Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let end = this.inner.is_end_stream();
                if let Some(d) = frame.data_ref() {
                    if end && this.sse.is_none() && this.json.is_empty() {
                        // A whole JSON answer in one frame: read it where it is.
                        this.scan(&wire::json::text::lossy(d));
                    } else {
                        let d = d.clone();
                        this.observe(&d);
                    }
                }
                if end {
                    // The answer is complete: nothing more will be polled.
                    this.finish("upstream_error");
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                // The answer ended without this call's response in it.
                this.finish("upstream_error");
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                let outcome = if e.is::<crate::http::body::DeadlineExceeded>() {
                    "timeout"
                } else {
                    "upstream_error"
                };
                this.finish(outcome);
                Poll::Ready(Some(Err(e)))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for AuditTap {
    fn drop(&mut self) {
        // Dropped before the end: the client went away (or the connection broke).
        self.finish("client_gone");
    }
}

#[cfg(test)]
mod outcome_tests {
    use super::{TAIL, each_outcome, each_outcome_by_serde, keep_tail, read_outcome};

    fn outcomes_in(text: &str) -> Vec<(String, &'static str)> {
        let mut all = Vec::new();
        each_outcome(text, |id, outcome| all.push((id.to_string(), outcome)));
        all
    }

    /// The tail kept of a large answer is the last `TAIL` bytes of everything seen,
    /// whatever the sizes of the pieces.
    #[test]
    fn the_tail_is_the_last_bytes_seen() {
        let mut seen: Vec<u8> = Vec::new();
        let mut tail: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
        seen.extend_from_slice(&tail);
        for (n, size) in [1usize, 7, 4095, 4096, 4097, 9000, 0, 13, 70_000, 2]
            .into_iter()
            .enumerate()
        {
            let piece: Vec<u8> = (0..size).map(|i| (i * 31 + n) as u8).collect();
            keep_tail(&mut tail, &piece);
            seen.extend_from_slice(&piece);
            assert_eq!(tail, seen[seen.len() - TAIL..], "after a piece of {size}");
        }
    }

    #[test]
    fn outcomes() {
        assert_eq!(
            outcomes_in(r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}}"#),
            [("1".to_string(), "ok")]
        );
        assert_eq!(
            outcomes_in(r#"{"jsonrpc":"2.0","id":"a","result":{"isError":true}}"#),
            [("\"a\"".to_string(), "is_error")]
        );
        assert_eq!(
            outcomes_in(r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"x"}}"#),
            [("2".to_string(), "jsonrpc_error")]
        );
        assert_eq!(
            outcomes_in(r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32004,"message":"x"}}"#),
            [("3".to_string(), "timeout")]
        );
        assert_eq!(
            outcomes_in(r#"[{"id":4,"result":{}},{"method":"notifications/x"}]"#),
            [("4".to_string(), "ok")]
        );
        assert!(outcomes_in("not json").is_empty());
    }

    const ANSWERS: &[&str] = &[
        r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello"}],"isError":false}}"#,
        r#"{"jsonrpc":"2.0","id":"a","result":{"isError":true,"content":[]}}"#,
        r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"x","data":{"k":[1]}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"error":{"message":"no code"}}"#,
        r#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"p":0.5}}"#,
        r#"{"result":{"isError":null},"id":-4.5e1}"#,
        r#" { "id" : "b" , "error" : { "code" : -32001 } , "x" : "\u00e9\n" } "#,
        r#"{"jsonrpc":"2.0","id":5,"result":null,"error":{"code":-32004}}"#,
        r#"{"jsonrpc":"2.0","id":6,"result":{"resultType":"input_required","requestState":"s"}}"#,
        r#"{"jsonrpc":"2.0","id":7,"result":{"task":{"taskId":"t"},"resultType":"task"}}"#,
        r#"{"jsonrpc":"2.0","id":8,"result":{"resultType":7,"isError":true}}"#,
    ];

    /// The one-pass reader either steps aside or finds exactly what serde_json finds, on
    /// the answers above and on random edits of them.
    #[test]
    fn fast_and_serde_agree() {
        let by_serde = |text: &str| {
            let mut all = Vec::new();
            each_outcome_by_serde(text, |id, outcome| all.push((id.to_string(), outcome)));
            all
        };
        let as_found = |read: Option<(&str, &'static str)>| -> Vec<(String, &'static str)> {
            read.into_iter()
                .map(|(id, o)| (id.to_string(), o))
                .collect()
        };
        for text in ANSWERS {
            let read = read_outcome(text).unwrap_or_else(|| panic!("stepped aside on {text}"));
            assert_eq!(as_found(read), by_serde(text), "{text}");
        }
        // Besides the JSON pieces every edit may use: what an answer's outcome hangs on.
        const BITS: &[&str] = &[
            "false",
            "\"id\"",
            "\"result\"",
            "\"error\"",
            "\"code\"",
            "\"isError\"",
            "\"resultType\"",
            "\"input_required\"",
            "\\u0069",
            "99999999999999999999",
        ];
        let mut read = 0;
        for text in wire::json::read::edits(ANSWERS, BITS, 0x2545_f491_4f6c_dd1d, 40_000) {
            if let Some(found) = read_outcome(&text) {
                read += 1;
                assert_eq!(as_found(found), by_serde(&text), "{text}");
            }
        }
        assert!(read > 2_000, "{read}");
    }
}
