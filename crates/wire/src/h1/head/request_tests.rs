//! Tests of request heads: their framing and what is refused.

use super::RequestFraming as Framing;
use super::*;

fn head(text: &str) -> Result<Option<Parsed>, (StatusCode, &'static str)> {
    parse_request(&mut BytesMut::from(text), 64 << 10)
}

fn status_of(text: &str) -> u16 {
    match head(text) {
        Err((status, _)) => status.as_u16(),
        Ok(Some(_)) => 200,
        Ok(None) => 0,
    }
}

#[test]
fn request_heads_are_framed_as_rfc_9112_says() {
    let framing = |text: &str| head(text).unwrap().unwrap().framing;
    assert_eq!(
        framing("POST /m HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n"),
        Framing::Length(12)
    );
    assert_eq!(
        framing("POST /m HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"),
        Framing::None
    );
    assert_eq!(
        framing("POST /m HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n"),
        Framing::Chunked
    );
    assert_eq!(framing("GET /m HTTP/1.1\r\nHost: a\r\n\r\n"), Framing::None);
    // The same length twice is one length.
    assert_eq!(
        framing("POST /m HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n"),
        Framing::Length(3)
    );
}

#[test]
fn heads_that_could_smuggle_or_mislead_are_refused() {
    for (text, status) in [
        (
            "POST /m HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        (
            "POST /m HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            400,
        ),
        (
            "POST /m HTTP/1.1\r\nHost: a\r\nContent-Length: -5\r\n\r\n",
            400,
        ),
        (
            "POST /m HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
            400,
        ),
        (
            "POST /m HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
            400,
        ),
        (
            "POST /m HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            501,
        ),
        (
            "POST /m HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        (
            "POST /m HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        ("GET /m HTTP/1.1\r\n\r\n", 400),
        ("GET /m HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        ("GET /m HTTP/9.9\r\nHost: a\r\n\r\n", 505),
        ("\x00\x01garbage\r\n\r\n", 400),
        ("GET /m HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n", 400),
    ] {
        assert_eq!(status_of(text), status, "{text:?}");
    }
    // A field name as long as the crate's header names may be, and one byte longer.
    for (len, refused) in [(MAX_NAME, false), (MAX_NAME + 1, true)] {
        let text = format!(
            "GET /m HTTP/1.1\r\nHost: a\r\n{}: v\r\n\r\n",
            "n".repeat(len)
        );
        let read = parse_request(&mut BytesMut::from(&text[..]), 1 << 20);
        assert_eq!(read.is_err(), refused, "{len}");
    }
    // HTTP/1.0 needs no Host; an absolute target carries its own.
    assert_eq!(status_of("GET /m HTTP/1.0\r\n\r\n"), 200);
    assert_eq!(status_of("GET http://a/m HTTP/1.1\r\n\r\n"), 200);
    let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
    assert_eq!(
        status_of(&format!("GET /m HTTP/1.1\r\nHost: a\r\n{many}\r\n")),
        431
    );
}

/// Every field of a head reaches the request, whether the spans fit on the stack
/// (up to 16) or not, up to the 100 allowed.
#[test]
fn every_field_is_kept_however_many() {
    for n in [0usize, 1, 14, 15, 16, 99] {
        let mut text = String::from("GET /m HTTP/1.1\r\nHost: a\r\n");
        for i in 0..n {
            text.push_str(&format!("X-F{i}: v{i}\r\n"));
        }
        text.push_str("\r\n");
        let parsed = head(&text).unwrap().unwrap();
        let fields: Vec<(FieldKind, &[u8], &[u8])> = parsed.fields.iter().collect();
        assert_eq!(fields.len(), n + 1, "{n}");
        assert_eq!(fields[0], (FieldKind::Host, &b"Host"[..], &b"a"[..]));
        for i in 0..n {
            let (name, value) = (format!("X-F{i}"), format!("v{i}"));
            assert_eq!(
                fields[i + 1],
                (FieldKind::Other, name.as_bytes(), value.as_bytes())
            );
        }
    }
}

/// The target is read from the head's own bytes, and reads as parsing its text would:
/// the same URI, or the same refusal.
#[test]
fn targets_read_as_their_text_parses() {
    for target in [
        "/m",
        "/gpt-mcp/abc/mcp?x=1&y=%20",
        "http://a:8/m?q",
        "*",
        "http://",
        "/a\"b",
        "/a<b>{c}",
        "//",
        "/%zz",
    ] {
        let parsed = target.parse::<http::Uri>();
        match head(&format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n")) {
            Ok(Some(p)) => {
                let uri = parsed.as_ref().expect(target);
                assert_eq!(p.target.path(), uri.path(), "{target:?}");
                assert_eq!(p.target.query(), uri.query(), "{target:?}");
                let authority = uri.authority().map(|a| a.as_str());
                assert_eq!(p.target.authority(), authority, "{target:?}");
            }
            Err((status, why)) => {
                assert_eq!(status, 400, "{target:?}");
                assert!(parsed.is_err() || why != "target", "{target:?}: {why}");
            }
            Ok(None) => panic!("{target:?}: a whole head read as partial"),
        }
    }
}

#[test]
fn a_head_is_taken_whole_or_not_at_all() {
    let text = "POST /m?q=1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}GET";
    for cut in 1..text.len() - 5 {
        let mut buf = BytesMut::from(&text[..cut]);
        assert!(parse_request(&mut buf, 1 << 16).unwrap().is_none(), "{cut}");
        assert_eq!(buf.len(), cut, "nothing taken from a partial head");
    }
    let mut buf = BytesMut::from(text);
    let p = parse_request(&mut buf, 1 << 16).unwrap().unwrap();
    assert_eq!(&buf[..], b"{}GET", "the body and what follows stay");
    assert_eq!(p.method, Method::POST);
    assert_eq!(p.target.query(), Some("q=1"));
    assert_eq!(p.fields.get(FieldKind::Host), Some(&b"a"[..]));
    assert_eq!(p.fields.get_str(FieldKind::Expect), Some("100-continue"));
    assert!(!p.keep_alive && p.expect_continue && !p.http10);
    // Over the size limit while still partial: refused rather than buffered.
    let mut big = BytesMut::from(&format!("GET /m HTTP/1.1\r\nX: {}", "a".repeat(100))[..]);
    assert_eq!(parse_request(&mut big, 64).unwrap_err().0, 431);
}

#[test]
fn http10_keeps_alive_only_when_asked() {
    let keep = |text: &str| head(text).unwrap().unwrap().keep_alive;
    assert!(!keep("GET /m HTTP/1.0\r\n\r\n"));
    assert!(keep("GET /m HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
    assert!(keep("GET /m HTTP/1.1\r\nHost: a\r\n\r\n"));
    assert!(!keep(
        "GET /m HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\n\r\n"
    ));
}
