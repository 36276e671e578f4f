//! docs/operations.md end to end: reload by every trigger, reloads under load, token rotation closing
//! streams, a broken file keeping the old configuration, the admin endpoints and metrics,
//! TLS with ALPN h2 and certificate replacement, mTLS, and graceful shutdown.

mod support;

use bytes::Bytes;
use http::Method;
use http_body_util::{BodyExt, Full};
use mcpgate::cli::sample;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use support::*;

const NEW_TOKEN: &str = "tok-rotated-in-Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz";

/// The config plus one more token for the gpt profile.
fn with_new_token(text: &str) -> String {
    format!(
        "{text}\n[[tokens]]\nid = \"rotated\"\nsha256 = \"{}\"\nprofiles = [\"gpt\"]\n",
        hash(NEW_TOKEN)
    )
}

async fn new_token_works(gw: &Gateway) -> bool {
    post(&gw.url(&format!("/gpt-mcp/{NEW_TOKEN}/mcp")), &[], &list(1))
        .await
        .status
        == 200
}

/// Polls until the new token is accepted (file watchers are asynchronous).
async fn eventually_new_token_works(gw: &Gateway) -> bool {
    for _ in 0..60 {
        if new_token_works(gw).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

async fn metrics(gw: &Gateway) -> String {
    send(Method::GET, &gw.admin_url("/metrics"), &[], "")
        .await
        .body
}

/// Files written on every request next to the configuration (the audit trail here) must
/// not wake the watcher; a change to the configuration itself must.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_files_beside_the_configuration_do_not_wake_the_watcher() {
    let up = json_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcpgate.toml");
    let audit = dir.path().join("audit.jsonl");
    let base = format!(
        "{}\n[audit]\npath = \"{}\"\n",
        config(&up.url(), "10s"),
        audit.display()
    );
    std::fs::write(&path, &base).unwrap();
    let gw = Gateway::start_at(&path);
    let woke = "configuration folder changed";
    for i in 0..20 {
        let r = post(
            &gw.url(&format!("/gpt-mcp/{GPT}/mcp")),
            &[],
            &call(i, "get_document"),
        )
        .await;
        assert_eq!(r.status, 200);
    }
    // A finished write of another file there (an editor's backup, a rotated log) reaches
    // inotify but is not the configuration.
    std::fs::write(dir.path().join("notes.txt"), "not the config").unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        std::fs::metadata(&audit).unwrap().len() > 0,
        "the audit file was written"
    );
    assert!(!gw.log().contains(woke), "{}", gw.log());
    std::fs::write(&path, with_new_token(&base)).unwrap();
    assert!(eventually_new_token_works(&gw).await);
    assert!(gw.log().contains(woke));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_by_every_trigger() {
    let up = json_upstream().await;
    let base = with_admin(config(&up.url(), "10s"));

    // Rename-replace (what editors do).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcpgate.toml");
    std::fs::write(&path, &base).unwrap();
    let gw = Gateway::start_at(&path);
    assert!(!new_token_works(&gw).await);
    let tmp = dir.path().join(".mcpgate.toml.swp");
    std::fs::write(&tmp, with_new_token(&base)).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    assert!(eventually_new_token_works(&gw).await, "rename-replace");
    drop(gw);

    // In-place write.
    std::fs::write(&path, &base).unwrap();
    let gw = Gateway::start_at(&path);
    std::fs::write(&path, with_new_token(&base)).unwrap();
    assert!(eventually_new_token_works(&gw).await, "in-place write");
    drop(gw);

    // Kubernetes ConfigMap: mcpgate.toml -> ..data/mcpgate.toml, ..data -> ..v1, swapped atomically.
    let k8s = tempfile::tempdir().unwrap();
    let v1 = k8s.path().join("..v1");
    let v2 = k8s.path().join("..v2");
    std::fs::create_dir(&v1).unwrap();
    std::fs::create_dir(&v2).unwrap();
    std::fs::write(v1.join("mcpgate.toml"), &base).unwrap();
    std::fs::write(v2.join("mcpgate.toml"), with_new_token(&base)).unwrap();
    std::os::unix::fs::symlink("..v1", k8s.path().join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/mcpgate.toml", k8s.path().join("mcpgate.toml")).unwrap();
    let gw = Gateway::start_at(&k8s.path().join("mcpgate.toml"));
    assert!(!new_token_works(&gw).await);
    std::os::unix::fs::symlink("..v2", k8s.path().join("..data_tmp")).unwrap();
    std::fs::rename(k8s.path().join("..data_tmp"), k8s.path().join("..data")).unwrap();
    assert!(
        eventually_new_token_works(&gw).await,
        "ConfigMap symlink swap"
    );
    drop(gw);

    // SIGHUP: the watcher may see the change too; the log must show a SIGHUP reload, so
    // the signal path is checked on its own (asserted below).
    std::fs::write(&path, &base).unwrap();
    let gw = Gateway::start_at(&path);
    std::fs::write(&path, with_new_token(&base)).unwrap();
    gw.signal("HUP");
    assert!(eventually_new_token_works(&gw).await, "SIGHUP");
    assert!(
        gw.log().contains("\"trigger\":\"SIGHUP\"")
            || gw.log().contains("\"trigger\":\"file change\"")
    );

    // POST /reload answers after the swap: the very next request sees the new token.
    std::fs::write(&path, &base).unwrap();
    let r = send(Method::POST, &gw.admin_url("/reload"), &[], "").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!new_token_works(&gw).await, "token removed by the reload");
    std::fs::write(&path, with_new_token(&base)).unwrap();
    let r = send(Method::POST, &gw.admin_url("/reload"), &[], "").await;
    assert_eq!(r.status, 200);
    assert!(new_token_works(&gw).await, "POST /reload");
    assert!(
        gw.log().contains("\"trigger\":\"SIGHUP\""),
        "the SIGHUP reload is logged by its trigger"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_keeps_the_old_configuration() {
    let up = json_upstream().await;
    let base = with_admin(config(&up.url(), "10s"));
    let gw = Gateway::start(&base);
    std::fs::write(
        gw.config_path(),
        base.replace("[tools]\n", "[tools]\nhiden = 1\n"),
    )
    .unwrap();
    let r = send(Method::POST, &gw.admin_url("/reload"), &[], "").await;
    assert_eq!(r.status, 422);
    assert!(
        r.body.contains("mcpgate.toml:") && r.body.contains("hiden"),
        "the error names file, position and cause: {}",
        r.body
    );
    // Still serving, with the old rules.
    let r = post(&gw.url(&format!("/gpt-mcp/{GPT}/mcp")), &[], &list(1)).await;
    assert_eq!(r.tool_names(), GPT_TOOLS);
    let m = metrics(&gw).await;
    assert!(
        m.contains("mcpgate_config_reload_total{result=\"error\"} "),
        "{m}"
    );
    assert!(m.contains("mcpgate_config_last_reload_success 0"));
    // The watcher also saw the broken file; whatever it did, the old config still serves.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        post(&gw.url(&format!("/gpt-mcp/{GPT}/mcp")), &[], &list(2))
            .await
            .status,
        200
    );

    // A listener change cannot be applied live: refused with the reason.
    std::fs::write(
        gw.config_path(),
        base.replace("name = \"main\"", "name = \"renamed\"")
            .replace("listen = \"main\"", "listen = \"renamed\""),
    )
    .unwrap();
    let r = send(Method::POST, &gw.admin_url("/reload"), &[], "").await;
    assert_eq!(r.status, 422);
    assert!(r.body.contains("restart required"), "{}", r.body);
    std::fs::write(gw.config_path(), &base).unwrap();
    let r = send(Method::POST, &gw.admin_url("/reload"), &[], "").await;
    assert_eq!(r.status, 200);
    assert!(
        metrics(&gw)
            .await
            .contains("mcpgate_config_last_reload_success 1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_reloads_under_load_fail_no_request() {
    let up = json_upstream().await;
    let base = with_admin(config(&up.url(), "10s"));
    let gw = Arc::new(Gateway::start(&base));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(Mutex::new(Vec::new()));
    let mut clients = Vec::new();
    for c in 0..4 {
        let (gw, stop, done, failed) = (gw.clone(), stop.clone(), done.clone(), failed.clone());
        clients.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let body = if i % 2 == 0 {
                    list(i)
                } else {
                    call(i, "get_document")
                };
                let r = post(&gw.url(&format!("/gpt-mcp/{GPT}/mcp")), &[], &body).await;
                let ok = r.status == 200 && r.json().get("result").is_some();
                if !ok {
                    failed
                        .lock()
                        .unwrap()
                        .push(format!("client {c} request {i}: {} {}", r.status, r.body));
                }
                done.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        }));
    }
    for n in 0..20 {
        // Alternate between two valid configurations so each reload really swaps.
        let text = if n % 2 == 0 {
            with_new_token(&base)
        } else {
            base.clone()
        };
        std::fs::write(gw.config_path(), text).unwrap();
        let r = send(Method::POST, &gw.admin_url("/reload"), &[], "").await;
        assert_eq!(r.status, 200, "{}", r.body);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let failed = failed.lock().unwrap().clone();
    assert!(
        failed.is_empty(),
        "{} failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    assert!(done.load(Ordering::Relaxed) >= 40, "the clients really ran");
    assert!(
        metrics(&gw)
            .await
            .contains("mcpgate_config_reload_total{result=\"ok\"} ")
    );
}

use std::sync::Mutex;

/// A stream being read: when it ended and what it carried, and what came so far.
struct Open {
    ended: tokio::task::JoinHandle<(Instant, String)>,
    seen: Arc<Mutex<Vec<u8>>>,
}

impl Open {
    fn seen(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().unwrap()).into_owned()
    }
}

/// Opens a stream and reads it to its end.
async fn open_stream(
    url: String,
    headers: Vec<(&'static str, String)>,
    body: Option<String>,
) -> Open {
    let client: hyper_util::client::legacy::Client<_, Full<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();
    let mut req = http::Request::new(Full::new(Bytes::from(body.clone().unwrap_or_default())));
    *req.method_mut() = if body.is_some() {
        Method::POST
    } else {
        Method::GET
    };
    *req.uri_mut() = url.parse().unwrap();
    for (k, v) in headers {
        req.headers_mut().insert(k, v.parse().unwrap());
    }
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let text = seen.clone();
    let ended = tokio::spawn(async move {
        let mut body = resp.into_body();
        while let Some(Ok(f)) = body.frame().await {
            if let Ok(d) = f.into_data() {
                text.lock().unwrap().extend_from_slice(&d);
            }
        }
        let text = String::from_utf8_lossy(&text.lock().unwrap()).into_owned();
        (Instant::now(), text)
    });
    Open { ended, seen }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_token_closes_its_open_streams() {
    let up = upstream(sample::Options {
        stream: Some((10_000, Duration::from_millis(100))),
        ..Default::default()
    })
    .await;
    let base = with_admin(config(&up.url(), "10s"));
    let gw = Gateway::start(&with_new_token(&base));
    let sse = vec![("accept", "text/event-stream".to_string())];
    let revoked = open_stream(
        gw.url(&format!("/gpt-mcp/{NEW_TOKEN}/mcp")),
        sse.clone(),
        None,
    )
    .await;
    let kept = open_stream(gw.url(&format!("/gpt-mcp/{GPT}/mcp")), sse.clone(), None).await;
    let listen =
        r#"{"jsonrpc":"2.0","id":"sub","method":"subscriptions/listen","params":{}}"#.to_string();
    let revoked_post = open_stream(
        gw.url(&format!("/gpt-mcp/{NEW_TOKEN}/mcp")),
        vec![
            ("accept", SDK_ACCEPT.to_string()),
            ("content-type", "application/json".to_string()),
        ],
        Some(listen),
    )
    .await;
    eventually(Duration::from_secs(5), "three live streams", || async {
        let open = metrics(&gw).await.contains("mcpgate_open_streams 3");
        (open && revoked.seen().contains("tick 1")).then_some(())
    })
    .await;

    std::fs::write(gw.config_path(), &base).unwrap();
    let r = send(Method::POST, &gw.admin_url("/reload"), &[], "").await;
    assert_eq!(r.status, 200);
    let reloaded = Instant::now();
    let (ended, text) = tokio::time::timeout(Duration::from_secs(5), revoked.ended)
        .await
        .expect("revoked stream closed")
        .unwrap();
    assert!(
        ended.duration_since(reloaded) < Duration::from_secs(1),
        "closed within a second of the reload"
    );
    assert!(text.contains("tick 1"), "it was a live stream");
    let (_, text) = tokio::time::timeout(Duration::from_secs(5), revoked_post.ended)
        .await
        .expect("revoked POST stream closed")
        .unwrap();
    assert!(
        text.contains("\"id\":\"sub\"") && text.contains("-32001"),
        "the pending request learns why: {text}"
    );
    assert!(!kept.ended.is_finished(), "streams of other tokens go on");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!kept.ended.is_finished());
    assert!(metrics(&gw).await.contains("mcpgate_open_streams 1"));
    kept.ended.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints_and_metrics() {
    let up = json_upstream().await;
    let gw = Gateway::start(&with_admin(config(&up.url(), "10s")));
    assert_eq!(
        send(Method::GET, &gw.admin_url("/healthz"), &[], "")
            .await
            .status,
        200
    );
    assert_eq!(
        send(Method::GET, &gw.admin_url("/readyz"), &[], "")
            .await
            .status,
        200
    );
    assert_eq!(
        send(Method::GET, &gw.admin_url("/nope"), &[], "")
            .await
            .status,
        404
    );
    assert_eq!(
        send(Method::GET, &gw.admin_url("/reload"), &[], "")
            .await
            .status,
        405
    );
    // The admin endpoints are not on the MCP listener.
    assert_eq!(
        send(Method::GET, &gw.url("/metrics"), &[], "").await.status,
        404
    );

    let gpt = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    post(&gpt, &[], &call(1, "get_document")).await;
    post(&gpt, &[], &call(2, "move_document")).await;
    post(&gw.url("/gpt-mcp/wrong/mcp"), &[], &list(3)).await;
    post(
        &gpt,
        &[],
        r#"{"jsonrpc":"2.0","id":4,"method":"x/made-up-by-a-client"}"#,
    )
    .await;
    let m = metrics(&gw).await;
    for want in [
        "mcpgate_requests_total{route=\"/gpt-mcp/{token}/mcp\",profile=\"gpt\",method=\"tools/call\",status=\"200\"} 2",
        "mcpgate_requests_total{route=\"/gpt-mcp/{token}/mcp\",profile=\"gpt\",method=\"(other)\",status=\"200\"} 1",
        "mcpgate_tool_calls_total{profile=\"gpt\",tool=\"get_document\",outcome=\"forwarded\"} 1",
        "mcpgate_tool_calls_total{profile=\"gpt\",tool=\"move_document\",outcome=\"refused\"} 1",
        "mcpgate_refusals_total{reason=\"bad_path_token\"} 1",
        "mcpgate_refusals_total{reason=\"policy\"} 1",
        "mcpgate_upstream_duration_seconds_count{upstream=\"docs\"} 2",
        "mcpgate_request_duration_seconds_bucket{",
        "mcpgate_open_streams 0",
    ] {
        assert!(m.contains(want), "missing {want}\n{m}");
    }
    for t in ALL_TOKENS {
        assert!(!m.contains(t));
    }
    assert!(!m.contains("wrong"), "no request path in metrics");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_slow_call_finish_then_exits_zero() {
    let up = upstream(sample::Options {
        call_delay: Some(Duration::from_millis(1500)),
        ..Default::default()
    })
    .await;
    let mut gw = Gateway::start(&with_admin(config(&up.url(), "10s")));
    let url = gw.url("/mcp-gpt-full");
    let slow = tokio::spawn(async move { post(&url, &[], &call(1, "get_document")).await });
    // A kept-alive connection, idle between requests when the drain begins.
    use tokio::io::AsyncWriteExt;
    let mut idle = tokio::net::TcpStream::connect(gw.listeners["main"])
        .await
        .unwrap();
    idle.write_all(b"GET /nowhere HTTP/1.1\r\nHost: gw\r\n\r\n")
        .await
        .unwrap();
    assert!(read_answer(&mut idle).await.starts_with("HTTP/1.1 404"));
    tokio::time::sleep(Duration::from_millis(400)).await;
    gw.signal("TERM");
    // The idle connection is woken and closed at once, not left to the grace.
    let (took, rest) = until_closed(&mut idle, Duration::from_secs(5)).await;
    assert!(took < Duration::from_secs(2), "closed after {took:?}");
    assert_eq!(rest, "");
    let ready = send(Method::GET, &gw.admin_url("/readyz"), &[], "").await;
    assert_eq!(ready.status, 503, "not ready while draining");
    // No new connections.
    assert!(
        tokio::net::TcpStream::connect(gw.listeners["main"])
            .await
            .is_err()
    );
    let r = slow.await.unwrap();
    assert_eq!(r.status, 200, "the in-flight call finished: {}", r.body);
    assert_eq!(r.json()["result"]["isError"], false);
    let code = tokio::task::spawn_blocking(move || gw.wait_exit(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(code, Some(0));
}

// ---- TLS ----

/// A TLS handshake to `addr` as `localhost`: the negotiated ALPN and the server's certificate.
async fn handshake(
    addr: std::net::SocketAddr,
    config: rustls::ClientConfig,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    connector.connect(name, tcp).await
}

fn tls_config(up: &str, pki: &Pki, client_ca: bool) -> String {
    let ca = if client_ca {
        format!(", client_ca = \"{}\"", pki.path("ca.pem"))
    } else {
        String::new()
    };
    with_admin(config(up, "10s").replacen(
        "addr = \"127.0.0.1:0\"\n",
        &format!(
            "addr = \"127.0.0.1:0\"\ntls = {{ cert = \"{}\", key = \"{}\"{ca} }}\n",
            pki.path("server.pem"),
            pki.path("server.key")
        ),
        1,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_h2_and_certificate_replacement() {
    let up = json_upstream().await;
    let pki = Pki::new();
    let first = pki.issue("server", &["localhost", "127.0.0.1"], false);
    let gw = Gateway::start(&tls_config(&up.url(), &pki, false));
    let addr = gw.listeners["main"];

    let tls = handshake(addr, pki.client_config(None)).await.unwrap();
    let (_, conn) = tls.get_ref();
    assert_eq!(conn.alpn_protocol(), Some(&b"h2"[..]), "ALPN selects h2");
    assert_eq!(
        conn.peer_certificates().unwrap()[0].as_ref(),
        first.as_slice()
    );

    // A real MCP request over HTTP/2 on that connection.
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let req = http::Request::post(format!("https://localhost/gpt-mcp/{GPT}/mcp"))
        .header("content-type", "application/json")
        .header("accept", SDK_ACCEPT)
        .body(Full::new(Bytes::from(list(1))))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["result"]["tools"].as_array().unwrap().len(), 9);
    assert!(
        up.received()[0].headers["x-forwarded-proto"] == "https",
        "the upstream learns the client used TLS"
    );

    // Replace the certificate on disk: the next handshake presents the new one.
    let second = pki.issue("server", &["localhost", "127.0.0.1"], false);
    assert_ne!(first, second);
    let mut served = Vec::new();
    for _ in 0..50 {
        let tls = handshake(addr, pki.client_config(None)).await.unwrap();
        served = tls.get_ref().1.peer_certificates().unwrap()[0]
            .as_ref()
            .to_vec();
        if served == second {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        served, second,
        "the replaced certificate is served on the next handshake"
    );
    // HTTP/1.1 still works for clients that only speak it.
    let mut h1 = pki.client_config(None);
    h1.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tls = handshake(addr, h1).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_refuses_clients_without_a_certificate() {
    let up = json_upstream().await;
    let pki = Pki::new();
    pki.issue("server", &["localhost"], false);
    pki.issue("client", &["client.example"], true);
    let gw = Gateway::start(&tls_config(&up.url(), &pki, true));
    let addr = gw.listeners["main"];

    // Without a certificate the handshake (or the first read after it, in TLS 1.3) fails.
    let refused = match handshake(addr, pki.client_config(None)).await {
        Err(_) => true,
        Ok(mut tls) => {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let _ = tls
                .write_all(b"GET / HTTP/1.1\r\nhost: localhost\r\n\r\n")
                .await;
            let mut buf = [0u8; 64];
            !matches!(tls.read(&mut buf).await, Ok(n) if n > 0)
        }
    };
    assert!(refused, "a client without a certificate is refused");

    let tls = handshake(addr, pki.client_config(Some("client")))
        .await
        .unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let req = http::Request::post("https://localhost/mcp-gpt-full")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(list(1))))
        .unwrap();
    assert_eq!(sender.send_request(req).await.unwrap().status(), 200);
}

/// Upstream pools belong to the gateway, not to a configuration: a reload that keeps the
/// upstream's address (here it only adds a token) keeps its kept connections. All the
/// requests go over one client connection, so one worker, with one upstream connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_only_reload_keeps_upstream_connections() {
    use tokio::io::AsyncWriteExt;
    let upstream = json_upstream().await;
    let text = with_admin(config(&upstream.url(), "5s"));
    let gw = Gateway::start(&text);
    let mut client = tokio::net::TcpStream::connect(gw.listeners["main"])
        .await
        .unwrap();
    let req = raw_list_request();
    let mut three_lists = async || {
        for _ in 0..3 {
            client.write_all(req.as_bytes()).await.unwrap();
            let answer = read_answer(&mut client).await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        }
    };
    three_lists().await;
    assert_eq!(upstream.connections(), 1, "one kept upstream connection");
    std::fs::write(gw.config_path(), with_new_token(&text)).unwrap();
    let r = send(Method::POST, &gw.admin_url("/reload"), &[], "").await;
    assert_eq!(r.status, 200, "{}", r.body);
    three_lists().await;
    assert_eq!(
        upstream.connections(),
        1,
        "the reload kept the upstream connection"
    );
    assert!(new_token_works(&gw).await, "the reload took effect");
}

/// A keep-alive HTTP/1.1 POST of a one-element tools/list, as raw bytes for a socket.
fn raw_list_request() -> String {
    let body = list(1);
    format!(
        "POST /mcp-gpt-full HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Whether a connection closed `took` after the start of a `timeout` did so within what
/// the connection watch promises: no sooner than the timeout, at most two checks (1/8 of
/// it) later, plus room for a loaded machine.
fn closed_in_bound(timeout: Duration, took: Duration) -> bool {
    took >= timeout && took < timeout + timeout / 8 + Duration::from_millis(400)
}

/// The idle timeout counts from a connection's last byte: requests closer together than it
/// keep a connection open well past it, and a quiet connection is closed no sooner than
/// the timeout after its last byte and not much later (at most 2 × 1/16 of it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_timeout_counts_from_the_last_byte() {
    use tokio::io::AsyncWriteExt;
    let up = json_upstream().await;
    let idle = Duration::from_millis(800);
    let gw = Gateway::start(&format!(
        "{}\n[server]\nheader_read_timeout = \"1h\"\nidle_timeout = \"800ms\"\n",
        config(&up.url(), "300ms")
    ));
    let mut conn = tokio::net::TcpStream::connect(gw.listeners["main"])
        .await
        .unwrap();
    let req = raw_list_request();
    let opened = std::time::Instant::now();
    // Eight requests 300 ms apart: 2.4 s, three times the timeout.
    for _ in 0..8 {
        conn.write_all(req.as_bytes()).await.unwrap();
        let answer = read_answer(&mut conn).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(opened.elapsed() > idle * 3);
    conn.write_all(req.as_bytes()).await.unwrap();
    let answer = read_answer(&mut conn).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "still open: {answer}");
    let (quiet, rest) = until_closed(&mut conn, Duration::from_secs(5)).await;
    assert!(rest.is_empty(), "{rest}");
    assert!(
        closed_in_bound(idle, quiet),
        "closed {quiet:?} after the last byte"
    );
}

/// The header-read timeout counts from when a connection starts waiting for a head (on a
/// kept connection, the end of the previous answer): bytes that trickle in do not extend
/// it, a head that arrives within it is served, and a connection whose head does not is
/// closed without an answer no sooner than the timeout and not much later (at most 2 ×
/// 1/16 of it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_read_timeout_counts_from_the_wait() {
    use tokio::io::AsyncWriteExt;
    let up = json_upstream().await;
    let header = Duration::from_millis(800);
    let gw = Gateway::start(&format!(
        "{}\n[server]\nheader_read_timeout = \"800ms\"\nidle_timeout = \"1h\"\n",
        config(&up.url(), "300ms")
    ));
    let addr = gw.listeners["main"];
    let bound = |took: Duration| closed_in_bound(header, took);

    // A head sent a few bytes at a time over 500 ms is within the timeout: served.
    let req = raw_list_request();
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    for (i, piece) in req.as_bytes().chunks(req.len().div_ceil(5)).enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        conn.write_all(piece).await.unwrap();
    }
    let answer = read_answer(&mut conn).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // Then a head that trickles in a byte every 100 ms (its whole would take 20 s): the
    // bytes keep the connection from being idle, not the head from being late. The wait
    // began with the answer; the close is seen while the bytes still go out.
    let waited = std::time::Instant::now();
    let (mut rd, mut wr) = conn.split();
    let trickle = async {
        for b in req.as_bytes() {
            if wr.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        std::future::pending::<Vec<u8>>().await
    };
    let closed = async {
        use tokio::io::AsyncReadExt;
        let (mut got, mut buf) = (Vec::new(), [0u8; 1024]);
        while let Ok(n) = rd.read(&mut buf).await
            && n > 0
        {
            got.extend_from_slice(&buf[..n]);
        }
        got
    };
    let rest = tokio::time::timeout(Duration::from_secs(5), async {
        tokio::select! { got = trickle => got, got = closed => got }
    })
    .await
    .expect("a trickled head is cut off");
    let took = waited.elapsed();
    assert!(rest.is_empty(), "no answer to a late head: {rest:?}");
    assert!(bound(took), "a trickled head was cut off after {took:?}");

    // A connection that sends nothing: closed within the bound of its opening.
    let mut quiet = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (took, rest) = until_closed(&mut quiet, Duration::from_secs(5)).await;
    assert!(rest.is_empty(), "{rest}");
    assert!(bound(took), "a silent connection closed after {took:?}");

    // On a kept connection, the wait for the next head starts after the answer.
    let mut kept = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    kept.write_all(req.as_bytes()).await.unwrap();
    let answer = read_answer(&mut kept).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (took, rest) = until_closed(&mut kept, Duration::from_secs(5)).await;
    assert!(rest.is_empty(), "{rest}");
    assert!(bound(took), "closed {took:?} after the answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_hygiene_knobs() {
    use tokio::io::AsyncWriteExt;
    let up = json_upstream().await;
    // Each timeout is tested where the other one is an hour, so only it can close.
    let header_only = format!(
        "{}\n[server]\nheader_read_timeout = \"400ms\"\nidle_timeout = \"1h\"\nmax_header_size = \"8KiB\"\nmax_connections = 2\n",
        config(&up.url(), "300ms")
    );
    let idle_only = format!(
        "{}\n[server]\nheader_read_timeout = \"1h\"\nidle_timeout = \"700ms\"\n",
        config(&up.url(), "300ms")
    );
    let idle_gw = Gateway::start(&idle_only);
    assert!(
        idle_gw
            .log()
            .contains("idle_timeout is not longer than transport.sse_keepalive"),
        "check's warnings are logged at start"
    );
    let gw = Gateway::start(&header_only);
    let addr = gw.listeners["main"];

    // Slow headers (slowloris): closed by the header read timeout.
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"POST /mcp-gpt-full HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    let (took, _) = until_closed(&mut slow, Duration::from_secs(5)).await;
    assert!(
        took < Duration::from_secs(5),
        "a connection that never finishes its headers is closed"
    );
    drop(slow);

    // On a kept connection the header timeout counts from the end of the last answer,
    // not from when the connection opened: requests 300 ms apart are served well past
    // 400 ms, then the connection closes once it waits longer than that.
    let mut kept = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = raw_list_request();
    for _ in 0..4 {
        kept.write_all(req.as_bytes()).await.unwrap();
        let answer = read_answer(&mut kept).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (took, rest) = until_closed(&mut kept, Duration::from_secs(5)).await;
    assert!(rest.is_empty() && took < Duration::from_secs(5), "{rest}");
    drop(kept);

    // A keep-alive connection idle after its answer: closed by the idle timeout.
    let mut idle = tokio::net::TcpStream::connect(idle_gw.listeners["main"])
        .await
        .unwrap();
    let req = raw_list_request();
    idle.write_all(req.as_bytes()).await.unwrap();
    let (took, answer) = until_closed(&mut idle, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        took < Duration::from_secs(5),
        "closed after the answer once idle"
    );
    drop(idle);

    // Oversized headers are refused, not buffered.
    let big = format!(
        "POST /mcp-gpt-full HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    let answer = raw(addr, big.as_bytes()).await;
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "{}",
        &answer[..answer.len().min(100)]
    );

    // max_connections = 2: a third connection waits until one of the first two closes.
    let mut a = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut b = tokio::net::TcpStream::connect(addr).await.unwrap();
    a.write_all(b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    b.write_all(b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let third = tokio::spawn(async move {
        post(&format!("http://{addr}/mcp-gpt-full"), &[], &list(2))
            .await
            .status
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(
        !third.is_finished(),
        "the third connection is not served while two are open"
    );
    drop(a);
    drop(b);
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(5), third)
            .await
            .unwrap()
            .unwrap(),
        200
    );
}

#[test]
fn log_format_pretty_is_human() {
    let text = format!(
        "{}\n[log]\nformat = \"pretty\"\nlevel = \"info\"\n",
        config("http://127.0.0.1:9/mcp", "10s")
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.toml");
    std::fs::write(&path, text).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .args(["run", "-c"])
        .arg(&path)
        .env("MCPGATE_TEST_API_KEY", API_KEY)
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stderr.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        line.contains(" INFO ") && line.contains("listening") && !line.starts_with('{'),
        "{line}"
    );
}

/// The runtime shape `docs/architecture.md` describes: one worker thread per CPU beside
/// the control thread, and requests on separate connections served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_thread_per_cpu() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let url = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    // Separate connections (one client each), so they are spread over the workers.
    for i in 0..8 {
        let r = post(&url, &[], &call(i, "get_document")).await;
        assert_eq!(r.status, 200);
    }
    let cpus = std::thread::available_parallelism().unwrap().get();
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", gw.pid()))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .filter(|n| n.starts_with("mcpgate-wrk"))
        .collect();
    names.sort();
    let expected: Vec<String> = (1..=cpus).map(|i| format!("mcpgate-wrk-{i}")).collect();
    assert_eq!(names, expected);
}

/// The `request` lines of a JSON log, each checked to be a 200; panics on a line that is
/// not one whole JSON object.
fn answered_request_lines(log: &str) -> usize {
    let mut requests = 0;
    for line in log.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not one JSON object per line ({e}): {line:?}"));
        if v["message"] == "request" {
            assert_eq!(v["status"], 200);
            requests += 1;
        }
    }
    requests
}

/// Workers gather their log lines and write several at once: under concurrent load every
/// request's line still arrives, whole, one JSON object per line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_lines_written_in_batches_arrive_whole() {
    let up = json_upstream().await;
    let gw = Arc::new(Gateway::start(&config(&up.url(), "10s")));
    let url = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                assert_eq!(post(&url, &[], &list(1)).await.status, 200);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let log = gw.log_with("\"message\":\"request\"", 300).await;
    let requests = answered_request_lines(&log);
    assert_eq!(requests, 300);
}

/// With stderr a regular file (as in `2>>mcpgate.log`), under concurrent load from many
/// connections every request's line arrives whole, and a normal stop writes what was
/// gathered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_lines_written_to_a_file_arrive_whole() {
    let up = json_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.toml");
    std::fs::write(&path, config(&up.url(), "10s")).unwrap();
    let log_path = dir.path().join("mcpgate.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .args(["run", "-c"])
        .arg(&path)
        .env("MCPGATE_TEST_API_KEY", API_KEY)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let addr = loop {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        if let Some((_, addr)) = text.lines().find_map(parse_listening) {
            break addr;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no listening line: {text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let url = format!("http://{addr}/gpt-mcp/{GPT}/mcp");
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..40 {
                assert_eq!(post(&url, &[], &call(i, "get_document")).await.status, 200);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    assert!(child.wait().unwrap().success());
    let log = std::fs::read_to_string(&log_path).unwrap();
    let requests = answered_request_lines(&log);
    assert_eq!(requests, 640);
}

/// `mcpgate healthcheck` (for container probes) asks the admin listener and exits 0 only on
/// a 200; with nothing listening it fails and says where it looked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_command_asks_the_admin_listener() {
    let up = json_upstream().await;
    let gw = Gateway::start(&with_admin(config(&up.url(), "10s")));
    let admin = gw.listeners["admin"].to_string();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_mcpgate"))
            .arg("healthcheck")
            .args(args)
            .output()
            .unwrap()
    };
    assert!(run(&["--admin", &admin]).status.success());
    assert!(run(&["--admin", &admin, "--ready"]).status.success());
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nobody = closed.local_addr().unwrap().to_string();
    drop(closed);
    let out = run(&["--admin", &nobody]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot reach the admin listener at {nobody}")),
        "{err}"
    );
}
