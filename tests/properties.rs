//! Properties of the parsers that face hostile input: the SSE decoder gives the same events
//! however the stream is chunked and never loses a byte; Accept negotiation, JSON-RPC
//! classification and the tools/list rewrite never panic on arbitrary input.

use mcpgate::mcp::transport::accept::negotiate;
use mcpgate::mcp::transport::sse::{Decoder, Event};
use proptest::prelude::*;

fn decode(chunks: &[&[u8]]) -> (Vec<Event>, Vec<u8>) {
    let mut d = Decoder::new();
    let mut events = Vec::new();
    for c in chunks {
        d.feed(c);
        while let Some(e) = d.next_event() {
            events.push(e);
        }
    }
    let rest = d.finish().map(|b| b.to_vec()).unwrap_or_default();
    (events, rest)
}

/// SSE-ish streams: real field lines, comments, every line ending, odd bytes.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    let line = prop_oneof![
        Just(b"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}".to_vec()),
        Just(b"data:".to_vec()),
        Just(b"data: x".to_vec()),
        Just(b"event: message".to_vec()),
        Just(b"id: 42".to_vec()),
        Just(b"retry: 1000".to_vec()),
        Just(b": keepalive".to_vec()),
        Just(b"\xEF\xBB\xBFdata: bom".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..12),
    ];
    let ending = prop_oneof![
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\r".to_vec())
    ];
    proptest::collection::vec((line, ending, any::<bool>()), 0..24).prop_map(|lines| {
        let mut out = Vec::new();
        for (l, e, blank) in lines {
            out.extend_from_slice(&l);
            out.extend_from_slice(&e);
            if blank {
                out.extend_from_slice(&e);
            }
        }
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn any_chunking_gives_the_same_events(bytes in stream(), cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..16)) {
        let whole = decode(&[&bytes]);
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        points.sort_unstable();
        let mut chunks = Vec::new();
        let mut at = 0;
        for p in points {
            chunks.push(&bytes[at..p]);
            at = p;
        }
        chunks.push(&bytes[at..]);
        let chunked = decode(&chunks);
        prop_assert_eq!(&chunked, &whole);
        // Nothing is lost or invented: the raw bytes of the events and the rest are the input.
        let mut joined: Vec<u8> = whole.0.iter().flat_map(|e| e.raw.to_vec()).collect();
        joined.extend_from_slice(&whole.1);
        prop_assert_eq!(joined, bytes);
    }

    #[test]
    fn one_byte_at_a_time_is_the_same(bytes in stream()) {
        let chunks: Vec<&[u8]> = bytes.chunks(1).collect();
        prop_assert_eq!(decode(&chunks), decode(&[&bytes]));
    }

    #[test]
    fn accept_negotiation_never_panics(h in proptest::collection::vec(any::<u8>(), 0..64), s in "[a-z*/;=q0-9., -]{0,40}") {
        let _ = negotiate(Some(&h));
        let _ = negotiate(Some(s.as_bytes()));
    }

    #[test]
    fn jsonrpc_classification_never_panics(body in proptest::collection::vec(any::<u8>(), 0..96), s in r#"[\[\]{}":,a-z0-9\\ ]{0,80}"#) {
        let _ = mcpgate::mcp::jsonrpc::parse(&body);
        let _ = mcpgate::mcp::jsonrpc::parse(s.as_bytes());
    }
}
