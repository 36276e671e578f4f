//! A real nginx in front of a test's gateway, proxying as docs/nginx-migration.md has it
//! (`X-Forwarded-For $proxy_add_x_forwarded_for`). Its port is picked free before it
//! starts (nginx cannot report a port 0 it bound); stopped on drop.
use super::*;

pub struct Nginx {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Nginx {
    /// nginx on 127.0.0.1, passing everything to `upstream` (an `ip:port`).
    pub fn start(upstream: SocketAddr) -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let d = dir.path().display();
        // Run as root (a test machine's CI), nginx's workers would switch to `nobody`; that
        // is fine for proxying, and `user` may only be named when root.
        let user = if std::process::Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0"))
        {
            "user root root;"
        } else {
            ""
        };
        let conf = format!(
            r#"{user}
worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://{upstream};
      proxy_http_version 1.1;
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_buffering off;
    }}
  }}
}}
"#
        );
        let path = dir.path().join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let child = Command::new("nginx")
            .arg("-c")
            .arg(&path)
            .arg("-p")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nginx is installed (scripts/test.sh installs it)");
        eventually_blocking(Duration::from_secs(10), "nginx listens", || {
            std::net::TcpStream::connect(("127.0.0.1", port))
                .ok()
                .map(|_| ())
        });
        Nginx {
            child,
            port,
            _dir: dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM, so the master stops its worker too (SIGKILL would leave it running).
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}
