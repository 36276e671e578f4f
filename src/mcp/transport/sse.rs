//! Server-Sent Events (WHATWG HTML §9.2): an incremental decoder that accepts any chunking
//! of the stream (an event, a line, even a CRLF pair split across chunks) and keeps the
//! raw bytes of each event so an event that needs no change is forwarded byte for byte;
//! and an encoder for the events mcpgate writes itself.

use bytes::{Bytes, BytesMut};

/// One dispatched event: the parsed fields and the exact bytes it came from, blank line
/// included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub raw: Bytes,
    pub event: Option<String>,
    pub id: Option<String>,
    pub retry: Option<u64>,
    /// `data` lines joined with `\n`; `None` when the event had no data line.
    pub data: Option<String>,
}

#[derive(Debug, Default)]
struct Fields {
    event: Option<String>,
    id: Option<String>,
    retry: Option<u64>,
    data: Option<String>,
}

#[derive(Debug, Default)]
pub struct Decoder {
    buf: BytesMut,
    /// Bytes of `buf` already parsed into `fields` (whole lines of the pending event).
    scanned: usize,
    fields: Fields,
    /// Set once the first line of the stream is parsed (the only place a BOM may stand).
    past_first_line: bool,
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete event, if the bytes fed so far hold one.
    pub fn next_event(&mut self) -> Option<Event> {
        if !self.past_first_line && self.buf.len() < 3 && b"\xEF\xBB\xBF".starts_with(&self.buf) {
            // Maybe the start of a byte order mark: wait for more.
            return None;
        }
        loop {
            let rest = &self.buf[self.scanned..];
            let pos = rest.iter().position(|&b| b == b'\n' || b == b'\r')?;
            let term = if rest[pos] == b'\n' {
                1
            } else if pos + 1 < rest.len() {
                if rest[pos + 1] == b'\n' { 2 } else { 1 }
            } else {
                // A CR at the end of what we have may be the first half of a CRLF.
                return None;
            };
            let mut line = &rest[..pos];
            if !self.past_first_line {
                // A UTF-8 byte order mark may open the stream; it is not part of the line.
                self.past_first_line = true;
                line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
            }
            let blank = line.is_empty();
            if !blank {
                apply_line(&mut self.fields, line);
            }
            self.scanned += pos + term;
            if blank {
                let raw = self.buf.split_to(self.scanned).freeze();
                self.scanned = 0;
                let f = std::mem::take(&mut self.fields);
                return Some(Event {
                    raw,
                    event: f.event,
                    id: f.id,
                    retry: f.retry,
                    data: f.data,
                });
            }
        }
    }

    /// At the end of the stream: the bytes of an unfinished event (which SSE discards, but
    /// a proxy must still pass on), if any.
    pub fn finish(&mut self) -> Option<Bytes> {
        self.scanned = 0;
        self.fields = Fields::default();
        (!self.buf.is_empty()).then(|| self.buf.split().freeze())
    }

    /// How many bytes are held waiting for the end of an event.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

fn apply_line(f: &mut Fields, line: &[u8]) {
    if line[0] == b':' {
        return; // comment
    }
    let (name, value) = match line.iter().position(|&b| b == b':') {
        Some(i) => {
            let v = &line[i + 1..];
            (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
        }
        None => (line, &b""[..]),
    };
    let value = String::from_utf8_lossy(value);
    match name {
        b"data" => match &mut f.data {
            Some(d) => {
                d.push('\n');
                d.push_str(&value);
            }
            None => f.data = Some(value.into_owned()),
        },
        b"event" => f.event = Some(value.into_owned()),
        b"id" if !value.contains('\0') => f.id = Some(value.into_owned()),
        b"retry" => {
            if let Ok(ms) = value.parse() {
                f.retry = Some(ms)
            }
        }
        _ => {}
    }
}

impl Event {
    /// An `event: message` carrying `json`, as [`encode_json`] writes it.
    pub fn json(json: String) -> Event {
        Event {
            raw: encode_json(&json, None),
            event: Some("message".into()),
            id: None,
            retry: None,
            data: Some(json),
        }
    }

    /// The same event with `json` as its data.
    pub fn with_data(self, json: String) -> Event {
        Event {
            raw: encode_event(&self, &json),
            data: Some(json),
            ..self
        }
    }
}

/// Encodes one `event: message` frame carrying a JSON text.
pub fn encode_json(json: &str, id: Option<&str>) -> Bytes {
    encode(Some("message"), id, None, json)
}

/// Re-encodes a decoded event with new JSON data, keeping its `event`, `id` and `retry`.
pub fn encode_event(ev: &Event, json: &str) -> Bytes {
    encode(ev.event.as_deref(), ev.id.as_deref(), ev.retry, json)
}

/// Raw CR and LF bytes can only be insignificant whitespace in JSON (inside strings they
/// must be escaped), so they become spaces and the frame stays a single `data:` line.
fn encode(event: Option<&str>, id: Option<&str>, retry: Option<u64>, json: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(json.len() + 64);
    if let Some(e) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(e.as_bytes());
        out.extend_from_slice(b"\n");
    }
    if let Some(id) = id {
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(b"\n");
    }
    if let Some(r) = retry {
        out.extend_from_slice(format!("retry: {r}\n").as_bytes());
    }
    out.extend_from_slice(b"data: ");
    let mut rest = json.as_bytes();
    while let Some(i) = rest.iter().position(|&b| b == b'\r' || b == b'\n') {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(b" ");
        rest = &rest[i + 1..];
    }
    out.extend_from_slice(rest);
    out.extend_from_slice(b"\n\n");
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(chunks: &[&[u8]]) -> (Vec<Event>, Option<Bytes>) {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        for c in chunks {
            d.feed(c);
            while let Some(e) = d.next_event() {
                out.push(e);
            }
        }
        (out, d.finish())
    }

    const STREAM: &[u8] = b"\xEF\xBB\xBF: hello\r\nid: 1\r\ndata:\r\n\r\nevent: message\nid: 2\ndata: {\"a\":\ndata:  1}\n\nretry: 500\rdata: x\r\rdata: tail";

    #[test]
    fn fields_and_line_endings() {
        let (events, rest) = decode_all(&[STREAM]);
        assert_eq!(events.len(), 3);
        assert_eq!(events[0].id.as_deref(), Some("1"));
        assert_eq!(events[0].data.as_deref(), Some(""));
        assert_eq!(events[1].event.as_deref(), Some("message"));
        assert_eq!(events[1].data.as_deref(), Some("{\"a\":\n 1}"));
        assert_eq!(events[2].retry, Some(500));
        assert_eq!(events[2].data.as_deref(), Some("x"));
        assert_eq!(rest.as_deref(), Some(&b"data: tail"[..]));
        let joined: Vec<u8> = events
            .iter()
            .flat_map(|e| e.raw.to_vec())
            .chain(rest.unwrap().to_vec())
            .collect();
        assert_eq!(joined, STREAM, "raw bytes must add up to the input");
    }

    #[test]
    fn one_byte_at_a_time_gives_the_same_events() {
        let whole = decode_all(&[STREAM]);
        let bytes: Vec<&[u8]> = STREAM.chunks(1).collect();
        assert_eq!(decode_all(&bytes), whole);
    }

    #[test]
    fn crlf_split_across_chunks_is_one_line_end() {
        let (events, _) = decode_all(&[b"data: a\r", b"\n\r", b"\n"]);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data.as_deref(), Some("a"));
    }

    #[test]
    fn encoder_keeps_one_data_line() {
        let b = encode_json("{\n  \"a\": \"x\\ny\"\r\n}", Some("7"));
        assert_eq!(
            &b[..],
            b"event: message\nid: 7\ndata: {   \"a\": \"x\\ny\"  }\n\n"
        );
        let (events, _) = decode_all(&[&b]);
        assert_eq!(events[0].id.as_deref(), Some("7"));
    }
}
