//! The `mcpgate` binary run as a test's gateway, on the test deployment's configuration.
use super::*;

pub fn hash(token: &str) -> String {
    to_hex(&Secret(token).hash())
}

/// The test deployment: the profiles plus one with a `methods` list.
pub fn config(upstream_url: &str, timeout: &str) -> String {
    format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.docs]
url = "{upstream_url}"
connect_timeout = "1s"
timeout = "{timeout}"
headers = {{ "X-API-Key" = "${{env:MCPGATE_TEST_API_KEY}}" }}

[tools]
hidden = ["move_document"]
deny_code = -32602

[profiles.gpt]
upstream = "docs"
allow = ["search_knowledge", "list_documents", "get_document", "get_document_for_rewrite",
         "batch_read", "upload_document", "update_document", "patch_document", "delete_document"]

[profiles.gpt-full]
upstream = "docs"
allow = ["*"]

[profiles.readonly]
upstream = "docs"
allow = ["search_knowledge", "list_documents", "get_*", "batch_read"]
deny = ["get_document_for_rewrite"]

[profiles.limited]
upstream = "docs"
allow = ["*"]
methods = ["initialize", "ping", "notifications/*", "tools/list"]

[[routes]]
listen = "main"
path = "/gpt-mcp/{{token}}/mcp"
profile = "gpt"

[[routes]]
listen = "main"
path = "/mcp-readonly"
profile = "readonly"

[[routes]]
listen = "main"
path = "/mcp-gpt-full"
profile = "gpt-full"
auth = "none"

[[routes]]
listen = "main"
path = "/mcp-limited"
profile = "limited"

[[tokens]]
id = "chatgpt-app"
sha256 = "{gpt}"
profiles = ["gpt"]
not_after = "2999-01-01T00:00:00Z"

[[tokens]]
id = "reader"
sha256 = "{readonly}"
profiles = ["readonly"]

[[tokens]]
id = "old-token"
sha256 = "{expired}"
profiles = ["gpt"]
not_after = "2020-01-01T00:00:00Z"

[[tokens]]
id = "next-token"
sha256 = "{future}"
profiles = ["gpt"]
not_before = "2999-01-01T00:00:00Z"

[[tokens]]
id = "limited"
sha256 = "{limited}"
profiles = ["limited"]

[limits]
max_body = "64KiB"
"#,
        gpt = hash(GPT),
        readonly = hash(READONLY),
        expired = hash(EXPIRED),
        future = hash(FUTURE),
        limited = hash(LIMITED),
    )
}

/// The config with an admin listener on a free loopback port.
pub fn with_admin(text: String) -> String {
    format!("{text}\n[admin]\naddr = \"127.0.0.1:0\"\n")
}

/// A running `mcpgate run` process. Killed on drop.
pub struct Gateway {
    child: Child,
    pub listeners: HashMap<String, SocketAddr>,
    log: Arc<Mutex<String>>,
    out: Arc<Mutex<String>>,
    path: std::path::PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Gateway {
    pub fn start(config_text: &str) -> Gateway {
        Self::try_start(config_text)
            .unwrap_or_else(|(code, log)| panic!("mcpgate exited ({code:?}):\n{log}"))
    }

    /// Starts the gateway; on early exit returns its exit code and stderr.
    pub fn try_start(config_text: &str) -> Result<Gateway, (Option<i32>, String)> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mcpgate.toml");
        std::fs::write(&path, config_text).unwrap();
        let mut gw = Self::try_start_at(&path)?;
        gw._dir = Some(dir);
        Ok(gw)
    }

    /// Starts the gateway on a config file the caller placed (and may change later).
    pub fn start_at(path: &std::path::Path) -> Gateway {
        Self::try_start_at(path)
            .unwrap_or_else(|(code, log)| panic!("mcpgate exited ({code:?}):\n{log}"))
    }

    fn try_start_at(path: &std::path::Path) -> Result<Gateway, (Option<i32>, String)> {
        let config_text = std::fs::read_to_string(path).unwrap();
        let expected = config_text.matches("[[listen]]").count()
            + usize::from(config_text.contains("[admin]"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
            .args(["run", "-c"])
            .arg(path)
            .env("MCPGATE_TEST_API_KEY", API_KEY)
            .env("RUST_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let out = Arc::new(Mutex::new(String::new()));
        let out_sink = out.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let mut o = out_sink.lock().unwrap();
                o.push_str(&line);
                o.push('\n');
            }
        });
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(found) = parse_listening(&line) {
                    let _ = tx.send(found);
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let mut listeners = HashMap::new();
        while listeners.len() < expected {
            match rx.recv_timeout(Duration::from_secs(20)) {
                Ok((name, addr)) => {
                    listeners.insert(name, addr);
                }
                Err(_) => {
                    let code = child.wait().ok().and_then(|s| s.code());
                    std::thread::sleep(Duration::from_millis(100));
                    return Err((code, log.lock().unwrap().clone()));
                }
            }
        }
        Ok(Gateway {
            child,
            listeners,
            log,
            out,
            path: path.to_path_buf(),
            _dir: None,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.listeners["main"])
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// What the gateway wrote to stdout (the combined access log).
    pub fn stdout(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    /// The log once `what` is in it `times` times. A worker writes the info lines it
    /// gathered 10 ms after the first of them; this waits (up to 5 s) for that write.
    pub async fn log_with(&self, what: &str, times: usize) -> String {
        for _ in 0..500 {
            let log = self.log();
            if log.matches(what).count() >= times {
                return log;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the log never showed {what:?}:\n{}", self.log());
    }

    pub fn config_path(&self) -> &std::path::Path {
        &self.path
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.listeners["admin"])
    }

    /// Sends a signal (`HUP`, `TERM`, …) to the gateway process.
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Waits up to `limit` for the process to exit; its exit code, if it did.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let started = std::time::Instant::now();
        while started.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The gateway logs JSON lines when stderr is not a terminal; a `listening` line names the
/// listener and the address it bound.
pub fn parse_listening(line: &str) -> Option<(String, SocketAddr)> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v["message"] != "listening" {
        return None;
    }
    Some((
        v["listener"].as_str()?.to_string(),
        v["addr"].as_str()?.parse().ok()?,
    ))
}
