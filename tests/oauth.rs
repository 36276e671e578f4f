//! OAuth 2.1 resource server (docs/oauth.md) against a real OpenID provider: `oidc-provider`
//! from npm (`tests/peers/idp.mjs`), started on 127.0.0.1 by each test. Its tokens come
//! from the client-credentials and authorization-code flows with resource indicators;
//! hostile tokens are signed by the test with the provider's own keys, or forged.

mod support;

use http::{Method, StatusCode};
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;
use support::*;

/// Two oauth routes: `/mcp` (readonly) and `/full/mcp` (gpt-full), `kb.write` granting
/// both, `kb.read` only the first. `extra` goes into `[oauth]`.
fn oauth_config(idp: &Idp, port: u16, upstream: &str, extra: &str, audit: &str) -> String {
    format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:{port}"

[admin]
addr = "127.0.0.1:0"

[upstreams.docs]
url = "{upstream}"

[profiles.gpt-full]
upstream = "docs"
allow = ["*"]

[profiles.readonly]
upstream = "docs"
allow = ["search_knowledge", "list_documents", "get_document", "batch_read"]

[[routes]]
listen = "main"
path = "/mcp"
profile = "readonly"
auth = "oauth"

[[routes]]
listen = "main"
path = "/full/mcp"
profile = "gpt-full"
auth = "oauth"

[audit]
path = "{audit}"

[oauth]
issuer = "{issuer}"
resource = "http://127.0.0.1:{port}/mcp"
{extra}

[[oauth.grants]]
scope = "kb.write"
profiles = ["gpt-full", "readonly"]

[[oauth.grants]]
scope = "kb.read"
profiles = ["readonly"]
"#,
        issuer = idp.issuer
    )
}

struct Setup {
    idp: Idp,
    gw: Gateway,
    up: mcpgate::cli::sample::SampleServer,
    port: u16,
    audit: tempfile::TempDir,
}

impl Setup {
    async fn new(extra: &str) -> Setup {
        let idp = Idp::start();
        let up = json_upstream().await;
        let audit = tempfile::tempdir().unwrap();
        let port = free_port();
        let path = audit.path().join("audit.jsonl");
        let text = oauth_config(&idp, port, &up.url(), extra, &path.display().to_string());
        let gw = Gateway::start(&text);
        Setup {
            idp,
            gw,
            up,
            port,
            audit,
        }
    }

    fn resource(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    async fn call(&self, path: &str, token: Option<&str>, body: &str) -> Reply {
        let auth = token.map(bearer);
        let headers: Vec<(&str, &str)> = auth
            .as_deref()
            .map(|a| vec![("authorization", a)])
            .unwrap_or_default();
        post(&self.gw.url(path), &headers, body).await
    }

    fn audit_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(self.audit.path().join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The audit trail once a record satisfies `want`: the writer is a moment behind the
    /// answers (up to 5 s).
    async fn audit_with(&self, want: impl Fn(&Value) -> bool) -> Vec<Value> {
        for _ in 0..500 {
            let lines = self.audit_lines();
            if lines.iter().any(&want) {
                return lines;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no such audit record: {:?}", self.audit_lines());
    }
}

fn www_authenticate(r: &Reply) -> &str {
    r.header("www-authenticate")
}

#[tokio::test]
async fn metadata_and_the_401_point_clients_at_the_issuer() {
    let s = Setup::new("").await;
    let doc = json!({
        "resource": s.resource(),
        "authorization_servers": [s.idp.issuer],
        "scopes_supported": ["kb.write", "kb.read"],
        "bearer_methods_supported": ["header"],
        "resource_name": "mcpgate",
    });
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource/full/mcp",
    ] {
        let r = send(Method::GET, &s.gw.url(path), &[], "").await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
        assert_eq!(r.json(), doc, "{path}");
        assert_eq!(r.header("access-control-allow-origin"), "*");
    }
    let r = send(
        Method::GET,
        &s.gw.url("/.well-known/oauth-protected-resource/elsewhere"),
        &[],
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = send(
        Method::OPTIONS,
        &s.gw.url("/.well-known/oauth-protected-resource/mcp"),
        &[("origin", "http://localhost:6274")],
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);

    // No token: 401, pointing at the route's metadata, with the scope that would do.
    let r = s.call("/mcp", None, &list(1)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        www_authenticate(&r),
        format!(
            "Bearer resource_metadata=\"http://127.0.0.1:{}/.well-known/oauth-protected-resource/mcp\", scope=\"kb.read\"",
            s.port
        )
    );
    assert_eq!(r.json()["error"]["code"], -32001);
    let r = s.call("/full/mcp", Some("not-a-jwt"), &list(1)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(
        www_authenticate(&r).starts_with("Bearer error=\"invalid_token\""),
        "{}",
        www_authenticate(&r)
    );
    assert!(
        www_authenticate(&r).contains("resource_metadata=\"http://127.0.0.1:"),
        "{}",
        www_authenticate(&r)
    );
    assert!(s.up.received().is_empty());
}

#[tokio::test]
async fn client_credentials_tokens_get_the_profiles_their_scopes_grant() {
    let s = Setup::new("").await;
    let read = s.idp.token("cc-read", "kb.read", &s.resource()).await;
    let write = s
        .idp
        .token("cc-write", "kb.read kb.write", &s.resource())
        .await;

    let r = s.call("/mcp", Some(&read), &list(1)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.tool_names(), READONLY_TOOLS);
    // kb.read does not reach the gpt-full route: 403 naming the scope that would.
    let r = s.call("/full/mcp", Some(&read), &list(2)).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let challenge = www_authenticate(&r);
    assert!(
        challenge.starts_with("Bearer error=\"insufficient_scope\", scope=\"kb.write\""),
        "{challenge}"
    );
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("kb.write")
    );

    let r = s
        .call("/full/mcp", Some(&write), &call(3, "delete_document"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(r.json()["result"].is_object(), "{}", r.body);
    let r = s
        .call("/mcp", Some(&write), &call(4, "delete_document"))
        .await;
    assert_eq!(
        r.json()["error"]["code"],
        -32602,
        "readonly refuses it: {}",
        r.body
    );

    // No token passthrough: the upstream never sees the client's Authorization.
    let got = s.up.received();
    assert!(!got.is_empty());
    for req in &got {
        assert!(
            req.headers.get("authorization").is_none(),
            "{:?}",
            req.headers
        );
    }
    // The audit trail and the log name the caller, never the token.
    let is_delete = |l: &Value| l["tool"] == "delete_document" && l["decision"] == "allow";
    let lines = s.audit_with(is_delete).await;
    let delete = lines.iter().find(|l| is_delete(l)).unwrap();
    assert_eq!(delete["client_id"], "cc-write");
    assert_eq!(delete["sub"], "cc-write");
    let log = s.gw.log_with("\"client_id\":\"cc-read\"", 1).await;
    let audit_text = std::fs::read_to_string(s.audit.path().join("audit.jsonl")).unwrap();
    for token in [&read, &write] {
        assert!(!log.contains(token.as_str()), "the log holds a token");
        assert!(
            !audit_text.contains(token.as_str()),
            "the audit holds a token"
        );
        // Nor its signature alone.
        let signature = token.rsplit('.').next().unwrap();
        assert!(!log.contains(signature));
    }
    let metrics = send(Method::GET, &s.gw.admin_url("/metrics"), &[], "")
        .await
        .body;
    assert!(
        metrics.contains("mcpgate_oauth_failures_total{reason=\"insufficient_scope\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("mcpgate_oauth_key_fetches_total{result=\"ok\"} 1"));
}

#[tokio::test]
async fn hostile_tokens_are_refused_and_nothing_reaches_the_upstream() {
    let s = Setup::new("").await;
    let resource = s.resource();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // A good token signed the test's way passes: the refusals below are for their flaw.
    let good = s
        .idp
        .sign(json!({ "alg": "RS256", "claims": { "aud": resource } }))
        .await;
    let r = s.call("/mcp", Some(&good), &list(1)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let served = s.up.received().len();

    let other_resource = s
        .idp
        .token("cc-write", "kb.read kb.write", "http://127.0.0.1:9/other")
        .await;
    let cases = [
        (
            "alg none",
            json!({ "alg": "none", "claims": { "aud": resource } }),
            "algorithm_refused",
        ),
        (
            "HS256 keyed with the RSA public key",
            json!({ "alg": "HS256-with-public-key", "claims": { "aud": resource } }),
            "algorithm_refused",
        ),
        (
            "wrong iss",
            json!({ "alg": "ES256", "claims": { "aud": resource, "iss": "http://127.0.0.1:1" } }),
            "wrong_issuer",
        ),
        (
            "wrong aud",
            json!({ "alg": "ES256", "claims": { "aud": "http://127.0.0.1:9/other" } }),
            "wrong_audience",
        ),
        (
            "no aud",
            json!({ "alg": "ES256", "claims": { "aud": null } }),
            "malformed_token",
        ),
        (
            "expired",
            json!({ "alg": "EdDSA", "claims": { "aud": resource, "exp": now - 120 } }),
            "expired_token",
        ),
        (
            "not yet valid",
            json!({ "alg": "EdDSA", "claims": { "aud": resource, "nbf": now + 600 } }),
            "token_not_yet_valid",
        ),
        (
            "unknown key",
            json!({ "alg": "ES256", "fresh": true, "claims": { "aud": resource } }),
            "unknown_key",
        ),
        (
            "a known kid, another key",
            json!({ "alg": "ES256", "fresh": true, "kid": "ec-1", "claims": { "aud": resource } }),
            "bad_signature",
        ),
    ];
    for (what, spec, reason) in cases {
        let token = s.idp.sign(spec).await;
        let r = s.call("/mcp", Some(&token), &list(2)).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{what}: {}", r.body);
        assert!(
            www_authenticate(&r).contains("error=\"invalid_token\""),
            "{what}"
        );
        let log = s.gw.log_with(&format!("\"reason\":\"{reason}\""), 1).await;
        assert!(!log.contains(&token), "{what}: the log holds the token");
    }
    // A real token of the provider, for another resource.
    let r = s.call("/mcp", Some(&other_resource), &list(3)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("another resource")
    );
    // Text that is no token at all, and a header that is no bearer.
    for auth in [
        "Bearer a.b.c",
        "Bearer ....",
        "Bearer x.y",
        "Basic Zm9vOmJhcg==",
    ] {
        let r = post(&s.gw.url("/mcp"), &[("authorization", auth)], &list(4)).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{auth:?}: {}", r.body);
    }
    assert_eq!(
        s.up.received().len(),
        served,
        "a refused request went upstream"
    );
    let metrics = send(Method::GET, &s.gw.admin_url("/metrics"), &[], "")
        .await
        .body;
    for reason in [
        "algorithm_refused",
        "wrong_issuer",
        "wrong_audience",
        "expired_token",
        "unknown_key",
    ] {
        assert!(
            metrics.contains(&format!(
                "mcpgate_oauth_failures_total{{reason=\"{reason}\"}}"
            )),
            "{reason}: {metrics}"
        );
    }
}

#[tokio::test]
async fn an_unknown_kid_flood_is_one_fetch_and_a_rotated_key_is_picked_up() {
    // The refetch rule with a shorter wait than the default 30 s, so the test need not
    // sit through one.
    let s = Setup::new(r#"jwks_refetch_after = "3s""#).await;
    let resource = s.resource();
    // The first request waits for the start's fetch, if it is still going.
    let token = s.idp.token("cc-read", "kb.read", &resource).await;
    assert_eq!(
        s.call("/mcp", Some(&token), &list(1)).await.status,
        StatusCode::OK
    );
    let mut forged = Vec::new();
    for _ in 0..40 {
        forged.push(
            s.idp
                .sign(json!({ "alg": "ES256", "fresh": true, "claims": { "aud": resource } }))
                .await,
        );
    }
    // All at once, well within the 3 s between fetches.
    let before = s.idp.count("jwks").await;
    let bodies: Vec<String> = (0..forged.len() as u64).map(list).collect();
    let answers = futures_util::future::join_all(
        forged
            .iter()
            .zip(&bodies)
            .map(|(token, body)| s.call("/mcp", Some(token), body)),
    )
    .await;
    assert!(answers.iter().all(|r| r.status == StatusCode::UNAUTHORIZED));
    let after = s.idp.count("jwks").await;
    assert!(
        after - before <= 1,
        "{} JWKS fetches for 40 unknown kids",
        after - before
    );

    // The issuer rotates: a new key, published. Until the last fetch is 3 s old its
    // tokens are refused without a fetch; then one of them makes one fetch and passes.
    let rotated = s
        .idp
        .sign(json!({ "alg": "EdDSA", "fresh": true, "publish": true, "claims": { "aud": resource } }))
        .await;
    let fetched = s.idp.count("jwks").await;
    let tries = std::sync::atomic::AtomicU64::new(50);
    eventually(
        Duration::from_secs(10),
        "the rotated key is picked up",
        || async {
            let i = tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let r = s.call("/mcp", Some(&rotated), &list(i)).await;
            if r.status == StatusCode::OK {
                return Some(());
            }
            assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
            assert_eq!(s.idp.count("jwks").await, fetched, "a fetch within 3 s");
            None
        },
    )
    .await;
    assert_eq!(s.idp.count("jwks").await, fetched + 1);
    // Cached now: no fetch, no signature check shows, it just passes.
    for i in 0..5 {
        assert_eq!(
            s.call("/mcp", Some(&rotated), &list(60 + i)).await.status,
            StatusCode::OK
        );
    }
    assert_eq!(s.idp.count("jwks").await, fetched + 1);
}

#[tokio::test]
async fn without_keys_it_is_503_and_a_failed_refetch_keeps_the_last_good_keys() {
    let idp = Idp::start();
    idp.jwks_down(true).await;
    let up = json_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let audit = dir.path().join("audit.jsonl").display().to_string();
    let extra = r#"jwks_refetch_after = "2s""#;
    let gw = Gateway::start(&oauth_config(&idp, port, &up.url(), extra, &audit));
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let token = idp.token("cc-read", "kb.read", &resource).await;
    let r = post(
        &gw.url("/mcp"),
        &[("authorization", &bearer(&token))],
        &list(1),
    )
    .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], -32003);
    assert!(up.received().is_empty(), "never a silent allow");
    gw.log_with("cannot fetch the issuer's signing keys", 1)
        .await;

    // The issuer is back: the gateway tries again (every 2 s here) and lets the token in.
    idp.jwks_down(false).await;
    eventually(Duration::from_secs(15), "the keys came", || async {
        let r = post(
            &gw.url("/mcp"),
            &[("authorization", &bearer(&token))],
            &list(2),
        )
        .await;
        if r.status == StatusCode::OK {
            return Some(());
        }
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
        None
    })
    .await;

    // Down again: a refetch (an unknown kid, 2 s on) fails, the keys in hand stay.
    let failed_before = gw
        .log()
        .matches("cannot fetch the issuer's signing keys")
        .count();
    idp.jwks_down(true).await;
    let forged = idp
        .sign(json!({ "alg": "ES256", "fresh": true, "claims": { "aud": resource } }))
        .await;
    eventually(Duration::from_secs(15), "a refetch was tried", || async {
        let r = post(
            &gw.url("/mcp"),
            &[("authorization", &bearer(&forged))],
            &list(3),
        )
        .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
        let failed = gw
            .log()
            .matches("cannot fetch the issuer's signing keys")
            .count();
        (failed > failed_before).then_some(())
    })
    .await;
    let fresh = idp.token("cc-write", "kb.read kb.write", &resource).await;
    let r = post(
        &gw.url("/full/mcp"),
        &[("authorization", &bearer(&fresh))],
        &list(4),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

#[tokio::test]
async fn opaque_tokens_are_introspected_once_and_cached() {
    let s = Setup::new(
        r#"introspection = { client_id = "mcpgate", client_secret = "mcpgate-secret" }"#,
    )
    .await;
    let token = s.idp.token("opaque-read", "kb.read", &s.resource()).await;
    assert_eq!(token.matches('.').count(), 0, "an opaque token: {token}");
    let before = s.idp.count("introspection").await;
    for i in 0..5 {
        let r = s.call("/mcp", Some(&token), &list(i)).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    }
    assert_eq!(
        s.idp.count("introspection").await,
        before + 1,
        "cached after the first"
    );
    let r = s.call("/full/mcp", Some(&token), &list(9)).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // One the issuer never issued: inactive.
    let r = s
        .call(
            "/mcp",
            Some("PFIlyLGcROmws7SsgXvKvE-yM_OpVyhTJDgJ9m4DYqW"),
            &list(10),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    s.gw.log_with("\"reason\":\"inactive_token\"", 1).await;
    // JWTs still go the JWT way.
    let jwt = s.idp.token("cc-read", "kb.read", &s.resource()).await;
    assert_eq!(
        s.call("/mcp", Some(&jwt), &list(11)).await.status,
        StatusCode::OK
    );
    // The refusals are recorded with the caller, never with the token.
    let lines = s.audit_with(|l| l["reason"] == "inactive_token").await;
    assert!(lines.iter().any(|l| l["reason"] == "insufficient_scope"));
    assert!(lines.iter().all(|l| !l.to_string().contains(&token)));
}

#[tokio::test]
async fn a_reload_to_another_issuer_moves_trust_to_it() {
    let s = Setup::new("").await;
    let second = Idp::start();
    let resource = s.resource();
    let first_token = s.idp.token("cc-read", "kb.read", &resource).await;
    assert_eq!(
        s.call("/mcp", Some(&first_token), &list(1)).await.status,
        StatusCode::OK
    );

    let path = s.audit.path().join("audit.jsonl").display().to_string();
    let text = oauth_config(&second, s.port, &s.up.url(), "", &path);
    std::fs::write(s.gw.config_path(), text).unwrap();
    let r = send(Method::POST, &s.gw.admin_url("/reload"), &[], "").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);

    let second_token = second.token("cc-read", "kb.read", &resource).await;
    let r = s.call("/mcp", Some(&second_token), &list(2)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    // The first issuer's token, cached before, is not trusted any more.
    let r = s.call("/mcp", Some(&first_token), &list(3)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
    let doc = send(
        Method::GET,
        &s.gw.url("/.well-known/oauth-protected-resource"),
        &[],
        "",
    )
    .await
    .json();
    assert_eq!(doc["authorization_servers"], json!([second.issuer]));
}

/// The TypeScript SDK client's own OAuth support, end to end: the 401, discovery of the
/// resource metadata and the provider, a token, the calls.
// Two threads: the client blocks one, the in-process upstream answers on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_client_completes_the_flow_through_mcpgate() {
    let s = Setup::new("").await;
    for flow in ["client_credentials", "authorization_code"] {
        let out = run_client(
            Command::new(node22())
                .arg(peers().join("ts_oauth_client.mjs"))
                .arg(s.gw.url("/mcp"))
                .arg(flow)
                .arg(&s.idp.issuer)
                .current_dir(peers()),
        );
        let v: Value = serde_json::from_str(out.lines().last().unwrap_or(""))
            .unwrap_or_else(|e| panic!("{flow}: {e}: {out}"));
        assert_eq!(v["tools"], json!(READONLY_TOOLS), "{flow}: {out}");
        assert_eq!(v["called"], "search_knowledge", "{flow}: {out}");
    }
    // The authorization-code call is alice's.
    s.audit_with(|l| l["sub"] == "alice" && l["tool"] == "search_knowledge")
        .await;
}

/// A federated profile (docs/federation.md) behind an OAuth route: the access token's scope grants
/// it, its names are the prefixed ones, the member never sees the token, and the audit
/// names the caller and the member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_federated_profile_behind_an_oauth_route() {
    let extra = r#"
[[oauth.grants]]
scope = "kb.write"
profiles = ["fed"]

[profiles.fed]
upstreams = ["docs"]
prefix = "always"
allow = ["docs__get_document", "docs__list_documents"]

[[routes]]
listen = "main"
path = "/fed/mcp"
profile = "fed"
auth = "oauth"
"#;
    let s = Setup::new(extra).await;
    let read = s.idp.token("cc-read", "kb.read", &s.resource()).await;
    let write = s
        .idp
        .token("cc-write", "kb.read kb.write", &s.resource())
        .await;
    let r = s.call("/fed/mcp", Some(&read), &list(1)).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let r = s.call("/fed/mcp", None, &list(1)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
    let r = s.call("/fed/mcp", Some(&write), &list(2)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let mut names = r.tool_names();
    names.sort();
    assert_eq!(names, ["docs__get_document", "docs__list_documents"]);
    let r = s
        .call("/fed/mcp", Some(&write), &call(3, "docs__get_document"))
        .await;
    assert!(r.json()["result"].is_object(), "{}", r.body);
    let r = s
        .call("/fed/mcp", Some(&write), &call(4, "docs__delete_document"))
        .await;
    assert_eq!(r.json()["error"]["code"], -32602, "{}", r.body);
    for req in &s.up.received() {
        assert!(
            req.headers.get("authorization").is_none(),
            "{:?}",
            req.headers
        );
    }
    let is_get = |l: &Value| l["tool"] == "docs__get_document";
    let lines = s.audit_with(is_get).await;
    let line = lines.iter().find(|l| is_get(l)).unwrap();
    assert_eq!(line["upstream"], "docs", "{line}");
    assert_eq!(line["client_id"], "cc-write", "{line}");
    let text = std::fs::read_to_string(s.audit.path().join("audit.jsonl")).unwrap();
    assert!(!text.contains(&write), "the token reached the audit trail");
}
