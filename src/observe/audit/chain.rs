//! The hash chain: every line carries the SHA-256 of the line before it in `prev`; the
//! first line of a file links to the genesis (this text, then the file's start time), and
//! a restarted writer continues from the last complete line already in the file.

use sha2::{Digest, Sha256};
use std::fs::File;
use std::path::Path;
use std::time::SystemTime;

/// What the first line of a chain hashes: this, then the file's start time.
pub const GENESIS: &str = "mcpgate-audit-v1";

pub(super) fn hex_sha256(bytes: &[u8]) -> String {
    crate::config::token::to_hex(&Sha256::digest(bytes))
}

pub(super) fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// How an existing file ends: the hash of its last complete line, and the bytes after it
/// when the file ends mid-line (a write a crash cut short).
#[derive(Debug, Default, PartialEq)]
pub(super) struct Tail {
    pub(super) last: Option<String>,
    pub(super) torn: Option<Vec<u8>>,
}

/// The [`Tail`] of an existing regular file, so a restart continues its chain. Reads only
/// the file's end (devices such as /dev/full never end): enough for a torn line and the
/// complete one before it, as a line is far below the window.
pub(super) fn read_tail(path: &Path) -> Tail {
    use std::io::{Read, Seek, SeekFrom};
    let read = || -> Option<Vec<u8>> {
        let mut f = File::open(path).ok()?;
        let len = f.metadata().ok().filter(|m| m.is_file())?.len();
        let window = len.min(super::MAX_ARGUMENTS_BYTES as u64 * 4);
        f.seek(SeekFrom::Start(len - window)).ok()?;
        let mut text = Vec::with_capacity(window as usize);
        f.read_to_end(&mut text).ok()?;
        Some(text)
    };
    let Some(text) = read() else {
        return Tail::default();
    };
    // Complete lines end at the last newline; what follows it, if anything, is torn.
    let end = text.iter().rposition(|&b| b == b'\n');
    let (complete, torn) = match end {
        Some(i) => (&text[..i], &text[i + 1..]),
        None => (&text[..0], &text[..]),
    };
    let start = complete
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let last = &complete[start..];
    Tail {
        last: (!last.is_empty()).then(|| hex_sha256(last)),
        torn: (!torn.is_empty()).then(|| torn.to_vec()),
    }
}
