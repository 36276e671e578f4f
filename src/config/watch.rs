//! Reload triggers other than `POST /reload`: SIGHUP, and changes to the config file or
//! any file it references. The watcher watches the *folders* of those files, so editors
//! that write a new file and rename it over the old one, and Kubernetes ConfigMap updates
//! (an atomic swap of the `..data` symlink), are seen. Events are debounced, and a reload
//! happens only if the files' contents changed.
//!
//! Only finished changes wake the watcher (inotify's close-after-write, rename, create,
//! delete), never each `write(2)`: an audit file or a log kept in the same folder as the
//! configuration is written on every request and must cost nothing here. Linux only;
//! elsewhere SIGHUP and `POST /reload` remain.

use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

const DEBOUNCE: Duration = Duration::from_millis(200);

/// A hash of the contents of `files` (following symlinks); a missing file counts too.
fn fingerprint(files: &[PathBuf]) -> [u8; 32] {
    let mut h = Sha256::new();
    for f in files {
        h.update(f.as_os_str().as_encoded_bytes());
        match std::fs::read(f) {
            Ok(bytes) => {
                h.update([1]);
                h.update(&bytes);
            }
            Err(_) => h.update([0]),
        }
    }
    h.finalize().into()
}

fn folders(files: &[PathBuf]) -> BTreeSet<PathBuf> {
    files
        .iter()
        .map(|f| match f.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        })
        .collect()
}

/// The names an event must carry to concern the configuration: the watched files' own
/// names. Names starting with `..` are Kubernetes' `..data` swap, which changes what a
/// symlinked file points to without touching the file's name.
fn names(files: &[PathBuf]) -> BTreeSet<OsString> {
    files
        .iter()
        .filter_map(|f| f.file_name().map(ToOwned::to_owned))
        .collect()
}

fn concerns(names: &BTreeSet<OsString>, event_name: Option<&std::ffi::OsStr>) -> bool {
    match event_name {
        // An event on the folder itself, or a queue overflow: look.
        None => true,
        Some(n) => names.contains(n) || n.as_encoded_bytes().starts_with(b".."),
    }
}

/// What the triggers reload; the gateway implements it.
pub trait Reload: Send + Sync + 'static {
    /// Why a reload was not applied.
    type Error;
    /// The files the configuration in force was read from (`Snapshot::files`).
    fn files(&self) -> Vec<PathBuf>;
    /// Reloads the configuration; `Err` keeps the running one (and has been logged).
    fn reload(&self, trigger: &'static str)
    -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// Starts the SIGHUP handler and the file watcher. Runs until the runtime stops.
pub fn spawn<R: Reload>(gw: Arc<R>) -> Result<(), String> {
    #[cfg(unix)]
    {
        let gw = gw.clone();
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .map_err(|e| format!("cannot listen for SIGHUP: {e}"))?;
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                let _ = gw.reload("SIGHUP").await;
            }
        });
    }
    watch_files(gw)
}

#[cfg(not(target_os = "linux"))]
fn watch_files<R: Reload>(_gw: Arc<R>) -> Result<(), String> {
    Err("configuration files are watched on Linux only".into())
}

#[cfg(target_os = "linux")]
fn watch_files<R: Reload>(gw: Arc<R>) -> Result<(), String> {
    use futures_util::StreamExt;
    use inotify::{Inotify, WatchMask};

    let inotify = Inotify::init().map_err(|e| format!("cannot watch the configuration: {e}"))?;
    let mut watches = inotify.watches();
    let mut watched = BTreeSet::new();
    let mask = WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_TO
        | WatchMask::MOVED_FROM
        | WatchMask::CREATE
        | WatchMask::DELETE;
    let mut watch_folders = move |files: &[PathBuf]| {
        for dir in folders(files) {
            if watched.contains(&dir) {
                continue;
            }
            match watches.add(&dir, mask) {
                Ok(_) => {
                    watched.insert(dir);
                }
                Err(e) => {
                    tracing::warn!(folder = %dir.display(), error = %e, "cannot watch folder for configuration changes")
                }
            }
        }
    };
    watch_folders(&gw.files());
    let mut events = inotify
        .into_event_stream(vec![0u8; 4096])
        .map_err(|e| format!("cannot watch the configuration: {e}"))?;

    // Taken now, not in the task: an edit made before the task first runs is a change
    // from this, and is not missed.
    let mut last = fingerprint(&gw.files());
    let mut relevant = names(&gw.files());
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            let Ok(event) = event else { break };
            if !concerns(&relevant, event.name.as_deref()) {
                continue;
            }
            tracing::debug!(name = ?event.name, "configuration folder changed; comparing contents");
            // Let a burst of events (write, rename, chmod…) settle into one reload: wait,
            // then take whatever else arrived meanwhile without waiting for more.
            tokio::time::sleep(DEBOUNCE).await;
            while let Some(Some(_)) = futures_util::FutureExt::now_or_never(events.next()) {}
            let files = gw.files();
            let now = tokio::task::spawn_blocking(move || fingerprint(&files))
                .await
                .unwrap_or(last);
            if now == last {
                continue;
            }
            last = now;
            if gw.reload("file change").await.is_ok() {
                // The new configuration may reference files in other folders.
                let files = gw.files();
                watch_folders(&files);
                relevant = names(&files);
                last = fingerprint(&files);
            }
        }
        tracing::warn!("the configuration watcher stopped; reload with SIGHUP or POST /reload");
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_configuration_names_concern_the_watcher() {
        let files = [
            PathBuf::from("/etc/mcpgate/mcpgate.toml"),
            PathBuf::from("/etc/mcpgate/tls/cert.pem"),
        ];
        let n = names(&files);
        let c = |s: &str| concerns(&n, Some(std::ffi::OsStr::new(s)));
        assert!(c("mcpgate.toml"));
        assert!(c("cert.pem"));
        assert!(c("..data"), "the Kubernetes swap");
        assert!(!c("audit.jsonl"));
        assert!(
            !c(".mcpgate.toml.swp"),
            "an editor's scratch file is not the file"
        );
        assert!(concerns(&n, None));
    }
}
