//! A real `redis-server` for the shared-limits tests.
use super::*;

/// A real `redis-server` (Debian's package; `scripts/test.sh` installs it) on a loopback
/// port, with no persistence: a restart starts empty, as a replaced pod would. Killed on
/// drop.
pub struct Redis {
    child: Option<Child>,
    pub port: u16,
    args: Vec<String>,
    dir: tempfile::TempDir,
}

impl Redis {
    pub fn start() -> Redis {
        Self::start_with(&[])
    }

    /// With extra `redis-server` arguments (`--requirepass`, …).
    pub fn start_with(args: &[&str]) -> Redis {
        let port = free_port();
        let mut redis = Redis {
            child: None,
            port,
            args: args.iter().map(|a| a.to_string()).collect(),
            dir: tempfile::tempdir().unwrap(),
        };
        redis.restart();
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Starts it (again) on the same port and waits until it answers.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (scripts/test.sh installs Debian's redis-server)");
        self.child = Some(child);
        for _ in 0..200 {
            if self
                .try_cli(&["PING"])
                .is_some_and(|o| o.contains("PONG") || o.contains("NOAUTH"))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("redis-server did not start on port {}", self.port);
    }

    /// SIGKILL, as a crashed node.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends a signal (`STOP`, `CONT`) to the server: a stopped server keeps its socket
    /// open and answers nothing.
    pub fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id();
        assert!(
            Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(pid.to_string())
                .status()
                .unwrap()
                .success()
        );
    }

    fn try_cli(&self, args: &[&str]) -> Option<String> {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-h", "127.0.0.1", "-p", &self.port.to_string()]);
        if let Some(at) = self.args.iter().position(|a| a == "--requirepass") {
            cmd.args(["--no-auth-warning", "-a", &self.args[at + 1]]);
        }
        let o = cmd.args(args).output().ok()?;
        o.status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
    }

    /// `redis-cli` against it; its output.
    pub fn cli(&self, args: &[&str]) -> String {
        self.try_cli(args)
            .unwrap_or_else(|| panic!("redis-cli {args:?} failed"))
    }

    /// How many times Redis ran `command` (from INFO commandstats), e.g. `evalsha`.
    pub fn calls(&self, command: &str) -> u64 {
        let stats = self.cli(&["INFO", "commandstats"]);
        let prefix = format!("cmdstat_{command}:calls=");
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits (up to 15 s: the store's reconnect backoff is at most 5 s) until the gateway's
/// `mcpgate_limit_store_up` is `up`.
pub async fn wait_store_up(gw: &Gateway, up: bool) {
    let want = format!("mcpgate_limit_store_up {}", u8::from(up));
    for _ in 0..150 {
        let m = send(Method::GET, &gw.admin_url("/metrics"), &[], "")
            .await
            .body;
        if m.lines().any(|l| l == want) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the store never became up={up}:\n{}", gw.log());
}
