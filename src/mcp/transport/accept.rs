//! `Accept` negotiation between JSON and SSE answers (RFC 9110 §12.5.1, docs/behaviour.md). The q of a
//! type is the q of the most specific range that matches it (`text/event-stream` beats
//! `text/*` beats `*/*`); a lone `*` means `*/*`. A header that cannot be parsed is treated
//! as absent: never an error, never a 500.

/// The format the client should get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    Json,
    Sse,
    /// Both listed with equal preference: pass the upstream's own format through.
    Either,
}

/// Neither JSON nor SSE is acceptable (406).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAcceptable;

/// What one media type got from the header: the q of its best match and whether that match
/// named the type exactly.
#[derive(Debug, Clone, Copy, Default)]
struct Score {
    specificity: u8,
    q: u16,
}

/// Quality values in thousandths, so comparisons are exact.
fn parse_q(v: &str) -> Option<u16> {
    let v = v.trim();
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths: u16 = format!("{frac:0<3}").parse().ok()?;
    match int {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// Scores for `application/json` and `text/event-stream`, or `None` if unparseable.
fn scores(header: &str) -> Option<(Score, Score)> {
    let mut json = Score::default();
    let mut sse = Score::default();
    let mut any = false;
    for range in header.split(',') {
        let mut parts = range.split(';');
        let media = parts.next()?.trim();
        if media.is_empty() {
            continue; // RFC 9110 list syntax allows empty elements
        }
        any = true;
        let mut q = 1000;
        for p in parts {
            let (name, value) = p.split_once('=')?;
            if name.trim().eq_ignore_ascii_case("q") {
                q = parse_q(value)?;
            }
        }
        let media = if media == "*" { "*/*" } else { media };
        let (ty, sub) = media.split_once('/')?;
        let (ty, sub) = (ty.trim(), sub.trim());
        if ty.is_empty() || sub.is_empty() || (ty == "*" && sub != "*") {
            return None;
        }
        for (score, want_ty, want_sub) in [
            (&mut json, "application", "json"),
            (&mut sse, "text", "event-stream"),
        ] {
            let specificity = if ty == "*" {
                1
            } else if !ty.eq_ignore_ascii_case(want_ty) {
                continue;
            } else if sub == "*" {
                2
            } else if sub.eq_ignore_ascii_case(want_sub) {
                3
            } else {
                continue;
            };
            if specificity > score.specificity || (specificity == score.specificity && q > score.q)
            {
                *score = Score { specificity, q };
            }
        }
    }
    // An empty header says nothing: treat it as absent.
    any.then_some((json, sse))
}

/// The `Accept` the MCP SDK clients (TypeScript and Python) send with every POST.
const SDK_ACCEPT: &[u8] = b"application/json, text/event-stream";

/// The docs/behaviour.md table.
pub fn negotiate(header: Option<&[u8]>) -> Result<Want, NotAcceptable> {
    // Most requests carry exactly this; its answer is known without parsing.
    if header == Some(SDK_ACCEPT) {
        return Ok(Want::Either);
    }
    parse_and_negotiate(header)
}

fn parse_and_negotiate(header: Option<&[u8]>) -> Result<Want, NotAcceptable> {
    let Some((json, sse)) = header
        .and_then(|h| std::str::from_utf8(h).ok())
        .and_then(scores)
    else {
        return Ok(Want::Json);
    };
    if json.specificity == 0 && sse.specificity == 0 {
        // Only other types listed: neither is acceptable.
        return Err(NotAcceptable);
    }
    Ok(match json.q.cmp(&sse.q) {
        _ if json.q == 0 && sse.q == 0 => return Err(NotAcceptable),
        std::cmp::Ordering::Equal if json.specificity == 3 && sse.specificity == 3 => Want::Either,
        std::cmp::Ordering::Equal => Want::Json,
        std::cmp::Ordering::Less => Want::Sse,
        std::cmp::Ordering::Greater => Want::Json,
    })
}

/// Whether a GET stream may be opened: `text/event-stream` must be acceptable.
pub fn accepts_sse(header: Option<&[u8]>) -> bool {
    header
        .and_then(|h| std::str::from_utf8(h).ok())
        .and_then(scores)
        .is_some_and(|(_, sse)| sse.q > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(h: &str) -> Result<Want, NotAcceptable> {
        negotiate(Some(h.as_bytes()))
    }

    #[test]
    fn the_sdk_header_gets_what_parsing_it_gives() {
        assert_eq!(negotiate(Some(SDK_ACCEPT)), Ok(Want::Either));
        assert_eq!(
            negotiate(Some(SDK_ACCEPT)),
            parse_and_negotiate(Some(SDK_ACCEPT))
        );
    }

    #[test]
    fn the_spec_table() {
        assert_eq!(negotiate(None), Ok(Want::Json));
        assert_eq!(n(""), Ok(Want::Json));
        assert_eq!(n("*/*"), Ok(Want::Json));
        assert_eq!(n("*"), Ok(Want::Json));
        assert_eq!(n("application/json, text/event-stream"), Ok(Want::Either));
        assert_eq!(n("text/event-stream, application/json"), Ok(Want::Either));
        assert_eq!(n("text/event-stream"), Ok(Want::Sse));
        assert_eq!(n("application/json"), Ok(Want::Json));
        assert_eq!(
            n("application/json;q=0.5, text/event-stream"),
            Ok(Want::Sse)
        );
        assert_eq!(
            n("application/json, text/event-stream;q=0.9"),
            Ok(Want::Json)
        );
        assert_eq!(n("text/*"), Ok(Want::Sse));
        assert_eq!(n("text/html"), Err(NotAcceptable));
        assert_eq!(
            n("application/json;q=0, text/event-stream;q=0"),
            Err(NotAcceptable)
        );
        assert_eq!(n("*/*;q=0"), Err(NotAcceptable));
    }

    #[test]
    fn most_specific_match_wins() {
        // text/* would allow SSE, but the exact range says no.
        assert_eq!(
            n("text/*, text/event-stream;q=0, application/json;q=0.1"),
            Ok(Want::Json)
        );
        assert_eq!(n("*/*;q=0.1, text/event-stream"), Ok(Want::Sse));
        assert_eq!(n("APPLICATION/JSON, Text/Event-Stream"), Ok(Want::Either));
        assert_eq!(
            n("application/json; charset=utf-8; q=1.0, text/event-stream; q=1"),
            Ok(Want::Either)
        );
    }

    #[test]
    fn garbage_is_treated_as_absent() {
        for h in [
            "application",
            "/json",
            "*/json",
            "application/json;q=2",
            "a/b;q=0.1234",
            "x/y;q",
            "application/json;q=abc",
        ] {
            assert_eq!(n(h), Ok(Want::Json), "{h}");
        }
        assert_eq!(negotiate(Some(b"\xff\xfe")), Ok(Want::Json));
    }

    #[test]
    fn get_streams_need_sse() {
        assert!(accepts_sse(Some(b"text/event-stream")));
        assert!(accepts_sse(Some(b"*/*")));
        assert!(!accepts_sse(Some(b"application/json")));
        assert!(!accepts_sse(None));
        assert!(!accepts_sse(Some(b"text/event-stream;q=0")));
    }
}
