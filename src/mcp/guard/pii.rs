//! `pii`: e-mail addresses, phone numbers in international form, payment card numbers
//! that pass Luhn, IBANs that pass mod 97. Each is found from a byte that must be in it
//! (`@`, `+`, a digit), then read whole and checked.

use super::{Finding, Kind};

/// E-mail addresses: a local part (letters, digits, `.`, `_`, `%`, `+`, `-`, not starting
/// or ending with `.`) at a domain of two labels or more, its last of letters only.
pub(super) fn emails(text: &str, out: &mut Vec<Finding>) {
    let bytes = text.as_bytes();
    let local = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'%' | b'+' | b'-');
    let domain = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-');
    let mut last_end = 0;
    for at in memchr::memchr_iter(b'@', bytes) {
        if at < last_end {
            continue;
        }
        // A local part is at most 64 bytes, a domain at most 253 (RFC 5321).
        let mut start = at;
        while start > last_end.max(at.saturating_sub(64)) && local(bytes[start - 1]) {
            start -= 1;
        }
        while start < at && bytes[start] == b'.' {
            start += 1;
        }
        let mut end = at + 1;
        while end < bytes.len().min(at + 254) && domain(bytes[end]) {
            end += 1;
        }
        // A sentence's full stop is not the domain's.
        while end > at + 1 && matches!(bytes[end - 1], b'.' | b'-') {
            end -= 1;
        }
        if start == at || bytes[at - 1] == b'.' {
            continue;
        }
        let host = &text[at + 1..end];
        let labels: Vec<&str> = host.split('.').collect();
        let fits = labels.len() >= 2
            && labels
                .iter()
                .all(|l| !l.is_empty() && l.len() <= 63 && !l.starts_with('-'))
            && labels
                .last()
                .is_some_and(|tld| tld.len() >= 2 && tld.bytes().all(|b| b.is_ascii_alphabetic()));
        if fits {
            out.push(Finding {
                kind: Kind::Email,
                start,
                end,
            });
            last_end = end;
        }
    }
}

/// Phone numbers in international form: `+`, then 8 to 15 digits, the first not 0, in
/// groups a space, `-`, `.` or a bracket apart. National forms are not found: without a
/// country they cannot be told from other numbers.
pub(super) fn phones(text: &str, out: &mut Vec<Finding>) {
    let bytes = text.as_bytes();
    for at in memchr::memchr_iter(b'+', bytes) {
        if at > 0 && bytes[at - 1].is_ascii_alphanumeric() {
            continue;
        }
        let Some(&first) = bytes.get(at + 1) else {
            continue;
        };
        if !first.is_ascii_digit() || first == b'0' {
            continue;
        }
        let (digits, end) = digit_groups(bytes, at + 1, b" -.()");
        if (8..=15).contains(&digits) && !bytes.get(end).is_some_and(|b| b.is_ascii_alphanumeric())
        {
            out.push(Finding {
                kind: Kind::Phone,
                start: at,
                end,
            });
        }
    }
}

/// From `at`, digits in groups one separator (of `seps`) apart: how many digits, and
/// where the last one ends.
fn digit_groups(bytes: &[u8], at: usize, seps: &[u8]) -> (usize, usize) {
    let (mut digits, mut end, mut i) = (0, at, at);
    while i < bytes.len() && digits < 40 {
        let b = bytes[i];
        if b.is_ascii_digit() {
            digits += 1;
            end = i + 1;
        } else if seps.contains(&b) {
            // One separator, or two different ones (`) `, ` (`), then more digits.
            let next = bytes.get(i + 1).copied();
            if !next.is_some_and(|n| n.is_ascii_digit() || (seps.contains(&n) && n != b)) {
                break;
            }
        } else {
            break;
        }
        i += 1;
    }
    (digits, end)
}

/// Card numbers and IBANs.
pub(super) fn numbers(text: &str, cards: bool, ibans: bool, out: &mut Vec<Finding>) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !b.is_ascii_digit() {
            i += 1;
            continue;
        }
        let apart = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        // An IBAN: two capitals before two digits.
        if ibans && i >= 2 && bytes[i - 1].is_ascii_uppercase() && bytes[i - 2].is_ascii_uppercase()
        {
            let start = i - 2;
            if (start == 0 || !bytes[start - 1].is_ascii_alphanumeric())
                && let Some(end) = iban(bytes, start)
            {
                out.push(Finding {
                    kind: Kind::Iban,
                    start,
                    end,
                });
                i = end;
                continue;
            }
        }
        let (digits, end) = digit_groups(bytes, i, b" -");
        if cards
            && apart
            && (13..=19).contains(&digits)
            && !bytes.get(end).is_some_and(|b| b.is_ascii_alphanumeric())
            && matches!(b, b'2'..=b'6')
            && luhn(&bytes[i..end])
        {
            out.push(Finding {
                kind: Kind::Card,
                start: i,
                end,
            });
        }
        // On past this run of digits and separators.
        i = end.max(i + 1);
    }
}

/// Luhn's check over the digits of `text` (other bytes left out).
fn luhn(text: &[u8]) -> bool {
    let mut sum = 0u32;
    for (n, d) in text.iter().rev().filter(|b| b.is_ascii_digit()).enumerate() {
        let mut v = u32::from(d - b'0');
        if n % 2 == 1 {
            v *= 2;
            if v > 9 {
                v -= 9;
            }
        }
        sum += v;
    }
    sum % 10 == 0
}

/// An IBAN at `start` (in groups of four a space apart, or not): its country's length,
/// and mod 97 of its digits, letters as numbers, country and check moved to the end, is 1.
fn iban(bytes: &[u8], start: usize) -> Option<usize> {
    let want = iban_length(&bytes[start..start + 2])?;
    let mut chars: Vec<u8> = Vec::with_capacity(34);
    let mut i = start;
    let mut end = start;
    while i < bytes.len() && chars.len() < want {
        let b = bytes[i];
        if b.is_ascii_uppercase() || b.is_ascii_digit() {
            chars.push(b);
            end = i + 1;
        } else if !(b == b' ' && chars.len() % 4 == 0) {
            break;
        }
        i += 1;
    }
    if chars.len() != want || bytes.get(end).is_some_and(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    let mut rest = 0u32;
    for b in chars[4..].iter().chain(&chars[..4]) {
        let v = if b.is_ascii_digit() {
            u32::from(b - b'0')
        } else {
            u32::from(b - b'A') + 10
        };
        rest = if v >= 10 {
            (rest * 100 + v) % 97
        } else {
            (rest * 10 + v) % 97
        };
    }
    (rest == 1).then_some(end)
}

/// The length of an IBAN of the country `cc` (ISO 13616's registry; countries not in it
/// have no IBAN to find).
fn iban_length(cc: &[u8]) -> Option<usize> {
    const LENGTHS: &[(&[u8; 2], usize)] = &[
        (b"AD", 24),
        (b"AE", 23),
        (b"AL", 28),
        (b"AT", 20),
        (b"AZ", 28),
        (b"BA", 20),
        (b"BE", 16),
        (b"BG", 22),
        (b"BH", 22),
        (b"BR", 29),
        (b"CH", 21),
        (b"CR", 22),
        (b"CY", 28),
        (b"CZ", 24),
        (b"DE", 22),
        (b"DK", 18),
        (b"DO", 28),
        (b"EE", 20),
        (b"EG", 29),
        (b"ES", 24),
        (b"FI", 18),
        (b"FO", 18),
        (b"FR", 27),
        (b"GB", 22),
        (b"GE", 22),
        (b"GI", 23),
        (b"GL", 18),
        (b"GR", 27),
        (b"GT", 28),
        (b"HR", 21),
        (b"HU", 28),
        (b"IE", 22),
        (b"IL", 23),
        (b"IS", 26),
        (b"IT", 27),
        (b"JO", 30),
        (b"KW", 30),
        (b"KZ", 20),
        (b"LB", 28),
        (b"LI", 21),
        (b"LT", 20),
        (b"LU", 20),
        (b"LV", 21),
        (b"MC", 27),
        (b"MD", 24),
        (b"ME", 22),
        (b"MK", 19),
        (b"MR", 27),
        (b"MT", 31),
        (b"MU", 30),
        (b"NL", 18),
        (b"NO", 15),
        (b"PK", 24),
        (b"PL", 28),
        (b"PS", 29),
        (b"PT", 25),
        (b"QA", 29),
        (b"RO", 24),
        (b"RS", 22),
        (b"SA", 24),
        (b"SE", 24),
        (b"SI", 19),
        (b"SK", 24),
        (b"SM", 27),
        (b"TN", 24),
        (b"TR", 26),
        (b"UA", 29),
        (b"VG", 24),
        (b"XK", 20),
    ];
    LENGTHS
        .iter()
        .find(|(c, _)| c.as_slice() == cc)
        .map(|(_, n)| *n)
}
