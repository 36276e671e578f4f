//! Every fuzz target's check over its checked-in corpus (`fuzz/corpus/<target>/`), on
//! stable: the targets themselves need cargo-fuzz and nightly, their corpora do not. A
//! corpus file that makes a check panic fails this test, so a crash a fuzzer found and
//! saved stays found. The wire crate's targets have a runner of their own.

#[path = "../fuzz/checks.rs"]
mod checks;
#[path = "../crates/wire/fuzz/corpora.rs"]
mod corpora;

use corpora::Target;
use std::path::Path;

const TARGETS: &[Target] = &[
    ("jsonrpc_envelope", checks::jsonrpc_envelope),
    ("accept_header", checks::accept_header),
    ("sse_stream", checks::sse_stream),
    ("tools_list", checks::tools_list),
    ("config_text", checks::config_text),
    ("stdio_lines", checks::stdio_lines),
    ("sealed_session", checks::sealed_session),
    ("guard_scan", checks::guard_scan),
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
