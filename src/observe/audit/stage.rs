//! Where plain records wait for the writer: each worker thread stages its records' lines
//! in an area of its own, under a lock no other request takes; the writer takes every
//! area's lines at each gathering.

use super::record::{Record, write_line};
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

/// A plain record's line as its request's thread made it: the record's JSON text without
/// the chain link, which only the writer knows, and where that link goes.
pub(super) struct Lines {
    pub(super) text: String,
    /// Per line: where its `prev` member goes in `text`, and where the line ends. A line
    /// starts where the one before it ends.
    pub(super) marks: Vec<(usize, usize)>,
    /// Set once the writer has stopped: records staged after it are dropped.
    pub(super) closed: bool,
}

impl Lines {
    pub(super) const fn new() -> Lines {
        Lines {
            text: String::new(),
            marks: Vec::new(),
            closed: false,
        }
    }

    pub(super) fn push(&mut self, record: &Record) {
        // A line left half made (a panic while making it) is not kept.
        self.text.truncate(self.marks.last().map_or(0, |m| m.1));
        let prev_at = write_line(&mut self.text, record);
        self.marks.push((prev_at, self.text.len()));
    }

    /// Each line as the text before its `prev` member and the text after it.
    pub(super) fn each(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut start = 0;
        self.marks.iter().map(move |&(at, end)| {
            let parts = (&self.text[start..at], &self.text[at..end]);
            start = end;
            parts
        })
    }

    pub(super) fn clear(&mut self) {
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
pub(super) struct Stage {
    pub(super) areas: Box<[Mutex<Lines>]>,
    /// Lines one area holds before new ones are dropped: `queue` shared out among the areas.
    pub(super) area_max: usize,
    /// Set while the writer waits with nothing to do: the first record after it wakes it.
    pub(super) idle: AtomicBool,
    /// Set when the last handle is gone: the writer writes what is left and stops.
    pub(super) ended: AtomicBool,
    pub(super) writer: OnceLock<std::thread::Thread>,
}

impl Stage {
    pub(super) fn new(queue: usize) -> Stage {
        let n = crate::runtime::workers::count() + 1;
        Stage {
            areas: (0..n).map(|_| Mutex::new(Lines::new())).collect(),
            area_max: (queue / n).max(1),
            idle: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            writer: OnceLock::new(),
        }
    }

    pub(super) fn area(&self, i: usize) -> MutexGuard<'_, Lines> {
        self.areas[i].lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn wake_writer(&self) {
        if let Some(writer) = self.writer.get() {
            writer.unpark();
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        (0..self.areas.len()).all(|i| self.area(i).marks.is_empty())
    }

    /// Swaps every area's lines with the (empty) ones in `into`. `close`: no line is
    /// staged after this.
    pub(super) fn take(&self, into: &mut [Lines], close: bool) {
        for (i, lines) in into.iter_mut().enumerate() {
            let mut area = self.area(i);
            std::mem::swap(&mut area.text, &mut lines.text);
            std::mem::swap(&mut area.marks, &mut lines.marks);
            area.closed |= close;
        }
    }
}
