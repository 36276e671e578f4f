//! `injection`: what is written for a model and hidden from the person, or shaped as an
//! order to the model. Unicode tag characters (U+E0000–U+E007F, invisible, which models
//! read as ASCII), bidirectional overrides and isolates (U+202A–U+202E, U+2066–U+2069:
//! text shown in another order than it is read), runs of two or more zero-width
//! characters (U+200B–U+200D, U+2060, U+FEFF; one alone joins emoji and Persian letters),
//! and phrases that tell a model to drop its instructions or keep something from its user.

use super::{BLOCK, Detectors, Finding, Kind};

/// The phrases, any case, words one space apart.
pub(super) const ANCHORS: &[(Kind, &[&str])] = &[(
    Kind::Instruction,
    &[
        "ignore previous instructions",
        "ignore all previous instructions",
        "ignore the previous instructions",
        "ignore prior instructions",
        "ignore all prior instructions",
        "ignore your instructions",
        "disregard previous instructions",
        "disregard all previous instructions",
        "disregard your instructions",
        "forget previous instructions",
        "forget all previous instructions",
        "forget your instructions",
        "do not tell the user",
        "don't tell the user",
        "do not mention this to the user",
        "do not reveal this to the user",
        "without telling the user",
        "without informing the user",
        "hide this from the user",
        "<important>",
        "<system>",
    ],
)];

/// The phrase found at `start..end`; an `<IMPORTANT>` or `<SYSTEM>` block through its
/// closing tag, or, unclosed, through the next 16 KiB.
pub(super) fn instruction(text: &str, start: usize, end: usize) -> Option<(usize, usize)> {
    let found = &text[start..end];
    if let Some(tag) = found.strip_prefix('<') {
        let closing = format!("</{tag}");
        // Unclosed, the block runs as far as it is followed: what comes after an opened
        // hidden block is the block.
        let mut limit = (end + BLOCK).min(text.len());
        while !text.is_char_boundary(limit) {
            limit -= 1;
        }
        let stop = text.as_bytes()[end..limit]
            .windows(closing.len())
            .position(|w| w.eq_ignore_ascii_case(closing.as_bytes()))
            .map_or(limit, |at| end + at + closing.len());
        return Some((start, stop));
    }
    // A phrase inside a longer word is not the phrase (`xignore previous instructions`).
    let bytes = text.as_bytes();
    let apart = |i: Option<&u8>| !i.is_some_and(|b| b.is_ascii_alphanumeric());
    (apart(start.checked_sub(1).and_then(|i| bytes.get(i))) && apart(bytes.get(end)))
        .then_some((start, end))
}

/// What a code point at the start of `bytes` is of the invisible kinds, and its length.
fn invisible_at(bytes: &[u8]) -> Option<(Kind, usize)> {
    match *bytes {
        // U+E0000–U+E007F: F3 A0 80 80 – F3 A0 81 BF.
        [0xF3, 0xA0, 0x80 | 0x81, c, ..] if (0x80..=0xBF).contains(&c) => Some((Kind::Tags, 4)),
        // U+202A–U+202E.
        [0xE2, 0x80, c, ..] if (0xAA..=0xAE).contains(&c) => Some((Kind::Bidi, 3)),
        // U+2066–U+2069.
        [0xE2, 0x81, c, ..] if (0xA6..=0xA9).contains(&c) => Some((Kind::Bidi, 3)),
        // U+200B–U+200D.
        [0xE2, 0x80, c, ..] if (0x8B..=0x8D).contains(&c) => Some((Kind::ZeroWidth, 3)),
        // U+2060.
        [0xE2, 0x81, 0xA0, ..] => Some((Kind::ZeroWidth, 3)),
        // U+FEFF.
        [0xEF, 0xBB, 0xBF, ..] => Some((Kind::ZeroWidth, 3)),
        _ => None,
    }
}

/// Runs of invisible code points, a finding a run (zero-width ones: runs of two or more).
pub(super) fn invisible(text: &str, detectors: &Detectors, out: &mut Vec<Finding>) {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(off) = memchr::memchr3(0xF3, 0xE2, 0xEF, &bytes[from..]) {
        let start = from + off;
        let Some((kind, len)) = invisible_at(&bytes[start..]) else {
            from = start + 1;
            continue;
        };
        let (mut end, mut count) = (start + len, 1);
        while let Some((k, n)) = invisible_at(&bytes[end..]) {
            if k != kind {
                break;
            }
            end += n;
            count += 1;
        }
        let enough = kind != Kind::ZeroWidth || count >= 2;
        if enough && detectors.wants(kind) {
            out.push(Finding { kind, start, end });
        }
        from = end;
    }
}
