//! Reload triggers other than `POST /reload`: SIGHUP, and changes to the config file or
//! any file it references. The watcher watches the *folders* of those files, so editors
//! that write a new file and rename it over the old one, and Kubernetes ConfigMap updates
//! (an atomic swap of the `..data` symlink), are seen. Events are debounced, and a reload
//! happens only if the files' contents changed (folders like /etc see unrelated events).

use crate::gateway::Gateway;
use notify::{EventKind, RecursiveMode, Watcher};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
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

/// Starts the SIGHUP handler and the file watcher. Runs until the runtime stops.
pub fn spawn(gw: Arc<Gateway>) -> Result<(), String> {
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

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(e) = event {
            if matches!(
                e.kind,
                EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_) | EventKind::Any
            ) {
                let _ = tx.send(());
            }
        }
    })
    .map_err(|e| format!("cannot watch the configuration: {e}"))?;
    let mut watched = BTreeSet::new();
    watch_folders(&mut watcher, &mut watched, &gw.snapshot().files);

    tokio::spawn(async move {
        let mut last = fingerprint(&gw.snapshot().files);
        while rx.recv().await.is_some() {
            // Let a burst of events (write, rename, chmod…) settle into one reload.
            tokio::time::sleep(DEBOUNCE).await;
            while rx.try_recv().is_ok() {}
            let files = gw.snapshot().files.clone();
            let now = tokio::task::spawn_blocking(move || fingerprint(&files))
                .await
                .unwrap_or(last);
            if now == last {
                continue;
            }
            last = now;
            if gw.reload("file change").await.is_ok() {
                // The new configuration may reference files in other folders.
                watch_folders(&mut watcher, &mut watched, &gw.snapshot().files);
                last = fingerprint(&gw.snapshot().files);
            }
        }
    });
    Ok(())
}

fn watch_folders(
    watcher: &mut notify::RecommendedWatcher,
    watched: &mut BTreeSet<PathBuf>,
    files: &[PathBuf],
) {
    for dir in folders(files) {
        if watched.contains(&dir) {
            continue;
        }
        match watcher.watch(Path::new(&dir), RecursiveMode::NonRecursive) {
            Ok(()) => {
                watched.insert(dir);
            }
            Err(e) => {
                tracing::warn!(folder = %dir.display(), error = %e, "cannot watch folder for configuration changes")
            }
        }
    }
}
