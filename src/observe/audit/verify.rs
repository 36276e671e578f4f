//! `mcpgate audit verify`: walks a file's chain from its genesis to its last line.

use super::chain::{GENESIS, hex_sha256};
use serde_json::{Map, Value};
use std::path::Path;

/// Why a file's chain does not verify.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("cannot read {path}: {cause}")]
    Read {
        path: std::path::PathBuf,
        cause: std::io::Error,
    },
    /// The first broken line (1-based) and what is wrong with it.
    #[error("line {line}: {why}")]
    Broken { line: usize, why: String },
}

/// A chain walked whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    /// The lines whose links hold.
    pub lines: usize,
    /// The bytes of an unfinished last line, when a crash cut the last write short and no
    /// gateway has started on the file since (one marks it with a `recovered` record).
    /// Cutting a file's end is not something a chain can show, so this is no break.
    pub torn_tail: Option<usize>,
}

/// `mcpgate audit verify FILE`: walks the chain; how far it holds, or why it is broken.
pub fn verify(path: &Path) -> Result<Verified, VerifyError> {
    let text = std::fs::read(path).map_err(|cause| VerifyError::Read {
        path: path.to_path_buf(),
        cause,
    })?;
    let broken = |line: usize, why: String| VerifyError::Broken { line, why };
    // Every record ends with its newline; bytes after the last one are a write cut short.
    let end = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let torn_tail = (end < text.len()).then_some(text.len() - end);
    let lines: Vec<&[u8]> = text[..end]
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let mut prev: Option<String> = None;
    // The line a crash cut short, passed over because the record after it names it.
    let mut torn = false;
    for (i, line) in lines.iter().enumerate() {
        let n = i + 1;
        if lines.get(i + 1).is_some_and(|next| names_torn(next, line)) {
            torn = true;
            continue;
        }
        let v: Map<String, Value> = serde_json::from_slice(line)
            .map_err(|e| broken(n, format!("not a JSON record: {e}")))?;
        let claimed = v
            .get("prev")
            .and_then(Value::as_str)
            .ok_or_else(|| broken(n, "no \"prev\" field".to_string()))?;
        let kind = v.get("type").and_then(Value::as_str);
        let time = || v.get("time").and_then(Value::as_str).unwrap_or("");
        if kind == Some("recovered") && !std::mem::take(&mut torn) {
            return Err(broken(
                n,
                "a recovery record without the torn line it names".into(),
            ));
        }
        let expected = match (&prev, kind) {
            (Some(p), _) => p.clone(),
            (None, Some("genesis" | "recovered")) => {
                hex_sha256(format!("{GENESIS}{}", time()).as_bytes())
            }
            // A rotated file starts by continuing the previous file's chain; its first
            // link can only be checked against that file.
            (None, Some("continued")) => claimed.to_string(),
            (None, _) => {
                return Err(broken(
                    n,
                    "the first line is neither a genesis nor a continuation".into(),
                ));
            }
        };
        if claimed != expected {
            return Err(broken(
                n,
                format!("\"prev\" is {claimed} but the line before hashes to {expected}"),
            ));
        }
        prev = Some(hex_sha256(line));
    }
    Ok(Verified {
        lines: lines.len(),
        torn_tail,
    })
}

/// Whether `next` is the `recovered` record of `line`: it names its length and hash.
fn names_torn(next: &[u8], line: &[u8]) -> bool {
    let Ok(v) = serde_json::from_slice::<Map<String, Value>>(next) else {
        return false;
    };
    v.get("type").and_then(Value::as_str) == Some("recovered")
        && v.get("torn_bytes").and_then(Value::as_u64) == Some(line.len() as u64)
        && v.get("torn_sha256").and_then(Value::as_str) == Some(hex_sha256(line).as_str())
}
