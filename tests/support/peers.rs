//! The MCP peers `scripts/test.sh` installs: where they are, and running a client.
use super::*;

/// The installed MCP peers (`scripts/test.sh` installs them).
pub fn peers() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers");
    assert!(
        dir.join("node_modules/node/bin/node").exists() && dir.join(".venv/bin/python").exists(),
        "the MCP peers are not installed: run scripts/test.sh (it installs them into tests/peers/)"
    );
    dir
}

pub fn node22() -> std::path::PathBuf {
    peers().join("node_modules/node/bin/node")
}

pub fn python() -> std::path::PathBuf {
    peers().join(".venv/bin/python")
}

/// Runs a client to completion (bounded) and returns its stdout.
pub fn run_client(cmd: &mut Command) -> String {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "client failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
