//! The writer: one thread owns the audit file. It gathers staged lines, links each to the
//! one before it (`chain`), writes them together, fsyncs durable records before they are
//! acknowledged, rotates by size and reopens after logrotate.

use super::chain::{GENESIS, hex_sha256, now_rfc3339, read_tail};
use super::stage::{Lines, Stage};
use super::{AuditError, AuditSettings, Command};
use prometheus_client::metrics::counter::Counter;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How long a plain record may wait for others to share its write (see `Writer::run`):
/// each gathering wakes the writer thread, so waking it less often costs it less CPU.
pub(super) const GATHER: Duration = Duration::from_millis(5);

pub(super) struct Writer {
    pub(super) settings: AuditSettings,
    pub(super) file: File,
    pub(super) size: u64,
    /// SHA-256 of the last line written (hex), what the next line carries as `prev`.
    pub(super) last: String,
    /// The batch being made, kept between batches so its buffer is not grown again from
    /// nothing (hundreds of KiB a gathering under load) every time.
    pub(super) spare: Batch,
}

impl Writer {
    pub(super) fn open(settings: &AuditSettings) -> Result<Writer, AuditError> {
        let (file, size) = open_append(&settings.path)?;
        let tail = read_tail(&settings.path);
        let mut w = Writer {
            settings: settings.clone(),
            file,
            size,
            last: tail.last.unwrap_or_default(),
            spare: Batch::default(),
        };
        let started = match tail.torn {
            Some(torn) => w.recover(&torn),
            None if w.last.is_empty() => w.write_genesis(),
            None => Ok(()),
        };
        // A file that opens but cannot be written (a full disk) is not fatal: durable
        // calls are refused while it lasts, everything else is served and counted.
        if let Err(e) = started {
            tracing::error!(path = %settings.path.display(), error = %e, "cannot write the audit file");
        }
        Ok(w)
    }

    /// After a crash mid-write the file ends in a torn line. It is left as it is (a
    /// complete record is never rewritten, and neither is this): it is ended, and a
    /// `recovered` record names its length and hash and continues the chain from the last
    /// complete line, or starts one as a genesis would when there is none. `verify`
    /// accepts exactly this form.
    fn recover(&mut self, torn: &[u8]) -> std::io::Result<()> {
        tracing::warn!(
            path = %self.settings.path.display(),
            bytes = torn.len(),
            "the audit file ends in a torn line (a write cut short); marking it and continuing the chain"
        );
        let time = now_rfc3339();
        if self.last.is_empty() {
            self.last = hex_sha256(format!("{GENESIS}{time}").as_bytes());
        }
        let mut m = Map::new();
        m.insert("type".into(), "recovered".into());
        m.insert("time".into(), time.into());
        m.insert("torn_bytes".into(), torn.len().into());
        m.insert("torn_sha256".into(), hex_sha256(torn).into());
        self.file.write_all(b"\n")?;
        self.size += 1;
        self.write(m, true)
    }

    /// The first line of a new chain: it hashes the genesis value and the start time.
    pub(super) fn write_genesis(&mut self) -> std::io::Result<()> {
        let started = now_rfc3339();
        let mut m = Map::new();
        m.insert("type".into(), "genesis".into());
        m.insert("time".into(), started.clone().into());
        self.last = hex_sha256(format!("{GENESIS}{started}").as_bytes());
        self.write(m, true)
    }

    /// Links a chain marker (`genesis`, `continued`) and returns its line, newline included.
    pub(super) fn chain_marker(&mut self, mut marker: Map<String, Value>) -> Vec<u8> {
        marker.insert("prev".into(), Value::String(std::mem::take(&mut self.last)));
        let mut line = serde_json::to_vec(&marker).expect("markers are JSON");
        self.last = hex_sha256(&line);
        line.push(b'\n');
        line
    }

    /// Appends a staged line to `buf`, its `prev` member (the chain link) put in between
    /// `head` and `tail`.
    pub(super) fn chain_line(&mut self, head: &str, tail: &str, buf: &mut String) {
        let start = buf.len();
        buf.push_str(head);
        buf.push_str("\"prev\":\"");
        buf.push_str(&self.last);
        buf.push_str("\",");
        buf.push_str(tail);
        self.last.clear();
        crate::config::token::push_hex(&mut self.last, &Sha256::digest(&buf.as_bytes()[start..]));
        buf.push('\n');
    }

    pub(super) fn write(&mut self, marker: Map<String, Value>, sync: bool) -> std::io::Result<()> {
        let line = self.chain_marker(marker);
        self.file.write_all(&line)?;
        if sync {
            self.file.sync_data()?;
        }
        self.size += line.len() as u64;
        if self.settings.max_size.is_some_and(|max| self.size >= max) {
            self.rotate()?;
        }
        Ok(())
    }

    /// `audit.jsonl` → `.1` → `.2` …, keeping `keep` files, then a fresh file whose first
    /// line continues the chain.
    pub(super) fn rotate(&mut self) -> std::io::Result<()> {
        let p = &self.settings.path;
        let numbered = |n: u32| PathBuf::from(format!("{}.{n}", p.display()));
        let _ = std::fs::remove_file(numbered(self.settings.keep.max(1)));
        for n in (1..self.settings.keep.max(1)).rev() {
            let _ = std::fs::rename(numbered(n), numbered(n + 1));
        }
        std::fs::rename(p, numbered(1))?;
        self.reopen()
    }

    pub(super) fn reopen(&mut self) -> std::io::Result<()> {
        let (file, size) = open_append(&self.settings.path).map_err(std::io::Error::other)?;
        self.file = file;
        self.size = size;
        let mut m = Map::new();
        m.insert("type".into(), "continued".into());
        m.insert("time".into(), now_rfc3339().into());
        self.write(m, true)
    }

    /// Waits for work, then, for as long as records keep coming, takes what was staged and
    /// queued every [`GATHER`] (up to 1024 commands) and writes it with one `write`; if any
    /// of it is durable, one fsync covers the batch (group commit) before the acks. Only a
    /// waiting writer is woken by a plain record, so under load there is no wake-up per
    /// record. A durable record, a reopen or a close wakes it and is handled without
    /// gathering. A gather that finds nothing sends the writer back to waiting.
    pub(super) fn run(mut self, stage: &Stage, mut rx: mpsc::Receiver<Command>, dropped: Counter) {
        let mut commands = Vec::with_capacity(64);
        let mut lines: Vec<Lines> = stage.areas.iter().map(|_| Lines::new()).collect();
        let mut ended = false;
        while !ended {
            // Waiting: `idle` first, then a last look, so a record staged after the look
            // finds the flag set and wakes the writer.
            loop {
                stage.idle.store(true, Ordering::SeqCst);
                take_commands(&mut rx, &mut commands);
                ended = stage.ended.load(Ordering::SeqCst);
                if ended || !commands.is_empty() || !stage.is_empty() {
                    break;
                }
                std::thread::park();
            }
            stage.idle.store(false, Ordering::SeqCst);
            // Gathering.
            loop {
                if !ended && commands.is_empty() {
                    std::thread::park_timeout(GATHER);
                }
                take_commands(&mut rx, &mut commands);
                stage.take(&mut lines, false);
                if commands.is_empty() && lines.iter().all(|l| l.marks.is_empty()) {
                    break;
                }
                if !self.write_batch(stage, &mut lines, &mut commands, &dropped) {
                    return;
                }
            }
        }
        // Every handle is gone: nothing more can be staged.
        stage.take(&mut lines, true);
        let mut closing = Vec::new();
        self.write_batch(stage, &mut lines, &mut closing, &dropped);
        let _ = self.file.sync_all();
    }

    /// Writes the staged `lines`, then the `commands` in order (emptying both). `false`
    /// once a `Close` was handled.
    pub(super) fn write_batch(
        &mut self,
        stage: &Stage,
        lines: &mut [Lines],
        commands: &mut Vec<Command>,
        dropped: &Counter,
    ) -> bool {
        let mut pending = std::mem::take(&mut self.spare);
        self.chain_staged(lines, &mut pending, dropped);
        for cmd in commands.drain(..) {
            match cmd {
                Command::Durable(r, ack) => {
                    let mut one = Lines::new();
                    one.push(&r);
                    for (head, tail) in one.each() {
                        self.chain_line(head, tail, &mut pending.buf);
                    }
                    pending.acks.push(ack);
                    self.flush_if_full(&mut pending, dropped);
                }
                // Everything staged or queued before a reopen or close goes to the old file.
                Command::Reopen => {
                    self.flush(&mut pending, dropped);
                    match self.reopen() {
                        Ok(()) => {
                            tracing::info!(path = %self.settings.path.display(), "audit file reopened")
                        }
                        Err(e) => tracing::error!(error = %e, "audit file could not be reopened"),
                    }
                }
                Command::Close(ack) => {
                    // Lines staged since the batch was taken, and none after.
                    stage.take(lines, true);
                    self.chain_staged(lines, &mut pending, dropped);
                    self.flush(&mut pending, dropped);
                    let _ = self.file.sync_all();
                    let _ = ack.send(());
                    return false;
                }
            }
        }
        self.flush(&mut pending, dropped);
        // A burst of large records is not held on to.
        if pending.buf.capacity() > 1 << 20 {
            pending.buf = String::new();
        }
        self.spare = pending;
        true
    }

    /// Links the staged lines into the chain, into `pending` (emptying `lines`).
    pub(super) fn chain_staged(
        &mut self,
        lines: &mut [Lines],
        pending: &mut Batch,
        dropped: &Counter,
    ) {
        for staged in lines.iter_mut() {
            for (head, tail) in staged.each() {
                self.chain_line(head, tail, &mut pending.buf);
                pending.plain += 1;
                self.flush_if_full(pending, dropped);
            }
            staged.clear();
        }
    }

    /// With `max_size`, writes what gathered as soon as it would fill the file, so the file
    /// rotates there: a file ends at most one record past `max_size`, however many records
    /// a batch holds.
    pub(super) fn flush_if_full(&mut self, pending: &mut Batch, dropped: &Counter) {
        if self
            .settings
            .max_size
            .is_some_and(|max| self.size + pending.buf.len() as u64 >= max)
        {
            self.flush(pending, dropped);
        }
    }

    pub(super) fn flush(&mut self, pending: &mut Batch, dropped: &Counter) {
        if pending.buf.is_empty() {
            return;
        }
        let mut result = self.file.write_all(pending.buf.as_bytes());
        if result.is_ok() && !pending.acks.is_empty() {
            result = self.file.sync_data();
        }
        match result {
            Ok(()) => {
                self.size += pending.buf.len() as u64;
                for ack in pending.acks.drain(..) {
                    let _ = ack.send(Ok(()));
                }
                if self.settings.max_size.is_some_and(|max| self.size >= max) {
                    if let Err(e) = self.rotate() {
                        tracing::error!(error = %e, "audit file could not be rotated");
                    }
                }
            }
            Err(e) => {
                let e = Arc::new(e);
                // Lost lines leave a visible gap in the chain: `verify` names it.
                if pending.plain > 0 {
                    dropped.inc_by(pending.plain);
                    tracing::error!(error = %e, records = pending.plain, "audit record could not be written");
                }
                for ack in pending.acks.drain(..) {
                    tracing::error!(error = %e, "durable audit record could not be written");
                    let _ = ack.send(Err(AuditError::Write(e.clone())));
                }
            }
        }
        pending.buf.clear();
        pending.plain = 0;
    }
}

/// Moves what is queued (up to 1024 commands in all) into `commands`.
pub(super) fn take_commands(rx: &mut mpsc::Receiver<Command>, commands: &mut Vec<Command>) {
    while commands.len() < 1024 {
        match rx.try_recv() {
            Ok(cmd) => commands.push(cmd),
            Err(_) => break,
        }
    }
}

/// Lines waiting for one write, and who waits for their fsync.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) buf: String,
    pub(super) plain: u64,
    pub(super) acks: Vec<oneshot::Sender<Result<(), AuditError>>>,
}

pub(super) fn open_append(path: &Path) -> Result<(File, u64), AuditError> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| AuditError::Open {
            path: path.to_path_buf(),
            cause: Arc::new(e),
        })?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    Ok((file, size))
}
