//! What each fuzz target checks, one function per target over the fuzzer's bytes. Shared
//! by the cargo-fuzz targets (`fuzz_targets/`, nightly) and by `tests/fuzz_corpora.rs`,
//! which runs every function over the checked-in corpora on stable. A check panics when
//! the code under test breaks a rule it promises; input it refuses is fine.

// Each target binary and the stable runner use some of these checks, not all.
#![allow(dead_code)]
use mcpgate::mcp::jsonrpc::{self, Payload};
use mcpgate::mcp::transport::{accept, sse};
use std::sync::Arc;

/// Splits `data` in two at a place its first byte chooses: the same input read whole
/// and in pieces must give the same result.
fn cut(data: &[u8]) -> (&[u8], &[u8]) {
    let at = data.first().map_or(0, |&b| b as usize % (data.len() + 1));
    data.split_at(at)
}

/// The JSON-RPC envelope against serde_json: what serde_json refuses as a JSON text is
/// refused; what is taken reads, method and id, as serde_json reads it. serde_json's own
/// reading of a text it passes on (`RawValue`, as mcpgate forwards the body) is the
/// measure: it takes a lone surrogate escape (`"\udc00"`) in a string, which its
/// decoding into a `Value` refuses, so the values are compared only where that decoding
/// succeeds.
pub fn jsonrpc_envelope(data: &[u8]) {
    let ours = jsonrpc::parse(data);
    let text: Result<&serde_json::value::RawValue, _> = serde_json::from_slice(data);
    let value: Result<serde_json::Value, _> = serde_json::from_slice(data);
    match (&ours, &text, &value) {
        (Ok(_), Err(e), _) => panic!("taken, but serde_json refuses it: {e}"),
        (Ok(Payload::Single(m)), Ok(_), Ok(v)) => {
            assert_eq!(m.method(), v.get("method").and_then(|m| m.as_str()));
            let id =
                m.id.map(|id| serde_json::from_str::<serde_json::Value>(id.get()).ok());
            if let Some(Some(id)) = id {
                assert_eq!(Some(&id), v.get("id"));
            }
        }
        (Ok(Payload::Batch(items)), Ok(_), Ok(v)) => {
            assert_eq!(Some(items.len()), v.as_array().map(Vec::len));
        }
        _ => {}
    }
}

/// Accept negotiation: any bytes, never a panic, and the same answer twice.
pub fn accept_header(data: &[u8]) {
    assert_eq!(accept::negotiate(Some(data)), accept::negotiate(Some(data)));
    let _ = accept::accepts_sse(Some(data));
}

/// The SSE decoder: the same events whether the stream comes whole, in two pieces, or a
/// byte at a time.
pub fn sse_stream(data: &[u8]) {
    let events = |pieces: &mut dyn Iterator<Item = &[u8]>| {
        let mut d = sse::Decoder::new();
        let mut out = Vec::new();
        for piece in pieces {
            d.feed(piece);
            while let Some(e) = d.next_event() {
                out.push((e.raw, e.event, e.id, e.retry, e.data));
            }
        }
        out
    };
    let whole = events(&mut std::iter::once(data));
    let (a, b) = cut(data);
    assert_eq!(whole, events(&mut [a, b].into_iter()));
    assert_eq!(whole, events(&mut data.chunks(1)));
}

/// The tools/list filter over any answer text: never a panic, and a rewrite of valid
/// JSON is valid JSON.
pub fn tools_list(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let snapshot = Arc::new(
        mcpgate::config::load_str(
            "[[listen]]\nname = \"m\"\naddr = \"127.0.0.1:0\"\n[upstreams.u]\nurl = \"http://127.0.0.1:9/mcp\"\n[tools]\nhidden = [\"move_*\"]\n[profiles.p]\nupstream = \"u\"\nallow = [\"get_*\", \"search\"]\nresources = { allow = [\"kb://docs/*\"] }\nprompts = { deny = [\"x*\"] }\n",
            "fuzz.toml",
        )
        .unwrap(),
    );
    let profile = snapshot.profiles["p"].clone();
    let filter = mcpgate::mcp::tools_list::ToolFilter::new(snapshot, profile);
    use mcpgate::mcp::jsonrpc::ListKind;
    let ids: Vec<(Box<str>, ListKind)> = vec![
        ("1".into(), ListKind::Tools),
        ("\"a\"".into(), ListKind::Resources),
        ("2".into(), ListKind::Prompts),
    ];
    if let Ok(Some(out)) = mcpgate::mcp::tools_list::rewrite(text, &ids, &filter) {
        if serde_json::from_str::<serde_json::Value>(text).is_ok() {
            serde_json::from_str::<serde_json::Value>(&out).expect("a rewrite of JSON is JSON");
        }
    }
}

/// The configuration compiler: any text, never a panic.
pub fn config_text(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = mcpgate::config::load_str(text, "fuzz.toml");
    }
}

/// A stdio server's stdout read in lines, bounded (`upstream::stdio::lines`): never a
/// panic; no line longer than the bound or holding a newline; the same bytes read whole
/// and in pieces give the same lines.
pub fn stdio_lines(data: &[u8]) {
    use mcpgate::upstream::stdio::lines::{Line, Lines};
    const MAX: usize = 64;
    /// Gives its pieces one read at a time.
    struct Pieces(std::collections::VecDeque<Vec<u8>>);
    impl tokio::io::AsyncRead for Pieces {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if let Some(mut piece) = self.0.pop_front() {
                let n = piece.len().min(buf.remaining());
                buf.put_slice(&piece[..n]);
                if n < piece.len() {
                    self.0.push_front(piece.split_off(n));
                }
            }
            std::task::Poll::Ready(Ok(()))
        }
    }
    let read = |pieces: Vec<Vec<u8>>| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut lines = Lines::new(Pieces(pieces.into()), MAX);
            let mut out = Vec::new();
            while let Some(l) = lines.next().await {
                if let Line::Text(t) = &l {
                    assert!(t.len() <= MAX, "a line over the bound");
                    assert!(!t.contains(&b'\n'), "a newline inside a line");
                }
                out.push(l);
            }
            out
        })
    };
    let whole = read(vec![data.to_vec()]);
    let (a, b) = cut(data);
    // A read of nothing is the end of a pipe: no empty pieces.
    let pieces = [a, b]
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(<[u8]>::to_vec);
    assert_eq!(whole, read(pieces.collect()));
}

/// Sealed session ids (`upstream::session`): whatever a client sends opens to nothing,
/// without a panic; any upstream id up to the bound seals and opens to itself.
pub fn sealed_session(data: &[u8]) {
    use mcpgate::upstream::session::{Sealer, endpoint_id};
    let sealer = Sealer::new("kb", &[mcpgate::config::SessionKey([7; 32])]);
    assert_eq!(sealer.open(data), None, "made-up text opened");
    let endpoint = endpoint_id("http://127.0.0.1:8001/mcp");
    if let Some(sealed) = sealer.seal(&endpoint, data) {
        assert_eq!(
            sealer.open(sealed.as_bytes()),
            Some((endpoint, data.to_vec()))
        );
    }
}

/// The guardrails' built-in detectors over any text: no panic, findings in order, none
/// overlapping, each on character boundaries and of a kind asked for; a text scanned
/// with fewer kinds finds no kind it was not asked for.
pub fn guard_scan(data: &[u8]) {
    use mcpgate::mcp::guard::{Detectors, KINDS};
    // Built once: the detectors of the first n kinds, for every n.
    static SETS: std::sync::OnceLock<Vec<Detectors>> = std::sync::OnceLock::new();
    let sets = SETS.get_or_init(|| {
        (0..=KINDS.len())
            .map(|n| Detectors::new(&KINDS[..n]))
            .collect()
    });
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut out = Vec::new();
    sets[KINDS.len()].scan(text, &mut out);
    for w in out.windows(2) {
        assert!(w[0].end <= w[1].start, "findings overlap: {out:?}");
    }
    for f in &out {
        assert!(f.start < f.end && f.end <= text.len(), "{f:?}");
        assert!(
            text.is_char_boundary(f.start) && text.is_char_boundary(f.end),
            "{f:?}"
        );
    }
    let n = data.first().map_or(0, |b| *b as usize % KINDS.len());
    let mut fewer = Vec::new();
    sets[n].scan(text, &mut fewer);
    assert!(
        fewer.iter().all(|f| KINDS[..n].contains(&f.kind)),
        "{fewer:?}"
    );
}
