//! `identity` on a stdio upstream (docs/oauth.md, `mode = "jwt"`). A process gets its
//! environment once, at its start, and serves every call after it: it is told who it
//! serves, not who makes each call.
//!
//! - Who it serves: with `per_client`, the caller whose request started it (a legacy
//!   session's `initialize`, or a 2026-07-28 caller's first request); with `shared`,
//!   nobody in particular (`sub: mcpgate`).
//! - `MCPGATE_IDENTITY_TOKEN` holds a token signed at its start, with the life of every
//!   token mcpgate signs (60 s): enough to learn and check who it serves.
//! - `MCPGATE_IDENTITY_TOKEN_FILE` names a file mcpgate rewrites every half life while the
//!   process runs (written whole, then renamed into place), so a token read from it has at
//!   least 30 s left: what the process shows to services of its own. The file is the
//!   process's alone (0600, in a directory of mcpgate's, 0700) and goes when it exits.
//! - A reload that changes the keys or the audience keeps the process; the file's next
//!   token follows the new settings.

use crate::config::identity::JWT_LIFE;
use crate::upstream::identity::{Tokens, Who};
use arc_swap::ArcSwapOption;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// The tokens an upstream's processes are told, as the last reload set them.
pub type Current = Arc<ArcSwapOption<Tokens>>;

/// What a process is given at its start: its first token and the file kept fresh.
pub struct Given {
    pub token: String,
    pub file: PathBuf,
}

/// Signs the first token for a process serving `who` and writes it to a new file.
pub fn give(tokens: &Tokens, who: &Who, upstream: &str) -> Result<Given, String> {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let token = tokens.jwt(who)?;
    let name: String = upstream
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let file = dir()?.join(format!(
        "{name}-{}.jwt",
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    write(&file, &token)?;
    Ok(Given { token, file })
}

/// Rewrites `file` with a new token every half life until the process has exited, then
/// removes it.
pub async fn keep_fresh(
    current: Current,
    who: Who,
    file: PathBuf,
    mut exited: watch::Receiver<bool>,
    upstream: Arc<str>,
) {
    loop {
        tokio::select! {
            _ = exited.wait_for(|gone| *gone) => break,
            () = tokio::time::sleep(JWT_LIFE / 2) => {}
        }
        let Some(tokens) = current.load_full() else {
            break;
        };
        if let Err(e) = tokens.jwt(&who).and_then(|t| write(&file, &t)) {
            tracing::error!(upstream = %upstream, error = %e, "the stdio server's identity token could not be renewed");
        }
    }
    let _ = std::fs::remove_file(&file);
}

/// Removes the directory of the token files (at shutdown, once the processes are gone).
pub fn remove_dir() {
    if let Some(dir) = DIR.lock().unwrap_or_else(|p| p.into_inner()).take() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The directory of the token files, once made. A failure to make it is not kept: the
/// next process tries again.
static DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

/// mcpgate's directory for the token files, made on first use: under `$XDG_RUNTIME_DIR`
/// (else the temporary directory), a new name no one else can have made, 0700.
fn dir() -> Result<PathBuf, String> {
    let mut made = DIR.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(dir) = &*made {
        return Ok(dir.clone());
    }
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|e| format!("no randomness: {e}"))?;
    let dir = base.join(format!(
        "mcpgate-{}-{}",
        std::process::id(),
        crate::config::pins::hex(&random)
    ));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    *made = Some(dir.clone());
    Ok(dir)
}

/// Puts `token` in `file` whole: written beside it, then renamed over it.
fn write(file: &Path, token: &str) -> Result<(), String> {
    let next = file.with_extension("jwt.new");
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&next)
        .and_then(|mut f| f.write_all(token.as_bytes()))
        .and_then(|()| std::fs::rename(&next, file));
    written.map_err(|e| format!("{}: {e}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_file_is_the_processes_alone_and_replaced_whole() {
        let key = crate::config::identity::SigningKey::from_pem(
            &crate::config::identity::tests::pem_key(false),
        )
        .unwrap();
        let tokens = Tokens::new(Arc::new(crate::config::identity::Identity {
            issuer: "https://gate".into(),
            audience: "notes".into(),
            keys: vec![key].into(),
            jwks_path: None,
        }));
        let given = give(&tokens, &Who::gateway(), "notes/../x").unwrap();
        assert_eq!(std::fs::read_to_string(&given.file).unwrap(), given.token);
        let name = given.file.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("notes____x-"), "{name}");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&given.file), 0o600);
        assert_eq!(mode(given.file.parent().unwrap()), 0o700);
        write(&given.file, "next").unwrap();
        assert_eq!(std::fs::read_to_string(&given.file).unwrap(), "next");
        assert!(!given.file.with_extension("jwt.new").exists());
        remove_dir();
        assert!(!given.file.parent().unwrap().exists());
    }
}
