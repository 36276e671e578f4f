//! The guardrails' built-in detectors over 1 MiB of text a tool might return, with nothing
//! in it to find: prose, numbers, dates, code, a few non-ASCII letters, `@` and `+` that
//! start nothing. The goal (docs/guardrails.md): every kind at once, at least 200 MB/s on
//! one core. Run: `cargo bench --bench guard`.

use divan::counter::BytesCount;
use mcpgate::mcp::guard::{Detectors, Finding, KINDS, Kind};

fn main() {
    divan::main();
}

const PARAGRAPH: &str = "The quarterly report (2024-05-01) lists 1,204 orders and 37 returns; \
the average basket was 12.50 EUR, up 3.2% on the year. See section 4.1 for the regions: \
Nord-Pas-de-Calais, Île-de-France and Provence. @support replied within 2h; a+b stays \
below the limit of 65536. fn main() { let x = vec![1, 2, 3]; println!(\"{x:?}\"); } \
Order ids 88213, 88214 and 88215 shipped; café déjà vu naïve. Secrets are rotated, \
passwords are never logged, and the API key lives in the vault.\n";

fn text() -> String {
    let mut t = String::with_capacity(1 << 20);
    while t.len() + PARAGRAPH.len() <= 1 << 20 {
        t.push_str(PARAGRAPH);
    }
    t
}

fn scan(bencher: divan::Bencher, kinds: &[Kind]) {
    let text = text();
    let detectors = Detectors::new(kinds);
    let mut out: Vec<Finding> = Vec::new();
    detectors.scan(&text, &mut out);
    assert!(out.is_empty(), "the text has no finding: {out:?}");
    bencher
        .counter(BytesCount::new(text.len()))
        .bench_local(|| {
            out.clear();
            detectors.scan(divan::black_box(&text), &mut out);
            out.len()
        });
}

#[divan::bench]
fn every_kind(bencher: divan::Bencher) {
    scan(bencher, &KINDS);
}

#[divan::bench]
fn secrets(bencher: divan::Bencher) {
    scan(bencher, &Kind::named("secrets").unwrap());
}

#[divan::bench]
fn pii(bencher: divan::Bencher) {
    scan(bencher, &Kind::named("pii").unwrap());
}

#[divan::bench]
fn injection(bencher: divan::Bencher) {
    scan(bencher, &Kind::named("injection").unwrap());
}
