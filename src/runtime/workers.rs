//! The runtime shape of `mcpgate run`: one worker thread per core, each with its own
//! single-threaded tokio runtime, beside the control thread that runs `main`'s runtime
//! (signals, reloads, the admin listener, the accept loops).
//!
//! A connection is accepted on the control thread and handed to the next worker, round
//! robin; from then on everything it causes runs on that worker: its requests, their
//! upstream calls (each worker keeps its own upstream connection pools, see
//! [`slot`]), timers and streams. No worker ever wakes another to finish a request,
//! which a work-stealing runtime does several times per proxied call.

use std::cell::Cell;
use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

thread_local! {
    /// 0 on every thread but a worker's; `1..=count()` on the workers.
    static SLOT: Cell<usize> = const { Cell::new(0) };
}

/// How many workers serve connections: the CPUs this process may use (which honours
/// affinity masks and cgroup CPU quotas, so `taskset` and container limits apply).
pub fn count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The control thread's runtime, once workers started: what must outlive the workers
/// (a stdio upstream's processes, which shutdown closes after the workers stopped) runs
/// there.
pub fn control() -> Option<Handle> {
    CONTROL.get().cloned()
}

static CONTROL: OnceLock<Handle> = OnceLock::new();

/// Which per-thread resource this thread uses: `0` for the control thread and any thread
/// that is not a worker, `1..=count()` for the workers. Per-worker state is kept in arrays
/// of `count() + 1` entries indexed by this.
pub fn slot() -> usize {
    SLOT.with(Cell::get)
}

pub struct Workers {
    handles: Vec<Handle>,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    next: AtomicUsize,
}

impl Workers {
    /// Starts `count()` worker threads, each running its runtime until [`Workers::stop`].
    /// Called on the control thread, whose runtime [`control`] then names.
    pub fn start() -> std::io::Result<Workers> {
        if let Ok(here) = Handle::try_current() {
            let _ = CONTROL.set(here);
        }
        let n = count();
        let mut workers = Workers {
            handles: Vec::with_capacity(n),
            stops: Vec::with_capacity(n),
            threads: Vec::with_capacity(n),
            next: AtomicUsize::new(0),
        };
        for i in 1..=n {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (stop, stopped) = oneshot::channel::<()>();
            workers.handles.push(runtime.handle().clone());
            workers.stops.push(stop);
            let thread = std::thread::Builder::new()
                // Short enough for the 15 bytes `top -H` and /proc show.
                .name(format!("mcpgate-wrk-{i}"))
                .spawn(move || {
                    SLOT.with(|s| s.set(i));
                    // Dropping the runtime here, on its own thread, cancels what still runs.
                    runtime.block_on(async {
                        let _ = stopped.await;
                    });
                })?;
            workers.threads.push(thread);
        }
        Ok(workers)
    }

    /// Runs `task` on the next worker, round robin.
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        self.handles[i].spawn(task);
    }

    /// Stops every worker, dropping the tasks still on them, and waits for the threads.
    pub async fn stop(self) {
        drop(self.stops);
        let threads = self.threads;
        let _ = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tasks_run_on_workers_round_robin_and_stop_with_them() {
        let workers = Workers::start().unwrap();
        let mut seen = Vec::new();
        for _ in 0..count() * 2 {
            let (tx, rx) = oneshot::channel();
            workers.spawn(async move {
                let _ = tx.send((slot(), std::thread::current().name().map(str::to_string)));
            });
            seen.push(rx.await.unwrap());
        }
        assert_eq!(slot(), 0, "the test's own thread is not a worker");
        let slots: Vec<usize> = seen.iter().map(|(s, _)| *s).collect();
        let expected: Vec<usize> = (0..count() * 2).map(|i| i % count() + 1).collect();
        assert_eq!(slots, expected);
        assert!(
            seen.iter()
                .all(|(s, name)| name.as_deref() == Some(&format!("mcpgate-wrk-{s}")[..]))
        );

        // A task still pending when the workers stop is dropped, not leaked or left running.
        let (tx, rx) = oneshot::channel::<()>();
        workers.spawn(async move {
            std::future::pending::<()>().await;
            drop(tx);
        });
        workers.stop().await;
        assert!(
            rx.await.is_err(),
            "the pending task was dropped with its worker"
        );
    }
}
