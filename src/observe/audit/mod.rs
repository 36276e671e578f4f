//! The audit trail (docs/audit.md): one JSON line per decision on a tools/call and per refusal,
//! auth failure and rate-limit hit. One writer task owns the file, so lines are never
//! interleaved and each can carry the SHA-256 of the line before it (tamper evidence).
//! Records of `durable` tools are written *and fsynced* before the call is forwarded; if
//! that fails the call is refused. Other records are staged as text in an area of the
//! request's own thread, bounded: an overflow drops the record, counts it and logs it, and
//! never blocks a request.

mod chain;
mod record;
mod redact;
mod stage;
mod tap;
mod verify;
mod writer;

pub use crate::config::compile::AuditSettings;
pub use chain::GENESIS;
pub use record::{ApprovalNote, Base, Call, PinNote, Record};
pub use redact::redact_arguments;
pub use tap::{AuditTap, record_whole_answer};
pub use verify::{VerifyError, verify};

use crate::config::glob::Matcher;
use prometheus_client::metrics::counter::Counter;
use stage::Stage;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use writer::Writer;

/// Largest `arguments` value kept in a record; bigger ones keep only their hash and size.
pub const MAX_ARGUMENTS_BYTES: usize = 64 << 10;

/// Why the audit trail could not take a record, or could not start.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuditError {
    #[error("cannot open the audit file {path}: {cause}")]
    Open {
        path: std::path::PathBuf,
        cause: Arc<std::io::Error>,
    },
    #[error("the audit file could not be written: {0}")]
    Write(Arc<std::io::Error>),
    #[error("the audit writer is not accepting records")]
    NotAccepting,
    #[error("the audit writer did not confirm the record")]
    Unconfirmed,
}

enum Command {
    /// Write, fsync, then answer: for durable records.
    Durable(Box<Record>, oneshot::Sender<Result<(), AuditError>>),
    Reopen,
    /// Write everything staged and queued before it, sync, answer, and stop.
    Close(oneshot::Sender<()>),
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
    /// Registers `mcpgate_audit_dropped_total`, the counter [`Audit::start`] takes.
    pub fn register(registry: &mut prometheus_client::registry::Registry) -> Counter {
        let dropped = Counter::default();
        registry.register(
            "audit_dropped",
            "Audit records lost (queue full or write failed)",
            dropped.clone(),
        );
        dropped
    }

    /// Opens the file (creating it) and starts the writer. Fails if the file cannot be
    /// opened; a file that later fails to write is handled per record.
    /// `dropped` is the `mcpgate_audit_dropped_total` counter.
    pub fn start(
        settings: AuditSettings,
        dropped: Counter,
    ) -> Result<(Self, tokio::task::JoinHandle<()>), AuditError> {
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
    pub async fn durable(&self, record: Record) -> Result<(), AuditError> {
        let (ack, done) = oneshot::channel();
        let send = self.tx.send(Command::Durable(Box::new(record), ack));
        match tokio::time::timeout(Duration::from_secs(5), send).await {
            Ok(Ok(())) => {}
            _ => return Err(AuditError::NotAccepting),
        }
        self.stage.wake_writer();
        match tokio::time::timeout(Duration::from_secs(5), done).await {
            Ok(Ok(r)) => r,
            _ => Err(AuditError::Unconfirmed),
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

#[cfg(test)]
mod tests;
