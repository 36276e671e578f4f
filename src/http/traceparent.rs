//! W3C Trace Context (level 1) as mcpgate reads and writes it: a request's `traceparent`
//! parsed, and the one its upstream gets. `observe::trace` decides what is sampled and
//! exports the spans; this is only the header.

/// The trace context of one request.
#[derive(Clone, Debug)]
pub struct Context {
    pub trace_id: [u8; 16],
    /// This request's span.
    pub span_id: [u8; 8],
    /// The client's span, when its `traceparent` was continued.
    pub parent: Option<[u8; 8]>,
    pub sampled: bool,
    /// The `traceparent` the upstream gets: `00-trace-span-flags`.
    pub header: [u8; 55],
}

impl Context {
    /// Whether the trace came from the client (its `tracestate` then goes on too).
    pub fn continued(&self) -> bool {
        self.parent.is_some()
    }

    /// Continues a client's trace found elsewhere than in the header (`params._meta`): the
    /// request keeps its span, whose parent and trace become the client's.
    pub fn continue_from(&mut self, (trace, span, sampled): ([u8; 16], [u8; 8], bool)) {
        self.trace_id = trace;
        self.parent = Some(span);
        self.sampled = sampled;
        self.header = header(&trace, &self.span_id, sampled);
    }
}

/// A `traceparent` value: `(trace id, parent span id, sampled)`, or `None` when it is not
/// one (W3C Trace Context level 1: lower-case hex, no all-zero ids, version `ff` invalid;
/// a later version may carry more after its flags).
pub fn parse(v: &[u8]) -> Option<([u8; 16], [u8; 8], bool)> {
    if v.len() < 55 || v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    let version = hex::<1>(&v[0..2])?[0];
    if version == 0xff || (version == 0 && v.len() != 55) || (v.len() > 55 && v[55] != b'-') {
        return None;
    }
    let trace = hex::<16>(&v[3..35])?;
    let span = hex::<8>(&v[36..52])?;
    let flags = hex::<1>(&v[53..55])?[0];
    if trace == [0; 16] || span == [0; 8] {
        return None;
    }
    Some((trace, span, flags & 1 == 1))
}

fn hex<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    if text.len() != 2 * N {
        return None;
    }
    for (i, pair) in text.chunks_exact(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// The `traceparent` of a span: version 00, the ids in lower-case hex, the sampled flag.
pub fn header(trace: &[u8; 16], span: &[u8; 8], sampled: bool) -> [u8; 55] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [b'-'; 55];
    out[0] = b'0';
    out[1] = b'0';
    for (i, b) in trace.iter().enumerate() {
        out[3 + 2 * i] = DIGITS[usize::from(b >> 4)];
        out[4 + 2 * i] = DIGITS[usize::from(b & 15)];
    }
    for (i, b) in span.iter().enumerate() {
        out[36 + 2 * i] = DIGITS[usize::from(b >> 4)];
        out[37 + 2 * i] = DIGITS[usize::from(b & 15)];
    }
    out[53] = b'0';
    out[54] = if sampled { b'1' } else { b'0' };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_are_read_as_w3c_says() {
        let ok = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let (trace, span, sampled) = parse(ok).unwrap();
        assert_eq!(trace[0], 0x4b);
        assert_eq!(span[7], 0xb7);
        assert!(sampled);
        assert_eq!(&header(&trace, &span, true)[..], &ok[..]);
        assert!(
            !parse(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
                .unwrap()
                .2
        );
        // A later version may add fields after its flags; version 00 may not.
        assert!(parse(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what").is_some());
        for bad in [
            &b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what"[..],
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            b"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            b"",
        ] {
            assert!(parse(bad).is_none(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
