//! The stable runner of a cargo-fuzz folder's corpora, shared by the proxy's
//! `tests/fuzz_corpora.rs` and the wire crate's (each includes this file with `#[path]`):
//! every target's check over every file of its corpus, and the targets listed in the
//! folder's `Cargo.toml` being exactly the runner's.

use std::path::Path;

/// A target's name and its check.
pub type Target = (&'static str, fn(&[u8]));

/// Runs each target's check over `fuzz/corpus/<target>/` of the folder `fuzz`.
pub fn every_corpus_passes_its_check(fuzz: &Path, targets: &[Target]) {
    let root = fuzz.join("corpus");
    for (target, check) in targets {
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

/// Each target is listed in the folder's `Cargo.toml` and has a file of its own, so the
/// stable runner and the fuzzer cannot drift apart.
pub fn the_targets_are_the_fuzz_crates_binaries(fuzz: &Path, targets: &[Target]) {
    let manifest = std::fs::read_to_string(fuzz.join("Cargo.toml")).unwrap();
    let listed = manifest.matches("[[bin]]").count();
    assert_eq!(listed, targets.len());
    for (target, _) in targets {
        assert!(
            manifest.contains(&format!("name = \"{target}\"")),
            "{target}"
        );
        assert!(
            fuzz.join(format!("fuzz_targets/{target}.rs")).is_file(),
            "{target}"
        );
    }
}
