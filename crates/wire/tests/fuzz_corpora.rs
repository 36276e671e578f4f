//! Every fuzz target of the wire crate, its check over its checked-in corpus
//! (`fuzz/corpus/<target>/`), on stable: the targets themselves need cargo-fuzz and
//! nightly, their corpora do not. A corpus file that makes a check panic fails this test,
//! so a crash a fuzzer found and saved stays found.

#[path = "../fuzz/checks.rs"]
mod checks;
#[path = "../fuzz/corpora.rs"]
mod corpora;

use corpora::Target;
use std::path::Path;

const TARGETS: &[Target] = &[
    ("request_head", checks::request_head),
    ("chunked_body", checks::chunked_body),
    ("answer_head", checks::answer_head),
    ("json_read", checks::json_read),
    ("json_text", checks::json_text),
];

fn fuzz() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

#[test]
fn every_corpus_passes_its_check() {
    corpora::every_corpus_passes_its_check(&fuzz(), TARGETS);
}

#[test]
fn the_targets_are_the_fuzz_crates_binaries() {
    corpora::the_targets_are_the_fuzz_crates_binaries(&fuzz(), TARGETS);
}
