//! https upstreams: the sample server behind a TLS front made with rustls in this process
//! (certificates from rcgen), reached through mcpgate with an extra CA, a verify name and
//! a client certificate; and every certificate problem a 502 whose log line names it,
//! with nothing sent in the clear.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use support::*;

/// A TLS front for `backend`: the certificate `NAME.pem`/`NAME.key` from `pki`, asking
/// for a client certificate the CA signed when `client_ca`, copying bytes both ways once
/// the handshake is done. Returns its address and the handshakes it completed.
async fn tls_front(
    pki: &Pki,
    name: &str,
    client_ca: bool,
    backend: SocketAddr,
) -> (SocketAddr, Arc<AtomicUsize>) {
    use rustls_pki_types::pem::PemObject;
    let chain = rustls_pki_types::CertificateDer::pem_file_iter(pki.path(&format!("{name}.pem")))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key =
        rustls_pki_types::PrivateKeyDer::from_pem_file(pki.path(&format!("{name}.key"))).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = if client_ca {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(pki.ca_cert.der().clone()).unwrap();
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let config = builder.with_single_cert(chain, key).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handshakes = Arc::new(AtomicUsize::new(0));
    let counted = handshakes.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let counted = counted.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                counted.fetch_add(1, Ordering::Relaxed);
                let Ok(mut plain) = tokio::net::TcpStream::connect(backend).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    (addr, handshakes)
}

/// The test deployment with its upstream at `url` and the upstream's `tls` table.
fn https_config(url: &str, tls: &str) -> String {
    config(url, "10s").replacen(
        "[upstreams.docs]\n",
        &format!("[upstreams.docs]\ntls = {tls}\n"),
        1,
    )
}

/// An https upstream whose certificate names `mcp.internal` and chains to a private CA:
/// reached at `127.0.0.1` with that CA and that verify name, every call arrives, the
/// connections are kept (a handshake per worker at most, not per call), and `Host` is the
/// url's. With a client certificate required, the configured one is offered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstreams_are_verified_and_their_connections_kept() {
    let up = json_upstream().await;
    let pki = Pki::new();
    pki.issue("mcp", &["mcp.internal"], false);
    pki.issue("gateway", &["gateway.example"], true);
    for client_ca in [false, true] {
        let (front, handshakes) = tls_front(&pki, "mcp", client_ca, up.addr).await;
        let client = if client_ca {
            format!(
                r#", cert = "{}", key = "{}""#,
                pki.path("gateway.pem"),
                pki.path("gateway.key")
            )
        } else {
            String::new()
        };
        let tls = format!(
            r#"{{ ca = "{}", server_name = "mcp.internal"{client} }}"#,
            pki.path("ca.pem")
        );
        let gw = Gateway::start(&https_config(
            &format!("https://127.0.0.1:{}/mcp", front.port()),
            &tls,
        ));
        let before = up.received().len();
        for id in 1..=4 {
            let r = post(&gw.url("/mcp-gpt-full"), &[], &call(id, "get_document")).await;
            assert_eq!(r.status, 200, "client_ca={client_ca}: {}", r.body);
        }
        let received = up.received();
        assert_eq!(received.len() - before, 4);
        let last = received.last().unwrap();
        assert_eq!(last.headers["host"], format!("127.0.0.1:{}", front.port()));
        let made = handshakes.load(Ordering::Relaxed);
        assert!((1..=2).contains(&made), "{made} handshakes for 4 calls");
    }
}

/// Every certificate problem fails the call with 502 -32006 and a log line naming the
/// cause; the upstream gets nothing, and mcpgate never falls back to plain HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_certificate_problems_are_502_and_named_in_the_log() {
    let up = json_upstream().await;
    let pki = Pki::new();
    pki.issue("mcp", &["mcp.internal"], false);
    pki.issue_expired("old", &["mcp.internal"]);
    let ca = pki.path("ca.pem");
    let (good, _) = tls_front(&pki, "mcp", false, up.addr).await;
    let (expired, _) = tls_front(&pki, "old", false, up.addr).await;
    let (asks_client, _) = tls_front(&pki, "mcp", true, up.addr).await;
    let named = format!(r#"{{ ca = "{ca}", server_name = "mcp.internal" }}"#);
    let cases = [
        (
            "unknown CA",
            good,
            r#"{ server_name = "mcp.internal" }"#.to_string(),
            "UnknownIssuer",
        ),
        (
            "wrong name",
            good,
            format!(r#"{{ ca = "{ca}" }}"#),
            "NotValidForName",
        ),
        ("expired", expired, named.clone(), "Expired"),
        (
            "no client certificate",
            asks_client,
            named.clone(),
            "CertificateRequired",
        ),
    ];
    for (what, front, tls, cause) in cases {
        let gw = Gateway::start(&https_config(
            &format!("https://127.0.0.1:{}/mcp", front.port()),
            &tls,
        ));
        let r = post(&gw.url("/mcp-gpt-full"), &[], &call(9, "get_document")).await;
        assert_eq!(r.status, 502, "{what}: {}", r.body);
        assert_eq!(r.json()["error"]["code"], -32006, "{what}");
        assert_eq!(r.json()["id"], 9);
        // The warning is written a moment after the answer.
        gw.log_with(cause, 1).await;
    }
    assert!(up.received().is_empty(), "nothing reached the upstream");

    // A plain-HTTP upstream named https: the handshake fails, nothing is sent in clear.
    let gw = Gateway::start(&https_config(
        &up.url().replace("http://", "https://"),
        &named,
    ));
    let r = post(&gw.url("/mcp-gpt-full"), &[], &call(10, "get_document")).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert!(up.received().is_empty(), "no request in the clear");
}

/// The upstream's CA file is watched like the listener's certificates: replacing it
/// reloads the configuration, and the next call makes its connection with the new roots
/// (the pool is keyed by the TLS settings, so none made with the old ones is reused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_ca_file_is_used_without_a_restart() {
    let up = json_upstream().await;
    let pki = Pki::new();
    let stranger = Pki::new();
    pki.issue("mcp", &["mcp.internal"], false);
    let (front, _) = tls_front(&pki, "mcp", false, up.addr).await;
    let ca = pki.dir.path().join("trusted.pem");
    std::fs::write(&ca, stranger.ca_cert.pem()).unwrap();
    let tls = format!(
        r#"{{ ca = "{}", server_name = "mcp.internal" }}"#,
        ca.display()
    );
    let gw = Gateway::start(&https_config(
        &format!("https://127.0.0.1:{}/mcp", front.port()),
        &tls,
    ));
    let r = post(&gw.url("/mcp-gpt-full"), &[], &call(1, "get_document")).await;
    assert_eq!(r.status, 502, "a CA that did not sign it: {}", r.body);

    let tmp = pki.dir.path().join(".trusted.pem");
    std::fs::write(&tmp, pki.ca_cert.pem()).unwrap();
    std::fs::rename(&tmp, &ca).unwrap();
    let started = std::time::Instant::now();
    loop {
        let r = post(&gw.url("/mcp-gpt-full"), &[], &call(2, "get_document")).await;
        if r.status == 200 {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "still {} after the CA file was replaced: {}",
            r.status,
            gw.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(gw.log().contains("reload"), "{}", gw.log());
}

/// Replicas over https share the upstream's `tls` table: each session stays on the endpoint
/// that made it, with that endpoint's own verified connections; an endpoint whose
/// certificate does not verify counts as one that cannot be reached, so a request without
/// a session goes to another (it cannot have been sent), and nothing goes out in the clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_replicas_keep_sessions_and_skip_an_endpoint_that_does_not_verify() {
    let (a, b) = (json_upstream().await, json_upstream().await);
    let pki = Pki::new();
    pki.issue("mcp", &["mcp.internal"], false);
    pki.issue("other", &["other.internal"], false);
    let (front_a, _) = tls_front(&pki, "mcp", false, a.addr).await;
    let (front_b, _) = tls_front(&pki, "mcp", false, b.addr).await;
    let bad = json_upstream().await;
    let (front_bad, _) = tls_front(&pki, "other", false, bad.addr).await;
    let urls = [front_a, front_b, front_bad]
        .map(|f| format!("\"https://127.0.0.1:{}/mcp\"", f.port()))
        .join(", ");
    let text = config("http://127.0.0.1:9/mcp", "10s").replacen(
        "url = \"http://127.0.0.1:9/mcp\"",
        &format!(
            "endpoints = [{urls}]\nbalance = \"round_robin\"\nsession_key = \"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\"\noutlier = {{ consecutive_failures = 100 }}\ntls = {{ ca = \"{}\", server_name = \"mcp.internal\" }}",
            pki.path("ca.pem")
        ),
        1,
    );
    let gw = Gateway::start(&text);
    let url = gw.url("/mcp-gpt-full");
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    // Round robin over three: a, b, then the bad one, which fails its handshake, so that
    // initialize goes on to a.
    let mut sessions = Vec::new();
    for _ in 0..3 {
        let r = post(&url, &[], init).await;
        assert_eq!(r.status, 200, "{}", r.body);
        sessions.push(r.header("mcp-session-id").to_string());
    }
    assert_eq!(
        bad.received().len(),
        0,
        "nothing reached the endpoint that did not verify"
    );
    assert_eq!(a.received().len(), 2);
    assert_eq!(b.received().len(), 1);
    for (id, s) in sessions.iter().enumerate() {
        let r = post(
            &url,
            &[("mcp-session-id", s)],
            &call(id as u64 + 10, "get_document"),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    // Each session's call reached the server that made it, with that server's own id.
    for server in [&a, &b] {
        let got = server.received();
        let made = got
            .iter()
            .filter(|r| r.headers.get("mcp-session-id").is_none())
            .count();
        let calls: Vec<&str> = got
            .iter()
            .filter_map(|r| r.headers.get("mcp-session-id"))
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(calls.len(), made, "one call per session made here");
        assert!(
            calls.iter().all(|c| c.starts_with("sample-")),
            "the server got its own ids: {calls:?}"
        );
    }
    assert!(
        gw.log().contains("upstream request failed"),
        "the failed handshake is logged"
    );
}
