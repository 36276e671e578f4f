//! `[audit]`: where the audit trail is written and what it records durably or redacts.

use super::{Compiler, Fail, at, check_patterns, fail};
use crate::config::raw;
use crate::config::units::parse_size;
use std::path::PathBuf;

/// Audit settings from `[audit]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditSettings {
    pub path: PathBuf,
    /// Tools (names or globs) whose calls get a fsynced `begin` record before forwarding.
    pub durable: Vec<String>,
    /// Argument keys whose values are replaced by `{sha256, len}`.
    pub redact: Vec<String>,
    /// Rotate when the file grows past this many bytes (`None`: never; use SIGUSR1).
    pub max_size: Option<u64>,
    /// Rotated files kept (`audit.jsonl.1` … `.N`).
    pub keep: u32,
    /// Records waiting for the writer before new ones are dropped.
    pub queue: usize,
}

impl Compiler<'_> {
    pub(super) fn audit(&self, a: &raw::RawAudit) -> Result<AuditSettings, Fail> {
        check_patterns(&a.durable)?;
        check_patterns(&a.redact)?;
        let max_size = a
            .max_size
            .as_ref()
            .map(|v| at(v, parse_size(v.get_ref())))
            .transpose()?;
        let keep = a.keep.as_ref().map_or(5, |k| *k.get_ref());
        let queue = a.queue.as_ref().map_or(8192, |q| *q.get_ref());
        if let Some(q) = a.queue.as_ref().filter(|q| *q.get_ref() == 0) {
            return fail(q.span(), "queue must be at least 1");
        }
        Ok(AuditSettings {
            // Not added to the watched files: the audit file changes with every record.
            path: self.base.join(a.path.get_ref()),
            durable: a.durable.iter().map(|d| d.get_ref().clone()).collect(),
            redact: a.redact.iter().map(|d| d.get_ref().clone()).collect(),
            max_size,
            keep,
            queue: queue as usize,
        })
    }
}
