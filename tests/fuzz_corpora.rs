//! Every fuzz target's check over its checked-in corpus (`fuzz/corpus/<target>/`), on
//! stable: the targets themselves need cargo-fuzz and nightly, their corpora do not. A
//! corpus file that makes a check panic fails this test, so a crash a fuzzer found and
//! saved stays found.

#[path = "../fuzz/checks.rs"]
mod checks;

use std::path::Path;

/// A target's name and its check.
type Target = (&'static str, fn(&[u8]));

const TARGETS: &[Target] = &[
    ("jsonrpc_envelope", checks::jsonrpc_envelope),
    ("accept_header", checks::accept_header),
    ("sse_stream", checks::sse_stream),
    ("tools_list", checks::tools_list),
    ("config_text", checks::config_text),
    ("stdio_lines", checks::stdio_lines),
    ("sealed_session", checks::sealed_session),
];

#[test]
fn every_corpus_passes_its_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    for (target, check) in TARGETS {
        let dir = root.join(target);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{target}: an empty corpus");
        for file in files {
            let data = std::fs::read(&file).unwrap();
            let run = std::panic::catch_unwind(|| check(&data));
            assert!(run.is_ok(), "{target}: {} fails its check", file.display());
        }
    }
}

/// Each target is listed in `fuzz/Cargo.toml` and has a file of its own, so the stable
/// runner and the fuzzer cannot drift apart.
#[test]
fn the_targets_are_the_fuzz_crates_binaries() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let listed = manifest.matches("[[bin]]").count();
    assert_eq!(listed, TARGETS.len());
    for (target, _) in TARGETS {
        assert!(
            manifest.contains(&format!("name = \"{target}\"")),
            "{target}"
        );
        assert!(
            root.join(format!("fuzz_targets/{target}.rs")).is_file(),
            "{target}"
        );
    }
}
