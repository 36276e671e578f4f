//! `mcpgate check`: what `mcpgate run` would refuse before it serves, found without
//! serving (docs/configuration.md). The file is compiled as `run` compiles it; then the
//! audit file must be one `run` can open for appending, and each TLS listener's rustls
//! configuration must build. Nothing is created or written: an audit file that does not
//! exist yet needs a folder where it can be made. The ports are tried last, and a port
//! that cannot be bound now is a warning, not an error: the instance already running may
//! be the one holding it.

use crate::config::Snapshot;
use crate::http::tls::{CertStore, server_config};
use std::path::Path;
use std::sync::Arc;

/// The errors `run` would stop on (each a line for the operator), and warnings.
#[derive(Debug, Default)]
pub struct Preflight {
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

pub fn preflight(snapshot: &Snapshot) -> Preflight {
    let mut out = Preflight::default();
    if let Some(audit) = &snapshot.audit
        && let Err(e) = appendable(&audit.path)
    {
        out.errors.push(format!(
            "audit: {e}: `mcpgate run` would not start (create the folder, or fix its rights)"
        ));
    }
    for l in &snapshot.listeners {
        if let Some(tls) = &l.tls
            && let Err(e) = server_config(tls, Arc::new(CertStore::new(tls.key.clone())))
        {
            out.errors.push(format!("listener {:?}: {e}", l.name));
        }
    }
    let admin = snapshot.admin.map(|a| ("admin", a));
    let ports = snapshot
        .listeners
        .iter()
        .map(|l| (&*l.name, l.addr))
        .chain(admin);
    for (name, addr) in ports {
        if addr.port() == 0 {
            continue;
        }
        if let Err(e) = std::net::TcpListener::bind(addr) {
            out.warnings.push(format!(
                "listener {name:?} cannot listen on {addr} now ({e}): a running mcpgate may hold it, else `mcpgate run` would stop here"
            ));
        }
    }
    out
}

/// Whether `mcpgate run` could open `path` for appending (creating it if need be),
/// checked without creating or changing anything.
fn appendable(path: &Path) -> Result<(), String> {
    use nix::unistd::{AccessFlags, access};
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Err(format!("{} is a folder", path.display())),
        Ok(_) => access(path, AccessFlags::W_OK)
            .map_err(|e| format!("{} cannot be written: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let folder = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            match std::fs::metadata(folder) {
                Ok(m) if m.is_dir() => access(folder, AccessFlags::W_OK | AccessFlags::X_OK)
                    .map_err(|e| {
                        format!(
                            "{} cannot be created: its folder {} is not writable ({e})",
                            path.display(),
                            folder.display()
                        )
                    }),
                Ok(_) => Err(format!("{} is not a folder", folder.display())),
                Err(e) => Err(format!(
                    "{} cannot be created: its folder {} does not exist ({e})",
                    path.display(),
                    folder.display()
                )),
            }
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_audit_file_is_appendable_where_run_could_open_it() {
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("audit.jsonl");
        assert!(appendable(&new).is_ok());
        assert!(!new.exists(), "checking creates nothing");
        let missing = dir.path().join("no-such-folder/audit.jsonl");
        let e = appendable(&missing).unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
        assert!(appendable(dir.path()).unwrap_err().contains("is a folder"));
        std::fs::write(&new, "").unwrap();
        assert!(appendable(&new).is_ok());
    }
}
