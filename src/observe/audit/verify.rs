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

/// `mcpgate audit verify FILE`: walks the chain. `Ok(lines)`, or why it is broken.
pub fn verify(path: &Path) -> Result<usize, VerifyError> {
    let text = std::fs::read(path).map_err(|cause| VerifyError::Read {
        path: path.to_path_buf(),
        cause,
    })?;
    let broken = |line: usize, why: String| VerifyError::Broken { line, why };
    let mut prev: Option<String> = None;
    let mut n = 0;
    for line in text.split(|&b| b == b'\n') {
        if line.is_empty() {
            continue;
        }
        n += 1;
        let v: Map<String, Value> = serde_json::from_slice(line)
            .map_err(|e| broken(n, format!("not a JSON record: {e}")))?;
        let claimed = v
            .get("prev")
            .and_then(Value::as_str)
            .ok_or_else(|| broken(n, "no \"prev\" field".to_string()))?;
        let expected = match &prev {
            Some(p) => p.clone(),
            None => match v.get("type").and_then(Value::as_str) {
                Some("genesis") => {
                    let time = v.get("time").and_then(Value::as_str).unwrap_or("");
                    hex_sha256(format!("{GENESIS}{time}").as_bytes())
                }
                // A rotated file starts by continuing the previous file's chain; its first
                // link can only be checked against that file.
                Some("continued") => claimed.to_string(),
                _ => {
                    return Err(broken(
                        n,
                        "the first line is neither a genesis nor a continuation".into(),
                    ));
                }
            },
        };
        if claimed != expected {
            return Err(broken(
                n,
                format!("\"prev\" is {claimed} but the line before hashes to {expected}"),
            ));
        }
        prev = Some(hex_sha256(line));
    }
    Ok(n)
}
