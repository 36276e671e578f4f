//! JSON text written straight into a buffer, for the lines mcpgate writes on every request
//! (the log and the audit trail). The output is exactly serde_json's for the same values:
//! same escapes, same number digits. The tests hold both writers to that.

/// For each byte, how a JSON string writes it: `0` as itself, `u` as `\u00XX`, any other
/// letter as that letter after a backslash.
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x0c] = b'f';
    table[b'\n' as usize] = b'n';
    table[b'\r' as usize] = b'r';
    table[b'\t' as usize] = b't';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// Whether any of the eight bytes in `w` must be escaped in a JSON string: a control
/// byte (below 0x20), `"` or `\\`. Each test is exact as a yes or no (the classic "has a
/// zero byte" and "has a byte less than n" word tricks).
pub(crate) fn needs_escape(w: u64) -> bool {
    escape_mask(w) != 0
}

/// The bytes of `w` that must be escaped, as their high bits. A flagged byte can make the
/// bytes above it look flagged too (the subtraction borrows), but the lowest flag is
/// always exact: for `w` read little-endian, `trailing_zeros() / 8` is the position of
/// the first byte to escape.
pub(crate) fn escape_mask(w: u64) -> u64 {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    control | has_zero(w ^ (ONES * u64::from(b'"'))) | has_zero(w ^ (ONES * u64::from(b'\\')))
}

/// Whether `s` has no byte that must be escaped, read a word at a time and the last few
/// bytes one by one (copying them into a word took a `memcpy` call).
fn is_plain(s: &str) -> bool {
    let mut words = s.as_bytes().chunks_exact(8);
    for word in words.by_ref() {
        if needs_escape(u64::from_ne_bytes(word.try_into().unwrap_or([0; 8]))) {
            return false;
        }
    }
    words
        .remainder()
        .iter()
        .all(|&b| ESCAPE[usize::from(b)] == 0)
}

/// Appends `s` as a JSON string, escaped as serde_json escapes it. Text with nothing to
/// escape (nearly all of it: names, ids, routes) is checked a word at a time and copied
/// whole; otherwise runs of eight bytes that need no escape are passed over a word at a
/// time.
pub fn push_str(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push('"');
    if is_plain(s) {
        out.push_str(s);
        out.push('"');
        return;
    }
    let bytes = s.as_bytes();
    let mut plain = 0;
    let mut i = 0;
    while i < bytes.len() {
        if let Some(word) = bytes.get(i..i + 8) {
            let word = u64::from_ne_bytes(word.try_into().unwrap_or([0; 8]));
            if !needs_escape(word) {
                i += 8;
                continue;
            }
        }
        let b = bytes[i];
        let escape = ESCAPE[usize::from(b)];
        if escape != 0 {
            out.push_str(&s[plain..i]);
            out.push('\\');
            if escape == b'u' {
                out.push_str("u00");
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xf)]));
            } else {
                out.push(char::from(escape));
            }
            plain = i + 1;
        }
        i += 1;
    }
    out.push_str(&s[plain..]);
    out.push('"');
}

/// Appends `s` in quotes as it is: only for text that cannot need an escape (names and
/// values mcpgate makes itself, hex digests, request ids checked for their characters).
/// A debug build checks that promise.
pub fn push_plain(out: &mut String, s: &str) {
    debug_assert!(
        !s.bytes().any(|b| ESCAPE[usize::from(b)] != 0),
        "{s:?} needs escaping"
    );
    out.reserve(s.len() + 2);
    out.push('"');
    out.push_str(s);
    out.push('"');
}

/// Appends a number as serde_json writes it; JSON has no NaN or infinity, so those are
/// `null`, as serde_json writes them too.
pub fn push_f64(out: &mut String, value: f64) {
    if value.is_finite() {
        let mut digits = zmij::Buffer::new();
        let text = digits.format_finite(value);
        out.push_str(text);
    } else {
        out.push_str("null");
    }
}

/// A duration in milliseconds rounded to the microsecond (`0.578`, not
/// `0.5781440000000001`): the precision the clocks give, in a few bytes when written.
pub fn to_microsecond(ms: f64) -> f64 {
    (ms * 1000.0).round() / 1000.0
}

/// Appends a duration in milliseconds, to the microsecond: the same text as
/// `push_f64(out, to_microsecond(ms))`, written from the whole count of microseconds.
/// Below 10^12 µs the shortest text that reads back as `k / 1000` is that decimal itself
/// (neighbouring counts are further apart than the float's spacing), which is what
/// serde_json writes: `12.5`, `0.034`, `3.0`.
pub fn push_ms(out: &mut String, ms: f64) {
    let t = ms * 1000.0;
    // `t.round()` without the libm call: below 2^52 the fraction `t - trunc(t)` is exact,
    // so rounding half away from zero is the truncation plus one from a half up.
    if !(t.is_sign_positive() && t < 1e12) {
        return push_f64(out, to_microsecond(ms));
    }
    let whole = t as u64;
    let us = whole + u64::from(t - whole as f64 >= 0.5);
    out.reserve(24);
    // Most durations are under ten milliseconds: one digit, without itoa's copy.
    match us / 1000 {
        ms @ 0..=9 => out.push(char::from(b'0' + ms as u8)),
        ms => push_u64(out, ms),
    }
    out.push('.');
    let frac = us % 1000;
    let digits = [frac / 100, frac / 10 % 10, frac % 10];
    let kept = match frac {
        0 => 1,
        _ if frac % 100 == 0 => 1,
        _ if frac % 10 == 0 => 2,
        _ => 3,
    };
    for d in &digits[..kept] {
        out.push(char::from(b'0' + *d as u8));
    }
}

pub fn push_u64(out: &mut String, value: u64) {
    out.push_str(itoa::Buffer::new().format(value));
}

/// Appends an address as `IpAddr`'s `Display` writes it: an IPv4 one by its octets,
/// without the formatting machinery (about a thousand instructions a call less); an IPv6
/// one through it.
pub fn push_ip(out: &mut String, ip: std::net::IpAddr) {
    match ip {
        std::net::IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                out.push_str(itoa::Buffer::new().format(octet));
            }
        }
        v6 => {
            use std::fmt::Write as _;
            let _ = write!(out, "{v6}");
        }
    }
}

pub fn push_i64(out: &mut String, value: i64) {
    out.push_str(itoa::Buffer::new().format(value));
}

/// Appends `time` in RFC 3339 (UTC) with `digits` (3 or 6) digits of the second, exactly
/// as humantime's `format_rfc3339_millis` / `_micros` write it. The part down to the
/// second is formatted once per second per thread and reused by the lines within it.
pub fn push_rfc3339(out: &mut String, time: std::time::SystemTime, digits: u32) {
    use std::time::{Duration, UNIX_EPOCH};
    thread_local! {
        /// The second last formatted on this thread, and its text without the `Z`.
        static SECOND: std::cell::RefCell<(u64, String)> =
            const { std::cell::RefCell::new((u64::MAX, String::new())) };
    }
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let cached = SECOND.try_with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.0 != secs {
            use std::fmt::Write as _;
            cell.1.clear();
            let whole = UNIX_EPOCH + Duration::from_secs(secs);
            let _ = write!(cell.1, "{}", humantime::format_rfc3339_seconds(whole));
            cell.1.pop();
            cell.0 = secs;
        }
        out.push_str(&cell.1);
    });
    if cached.is_err() {
        use std::fmt::Write as _;
        let whole = UNIX_EPOCH + Duration::from_secs(secs);
        let mut text = humantime::format_rfc3339_seconds(whole).to_string();
        text.pop();
        let _ = write!(out, "{text}");
    }
    let (fraction, width) = match digits {
        3 => (since.subsec_millis(), 3),
        _ => (since.subsec_micros(), 6),
    };
    let mut digits = itoa::Buffer::new();
    let text = digits.format(fraction);
    out.push('.');
    for _ in text.len()..width {
        out.push('0');
    }
    out.push_str(text);
    out.push('Z');
}

/// `bytes` as text: borrowed when it is UTF-8 (the usual case, checked on the fast path),
/// else with U+FFFD for each bad sequence.
pub fn lossy(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// Appends JSON text without the whitespace between its tokens, which is how serde_json
/// writes it; strings are copied as they are, escapes and all. `json` must be valid JSON
/// (it then has no raw line break left, strings cannot hold one).
pub fn push_compact(out: &mut String, json: &str) {
    let bytes = json.as_bytes();
    let mut in_string = false;
    let mut escaped = false;
    let mut kept = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
            out.push_str(&json[kept..i]);
            kept = i + 1;
        }
    }
    out.push_str(&json[kept..]);
}

#[cfg(test)]
mod tests {
    #[test]
    fn addresses_are_written_as_display_writes_them() {
        for text in [
            "0.0.0.0",
            "127.0.0.1",
            "10.200.3.45",
            "255.255.255.255",
            "::1",
            "2001:db8::8a2e:370:7334",
            "::ffff:192.0.2.1",
        ] {
            let ip: std::net::IpAddr = text.parse().unwrap();
            let mut out = String::new();
            super::push_ip(&mut out, ip);
            assert_eq!(out, ip.to_string());
        }
    }

    use super::*;

    /// One byte to escape at each place of strings of every length up to three words,
    /// the whole-string check's padded last word included, and strings with none.
    #[test]
    fn an_escape_anywhere_is_found() {
        for len in 0..=24 {
            let plain: String = "ab é~\u{7f}z ".chars().cycle().take(len).collect();
            let mut ours = String::new();
            push_str(&mut ours, &plain);
            assert_eq!(ours, serde_json::to_string(&plain).unwrap());
            for at in 0..len {
                for c in ['"', '\\', '\n', '\u{1}', '\u{1f}', '\0'] {
                    let mut text: Vec<char> = "x".repeat(len).chars().collect();
                    text[at] = c;
                    let text: String = text.into_iter().collect();
                    let mut ours = String::new();
                    push_str(&mut ours, &text);
                    assert_eq!(ours, serde_json::to_string(&text).unwrap(), "{text:?}");
                }
            }
        }
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let every_ascii: String = (0u8..0x80).map(char::from).collect();
        for text in [
            every_ascii.as_str(),
            "",
            "plain",
            "é ü 日本 🦀",
            "a\u{2028}b\\\"\u{7f}",
        ] {
            let mut ours = String::new();
            push_str(&mut ours, text);
            assert_eq!(ours, serde_json::to_string(text).unwrap());
        }
        // Each byte that needs escaping, at every place in and around a word.
        for special in (0u8..0x20).chain([b'"', b'\\']) {
            for len in 0..20 {
                for at in 0..len {
                    let mut text = vec![b'a'; len];
                    text[at] = special;
                    let text = String::from_utf8(text).unwrap();
                    let mut ours = String::new();
                    push_str(&mut ours, &text);
                    assert_eq!(ours, serde_json::to_string(&text).unwrap());
                }
            }
        }
    }

    /// The microsecond count is written as serde_json writes the rounded float.
    #[test]
    fn milliseconds_are_written_as_serde_json_writes_them() {
        let check = |ms: f64| {
            let mut ours = String::new();
            push_ms(&mut ours, ms);
            let theirs = serde_json::to_string(&to_microsecond(ms)).unwrap();
            assert_eq!(ours, theirs, "{ms}");
        };
        for k in 0..200_000u64 {
            check(k as f64 / 1000.0);
        }
        let mut state = 0x853c_49e6_748f_ea9bu64;
        for _ in 0..200_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let scale = 10f64.powi((state % 16) as i32 - 4);
            check((state >> 11) as f64 / (1u64 << 53) as f64 * scale);
        }
        for ms in [
            0.0,
            -0.0,
            0.0004999,
            0.0005,
            0.0015,
            1e9 - 0.0005,
            999_999_999.999_4,
            1e9,
            1e12,
            1e300,
            -1.5,
            f64::MIN_POSITIVE,
        ] {
            check(ms);
        }
    }

    /// The lowest flag of the mask is the first byte to escape, for every position and
    /// every byte value, whatever follows it.
    #[test]
    fn the_escape_mask_finds_the_first_byte_to_escape() {
        for at in 0..8 {
            for b in 0..=255u8 {
                for after in [0u8, b'"', b'a', 0xff] {
                    let mut word = [b'x'; 8];
                    word[at] = b;
                    word[at + 1..].fill(after);
                    let first = word.iter().position(|&c| ESCAPE[usize::from(c)] != 0);
                    let mask = escape_mask(u64::from_le_bytes(word));
                    let found = (mask != 0).then(|| mask.trailing_zeros() as usize / 8);
                    assert_eq!(found, first, "{word:?}");
                }
            }
        }
    }

    #[test]
    fn compact_text_is_the_same_value_without_whitespace() {
        for text in [
            "{}",
            " [ 1 , 2.5 , -3 , true , false , null ] ",
            "{\"a b\" : \" spaced \\\" \\\\ \\n \" ,\n\t\"c\":{ \"d\" :[ ] }}",
            "\"\\\\\"",
            "{\"é\":\"日本 🦀\"}",
        ] {
            let mut ours = String::new();
            push_compact(&mut ours, text);
            let value: serde_json::Value = serde_json::from_str(text).unwrap();
            assert_eq!(ours, serde_json::to_string(&value).unwrap(), "{text}");
        }
        // Numbers and escapes stay as written: the record shows what the upstream got.
        let mut ours = String::new();
        push_compact(&mut ours, "[ 2.5e3 , -0 , \"\\u00e9\" ]");
        assert_eq!(ours, "[2.5e3,-0,\"\\u00e9\"]");
    }

    #[test]
    fn times_are_written_as_humantime_writes_them() {
        use std::time::{Duration, UNIX_EPOCH};
        for nanos in [
            0u64,
            1_790_000_000_123_456_789,
            1_790_000_000_000_000_001,
            1_790_000_000_999_999_999,
            1_790_000_001_050_000_000,
            1_790_000_001_000_007_000,
            4_102_444_799_999_000_000,
        ] {
            let t = UNIX_EPOCH + Duration::from_nanos(nanos);
            let mut ours = String::new();
            push_rfc3339(&mut ours, t, 3);
            assert_eq!(ours, humantime::format_rfc3339_millis(t).to_string());
            ours.clear();
            push_rfc3339(&mut ours, t, 6);
            assert_eq!(ours, humantime::format_rfc3339_micros(t).to_string());
        }
    }

    #[test]
    fn numbers_are_written_as_serde_json_writes_them() {
        for v in [
            0.0,
            -0.0,
            1.0,
            0.25,
            1e-7,
            123456.789,
            1e21,
            f64::MAX,
            f64::MIN_POSITIVE,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            let mut ours = String::new();
            push_f64(&mut ours, v);
            assert_eq!(ours, serde_json::to_string(&v).unwrap(), "{v}");
        }
        for v in [0u64, 7, 499, u64::MAX] {
            let mut ours = String::new();
            push_u64(&mut ours, v);
            assert_eq!(ours, serde_json::to_string(&v).unwrap());
        }
        for v in [0i64, -3, i64::MIN, i64::MAX] {
            let mut ours = String::new();
            push_i64(&mut ours, v);
            assert_eq!(ours, serde_json::to_string(&v).unwrap());
        }
    }
}
