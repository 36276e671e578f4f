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

/// The hash of the last complete line of an existing regular file, so a restart continues
/// its chain. Reads only the file's tail (devices such as /dev/full never end).
pub(super) fn last_line_hash(path: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = File::open(path).ok()?;
    let len = f.metadata().ok().filter(|m| m.is_file())?.len();
    let tail = len.min(super::MAX_ARGUMENTS_BYTES as u64 * 4);
    f.seek(SeekFrom::Start(len - tail)).ok()?;
    let mut text = Vec::with_capacity(tail as usize);
    f.read_to_end(&mut text).ok()?;
    let body = text.strip_suffix(b"\n")?;
    let start = body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    (!body[start..].is_empty()).then(|| hex_sha256(&body[start..]))
}
