//! The audit trail (SPEC §7): one JSON line per decision on a tools/call and per refusal,
//! auth failure and rate-limit hit. One writer task owns the file, so lines are never
//! interleaved and each can carry the SHA-256 of the line before it (tamper evidence).
//! Records of `durable` tools are written *and fsynced* before the call is forwarded; if
//! that fails the call is refused. Other records are staged as text in an area of the
//! request's own thread, bounded: an overflow drops the record, counts it and logs it, and
//! never blocks a request.

pub use crate::config::compile::AuditSettings;
use crate::config::glob::Matcher;
use prometheus_client::metrics::counter::Counter;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, oneshot};

/// What the first line of a chain hashes: this, then the file's start time.
pub const GENESIS: &str = "mcpgate-audit-v1";

/// Largest `arguments` value kept in a record; bigger ones keep only their hash and size.
pub const MAX_ARGUMENTS_BYTES: usize = 64 << 10;

enum Command {
    /// Write, fsync, then answer: for durable records.
    Durable(Box<Record>, oneshot::Sender<Result<(), String>>),
    Reopen,
    /// Write everything staged and queued before it, sync, answer, and stop.
    Close(oneshot::Sender<()>),
}

/// A plain record's line as its request's thread made it: the record's JSON text without
/// the chain link, which only the writer knows, and where that link goes.
struct Lines {
    text: String,
    /// Per line: where its `prev` member goes in `text`, and where the line ends. A line
    /// starts where the one before it ends.
    marks: Vec<(usize, usize)>,
    /// Set once the writer has stopped: records staged after it are dropped.
    closed: bool,
}

impl Lines {
    const fn new() -> Lines {
        Lines {
            text: String::new(),
            marks: Vec::new(),
            closed: false,
        }
    }

    fn push(&mut self, record: &Record) {
        // A line left half made (a panic while making it) is not kept.
        self.text.truncate(self.marks.last().map_or(0, |m| m.1));
        let prev_at = write_line(&mut self.text, record);
        self.marks.push((prev_at, self.text.len()));
    }

    /// Each line as the text before its `prev` member and the text after it.
    fn each(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut start = 0;
        self.marks.iter().map(move |&(at, end)| {
            let parts = (&self.text[start..at], &self.text[at..end]);
            start = end;
            parts
        })
    }

    fn clear(&mut self) {
        self.text.clear();
        self.marks.clear();
        // A burst of large records is not held on to.
        if self.text.capacity() > 1 << 20 {
            self.text = String::new();
            self.marks = Vec::new();
        }
    }
}

/// Where plain records wait for the writer: one area per worker thread (and one for every
/// other thread), so a request adds its line under a lock no other request takes, and no
/// memory of a request's is freed on the writer's thread.
struct Stage {
    areas: Box<[Mutex<Lines>]>,
    /// Lines one area holds before new ones are dropped: `queue` shared out among the areas.
    area_max: usize,
    /// Set while the writer waits with nothing to do: the first record after it wakes it.
    idle: AtomicBool,
    /// Set when the last handle is gone: the writer writes what is left and stops.
    ended: AtomicBool,
    writer: OnceLock<std::thread::Thread>,
}

impl Stage {
    fn new(queue: usize) -> Stage {
        let n = crate::runtime::workers::count() + 1;
        Stage {
            areas: (0..n).map(|_| Mutex::new(Lines::new())).collect(),
            area_max: (queue / n).max(1),
            idle: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            writer: OnceLock::new(),
        }
    }

    fn area(&self, i: usize) -> MutexGuard<'_, Lines> {
        self.areas[i].lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake_writer(&self) {
        if let Some(writer) = self.writer.get() {
            writer.unpark();
        }
    }

    fn is_empty(&self) -> bool {
        (0..self.areas.len()).all(|i| self.area(i).marks.is_empty())
    }

    /// Swaps every area's lines with the (empty) ones in `into`. `close`: no line is
    /// staged after this.
    fn take(&self, into: &mut [Lines], close: bool) {
        for (i, lines) in into.iter_mut().enumerate() {
            let mut area = self.area(i);
            std::mem::swap(&mut area.text, &mut lines.text);
            std::mem::swap(&mut area.marks, &mut lines.marks);
            area.closed |= close;
        }
    }
}

/// The handle requests use. Cheap to clone: one shared pointer, so a request that holds
/// a copy costs one atomic count on a line the workers share, not one per field.
#[derive(Clone)]
pub struct Audit(Arc<Shared>);

pub struct Shared {
    /// Durable records, reopens and the close: the writer handles them in order.
    tx: mpsc::Sender<Command>,
    stage: Arc<Stage>,
    dropped: Counter,
    durable: Matcher,
    pub settings: AuditSettings,
}

impl std::ops::Deref for Audit {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.stage.ended.store(true, Ordering::SeqCst);
        self.stage.wake_writer();
    }
}

impl Audit {
    /// Opens the file (creating it) and starts the writer. Fails if the file cannot be
    /// opened; a file that later fails to write is handled per record.
    /// `dropped` is the `mcpgate_audit_dropped_total` counter.
    pub fn start(
        settings: AuditSettings,
        dropped: Counter,
    ) -> Result<(Self, tokio::task::JoinHandle<()>), String> {
        let writer = Writer::open(&settings)?;
        let (tx, rx) = mpsc::channel(settings.queue.max(1));
        let stage = Arc::new(Stage::new(settings.queue));
        let task = tokio::task::spawn_blocking({
            let dropped = dropped.clone();
            let stage = stage.clone();
            move || {
                let _ = stage.writer.set(std::thread::current());
                writer.run(&stage, rx, dropped)
            }
        });
        let durable = Matcher::new(settings.durable.iter().map(String::as_str));
        Ok((
            Audit(Arc::new(Shared {
                tx,
                stage,
                dropped,
                durable,
                settings,
            })),
            task,
        ))
    }

    /// Stages a record for the writer; never waits on it. A full area drops the record,
    /// counted and logged.
    pub fn record(&self, record: Record) {
        let stage = &*self.stage;
        let mut area = stage.area(crate::runtime::workers::slot().min(stage.areas.len() - 1));
        if area.closed || area.marks.len() >= stage.area_max {
            drop(area);
            self.count_dropped();
            return;
        }
        area.push(&record);
        drop(area);
        // Only a writer that waits with nothing to do is woken: one gathering takes the
        // line within a few milliseconds anyway. (Its `idle` is set before it looks at the
        // areas, so a line it did not see finds the flag set here.)
        if stage.idle.load(Ordering::SeqCst) && stage.idle.swap(false, Ordering::SeqCst) {
            stage.wake_writer();
        }
    }

    fn count_dropped(&self) {
        let n = self.dropped.inc() + 1;
        // Logged at powers of two so a storm of drops does not flood the log.
        if n.is_power_of_two() {
            tracing::error!(dropped_total = n, "audit queue full: record dropped");
        }
    }

    /// Writes and fsyncs a record before returning. `Err`: it is not on disk.
    pub async fn durable(&self, record: Record) -> Result<(), String> {
        let (ack, done) = oneshot::channel();
        let send = self.tx.send(Command::Durable(Box::new(record), ack));
        match tokio::time::timeout(Duration::from_secs(5), send).await {
            Ok(Ok(())) => {}
            _ => return Err("the audit writer is not accepting records".into()),
        }
        self.stage.wake_writer();
        match tokio::time::timeout(Duration::from_secs(5), done).await {
            Ok(Ok(r)) => r,
            _ => Err("the audit writer did not confirm the record".into()),
        }
    }

    /// Flushes and stops the writer (at shutdown). Records made after it are dropped.
    pub async fn close(&self) {
        let (ack, done) = oneshot::channel();
        if self.tx.send(Command::Close(ack)).await.is_ok() {
            self.stage.wake_writer();
            let _ = done.await;
        }
    }

    /// Closes and reopens the file (after logrotate moved it). The chain continues.
    pub fn reopen(&self) {
        if self.tx.try_send(Command::Reopen).is_ok() {
            self.stage.wake_writer();
        }
    }

    pub fn is_durable(&self, tool: &str) -> bool {
        self.durable.matches(tool)
    }
}

/// How long a plain record may wait for others to share its write (see `Writer::run`).
/// Each gathering wakes the writer thread; at 1 ms those wake-ups were a third of its CPU
/// time under load (docs/benchmarks.md, eleventh round).
const GATHER: Duration = Duration::from_millis(5);

struct Writer {
    settings: AuditSettings,
    file: File,
    size: u64,
    /// SHA-256 of the last line written (hex), what the next line carries as `prev`.
    last: String,
    /// The batch being made, kept between batches so its buffer is not grown again from
    /// nothing (hundreds of KiB a gathering under load) every time.
    spare: Batch,
}

fn hex_sha256(bytes: &[u8]) -> String {
    crate::config::token::to_hex(&Sha256::digest(bytes))
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

impl Writer {
    fn open(settings: &AuditSettings) -> Result<Writer, String> {
        let (file, size) = open_append(&settings.path)?;
        let last = last_line_hash(&settings.path).unwrap_or_default();
        let mut w = Writer {
            settings: settings.clone(),
            file,
            size,
            last,
            spare: Batch::default(),
        };
        if w.last.is_empty() {
            // A file that opens but cannot be written (a full disk) is not fatal: durable
            // calls are refused while it lasts, everything else is served and counted.
            if let Err(e) = w.write_genesis() {
                tracing::error!(path = %settings.path.display(), error = %e, "cannot write the audit file");
            }
        }
        Ok(w)
    }

    /// The first line of a new chain: it hashes the genesis value and the start time.
    fn write_genesis(&mut self) -> std::io::Result<()> {
        let started = now_rfc3339();
        let mut m = Map::new();
        m.insert("type".into(), "genesis".into());
        m.insert("time".into(), started.clone().into());
        self.last = hex_sha256(format!("{GENESIS}{started}").as_bytes());
        self.write(m, true)
    }

    /// Links a chain marker (`genesis`, `continued`) and returns its line, newline included.
    fn chain_marker(&mut self, mut marker: Map<String, Value>) -> Vec<u8> {
        marker.insert("prev".into(), Value::String(std::mem::take(&mut self.last)));
        let mut line = serde_json::to_vec(&marker).expect("markers are JSON");
        self.last = hex_sha256(&line);
        line.push(b'\n');
        line
    }

    /// Appends a staged line to `buf`, its `prev` member (the chain link) put in between
    /// `head` and `tail`.
    fn chain_line(&mut self, head: &str, tail: &str, buf: &mut String) {
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

    fn write(&mut self, marker: Map<String, Value>, sync: bool) -> std::io::Result<()> {
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
    fn rotate(&mut self) -> std::io::Result<()> {
        let p = &self.settings.path;
        let numbered = |n: u32| PathBuf::from(format!("{}.{n}", p.display()));
        let _ = std::fs::remove_file(numbered(self.settings.keep.max(1)));
        for n in (1..self.settings.keep.max(1)).rev() {
            let _ = std::fs::rename(numbered(n), numbered(n + 1));
        }
        std::fs::rename(p, numbered(1))?;
        self.reopen()
    }

    fn reopen(&mut self) -> std::io::Result<()> {
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
    fn run(mut self, stage: &Stage, mut rx: mpsc::Receiver<Command>, dropped: Counter) {
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
    fn write_batch(
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
    fn chain_staged(&mut self, lines: &mut [Lines], pending: &mut Batch, dropped: &Counter) {
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
    fn flush_if_full(&mut self, pending: &mut Batch, dropped: &Counter) {
        if self
            .settings
            .max_size
            .is_some_and(|max| self.size + pending.buf.len() as u64 >= max)
        {
            self.flush(pending, dropped);
        }
    }

    fn flush(&mut self, pending: &mut Batch, dropped: &Counter) {
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
                // Lost lines leave a visible gap in the chain: `verify` names it.
                if pending.plain > 0 {
                    dropped.inc_by(pending.plain);
                    tracing::error!(error = %e, records = pending.plain, "audit record could not be written");
                }
                for ack in pending.acks.drain(..) {
                    tracing::error!(error = %e, "durable audit record could not be written");
                    let _ = ack.send(Err(e.to_string()));
                }
            }
        }
        pending.buf.clear();
        pending.plain = 0;
    }
}

/// Moves what is queued (up to 1024 commands in all) into `commands`.
fn take_commands(rx: &mut mpsc::Receiver<Command>, commands: &mut Vec<Command>) {
    while commands.len() < 1024 {
        match rx.try_recv() {
            Ok(cmd) => commands.push(cmd),
            Err(_) => break,
        }
    }
}

/// Lines waiting for one write, and who waits for their fsync.
#[derive(Default)]
struct Batch {
    buf: String,
    plain: u64,
    acks: Vec<oneshot::Sender<Result<(), String>>>,
}

fn open_append(path: &Path) -> Result<(File, u64), String> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open the audit file {}: {e}", path.display()))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    Ok((file, size))
}

/// The hash of the last complete line of an existing regular file, so a restart continues
/// its chain. Reads only the file's tail (devices such as /dev/full never end).
fn last_line_hash(path: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = File::open(path).ok()?;
    let len = f.metadata().ok().filter(|m| m.is_file())?.len();
    let tail = len.min(MAX_ARGUMENTS_BYTES as u64 * 4);
    f.seek(SeekFrom::Start(len - tail)).ok()?;
    let mut text = Vec::with_capacity(tail as usize);
    f.read_to_end(&mut text).ok()?;
    let body = text.strip_suffix(b"\n")?;
    let start = body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    (!body[start..].is_empty()).then(|| hex_sha256(&body[start..]))
}

/// A call's `arguments` as the JSON text its records carry: the client's own text when
/// no key is redacted (written without the whitespace between tokens), else the value
/// with the values of `redact` keys (at any depth) replaced by their SHA-256 and length.
/// Oversized arguments shrink to their hash and size. `None`: the call had none.
pub fn redact_arguments(arguments: Option<&str>, redact: &[String]) -> Option<Box<str>> {
    let text = arguments?;
    if text.len() > MAX_ARGUMENTS_BYTES {
        let stub = serde_json::json!({"truncated": true, "sha256": hex_sha256(text.as_bytes()), "len": text.len()});
        return Some(stub.to_string().into());
    }
    if redact.is_empty() {
        return Some(text.into());
    }
    let mut v: Value = serde_json::from_str(text).ok()?;
    redact_value(&mut v, redact);
    Some(v.to_string().into())
}

fn redact_value(v: &mut Value, redact: &[String]) {
    match v {
        Value::Object(map) => {
            for (k, val) in map.iter_mut() {
                if redact.iter().any(|r| r == k) {
                    let bytes = match &*val {
                        Value::String(s) => s.as_bytes().to_vec(),
                        other => other.to_string().into_bytes(),
                    };
                    *val = serde_json::json!({"sha256": hex_sha256(&bytes), "len": bytes.len()});
                } else {
                    redact_value(val, redact);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| redact_value(i, redact)),
        _ => {}
    }
}

/// `mcpgate audit verify FILE`: walks the chain. `Ok(lines)`, or the first broken line
/// (1-based) and why.
pub fn verify(path: &Path) -> Result<usize, (usize, String)> {
    let text =
        std::fs::read(path).map_err(|e| (0, format!("cannot read {}: {e}", path.display())))?;
    let mut prev: Option<String> = None;
    let mut n = 0;
    for line in text.split(|&b| b == b'\n') {
        if line.is_empty() {
            continue;
        }
        n += 1;
        let v: Map<String, Value> =
            serde_json::from_slice(line).map_err(|e| (n, format!("not a JSON record: {e}")))?;
        let claimed = v
            .get("prev")
            .and_then(Value::as_str)
            .ok_or((n, "no \"prev\" field".to_string()))?;
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
                    return Err((
                        n,
                        "the first line is neither a genesis nor a continuation".into(),
                    ));
                }
            },
        };
        if claimed != expected {
            return Err((
                n,
                format!("\"prev\" is {claimed} but the line before hashes to {expected}"),
            ));
        }
        prev = Some(hex_sha256(line));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hashes_values_at_any_depth() {
        let raw = serde_json::value::RawValue::from_string(
            r#"{"id":"a","content":"secret text","nested":{"content":[1,2]}}"#.into(),
        )
        .unwrap();
        let v: Value = serde_json::from_str(
            &redact_arguments(Some(raw.get()), &["content".to_string()]).unwrap(),
        )
        .unwrap();
        assert_eq!(v["id"], "a");
        assert_eq!(v["content"]["len"], 11);
        assert_eq!(v["content"]["sha256"], hex_sha256(b"secret text"));
        assert_eq!(v["nested"]["content"]["len"], 5);
        assert!(!v.to_string().contains("secret"));
    }

    fn test_settings(path: &Path, queue: usize) -> AuditSettings {
        AuditSettings {
            path: path.to_path_buf(),
            durable: Vec::new(),
            redact: Vec::new(),
            max_size: None,
            keep: 1,
            queue,
        }
    }

    /// A writer on a fresh file in a folder of its own (kept while the tuple lives).
    fn started() -> (
        tempfile::TempDir,
        PathBuf,
        Audit,
        tokio::task::JoinHandle<()>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let (audit, task) = Audit::start(test_settings(&path, 8192), Counter::default()).unwrap();
        (dir, path, audit, task)
    }

    fn test_record(n: usize) -> Record {
        let base = Arc::new(Base::new(
            format!("r-{n}").into(),
            "main",
            None,
            Some("tok"),
            "127.0.0.1".parse().unwrap(),
            "tools/call",
        ));
        Record::new(base, None)
    }

    fn request_ids(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .filter_map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                v["request_id"].as_str().map(str::to_string)
            })
            .collect()
    }

    /// Records made on worker threads and on others, while the writer waits and while it
    /// gathers, all reach the file at close, each area's in the order made, one chain.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_from_every_thread_are_written_by_close() {
        let (_dir, path, audit, task) = started();
        let workers = crate::runtime::workers::Workers::start().unwrap();
        let mut done = Vec::new();
        for w in 0..crate::runtime::workers::count() {
            let (tx, rx) = oneshot::channel();
            let audit = audit.clone();
            workers.spawn(async move {
                for i in 0..300 {
                    audit.record(test_record(w * 1000 + i));
                    if i % 100 == 0 {
                        // Long enough for the writer to go back to waiting.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
                let _ = tx.send(());
            });
            done.push(rx);
        }
        for i in 0..300 {
            audit.record(test_record(100_000 + i));
        }
        for rx in done {
            rx.await.unwrap();
        }
        audit.close().await;
        // Closed: a record made now is dropped and counted, not left waiting.
        audit.record(test_record(7));
        assert_eq!(audit.dropped.get(), 1);
        drop(audit);
        task.await.unwrap();
        workers.stop().await;

        assert_eq!(
            verify(&path),
            Ok(1 + 300 * (crate::runtime::workers::count() + 1))
        );
        let ids = request_ids(&path);
        for first in (0..crate::runtime::workers::count())
            .map(|w| w * 1000)
            .chain([100_000])
        {
            let ours: Vec<&String> = ids
                .iter()
                .filter(|id| {
                    let n: usize = id[2..].parse().unwrap();
                    (first..first + 300).contains(&n)
                })
                .collect();
            let expected: Vec<String> = (first..first + 300).map(|n| format!("r-{n}")).collect();
            assert_eq!(ours, expected.iter().collect::<Vec<_>>());
        }
    }

    /// A waiting writer is woken by one record: it reaches the file without a close.
    #[tokio::test]
    async fn a_lone_record_wakes_the_writer() {
        let (_dir, path, audit, task) = started();
        for n in 0..3 {
            // Let the writer go back to waiting between records.
            tokio::time::sleep(Duration::from_millis(20)).await;
            audit.record(test_record(n));
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while request_ids(&path).len() <= n {
                assert!(
                    std::time::Instant::now() < deadline,
                    "record {n} never written"
                );
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        drop(audit);
        task.await.unwrap();
        assert_eq!(verify(&path), Ok(4));
    }

    /// When the last handle goes, the writer writes what is staged and stops.
    #[tokio::test]
    async fn the_writer_stops_with_the_last_handle_and_loses_nothing() {
        let (_dir, path, audit, task) = started();
        for n in 0..50 {
            audit.record(test_record(n));
        }
        drop(audit);
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the writer stopped")
            .unwrap();
        assert_eq!(verify(&path), Ok(51));
    }

    /// The queue bound: `queue` records wait in all, shared out among the areas; past
    /// that a record is dropped and counted, and the rest are kept.
    #[test]
    fn a_full_area_drops_and_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let areas = crate::runtime::workers::count() + 1;
        let (tx, _rx) = mpsc::channel(1);
        let dropped = Counter::default();
        // No writer runs: nothing is taken from the areas.
        let audit = Audit(Arc::new(Shared {
            tx,
            stage: Arc::new(Stage::new(4 * areas)),
            dropped: dropped.clone(),
            durable: Matcher::new(std::iter::empty()),
            settings: test_settings(&path, 4 * areas),
        }));
        for n in 0..10 {
            audit.record(test_record(n));
        }
        assert_eq!(dropped.get(), 6);
        let kept: Vec<String> = audit
            .stage
            .area(0)
            .each()
            .map(|(head, tail)| {
                let line = format!("{head}\"prev\":\"x\",{tail}");
                let v: Value = serde_json::from_str(&line).unwrap();
                v["request_id"].as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(kept, ["r-0", "r-1", "r-2", "r-3"]);
    }

    /// Size rotation holds for a batch of many records (as the writer gathers under
    /// load): every file ends at most one record past `max_size`, and each verifies.
    #[test]
    fn a_large_batch_rotates_where_the_file_fills() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let max = 2048;
        let settings = AuditSettings {
            path: path.clone(),
            durable: Vec::new(),
            redact: Vec::new(),
            max_size: Some(max),
            keep: 20,
            queue: 1024,
        };
        let mut writer = Writer::open(&settings).unwrap();
        let base = Arc::new(Base::new(
            "r-1".into(),
            "main",
            None,
            Some("tok"),
            "127.0.0.1".parse().unwrap(),
            "tools/call",
        ));
        let call = Arc::new(Call {
            rpc_id: Some("1".into()),
            tool: "move_document".into(),
            arguments: Some(r#"{"from":"a","to":"b"}"#.into()),
            durable: false,
        });
        let stage = Stage::new(settings.queue);
        let mut staged = Lines::new();
        for _ in 0..40 {
            staged.push(&Record::new(base.clone(), Some(call.clone())));
        }
        let mut lines = vec![staged];
        assert!(writer.write_batch(&stage, &mut lines, &mut Vec::new(), &Counter::default()));
        let mut files = vec![path.clone()];
        files.extend(
            (1..=20)
                .map(|n| dir.path().join(format!("audit.jsonl.{n}")))
                .filter(|p| p.exists()),
        );
        assert!(files.len() >= 5, "rotated {} times", files.len() - 1);
        let longest = std::fs::read_to_string(&files[1])
            .unwrap()
            .lines()
            .map(|l| l.len() as u64 + 1)
            .max()
            .unwrap();
        for f in &files {
            let len = std::fs::metadata(f).unwrap().len();
            assert!(len < max + longest, "{}: {len} bytes", f.display());
            assert!(verify(f).is_ok(), "{}", f.display());
        }
    }

    /// The hand-written line is serde_json's text for the same object, byte for byte: the
    /// keys in name order, the same escapes and number digits, `null` where it belongs.
    #[test]
    fn lines_are_serde_json_text() {
        use serde_json::json;
        use std::collections::BTreeMap;
        let snapshot = crate::config::load_str(
            r#"
            [[listen]]
            name = "main"
            addr = "127.0.0.1:0"
            [upstreams.u]
            url = "http://127.0.0.1:9/mcp"
            [profiles."p \"quoted\""]
            upstream = "u"
            allow = ["*"]
            [[routes]]
            listen = "main"
            path = "/mcp"
            profile = "p \"quoted\""
            auth = "none"
            "#,
            "test.toml",
        )
        .unwrap();
        let route = snapshot.routes[0].clone();
        let time = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_790_000_000_123);
        let base = |route: Option<&crate::config::Route>, token: Option<&str>| {
            Arc::new(Base::new(
                "r-1".into(),
                "main\n",
                route,
                token,
                "::1".parse().unwrap(),
                "tools/call",
            ))
        };
        let call = Arc::new(Call {
            rpc_id: Some("\"id \\u00e9\"".into()),
            tool: "delete_\u{1}doc".into(),
            arguments: Some("{\"a\": \"é\\t\" , \"b\":[1,  2.5,\r\n\tnull]}".into()),
            durable: true,
        });
        let mut full = Record::new(base(Some(&route), Some("tok")), Some(call.clone()));
        full.time = time;
        full.phase = Some("end");
        full.decision = Some("allow");
        full.reason = Some(Some("why \"not\"".into()));
        full.status = Some(200);
        full.upstream_ms = Some(Some(0.125));
        full.gateway_ms = Some(0.013904999999999945);
        full.outcome = Some(Some("ok"));
        full.total_ms = Some(12345.678);
        let mut nulls = Record::new(
            base(None, None),
            Some(Arc::new(Call {
                rpc_id: None,
                ..(*call).clone()
            })),
        );
        nulls.time = time;
        nulls.reason = Some(None);
        nulls.upstream_ms = Some(None);
        nulls.outcome = Some(None);
        nulls.gateway_ms = Some(f64::NAN);
        let mut bare = Record::new(base(None, Some("t")), None);
        bare.time = time;
        let mut v4 = bare.clone();
        v4.base = Arc::new(Base::new(
            "r-2".into(),
            "main",
            None,
            None,
            "10.0.200.7".parse().unwrap(),
            "POST",
        ));

        let expected = |r: &Record| -> String {
            let b = &r.base;
            let mut m: BTreeMap<&str, serde_json::Value> = BTreeMap::new();
            m.insert("client", json!(b.client.to_string()));
            m.insert("listener", json!(b.listener()));
            m.insert("method", json!(b.method()));
            m.insert("prev", json!("ab12"));
            m.insert("request_id", json!(&*b.request_id));
            m.insert("profile", json!(b.profile()));
            m.insert("route", json!(b.route()));
            m.insert(
                "time",
                json!(humantime::format_rfc3339_millis(r.time).to_string()),
            );
            m.insert("token", json!(b.token()));
            if let Some(c) = &r.call {
                let args = c.arguments.as_deref().map(serde_json::from_str).transpose();
                m.insert("arguments", args.unwrap().unwrap_or(json!(null)));
                m.insert("rpc_id", json!(null));
                m.insert("tool", json!(&*c.tool));
            }
            let mut put = |k, v: Option<serde_json::Value>| {
                if let Some(v) = v {
                    m.insert(k, v);
                }
            };
            put("phase", r.phase.map(|p| json!(p)));
            put("decision", r.decision.map(|d| json!(d)));
            put("reason", r.reason.clone().map(|x| json!(x)));
            put("status", r.status.map(|x| json!(x)));
            // Times are written to the microsecond.
            let ms = crate::mcp::jsontext::to_microsecond;
            put("upstream_ms", r.upstream_ms.map(|x| json!(x.map(ms))));
            put("gateway_ms", r.gateway_ms.map(|x| json!(ms(x))));
            put("outcome", r.outcome.map(|x| json!(x)));
            put("total_ms", r.total_ms.map(|x| json!(ms(x))));
            // The id goes in as the client wrote it, not re-encoded.
            let mut raw: BTreeMap<&str, Box<serde_json::value::RawValue>> = m
                .into_iter()
                .map(|(k, v)| (k, serde_json::value::to_raw_value(&v).unwrap()))
                .collect();
            if let Some(id) = r.call.as_ref().and_then(|c| c.rpc_id.clone()) {
                raw.insert(
                    "rpc_id",
                    serde_json::value::RawValue::from_string(id).unwrap(),
                );
            }
            serde_json::to_string(&raw).unwrap()
        };
        // As staged, then linked as the writer links it.
        let ours = |r: &Record| {
            let mut staged = Lines::new();
            staged.push(r);
            let (head, tail) = staged.each().next().unwrap();
            format!("{head}\"prev\":\"ab12\",{tail}")
        };
        assert!(ours(&full).contains(r#""gateway_ms":0.014,"#));
        for r in [&full, &nulls, &bare, &v4] {
            assert_eq!(ours(r), expected(r));
        }
    }
}

/// One tools/call of a request, as the audit trail needs it.
#[derive(Debug, Clone)]
pub struct Call {
    /// The JSON-RPC id as raw JSON text (`None` for a notification).
    pub rpc_id: Option<String>,
    pub tool: Arc<str>,
    /// JSON text, from [`redact_arguments`]; `None` is written as `null`.
    pub arguments: Option<Box<str>>,
    pub durable: bool,
}

/// The fields every record of one request shares. The names come from the configuration,
/// and are copied into one buffer of the record's own: holding the configuration's `Arc`s
/// instead would write counts both worker threads (and the writer) share, per request.
#[derive(Debug)]
pub struct Base {
    pub request_id: Arc<str>,
    pub client: std::net::IpAddr,
    /// listener, route template, profile, method and token id, one after the other.
    text: String,
    /// Where each of the first four ends in `text`; the token id, if any, is the rest.
    ends: [usize; 4],
    token: bool,
}

impl Base {
    /// `route`: the matched route, whose template and profile name are written (`-`
    /// without one). `method`: the JSON-RPC method, or the HTTP method when there is none.
    pub fn new(
        request_id: Arc<str>,
        listener: &str,
        route: Option<&crate::config::Route>,
        token: Option<&str>,
        client: std::net::IpAddr,
        method: &str,
    ) -> Base {
        let parts = [
            listener,
            route.map_or("-", |r| &r.template),
            route.map_or("-", |r| &r.profile.name),
            method,
        ];
        let mut text = String::with_capacity(
            parts.iter().map(|p| p.len()).sum::<usize>() + token.map_or(0, str::len),
        );
        let mut ends = [0; 4];
        for (end, part) in ends.iter_mut().zip(parts) {
            text.push_str(part);
            *end = text.len();
        }
        text.push_str(token.unwrap_or(""));
        Base {
            request_id,
            client,
            text,
            ends,
            token: token.is_some(),
        }
    }

    pub fn listener(&self) -> &str {
        &self.text[..self.ends[0]]
    }

    pub fn route(&self) -> &str {
        &self.text[self.ends[0]..self.ends[1]]
    }

    pub fn profile(&self) -> &str {
        &self.text[self.ends[1]..self.ends[2]]
    }

    pub fn method(&self) -> &str {
        &self.text[self.ends[2]..self.ends[3]]
    }

    pub fn token(&self) -> Option<&str> {
        self.token.then(|| &self.text[self.ends[3]..])
    }
}

/// One line of the trail, besides the chain's own `genesis` and `continued` lines. A
/// field left `None` is not written; `Some(None)` is written as `null`.
#[derive(Debug, Clone)]
pub struct Record {
    pub base: Arc<Base>,
    pub time: SystemTime,
    /// `tool`, `rpc_id` and `arguments`, on the records of a tools/call.
    pub call: Option<Arc<Call>>,
    pub phase: Option<&'static str>,
    pub decision: Option<&'static str>,
    pub reason: Option<Option<String>>,
    pub status: Option<u16>,
    pub upstream_ms: Option<Option<f64>>,
    pub gateway_ms: Option<f64>,
    pub outcome: Option<Option<&'static str>>,
    pub total_ms: Option<f64>,
}

impl Record {
    /// The JSON-RPC id of its call, as raw JSON text.
    fn rpc_id(&self) -> Option<&str> {
        self.call.as_ref()?.rpc_id.as_deref()
    }

    /// A record of the request with nothing but its shared fields and the time, now.
    pub fn new(base: Arc<Base>, call: Option<Arc<Call>>) -> Record {
        Record::at(base, call, SystemTime::now())
    }

    /// A record of the request with nothing but its shared fields and `time`.
    pub fn at(base: Arc<Base>, call: Option<Arc<Call>>, time: SystemTime) -> Record {
        Record {
            base,
            time,
            call,
            phase: None,
            decision: None,
            reason: None,
            status: None,
            upstream_ms: None,
            gateway_ms: None,
            outcome: None,
            total_ms: None,
        }
    }
}

/// Appends `record` as one JSON object, its fields in name order, exactly as serde_json
/// would write the same object, but for `prev` (the chain link): the returned offset is
/// where its member, `"prev":"…",`, goes. Written by hand because it runs for every
/// audited call; a unit test holds it to serde_json's output.
fn write_line(out: &mut String, record: &Record) -> usize {
    use crate::mcp::jsontext::{
        push_compact, push_ms, push_plain, push_rfc3339, push_str, push_u64,
    };
    use std::fmt::Write as _;
    let r = record;
    let b = &*r.base;
    // `,"name":` before every field but the first (`arguments` or `client`).
    let key = |out: &mut String, name: &str| {
        out.push_str(",\"");
        out.push_str(name);
        out.push_str("\":");
    };
    let optional_str = |out: &mut String, v: Option<&str>| match v {
        Some(v) => push_str(out, v),
        None => out.push_str("null"),
    };
    out.push('{');
    if let Some(c) = &r.call {
        out.push_str("\"arguments\":");
        match &c.arguments {
            Some(text) => push_compact(out, text),
            None => out.push_str("null"),
        }
        out.push(',');
    }
    out.push_str("\"client\":\"");
    match b.client {
        // The usual case, without the formatting machinery.
        std::net::IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                push_u64(out, octet.into());
            }
        }
        v6 => {
            let _ = write!(out, "{v6}");
        }
    }
    out.push('"');
    if let Some(d) = r.decision {
        key(out, "decision");
        push_plain(out, d);
    }
    if let Some(g) = r.gateway_ms {
        key(out, "gateway_ms");
        push_ms(out, g);
    }
    key(out, "listener");
    push_str(out, b.listener());
    key(out, "method");
    push_str(out, b.method());
    if let Some(o) = r.outcome {
        key(out, "outcome");
        optional_str(out, o);
    }
    if let Some(p) = r.phase {
        key(out, "phase");
        push_plain(out, p);
    }
    // `prev` is never first or last: `client` comes before it and `time` after.
    out.push(',');
    let prev_at = out.len();
    out.push_str("\"profile\":");
    push_str(out, b.profile());
    if let Some(reason) = &r.reason {
        key(out, "reason");
        optional_str(out, reason.as_deref());
    }
    key(out, "request_id");
    push_plain(out, &b.request_id);
    key(out, "route");
    push_str(out, b.route());
    if let Some(c) = &r.call {
        // The id as the client wrote it: valid JSON, parsed with the request.
        key(out, "rpc_id");
        match c.rpc_id.as_deref() {
            Some(id) => push_compact(out, id),
            None => out.push_str("null"),
        }
    }
    if let Some(status) = r.status {
        key(out, "status");
        push_u64(out, status.into());
    }
    out.push_str(",\"time\":\"");
    push_rfc3339(out, r.time, 3);
    out.push('"');
    key(out, "token");
    optional_str(out, b.token());
    if let Some(c) = &r.call {
        key(out, "tool");
        push_str(out, &c.tool);
    }
    if let Some(t) = r.total_ms {
        key(out, "total_ms");
        push_ms(out, t);
    }
    if let Some(u) = r.upstream_ms {
        key(out, "upstream_ms");
        match u {
            Some(u) => push_ms(out, u),
            None => out.push_str("null"),
        }
    }
    out.push('}');
    prev_at
}

#[derive(serde::Deserialize)]
struct AnswerHead<'a> {
    #[serde(borrow)]
    id: Option<&'a serde_json::value::RawValue>,
    result: Option<ResultHead>,
    error: Option<ErrorHead>,
}

#[derive(serde::Deserialize)]
struct ResultHead {
    #[serde(rename = "isError", default)]
    is_error: Option<bool>,
}

#[derive(serde::Deserialize)]
struct ErrorHead {
    #[serde(default)]
    code: i64,
}

/// Calls `found` with the id (as JSON text) and outcome of each response in a JSON text
/// (a response or a batch of them). A single response is read without allocating.
fn each_outcome(text: &str, mut found: impl FnMut(&str, &'static str)) {
    if !text.trim_start().starts_with('[')
        && let Some(read) = read_outcome(text)
    {
        if let Some((id, outcome)) = read {
            found(id, outcome);
        }
        return;
    }
    each_outcome_by_serde(text, found);
}

fn each_outcome_by_serde(text: &str, mut found: impl FnMut(&str, &'static str)) {
    let mut one = |h: AnswerHead<'_>| {
        let outcome = match (&h.result, &h.error) {
            (_, Some(e)) if e.code == crate::error::code::UPSTREAM_TIMEOUT => "timeout",
            (_, Some(e)) if e.code == crate::error::code::UPSTREAM => "upstream_error",
            (_, Some(_)) => "jsonrpc_error",
            (Some(r), None) if r.is_error == Some(true) => "is_error",
            (Some(_), None) => "ok",
            (None, None) => return,
        };
        if let Some(id) = h.id {
            found(id.get().trim(), outcome);
        }
    };
    if text.trim_start().starts_with('[') {
        let many: Vec<AnswerHead<'_>> = serde_json::from_str(text).unwrap_or_default();
        many.into_iter().for_each(one);
    } else if let Ok(head) = serde_json::from_str(text) {
        one(head);
    }
}

/// The outcome of a single response, read in one pass with [`crate::mcp::jsonread`]:
/// `Some(None)` when it has none (no id, or neither result nor error), `None` to leave
/// the text to serde_json (malformed, an escaped key, a repeated field, a `result` or
/// `error` or `isError` or `code` of a shape that is not the usual one). Where both
/// read it, they agree (`fast_and_serde_agree`).
fn read_outcome(text: &str) -> Option<Option<(&str, &'static str)>> {
    use crate::mcp::jsonread::Reader;
    let mut r = Reader::new(text);
    r.skip_ws();
    // Which of `id`, `result` and `error` were seen: a second of any makes it give up.
    let mut seen = [false; 3];
    let mut id = None;
    // `None` when absent or null; else `isError` (`None` when absent or null).
    let mut result: Option<Option<bool>> = None;
    let mut code: Option<i64> = None;
    r.object(0, |r, key| {
        let key = key.plain()?;
        let is_null = r.peek() == Some(b'n');
        let slot = match key {
            "id" => 0,
            "result" => 1,
            "error" => 2,
            _ => return r.skip(1),
        };
        first(&mut seen[slot])?;
        match key {
            "id" => id = Some(r.value(1)?).filter(|_| !is_null),
            _ if is_null => r.skip(1)?,
            "result" => {
                let mut is_error = None;
                let mut once = false;
                r.object(1, |r, key| {
                    if key.plain()? == "isError" {
                        first(&mut once)?;
                        is_error = match r.value(2)? {
                            "true" => Some(true),
                            "false" => Some(false),
                            "null" => None,
                            _ => return None,
                        };
                    } else {
                        r.skip(2)?;
                    }
                    Some(())
                })?;
                result = Some(is_error);
            }
            _ => {
                let mut found = 0;
                let mut once = false;
                r.object(1, |r, key| {
                    let value = r.value(2)?;
                    if key.plain()? == "code" {
                        first(&mut once)?;
                        found = value.parse().ok()?;
                    }
                    Some(())
                })?;
                code = Some(found);
            }
        }
        Some(())
    })?;
    if !r.at_end() {
        return None;
    }
    let outcome = match (result, code) {
        (_, Some(crate::error::code::UPSTREAM_TIMEOUT)) => "timeout",
        (_, Some(crate::error::code::UPSTREAM)) => "upstream_error",
        (_, Some(_)) => "jsonrpc_error",
        (Some(Some(true)), None) => "is_error",
        (Some(_), None) => "ok",
        (None, None) => return Some(None),
    };
    Some(id.map(|id| (id, outcome)))
}

/// Notes a field as seen; `None` when it was already (a repeated field: serde_json decides).
fn first(seen: &mut bool) -> Option<()> {
    (!std::mem::replace(seen, true)).then_some(())
}

/// Appends `data` to `tail` and keeps the last [`TAIL`] bytes of the two.
fn keep_tail(tail: &mut Vec<u8>, data: &[u8]) {
    if data.len() >= TAIL {
        tail.clear();
        tail.extend_from_slice(&data[data.len() - TAIL..]);
    } else {
        let keep = (TAIL - data.len()).min(tail.len());
        tail.drain(..tail.len() - keep);
        tail.extend_from_slice(data);
    }
}

/// Largest JSON answer kept whole to learn outcomes. A bigger one (a large tool result)
/// is not held: only its last `TAIL` bytes are kept, and the outcome comes from them
/// (`"isError": true` there means `is_error`, otherwise `ok`), so memory stays flat.
const MAX_OBSERVED_JSON: usize = 256 << 10;
const TAIL: usize = 4 << 10;

struct Pending {
    record: Record,
    outcome: Option<&'static str>,
}

/// The records of one answer's calls, waiting for the outcomes the answer holds.
struct Outcomes {
    pending: Vec<Pending>,
    started: std::time::Instant,
}

impl Outcomes {
    fn new(records: impl IntoIterator<Item = Record>, started: std::time::Instant) -> Self {
        Outcomes {
            pending: records
                .into_iter()
                .map(|record| Pending {
                    record,
                    outcome: None,
                })
                .collect(),
            started,
        }
    }

    /// Takes the outcome of each response in `text` for the calls with its id.
    fn scan(&mut self, text: &str) {
        let pending = &mut self.pending;
        each_outcome(text, |id, outcome| {
            for p in pending
                .iter_mut()
                .filter(|p| p.outcome.is_none() && p.record.rpc_id() == Some(id))
            {
                p.outcome = Some(outcome);
            }
        });
    }

    /// Gives `outcome` to every call that has none yet.
    fn settle_unknown(&mut self, outcome: &'static str) {
        for p in self.pending.iter_mut().filter(|p| p.outcome.is_none()) {
            p.outcome = Some(outcome);
        }
    }

    /// Writes one record per call; a call whose answer was not seen gets `otherwise`.
    fn write(&mut self, audit: &Audit, otherwise: &'static str, total_ms: f64) {
        for p in self.pending.drain(..) {
            let mut r = p.record;
            r.outcome = Some(Some(p.outcome.unwrap_or(otherwise)));
            r.total_ms = Some(total_ms);
            audit.record(r);
        }
    }
}

/// Writes the records of calls answered by a JSON text already whole in memory: their
/// outcomes are read from it at once, so the answer needs no [`AuditTap`]. A call whose
/// response is not in it is `upstream_error`, as the tap would record it. `total_ms`: the
/// request's time so far, which the caller has just read.
pub fn record_whole_answer(
    audit: &Audit,
    records: impl IntoIterator<Item = Record>,
    json: &[u8],
    started: std::time::Instant,
    total_ms: f64,
) {
    let mut outcomes = Outcomes::new(records, started);
    outcomes.scan(&crate::mcp::jsontext::lossy(json));
    outcomes.write(audit, "upstream_error", total_ms);
}

/// Wraps the answer to a request with tools/call elements: passes every byte on untouched,
/// reads along to learn each call's outcome, and writes the records when the answer ends,
/// fails, or the client goes away.
pub struct AuditTap {
    inner: crate::http::body::GateBody,
    audit: Audit,
    outcomes: Outcomes,
    sse: Option<crate::mcp::transport::sse::Decoder>,
    json: Vec<u8>,
    /// Set once `json` outgrew `MAX_OBSERVED_JSON`: from then on it holds only a tail.
    overflowed: bool,
    finished: bool,
}

impl AuditTap {
    pub fn new(
        inner: crate::http::body::GateBody,
        audit: Audit,
        records: impl IntoIterator<Item = Record>,
        sse: bool,
        started: std::time::Instant,
    ) -> Self {
        AuditTap {
            inner,
            audit,
            outcomes: Outcomes::new(records, started),
            sse: sse.then(crate::mcp::transport::sse::Decoder::new),
            json: Vec::new(),
            overflowed: false,
            finished: false,
        }
    }

    fn scan(&mut self, text: &str) {
        self.outcomes.scan(text);
    }

    fn observe(&mut self, data: &[u8]) {
        match &mut self.sse {
            Some(decoder) => {
                decoder.feed(data);
                let mut texts = Vec::new();
                while let Some(ev) = decoder.next_event() {
                    if let Some(d) = ev.data {
                        texts.push(d);
                    }
                }
                for t in texts {
                    self.scan(&t);
                }
            }
            None if self.overflowed => keep_tail(&mut self.json, data),
            None if self.json.len() + data.len() > MAX_OBSERVED_JSON => {
                // Too big to keep whole: from here on only the tail, switched to before
                // the buffer grows past the limit.
                self.overflowed = true;
                keep_tail(&mut self.json, data);
                self.json.shrink_to(TAIL);
            }
            None => self.json.extend_from_slice(data),
        }
    }

    /// Writes one record per call; a call whose answer was not seen gets `otherwise`.
    fn finish(&mut self, otherwise: &'static str) {
        if self.finished {
            return;
        }
        self.finished = true;
        if self.overflowed {
            let tail: Vec<u8> = self
                .json
                .iter()
                .copied()
                .filter(|b| !b.is_ascii_whitespace())
                .collect();
            const IS_ERROR: &[u8] = b"\"isError\":true";
            let outcome = if tail.windows(IS_ERROR.len()).any(|w| w == IS_ERROR) {
                "is_error"
            } else {
                "ok"
            };
            self.outcomes.settle_unknown(outcome);
        } else if !self.json.is_empty() {
            let json = std::mem::take(&mut self.json);
            self.scan(&crate::mcp::jsontext::lossy(&json));
        }
        let total_ms = self.outcomes.started.elapsed().as_secs_f64() * 1000.0;
        self.outcomes.write(&self.audit, otherwise, total_ms);
    }
}

impl http_body::Body for AuditTap {
    type Data = bytes::Bytes;
    type Error = crate::http::body::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        use std::task::Poll;
        let this = &mut *self;
        match std::pin::Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let end = this.inner.is_end_stream();
                if let Some(d) = frame.data_ref() {
                    if end && this.sse.is_none() && this.json.is_empty() {
                        // A whole JSON answer in one frame: read it where it is.
                        this.scan(&crate::mcp::jsontext::lossy(d));
                    } else {
                        let d = d.clone();
                        this.observe(&d);
                    }
                }
                if end {
                    // The answer is complete; hyper will not ask for more.
                    this.finish("upstream_error");
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                // The answer ended without this call's response in it.
                this.finish("upstream_error");
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                let outcome = if e.is::<crate::http::body::DeadlineExceeded>() {
                    "timeout"
                } else {
                    "upstream_error"
                };
                this.finish(outcome);
                Poll::Ready(Some(Err(e)))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for AuditTap {
    fn drop(&mut self) {
        // Dropped before the end: the client went away (or the connection broke).
        self.finish("client_gone");
    }
}

#[cfg(test)]
mod outcome_tests {
    use super::{TAIL, each_outcome, each_outcome_by_serde, keep_tail, read_outcome};

    fn outcomes_in(text: &str) -> Vec<(String, &'static str)> {
        let mut all = Vec::new();
        each_outcome(text, |id, outcome| all.push((id.to_string(), outcome)));
        all
    }

    /// The tail kept of a large answer is the last `TAIL` bytes of everything seen,
    /// whatever the sizes of the pieces.
    #[test]
    fn the_tail_is_the_last_bytes_seen() {
        let mut seen: Vec<u8> = Vec::new();
        let mut tail: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
        seen.extend_from_slice(&tail);
        for (n, size) in [1usize, 7, 4095, 4096, 4097, 9000, 0, 13, 70_000, 2]
            .into_iter()
            .enumerate()
        {
            let piece: Vec<u8> = (0..size).map(|i| (i * 31 + n) as u8).collect();
            keep_tail(&mut tail, &piece);
            seen.extend_from_slice(&piece);
            assert_eq!(tail, seen[seen.len() - TAIL..], "after a piece of {size}");
        }
    }

    #[test]
    fn outcomes() {
        assert_eq!(
            outcomes_in(r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}}"#),
            [("1".to_string(), "ok")]
        );
        assert_eq!(
            outcomes_in(r#"{"jsonrpc":"2.0","id":"a","result":{"isError":true}}"#),
            [("\"a\"".to_string(), "is_error")]
        );
        assert_eq!(
            outcomes_in(r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"x"}}"#),
            [("2".to_string(), "jsonrpc_error")]
        );
        assert_eq!(
            outcomes_in(r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32004,"message":"x"}}"#),
            [("3".to_string(), "timeout")]
        );
        assert_eq!(
            outcomes_in(r#"[{"id":4,"result":{}},{"method":"notifications/x"}]"#),
            [("4".to_string(), "ok")]
        );
        assert!(outcomes_in("not json").is_empty());
    }

    const ANSWERS: &[&str] = &[
        r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello"}],"isError":false}}"#,
        r#"{"jsonrpc":"2.0","id":"a","result":{"isError":true,"content":[]}}"#,
        r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"x","data":{"k":[1]}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"error":{"message":"no code"}}"#,
        r#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"p":0.5}}"#,
        r#"{"result":{"isError":null},"id":-4.5e1}"#,
        r#" { "id" : "b" , "error" : { "code" : -32001 } , "x" : "\u00e9\n" } "#,
        r#"{"jsonrpc":"2.0","id":5,"result":null,"error":{"code":-32004}}"#,
    ];

    /// The one-pass reader either steps aside or finds exactly what serde_json finds, on
    /// the answers above and on random edits of them.
    #[test]
    fn fast_and_serde_agree() {
        let by_serde = |text: &str| {
            let mut all = Vec::new();
            each_outcome_by_serde(text, |id, outcome| all.push((id.to_string(), outcome)));
            all
        };
        let as_found = |read: Option<(&str, &'static str)>| -> Vec<(String, &'static str)> {
            read.into_iter()
                .map(|(id, o)| (id.to_string(), o))
                .collect()
        };
        for text in ANSWERS {
            let read = read_outcome(text).unwrap_or_else(|| panic!("stepped aside on {text}"));
            assert_eq!(as_found(read), by_serde(text), "{text}");
        }
        // Besides the JSON pieces every edit may use: what an answer's outcome hangs on.
        const BITS: &[&str] = &[
            "false",
            "\"id\"",
            "\"result\"",
            "\"error\"",
            "\"code\"",
            "\"isError\"",
            "\\u0069",
            "99999999999999999999",
        ];
        let mut read = 0;
        for text in crate::mcp::jsonread::edits(ANSWERS, BITS, 0x2545_f491_4f6c_dd1d, 40_000) {
            if let Some(found) = read_outcome(&text) {
                read += 1;
                assert_eq!(as_found(found), by_serde(&text), "{text}");
            }
        }
        assert!(read > 2_000, "{read}");
    }
}
