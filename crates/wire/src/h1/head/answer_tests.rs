//! Tests of answer heads: their framing and what is refused.

use super::AnswerFraming as Framing;
use super::*;

fn head(text: &str, method: Method) -> Result<Option<(Response<()>, Head)>, io::Error> {
    parse_answer(&mut BytesMut::from(text), &method)
}

fn framing(text: &str) -> (Framing, bool) {
    let h = head(text, Method::POST).unwrap().unwrap().1;
    (h.framing, h.keep)
}

#[test]
fn answers_are_framed_as_rfc_9112_says() {
    let ok = "HTTP/1.1 200 OK\r\n";
    assert_eq!(
        framing(&format!("{ok}content-length: 5\r\n\r\n")),
        (Framing::Length(5), true)
    );
    assert_eq!(
        framing(&format!("{ok}transfer-encoding: Chunked\r\n\r\n")),
        (Framing::Chunked(Chunk::Size), true)
    );
    // A coding this client does not undo, anywhere in the list, or two of them: the
    // answer is refused (502) rather than passed on as plain bytes.
    for coding in [
        "gzip, chunked",
        "chunked, gzip",
        "identity",
        "chunked, chunked",
    ] {
        let text = format!("{ok}transfer-encoding: {coding}\r\n\r\n");
        assert!(head(&text, Method::POST).is_err(), "{coding}");
    }
    let twice = format!("{ok}transfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n\r\n");
    assert!(head(&twice, Method::POST).is_err());
    // No length at all: the body runs to the close.
    assert_eq!(framing(&format!("{ok}\r\n")), (Framing::Close, false));
    // Both: the coding wins, the length is not passed on, and the connection is not
    // trusted again.
    let both = format!("{ok}content-length: 3\r\ntransfer-encoding: chunked\r\n\r\n");
    let (r, h) = head(&both, Method::POST).unwrap().unwrap();
    assert_eq!((h.framing, h.keep), (Framing::Chunked(Chunk::Size), false));
    assert!(r.headers().get("content-length").is_none());
    // HTTP/1.0 with a transfer coding: read, then closed, keep-alive or not.
    assert_eq!(
        framing("HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ntransfer-encoding: chunked\r\n\r\n"),
        (Framing::Chunked(Chunk::Size), false)
    );
    // The same length twice is passed on once, as digits.
    let twice = format!("{ok}content-length: 5\r\nContent-Length: 5\r\n\r\n");
    let (r, h) = head(&twice, Method::POST).unwrap().unwrap();
    assert_eq!(h.framing, Framing::Length(5));
    let lengths: Vec<_> = r.headers().get_all("content-length").iter().collect();
    assert_eq!(lengths, ["5"]);
    assert_eq!(
        framing("HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n"),
        (Framing::Done, true)
    );
    assert_eq!(
        framing("HTTP/1.1 204 No Content\r\n\r\n"),
        (Framing::Done, true)
    );
    assert_eq!(
        framing(&format!(
            "{ok}connection: close\r\ncontent-length: 4\r\n\r\n"
        )),
        (Framing::Length(4), false)
    );
    assert_eq!(
        framing("HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n"),
        (Framing::Done, false)
    );
    assert_eq!(
        framing("HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 0\r\n\r\n"),
        (Framing::Done, true)
    );
    let h = head(&format!("{ok}content-length: 9\r\n\r\n"), Method::HEAD)
        .unwrap()
        .unwrap()
        .1;
    assert_eq!(
        h,
        Head {
            framing: Framing::Done,
            keep: true
        }
    );
    assert!(
        head(
            &format!("{ok}content-length: 2\r\ncontent-length: 3\r\n\r\n"),
            Method::POST
        )
        .is_err()
    );
    // A length is digits only, read by the same rule as a request's.
    for bad in ["x", "+5", "-1", "5 5", "0x5", "", "99999999999999999999"] {
        let text = format!("{ok}content-length: {bad}\r\n\r\n");
        assert!(head(&text, Method::POST).is_err(), "{bad:?}");
    }
    assert!(head("HTTP/1.1 101 Switching\r\n\r\n", Method::GET).is_err());
    assert!(
        head("HTTP/1.1 200 OK\r\ncontent-le", Method::POST)
            .unwrap()
            .is_none()
    );
    assert!(head("HTTP/1.1 2000 OK\r\n\r\n", Method::POST).is_err());
}

#[test]
fn interim_heads_are_skipped_and_headers_kept() {
    let mut buf = BytesMut::from(
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nMcp-Session-Id: s1\r\nx-a: 1\r\nx-a: 2\r\ncontent-length: 2\r\n\r\n{}",
    );
    let (r, h) = parse_answer(&mut buf, &Method::POST).unwrap().unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["mcp-session-id"], "s1");
    assert_eq!(r.headers().get_all("x-a").iter().count(), 2);
    assert_eq!(h.framing, Framing::Length(2));
    assert_eq!(&buf[..], b"{}");
}

/// An answer head leaves the pool without hop-by-hop fields: they are read for the
/// framing and the keep-alive decision, and the fields a `Connection` names go with it.
#[test]
fn hop_by_hop_fields_are_not_kept() {
    let parsed = |extra: &str| {
        let text = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{extra}transfer-encoding: chunked\r\nkeep-alive: timeout=5\r\nte: trailers\r\nupgrade: h2c\r\ntrailer: x\r\nproxy-connection: keep-alive\r\nx-kept: 2\r\n\r\n"
        );
        let (r, h) = parse_answer(&mut BytesMut::from(text.as_str()), &Method::POST)
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, Framing::Chunked(Chunk::Size));
        let names: Vec<String> = r.headers().keys().map(|n| n.to_string()).collect();
        (names, h.keep)
    };
    let kept = || vec!["content-type".to_string(), "x-kept".to_string()];
    assert_eq!(parsed(""), (kept(), true));
    assert_eq!(parsed("connection: close\r\n"), (kept(), false));
    // Named before or after the `Connection` that lists it.
    assert_eq!(
        parsed("x-hop: 1\r\nconnection: keep-alive, X-Hop\r\nx-hop: 2\r\n"),
        (kept(), true)
    );
    assert_eq!(parsed("connection: X-Hop, te\r\n"), (kept(), true));
}
