//! `secrets`: keys and tokens of fixed shape, found by their fixed prefix and checked by
//! their length and alphabet, and values assigned to a secret's name (`password=…`) that
//! look random enough to be one.

use super::{BLOCK, Kind, LONGEST, token_char, token_len};
use base64::Engine;

/// Each kind's anchors: what the prefilter looks for (ASCII, any case; the kind's own
/// check then asks for its exact case).
pub(super) const ANCHORS: &[(Kind, &[&str])] = &[
    (Kind::Pem, &["-----BEGIN "]),
    (Kind::Aws, &["AKIA", "ASIA"]),
    (
        Kind::Github,
        &["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
    ),
    (Kind::Slack, &["xoxb-", "xoxp-", "xoxa-", "xoxr-", "xoxs-"]),
    (Kind::Stripe, &["sk_live_", "rk_live_"]),
    (Kind::Google, &["AIza"]),
    (Kind::Jwt, &["eyJ"]),
    (
        Kind::Assignment,
        &[
            "client_secret",
            "api_secret",
            "access_token",
            "auth_token",
            "private_key",
            "password",
            "passwd",
            "api_key",
            "api-key",
            "apikey",
            "secret",
        ],
    ),
];

/// Whether the anchor of `kind` found at `start..end` starts a secret of that kind, and
/// where that secret is.
pub(super) fn confirm(kind: Kind, text: &str, start: usize, end: usize) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let anchor = &text[start..end];
    // A token starts where no other token character is just before it.
    let apart = start == 0 || !token_char(bytes[start - 1]);
    match kind {
        Kind::Pem => pem(text, start, end),
        Kind::Aws => {
            let n = token_len(bytes, end);
            let ok = apart
                && anchor.bytes().all(|b| b.is_ascii_uppercase())
                && n == 16
                && bytes[end..end + 16]
                    .iter()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit());
            ok.then_some((start, end + 16))
        }
        Kind::Github => {
            let exact = anchor.bytes().all(|b| !b.is_ascii_uppercase());
            let want = if anchor == "github_pat_" { 82 } else { 36 };
            let n = token_len(bytes, end);
            let alnum = bytes[end..end + n]
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || (want == 82 && *b == b'_'));
            (apart && exact && n == want && alnum).then_some((start, end + n))
        }
        Kind::Slack => {
            let n = token_len(bytes, end);
            let exact = anchor.bytes().all(|b| !b.is_ascii_uppercase());
            let has_digits = bytes[end..end + n]
                .iter()
                .filter(|b| b.is_ascii_digit())
                .count()
                >= 8;
            (apart && exact && n >= 10 && has_digits).then_some((start, end + n))
        }
        Kind::Stripe => {
            let n = bytes[end..]
                .iter()
                .take(LONGEST + 1)
                .take_while(|b| b.is_ascii_alphanumeric())
                .count();
            let exact = anchor.bytes().all(|b| !b.is_ascii_uppercase());
            (apart && exact && n >= 24 && !more_token(bytes, end + n)).then_some((start, end + n))
        }
        Kind::Google => {
            let n = token_len(bytes, end);
            (apart && anchor == "AIza" && n == 35).then_some((start, end + n))
        }
        Kind::Jwt => jwt(text, start).filter(|_| apart),
        Kind::Assignment => assignment(text, end),
        _ => None,
    }
}

/// Whether a token character follows at `at` (the token then is longer than its kind's).
fn more_token(bytes: &[u8], at: usize) -> bool {
    bytes.get(at).is_some_and(|b| token_char(*b))
}

/// `-----BEGIN [ALGO ]PRIVATE KEY-----`, through its `-----END …-----` (or the end of
/// the text, when cut).
fn pem(text: &str, start: usize, end: usize) -> Option<(usize, usize)> {
    let rest = &text[end..];
    let label_end = rest.find("-----")?;
    let label = &rest[..label_end];
    let private = label.len() <= 40
        && label.ends_with("PRIVATE KEY")
        && label.bytes().all(|b| b.is_ascii_uppercase() || b == b' ');
    if !private {
        return None;
    }
    let body = end + label_end + 5;
    let closing = format!("-----END {label}-----");
    let mut limit = (body + BLOCK).min(text.len());
    while !text.is_char_boundary(limit) {
        limit -= 1;
    }
    let stop = text[body..limit]
        .find(&closing)
        .map_or(limit, |at| body + at + closing.len());
    Some((start, stop))
}

/// A JWT at `start` (`eyJ…`): three base64url parts, the first two decoding to JSON
/// objects.
fn jwt(text: &str, start: usize) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut parts = [(0usize, 0usize); 3];
    let mut at = start;
    for (i, part) in parts.iter_mut().enumerate() {
        let n = bytes[at..]
            .iter()
            .take(BLOCK)
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_' || **b == b'-')
            .count();
        *part = (at, at + n);
        at += n;
        if i < 2 {
            if bytes.get(at) != Some(&b'.') || n < 4 {
                return None;
            }
            at += 1;
        }
    }
    let object = |(a, b): (usize, usize)| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&text[a..b])
            .ok()
            .and_then(|raw| {
                serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&raw).ok()
            })
            .is_some()
    };
    (object(parts[0]) && object(parts[1]) && !more_token(bytes, at)).then_some((start, at))
}

/// `name = value`, `"name": "value"`, `name: value`: the value, when the name (ending at
/// `end`) is a secret's and the value looks random (at least 8 characters, 3 bits
/// of entropy a character, two kinds of character or more). The name is kept.
fn assignment(text: &str, end: usize) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    // The name may be the end of a longer one (`db_password`), not the start of one
    // (`passwords`, `secretary`).
    let mut i = end;
    if bytes.get(i).is_some_and(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    i += closing_quote(&bytes[i..]);
    while bytes.get(i) == Some(&b' ') {
        i += 1;
    }
    if !matches!(bytes.get(i), Some(b'=' | b':')) {
        return None;
    }
    i += 1;
    while bytes.get(i) == Some(&b' ') {
        i += 1;
    }
    i += closing_quote(&bytes[i..]);
    let value_start = i;
    let n = bytes[i..]
        .iter()
        .take(LONGEST + 1)
        .take_while(|b| {
            b.is_ascii_graphic() && !matches!(b, b'"' | b'\'' | b',' | b';' | b'\\' | b'}' | b'&')
        })
        .count();
    let value = &bytes[value_start..value_start + n];
    ((8..=LONGEST).contains(&n) && looks_random(value)).then_some((value_start, value_start + n))
}

/// The length of the quote at the start of `bytes`: `"`, `'`, or `\"` (a JSON string's
/// quote as it comes inside a result's text).
fn closing_quote(bytes: &[u8]) -> usize {
    match bytes {
        [b'\\', b'"', ..] => 2,
        [b'"' | b'\'', ..] => 1,
        _ => 0,
    }
}

/// At least 3 bits of entropy a byte, and at least two of: lower case, upper case,
/// digits, other.
fn looks_random(value: &[u8]) -> bool {
    let mut counts = [0u16; 256];
    for b in value {
        counts[*b as usize] += 1;
    }
    let n = value.len() as f64;
    let entropy: f64 = counts
        .iter()
        .filter(|c| **c > 0)
        .map(|c| {
            let p = f64::from(*c) / n;
            -p * p.log2()
        })
        .sum();
    let classes = [
        value.iter().any(u8::is_ascii_lowercase),
        value.iter().any(u8::is_ascii_uppercase),
        value.iter().any(u8::is_ascii_digit),
        value.iter().any(|b| !b.is_ascii_alphanumeric()),
    ];
    entropy >= 3.0 && classes.iter().filter(|c| **c).count() >= 2
}
