//! The guardrails' built-in detectors (docs/guardrails.md): what in a text a tool returns,
//! describes or is sent looks like a secret, personal data or an instruction hidden for a
//! model, found in one pass over the text without sockets or state. Each kind has its
//! documented shape and, where one exists, its validation (Luhn for cards, mod 97 for
//! IBANs, the structure of a JWT, the entropy of an assigned secret), so that a number or a
//! word that merely looks alike is not a finding.
//!
//! The pass: a literal prefilter (`aho-corasick`, every kind's fixed anchor at once) and a
//! scan for the few bytes that start the other kinds (`@` of an e-mail, `+` of a phone
//! number, a digit run, the lead bytes of the invisible code points); only where one of
//! them is found does the kind's own check run. A text with nothing to find costs the
//! prefilter and that scan.
//!
//! This module finds; what a finding does (redact, block, warn), where texts come from
//! (results, descriptions, arguments) and what is recorded belong to the guardrails layer.

mod injection;
mod pii;
mod secrets;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

/// A kind of finding, by family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A PEM private key block (`-----BEGIN … PRIVATE KEY-----`).
    Pem,
    /// An AWS access key id (`AKIA`/`ASIA` and 16 upper-case letters or digits).
    Aws,
    /// A GitHub token (`ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_` and 36 characters;
    /// `github_pat_` and 82).
    Github,
    /// A Slack token (`xoxb-`, `xoxp-`, `xoxa-`, `xoxr-`, `xoxs-`, digits and dashes).
    Slack,
    /// A Stripe secret or restricted key (`sk_live_`, `rk_live_`).
    Stripe,
    /// A Google API key (`AIza` and 35 characters).
    Google,
    /// A JSON Web Token: three base64url parts, the first two JSON objects.
    Jwt,
    /// `password=`, `api_key: …` and the like, assigned a value of high entropy.
    Assignment,
    /// An e-mail address.
    Email,
    /// A phone number in international form (`+`, 8 to 15 digits).
    Phone,
    /// A payment card number of 13 to 19 digits that passes Luhn.
    Card,
    /// An IBAN whose length fits its country and that passes mod 97.
    Iban,
    /// Unicode tag characters (U+E0000–U+E007F): text no reader sees.
    Tags,
    /// Bidirectional overrides and isolates (U+202A–U+202E, U+2066–U+2069).
    Bidi,
    /// A run of zero-width characters (U+200B–U+200D, U+2060, U+FEFF).
    ZeroWidth,
    /// Instruction-shaped text aimed at a model: "ignore previous instructions", "do not
    /// tell the user", an `<IMPORTANT>` block.
    Instruction,
}

/// Every kind, in the order `check` lists them.
pub const KINDS: [Kind; 16] = [
    Kind::Pem,
    Kind::Aws,
    Kind::Github,
    Kind::Slack,
    Kind::Stripe,
    Kind::Google,
    Kind::Jwt,
    Kind::Assignment,
    Kind::Email,
    Kind::Phone,
    Kind::Card,
    Kind::Iban,
    Kind::Tags,
    Kind::Bidi,
    Kind::ZeroWidth,
    Kind::Instruction,
];

impl Kind {
    /// Its name in the configuration, the logs and the audit trail: `family.member`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Pem => "secrets.pem",
            Kind::Aws => "secrets.aws",
            Kind::Github => "secrets.github",
            Kind::Slack => "secrets.slack",
            Kind::Stripe => "secrets.stripe",
            Kind::Google => "secrets.google",
            Kind::Jwt => "secrets.jwt",
            Kind::Assignment => "secrets.assignment",
            Kind::Email => "pii.email",
            Kind::Phone => "pii.phone",
            Kind::Card => "pii.card",
            Kind::Iban => "pii.iban",
            Kind::Tags => "injection.tags",
            Kind::Bidi => "injection.bidi",
            Kind::ZeroWidth => "injection.zero_width",
            Kind::Instruction => "injection.instruction",
        }
    }

    /// The kinds a name stands for: a family (`secrets`) or one member (`pii.card`).
    pub fn named(name: &str) -> Option<Vec<Kind>> {
        let family = |f: &str| -> Vec<Kind> {
            KINDS
                .iter()
                .copied()
                .filter(|k| k.name().split('.').next() == Some(f))
                .collect()
        };
        match name {
            "secrets" | "pii" | "injection" => Some(family(name)),
            _ => KINDS.iter().find(|k| k.name() == name).map(|k| vec![*k]),
        }
    }
}

/// One finding: its kind and where it is in the text (byte offsets, `start..end`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finding {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
}

/// The built-in detectors a rule asks for, ready to scan.
#[derive(Debug, Clone)]
pub struct Detectors {
    wanted: u32,
    /// The fixed anchors of the wanted kinds, and the kind each belongs to.
    anchors: Option<(AhoCorasick, Vec<Kind>)>,
}

impl Detectors {
    pub fn new(kinds: &[Kind]) -> Detectors {
        let wanted = kinds.iter().fold(0u32, |w, k| w | bit(*k));
        let mut patterns: Vec<&'static str> = Vec::new();
        let mut of: Vec<Kind> = Vec::new();
        for (kind, anchors) in secrets::ANCHORS.iter().chain(injection::ANCHORS) {
            if wanted & bit(*kind) != 0 {
                for a in *anchors {
                    patterns.push(a);
                    of.push(*kind);
                }
            }
        }
        let anchors = (!patterns.is_empty()).then(|| {
            let ac = AhoCorasickBuilder::new()
                .ascii_case_insensitive(true)
                .match_kind(MatchKind::LeftmostFirst)
                .build(&patterns)
                .expect("the built-in anchors are plain literals");
            (ac, of)
        });
        Detectors { wanted, anchors }
    }

    fn wants(&self, kind: Kind) -> bool {
        self.wanted & bit(kind) != 0
    }

    /// The findings in `text`, in order of where they start, none overlapping another.
    pub fn scan(&self, text: &str, out: &mut Vec<Finding>) {
        let first = out.len();
        if let Some((ac, of)) = &self.anchors {
            // An anchor inside what an earlier one found is part of that finding.
            let mut covered = 0;
            for m in ac.find_iter(text) {
                if m.start() < covered {
                    continue;
                }
                let kind = of[m.pattern().as_usize()];
                let found = match kind {
                    Kind::Instruction => injection::instruction(text, m.start(), m.end()),
                    _ => secrets::confirm(kind, text, m.start(), m.end()),
                };
                if let Some((start, end)) = found {
                    out.push(Finding { kind, start, end });
                    covered = end;
                }
            }
        }
        if self.wants(Kind::Email) {
            pii::emails(text, out);
        }
        if self.wants(Kind::Phone) {
            pii::phones(text, out);
        }
        if self.wants(Kind::Card) || self.wants(Kind::Iban) {
            pii::numbers(text, self.wants(Kind::Card), self.wants(Kind::Iban), out);
        }
        if self.wanted & (bit(Kind::Tags) | bit(Kind::Bidi) | bit(Kind::ZeroWidth)) != 0 {
            injection::invisible(text, self, out);
        }
        let found = &mut out[first..];
        found.sort_by_key(|f| (f.start, std::cmp::Reverse(f.end)));
        // Where two findings overlap (a JWT in a `token=` assignment), the first kept.
        let mut kept = first;
        for i in first..out.len() {
            if kept > first && out[i].start < out[kept - 1].end {
                continue;
            }
            out[kept] = out[i];
            kept += 1;
        }
        out.truncate(kept);
    }
}

fn bit(kind: Kind) -> u32 {
    1 << (kind as u32)
}

/// The characters a token of the base64url or alphanumeric alphabets may hold.
fn token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// How many bytes from `at` are `token_char`s, counted up to [`LONGEST`] and one: no
/// token of a fixed shape is longer, and a check never reads further (a text of anchors
/// one after another stays one pass).
fn token_len(text: &[u8], at: usize) -> usize {
    text[at..]
        .iter()
        .take(LONGEST + 1)
        .take_while(|b| token_char(**b))
        .count()
}

/// The most any check reads past its anchor for a token or a value.
const LONGEST: usize = 512;

/// The most a PEM block or a hidden `<IMPORTANT>` block is followed for its end: past
/// that, the finding ends there (a 4096-bit RSA key's PEM is about 3.3 KiB).
const BLOCK: usize = 16 * 1024;

#[cfg(test)]
mod tests;
