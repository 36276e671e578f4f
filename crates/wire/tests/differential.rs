//! Each reader and writer of this crate against the crate it stands in for, on the same
//! input: request heads and chunked bodies against hyper's HTTP/1.1 server, answer heads
//! and chunked bodies against hyper's client, targets against `http`'s `Uri`, header
//! names against `HeaderName`, the JSON reader against serde_json's parser and the JSON
//! text writers against serde_json's writer.
//!
//! Where this crate is deliberately stricter (it refuses what the other takes: a missing
//! `Host`, both `Content-Length` and `Transfer-Encoding`, chunk-size lines with spaces),
//! only one direction is held: what it takes, the other takes and reads the same way.
//! Well-formed input, made so by construction, must be taken by both and read alike.
//!
//! One class goes the other way, on purpose: an HTTP/1.0 answer with `Transfer-Encoding`.
//! RFC 9112 §6.1 has the recipient process it as faulty framing and then close the
//! connection, which this crate does (docs/behaviour.md); hyper's client refuses it. For
//! that class the tests hold the close instead.

use bytes::{Bytes, BytesMut};
use http::{HeaderName, Method, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use proptest::prelude::*;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wire::h1::framing::{
    Chunk, ChunkStep, DEFAULT_CHUNK_OVERHEAD, Overhead, step_chunk, take_up_to,
};
use wire::h1::head::{AnswerFraming, RequestFraming, parse_answer, parse_request};
use wire::json::read::Reader;
use wire::json::text;

// The depth every member of a text reaches, duplicate keys too (the fuzz check's).
#[path = "../fuzz/checks.rs"]
mod checks;
use checks::depth;

/// A message as a reader handed it on: the start line's parts, the fields (sorted, as
/// hyper's map does not keep the order between names) and the whole body.
#[derive(Debug, PartialEq)]
struct Message {
    start: String,
    fields: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Decodes a chunked body from the front of `buf`; `None` if it is refused or unfinished.
fn chunked(buf: &mut BytesMut) -> Option<Vec<u8>> {
    let mut state = Chunk::Size;
    let mut overhead = Overhead::new(DEFAULT_CHUNK_OVERHEAD);
    let mut out = Vec::new();
    loop {
        match step_chunk(buf, state, &mut overhead).ok()? {
            ChunkStep::Data(d, next) => {
                out.extend_from_slice(&d);
                state = next;
            }
            ChunkStep::Moved(next) => state = next,
            ChunkStep::Ended => return Some(out),
            ChunkStep::NeedMore => return None,
        }
    }
}

fn sorted(fields: impl Iterator<Item = (String, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = fields.collect();
    v.sort();
    v
}

/// The first request of `input` as this crate reads it: its head, then its body by the
/// framing the head implies.
fn ours_request(input: &[u8]) -> Option<Message> {
    let mut buf = BytesMut::from(input);
    let p = parse_request(&mut buf, 64 << 10).ok()??;
    let body = match p.framing {
        RequestFraming::None => Vec::new(),
        RequestFraming::Length(n) => {
            let (b, left) = take_up_to(&mut buf, n);
            (left == 0).then_some(b.to_vec())?
        }
        RequestFraming::Chunked => chunked(&mut buf)?,
    };
    let target = match p.target.query() {
        Some(q) => format!("{}?{q}", p.target.path()),
        None => p.target.path().to_string(),
    };
    Some(Message {
        start: format!("{} {target}", p.method),
        fields: sorted(
            p.fields
                .iter()
                .map(|(_, n, v)| (String::from_utf8_lossy(n).to_lowercase(), v.to_vec())),
        ),
        body,
    })
}

/// The first request of `input` as hyper's HTTP/1.1 server hands it to its service.
async fn hyper_request(input: &[u8]) -> Option<Message> {
    let (mut client, server) = tokio::io::duplex(1 << 20);
    let seen: Arc<Mutex<Option<Message>>> = Arc::default();
    let record = seen.clone();
    let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let record = record.clone();
        async move {
            let (parts, body) = req.into_parts();
            if let Ok(body) = body.collect().await {
                let mut seen = record.lock().unwrap();
                if seen.is_none() {
                    *seen = Some(Message {
                        start: format!(
                            "{} {}",
                            parts.method,
                            parts.uri.path_and_query().map_or("", |p| p.as_str())
                        ),
                        fields: sorted(
                            parts
                                .headers
                                .iter()
                                .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec())),
                        ),
                        body: body.to_bytes().to_vec(),
                    });
                }
            }
            Ok::<_, Infallible>(http::Response::new(Empty::<Bytes>::new()))
        }
    });
    // The client half-closes after its bytes; a request already sent is still served.
    let serving = tokio::spawn(
        hyper::server::conn::http1::Builder::new()
            .half_close(true)
            .serve_connection(TokioIo::new(server), service),
    );
    let _ = client.write_all(input).await;
    let _ = client.shutdown().await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), client.read_to_end(&mut out)).await;
    serving.abort();
    seen.lock().unwrap().take()
}

/// An answer as this crate reads it for a request of `method`: status, the fields it
/// passes on (hop-by-hop ones and the framing's own left out, as it leaves them out),
/// the body. `None` if refused or unfinished at the end of `input`.
fn ours_answer(input: &[u8], method: &Method) -> Option<Message> {
    let mut buf = BytesMut::from(input);
    let (response, head) = parse_answer(&mut buf, method).ok()??;
    let body = match head.framing {
        AnswerFraming::Done => Vec::new(),
        AnswerFraming::Length(n) => {
            let (b, left) = take_up_to(&mut buf, n);
            (left == 0).then_some(b.to_vec())?
        }
        AnswerFraming::Chunked(_) => chunked(&mut buf)?,
        AnswerFraming::Close => buf.to_vec(),
    };
    Some(Message {
        start: response.status().as_str().to_string(),
        fields: end_to_end(response.headers()),
        body,
    })
}

/// The fields of an answer that are not about its framing or its connection.
fn end_to_end(headers: &http::HeaderMap) -> Vec<(String, Vec<u8>)> {
    sorted(
        headers
            .iter()
            .filter(|(n, _)| !wire::h1::framing::is_hop_by_hop(n))
            .filter(|(n, _)| *n != http::header::CONTENT_LENGTH)
            .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec())),
    )
}

/// The answer `input` as hyper's HTTP/1.1 client reads it, for a request of `method`.
async fn hyper_answer(input: &[u8], method: &Method) -> Option<Message> {
    let (client, mut server) = tokio::io::duplex(1 << 20);
    let input = input.to_vec();
    let upstream = tokio::spawn(async move {
        let mut request = [0u8; 4096];
        let _ = server.read(&mut request).await;
        let _ = server.write_all(&input).await;
        let _ = server.shutdown().await;
        // Held open until the client is done reading, as a server that closes would be.
        let mut rest = Vec::new();
        let _ = server.read_to_end(&mut rest).await;
    });
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(client))
        .await
        .ok()?;
    let driving = tokio::spawn(conn);
    let request = http::Request::builder()
        .method(method.clone())
        .uri("/mcp")
        .header("host", "upstream")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let read = async {
        let answer = sender.send_request(request).await.ok()?;
        let (parts, body) = answer.into_parts();
        let body = body.collect().await.ok()?.to_bytes().to_vec();
        Some(Message {
            start: parts.status.as_str().to_string(),
            fields: end_to_end(&parts.headers),
            body,
        })
    };
    let got = tokio::time::timeout(Duration::from_secs(2), read)
        .await
        .ok()
        .flatten();
    driving.abort();
    upstream.abort();
    got
}

/// Well-formed requests: a method, an origin-form target, a Host, a few fields, and a
/// body framed by `Content-Length`, by chunks (with extensions and trailers), or absent.
fn request() -> impl Strategy<Value = Vec<u8>> {
    let method = prop::sample::select(vec!["GET", "POST", "DELETE", "PUT", "OPTIONS"]);
    let target = "/[a-z0-9_.~-]{0,8}(/[a-z0-9%]{1,6}){0,2}(\\?[a-z0-9=&%]{0,10})?";
    let field = (
        "[A-Za-z][A-Za-z0-9-]{0,12}",
        "[ -~]{0,20}".prop_map(|v| v.trim().to_string()),
    )
        .prop_filter("not a framing or host field", |(n, _)| {
            let n = n.to_ascii_lowercase();
            ![
                "host",
                "content-length",
                "transfer-encoding",
                "connection",
                "expect",
                "te",
                "upgrade",
                "keep-alive",
                "trailer",
                "proxy-connection",
            ]
            .contains(&n.as_str())
        });
    let body = prop::collection::vec(any::<u8>(), 0..200);
    (
        method,
        target,
        prop::collection::vec(field, 0..5),
        body,
        0..3u8,
        prop::collection::vec(1..40usize, 1..5),
    )
        .prop_map(|(method, target, fields, body, framing, cuts)| {
            let mut out = format!("{method} {target} HTTP/1.1\r\nHost: gw.example\r\n");
            for (n, v) in &fields {
                out.push_str(&format!("{n}: {v}\r\n"));
            }
            let mut bytes = out.into_bytes();
            match framing {
                0 if body.is_empty() => bytes.extend_from_slice(b"\r\n"),
                0 | 1 => {
                    bytes.extend_from_slice(
                        format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes(),
                    );
                    bytes.extend_from_slice(&body);
                }
                _ => {
                    bytes.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
                    bytes.extend_from_slice(&chunks(&body, &cuts));
                }
            }
            bytes
        })
}

/// `body` as chunks of the sizes in `cuts` (cycled), one with an extension, then a
/// trailer field.
fn chunks(body: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0;
    for (i, size) in cuts.iter().cycle().enumerate() {
        if at >= body.len() {
            break;
        }
        let end = (at + size).min(body.len());
        let ext = if i == 1 { ";name=value" } else { "" };
        out.extend_from_slice(format!("{:x}{ext}\r\n", end - at).as_bytes());
        out.extend_from_slice(&body[at..end]);
        out.extend_from_slice(b"\r\n");
        at = end;
    }
    out.extend_from_slice(b"0\r\nx-trailer: t\r\n\r\n");
    out
}

/// Well-formed answers: a status, a few fields and a body framed by length or chunks.
fn answer() -> impl Strategy<Value = Vec<u8>> {
    let status = prop::sample::select(vec![200u16, 201, 202, 400, 404, 500, 503]);
    let field = ("x-[a-z]{1,8}", "[!-~][ -~]{0,16}[!-~]");
    (
        status,
        prop::collection::vec(field, 0..4),
        prop::collection::vec(any::<u8>(), 0..200),
        any::<bool>(),
        prop::collection::vec(1..40usize, 1..5),
    )
        .prop_map(|(status, fields, body, chunked, cuts)| {
            let mut out =
                format!("HTTP/1.1 {status} Whatever\r\ncontent-type: application/json\r\n");
            for (n, v) in &fields {
                out.push_str(&format!("{n}: {v}\r\n"));
            }
            let mut bytes = out.into_bytes();
            if chunked {
                bytes.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
                bytes.extend_from_slice(&chunks(&body, &cuts));
            } else {
                bytes.extend_from_slice(
                    format!("content-length: {}\r\n\r\n", body.len()).as_bytes(),
                );
                bytes.extend_from_slice(&body);
            }
            bytes
        })
}

/// One edit of `bytes` at a place and with a piece the inputs choose: what a hostile or
/// broken peer sends.
fn mangle(bytes: &[u8], at: usize, piece: &[u8], replace: bool) -> Vec<u8> {
    let at = at % (bytes.len() + 1);
    let mut out = bytes[..at].to_vec();
    out.extend_from_slice(piece);
    let rest = if replace {
        (at + 1).min(bytes.len())
    } else {
        at
    };
    out.extend_from_slice(&bytes[rest..]);
    out
}

fn hostile_piece() -> impl Strategy<Value = Vec<u8>> {
    prop::sample::select(vec![
        &b"\r\n"[..],
        b"\n",
        b"\r",
        b" ",
        b"\t",
        b"\0",
        b":",
        b";",
        b"0",
        b"f",
        b"-1",
        b"\r\nContent-Length: 5",
        b"\r\nTransfer-Encoding: chunked",
        b"\r\nTransfer-Encoding: gzip",
        b"\r\nHost: other",
        b"\r\n Folded",
        b"\xff",
        b"\r\n\r\n",
    ])
    .prop_map(<[u8]>::to_vec)
}

/// Whether an answer taken is HTTP/1.0 and framed by a transfer coding (see the top).
fn http10_with_coding(input: &[u8]) -> bool {
    let mut buf = BytesMut::from(input);
    let Ok(Some((response, head))) = parse_answer(&mut buf, &Method::POST) else {
        return false;
    };
    response.version() == http::Version::HTTP_10
        && matches!(head.framing, AnswerFraming::Chunked(_))
}

/// Whether the connection an answer came on is closed after it.
fn closes_after(input: &[u8]) -> bool {
    let mut buf = BytesMut::from(input);
    matches!(parse_answer(&mut buf, &Method::POST), Ok(Some((_, head))) if !head.keep)
}

#[test]
fn an_http10_answer_with_a_coding_is_read_then_closed() {
    let input = b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
    assert!(http10_with_coding(input));
    assert!(closes_after(input));
    let ours = ours_answer(input, &Method::POST).unwrap();
    assert_eq!(ours.body, b"{}");
    // hyper's client refuses it: the one place this crate takes more, as RFC 9112 says.
    assert_eq!(runtime().block_on(hyper_answer(input, &Method::POST)), None);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Well-formed requests are read alike, head and body.
    #[test]
    fn requests_read_as_hyper_reads_them(input in request()) {
        let ours = ours_request(&input);
        let theirs = runtime().block_on(hyper_request(&input));
        prop_assert!(ours.is_some(), "refused: {:?}", String::from_utf8_lossy(&input));
        prop_assert_eq!(ours, theirs);
    }

    /// Broken requests: what this crate takes, hyper takes and reads the same.
    #[test]
    fn a_broken_request_taken_is_taken_by_hyper_alike(
        input in request(), at in any::<usize>(), piece in hostile_piece(), replace in any::<bool>()
    ) {
        let input = mangle(&input, at, &piece, replace);
        if let Some(ours) = ours_request(&input) {
            let theirs = runtime().block_on(hyper_request(&input));
            prop_assert_eq!(Some(ours), theirs, "{:?}", String::from_utf8_lossy(&input));
        }
    }

    /// Well-formed answers are read alike, for a POST and for a GET.
    #[test]
    fn answers_read_as_hyper_reads_them(input in answer(), get in any::<bool>()) {
        let method = if get { Method::GET } else { Method::POST };
        let ours = ours_answer(&input, &method);
        let theirs = runtime().block_on(hyper_answer(&input, &method));
        prop_assert!(ours.is_some(), "refused: {:?}", String::from_utf8_lossy(&input));
        prop_assert_eq!(ours, theirs);
    }

    /// Broken answers: what this crate takes, hyper's client takes and reads the same.
    #[test]
    fn a_broken_answer_taken_is_taken_by_hyper_alike(
        input in answer(), at in any::<usize>(), piece in hostile_piece(), replace in any::<bool>()
    ) {
        let input = mangle(&input, at, &piece, replace);
        if http10_with_coding(&input) {
            prop_assert!(closes_after(&input), "{:?}", String::from_utf8_lossy(&input));
        } else if let Some(ours) = ours_answer(&input, &Method::POST) {
            let theirs = runtime().block_on(hyper_answer(&input, &Method::POST));
            prop_assert_eq!(Some(ours), theirs, "{:?}", String::from_utf8_lossy(&input));
        }
    }

    /// A target is taken exactly when `Uri` takes it, with the same path and query.
    #[test]
    fn targets_read_as_uri_reads_them(text in "/[ -~\u{80}-\u{10ffff}]{0,24}") {
        let ours = wire::target::Target::parse(&text);
        let theirs = text.parse::<Uri>();
        prop_assert_eq!(ours.is_some(), theirs.is_ok(), "{:?}", text);
        if let (Some(ours), Ok(theirs)) = (ours, theirs) {
            prop_assert_eq!(ours.path(), theirs.path());
            prop_assert_eq!(ours.query(), theirs.query());
        }
    }

    /// A field name is taken exactly when `HeaderName` takes it, as the same name.
    #[test]
    fn field_names_read_as_header_name_reads_them(name in prop::collection::vec(any::<u8>(), 0..24), known in any::<prop::sample::Index>()) {
        const KNOWN: &[&str] = &["Host", "content-length", "CONTENT-TYPE", "Mcp-Session-Id", "accept", "Authorization", "x-forwarded-for", "Origin"];
        let known = KNOWN[known.index(KNOWN.len())].as_bytes();
        for bytes in [&name[..], known] {
            let ours = wire::headval::name(bytes);
            let theirs = HeaderName::from_bytes(bytes);
            prop_assert_eq!(ours.is_ok(), theirs.is_ok(), "{:?}", bytes);
            if let (Ok(ours), Ok(theirs)) = (ours, theirs) {
                prop_assert_eq!(ours, theirs);
            }
        }
    }

    /// JSON text: what the reader takes whole, serde_json takes, and the value the reader
    /// hands back is the one serde_json reads; the reader may step aside (refuse) on
    /// anything, but never takes what serde_json refuses.
    #[test]
    fn the_json_reader_agrees_with_serde_json(seed in any::<u64>()) {
        const SEEDS: &[&str] = &[
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"get","arguments":{"q":[1,2.5e3,-0.0,true,null]}}}"#,
            r#"[{"a":"\u00e9\n","b":{}},[],"x\\y"]"#,
            r#"{"result":{"content":[{"type":"text","text":"ok"}],"isError":false},"id":"a"}"#,
        ];
        for text in wire::json::read::edits(SEEDS, &["\"k\"", "1e400", "\\u0000", "é", "[", "}", "\"[\\\"{\""], seed, 64) {
            // The depth scan agrees with the nesting of what serde_json reads.
            if let Some(d) = depth(&text) {
                prop_assert!(!wire::json::read::deeper_than(text.as_bytes(), d), "{:?}", text);
                prop_assert!(d == 0 || wire::json::read::deeper_than(text.as_bytes(), d - 1), "{:?}", text);
            }
            let mut r = Reader::new(&text);
            r.skip_ws();
            let ours = r.value(0).filter(|_| r.at_end());
            let theirs = serde_json::from_str::<serde_json::Value>(&text);
            if let Some(value) = ours {
                let raw = serde_json::from_str::<&serde_json::value::RawValue>(&text);
                prop_assert!(raw.is_ok(), "the reader took what serde_json refuses: {:?}", text);
                if let Ok(whole) = theirs {
                    prop_assert_eq!(serde_json::from_str::<serde_json::Value>(value).ok(), Some(whole));
                }
            }
        }
    }

    /// Strings are written byte for byte as serde_json writes them.
    #[test]
    fn strings_are_written_as_serde_json_writes_them(s in "\\PC*|[\u{0}-\u{1f}\"\\\\]{0,8}") {
        let mut ours = String::new();
        text::push_str(&mut ours, &s);
        prop_assert_eq!(ours, serde_json::to_string(&s).unwrap());
    }

    /// Numbers are written byte for byte as serde_json writes them.
    #[test]
    fn numbers_are_written_as_serde_json_writes_them(f in any::<f64>(), u in any::<u64>(), i in any::<i64>()) {
        if f.is_finite() {
            let mut ours = String::new();
            text::push_f64(&mut ours, f);
            prop_assert_eq!(ours, serde_json::to_string(&f).unwrap());
        }
        let mut ours = String::new();
        text::push_u64(&mut ours, u);
        prop_assert_eq!(ours, serde_json::to_string(&u).unwrap());
        let mut ours = String::new();
        text::push_i64(&mut ours, i);
        prop_assert_eq!(ours, serde_json::to_string(&i).unwrap());
    }
}
