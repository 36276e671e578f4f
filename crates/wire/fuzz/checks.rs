//! What each fuzz target of the wire crate checks, one function per target over the
//! fuzzer's bytes. Shared by the cargo-fuzz targets (`fuzz_targets/`, nightly) and by
//! `tests/fuzz_corpora.rs`, which runs every function over the checked-in corpora on
//! stable. A check panics when the code under test breaks a rule it promises; input it
//! refuses is fine.

// Each target binary and the stable runner use some of these checks, not all.
#![allow(dead_code)]
use bytes::BytesMut;
use http::Method;
use wire::h1::framing::{Chunk, ChunkStep, DEFAULT_CHUNK_OVERHEAD, Overhead, step_chunk};
use wire::h1::head::{parse_answer, parse_request};
use wire::json::{read::Reader, text};

/// Splits `data` in two at a place its first byte chooses: the same input read whole
/// and in pieces must give the same result.
fn cut(data: &[u8]) -> (&[u8], &[u8]) {
    let at = data.first().map_or(0, |&b| b as usize % (data.len() + 1));
    data.split_at(at)
}

/// Request heads: never a panic; a head taken whole is taken from the front of the buffer
/// and leaves the rest; a partial head takes nothing.
pub fn request_head(data: &[u8]) {
    let mut buf = BytesMut::from(data);
    match parse_request(&mut buf, 64 << 10) {
        Ok(Some(p)) => {
            assert!(buf.len() < data.len(), "a head was taken");
            assert!(data.ends_with(&buf), "only the head was taken");
            assert!(
                p.target.path().starts_with('/')
                    || p.target.path() == "*"
                    || p.target.authority().is_some()
            );
        }
        Ok(None) => assert_eq!(&buf[..], data, "nothing taken from a partial head"),
        Err(_) => {}
    }
}

/// Chunked bodies, in both directions: never a panic; the same bytes decoded whole and
/// in two pieces give the same data, end, or refusal.
pub fn chunked_body(data: &[u8]) {
    let decode = |pieces: &[&[u8]]| -> Result<(Vec<u8>, bool), ()> {
        let mut buf = BytesMut::new();
        let mut state = Chunk::Size;
        let mut overhead = Overhead::new(DEFAULT_CHUNK_OVERHEAD);
        let mut out = Vec::new();
        for piece in pieces {
            buf.extend_from_slice(piece);
            loop {
                match step_chunk(&mut buf, state, &mut overhead).map_err(|_| ())? {
                    ChunkStep::Data(d, next) => {
                        out.extend_from_slice(&d);
                        state = next;
                    }
                    ChunkStep::Moved(next) => state = next,
                    ChunkStep::Ended => return Ok((out, true)),
                    ChunkStep::NeedMore => break,
                }
            }
        }
        Ok((out, false))
    };
    let whole = decode(&[data]);
    let (a, b) = cut(data);
    let split = decode(&[a, b]);
    match (&whole, &split) {
        (Ok((w, true)), Ok((s, true))) => assert_eq!(w, s),
        (Ok((_, true)), _) | (_, Ok((_, true))) => {
            panic!("ended one way only: {whole:?} {split:?}")
        }
        // Unfinished or refused: a refusal may come at a different byte when cut.
        _ => {}
    }
}

/// Upstream answer heads: never a panic; a parsed head carries at most one
/// `Content-Length`, and none with a transfer coding.
pub fn answer_head(data: &[u8]) {
    for method in [Method::POST, Method::GET, Method::HEAD] {
        let mut buf = BytesMut::from(data);
        if let Ok(Some((response, _))) = parse_answer(&mut buf, &method) {
            let lengths = response.headers().get_all("content-length").iter().count();
            assert!(lengths <= 1);
            assert!(response.headers().get("transfer-encoding").is_none());
        }
    }
}

/// The JSON reader against serde_json: a text the reader takes whole, serde_json takes
/// too, and the value the reader hands back is the one serde_json reads.
pub fn json_read(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The depth scan against the nesting of the value serde_json reads (within its own
    // recursion limit of 128).
    if let Some(d) = depth(text) {
        assert!(
            !wire::json::read::deeper_than(data, d),
            "{text:?} is {d} deep"
        );
        assert!(
            d == 0 || wire::json::read::deeper_than(data, d - 1),
            "{text:?} is {d} deep"
        );
    }
    let mut r = Reader::new(text);
    r.skip_ws();
    if let Some(value) = r.value(0).filter(|_| r.at_end()) {
        assert!(
            serde_json::from_str::<&serde_json::value::RawValue>(text).is_ok(),
            "the reader took what serde_json refuses: {text:?}"
        );
        if let Ok(whole) = serde_json::from_str::<serde_json::Value>(text) {
            let part: serde_json::Value = serde_json::from_str(value).unwrap();
            assert_eq!(part, whole);
        }
    }
}

/// How deeply the JSON `text` nests objects and arrays (a scalar 0), as serde reads it.
/// Every member counts, a duplicate key's overwritten value too: a `serde_json::Value`
/// keeps only the last, which would hide nesting the text has.
pub fn depth(text: &str) -> Option<u32> {
    use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
    use std::fmt;
    struct Depth;
    impl<'de> DeserializeSeed<'de> for Depth {
        type Value = u32;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u32, D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Depth {
        type Value = u32;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<u32, E> {
            Ok(0)
        }
        fn visit_i64<E>(self, _: i64) -> Result<u32, E> {
            Ok(0)
        }
        fn visit_u64<E>(self, _: u64) -> Result<u32, E> {
            Ok(0)
        }
        fn visit_f64<E>(self, _: f64) -> Result<u32, E> {
            Ok(0)
        }
        fn visit_str<E>(self, _: &str) -> Result<u32, E> {
            Ok(0)
        }
        fn visit_unit<E>(self) -> Result<u32, E> {
            Ok(0)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u32, A::Error> {
            let mut deepest = 0;
            while let Some(d) = seq.next_element_seed(Depth)? {
                deepest = deepest.max(d);
            }
            Ok(1 + deepest)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u32, A::Error> {
            let mut deepest = 0;
            while map.next_key::<serde::de::IgnoredAny>()?.is_some() {
                deepest = deepest.max(map.next_value_seed(Depth)?);
            }
            Ok(1 + deepest)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let d = Depth.deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(d)
}

/// The JSON text writer against serde_json: any text is written as serde_json writes it.
pub fn json_text(data: &[u8]) {
    let s = String::from_utf8_lossy(data);
    let mut ours = String::new();
    text::push_str(&mut ours, &s);
    assert_eq!(ours, serde_json::to_string(&s).unwrap());
    if let Ok(bytes) = <[u8; 8]>::try_from(&data[..data.len().min(8)]) {
        let f = f64::from_le_bytes(bytes);
        if f.is_finite() {
            let mut ours = String::new();
            text::push_f64(&mut ours, f);
            assert_eq!(ours, serde_json::to_string(&f).unwrap());
        }
    }
}
