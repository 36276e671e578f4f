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

/// A peer process, killed on drop.
pub struct Peer(pub Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a peer that listens on `port` and waits until it accepts connections.
pub fn start_peer(cmd: &mut Command, port: u16) -> Peer {
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let peer = Peer(child);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "peer on port {port} did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    peer
}

/// The TypeScript SDK v2 client (`ts2_client.mjs`), pinned to 2026-07-28, running
/// `scenario` against `url`: what each step saw, as JSON.
pub fn ts2_client(url: &str, scenario: &str, bearer: Option<&str>) -> serde_json::Value {
    let mut cmd = Command::new(node22());
    cmd.current_dir(peers())
        .arg("ts2_client.mjs")
        .args([url, scenario]);
    if let Some(b) = bearer {
        cmd.arg(b);
    }
    let out = run_client(&mut cmd);
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The SDK v2 fixture server in modern-only mode (`legacy: 'reject'`), recording every
/// request it receives into `record` (one JSON line each: method, headers, body).
pub fn ts2_server(record: &std::path::Path) -> (Peer, u16) {
    let port = super::free_port();
    (ts2_server_on(port, record), port)
}

/// [`ts2_server`] on `port` (a test that stops and starts it again).
pub fn ts2_server_on(port: u16, record: &std::path::Path) -> Peer {
    start_peer(
        Command::new(node22())
            .current_dir(peers())
            .arg("ts2_server.mjs")
            .args([
                "--port",
                &port.to_string(),
                "--legacy",
                "reject",
                "--record",
            ])
            .arg(record),
        port,
    )
}

/// The SDK v1 fixture server (`ts1_server.mjs`): legacy sessions only, asking its client
/// for input on the call's stream, recording every request it receives into `record`.
pub fn ts1_server(record: &std::path::Path) -> (Peer, u16) {
    let port = super::free_port();
    let peer = start_peer(
        Command::new(node22())
            .current_dir(peers())
            .arg("ts1_server.mjs")
            .args(["--port", &port.to_string(), "--record"])
            .arg(record),
        port,
    );
    (peer, port)
}

/// The TypeScript SDK v2 client's tour of a route (`fed_client.mjs`, 2026-07-28): discover,
/// every tool (all pages), prompts, resources, and each call, read and prompt of `plan`.
pub async fn fed_client(url: &str, plan: serde_json::Value) -> serde_json::Value {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || {
        let out = run_client(
            Command::new(node22())
                .current_dir(peers())
                .arg("fed_client.mjs")
                .arg(&url)
                .arg(plan.to_string()),
        );
        // The SDK warns on stdout of lists the server has no capability for.
        let last = out.trim().lines().last().unwrap_or_default();
        serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {out}"))
    })
    .await
    .unwrap()
}

/// The Python SDK server whose tools write down every call they run (`py_approvals.py`):
/// it, its port, and the file the calls are written to (in `dir`).
pub fn notes_server(dir: &std::path::Path) -> (Peer, u16, std::path::PathBuf) {
    let port = super::free_port();
    let ran = dir.join("ran.jsonl");
    let peer = start_peer(
        Command::new(python())
            .arg(peers().join("py_approvals.py"))
            .arg(port.to_string())
            .arg(&ran),
        port,
    );
    (peer, port, ran)
}
