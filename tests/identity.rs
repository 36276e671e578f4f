//! Upstream identity, `mode = "jwt"` (docs/oauth.md), with real parts: an SDK server that
//! checks every request's JWT with `jose` against the JWKS it fetches from mcpgate
//! (`jwt_upstream.mjs`), keys made by `openssl genpkey`, and the TypeScript SDK client as
//! two callers at once. The upstream learns who calls; no caller's token reaches it.

mod support;

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use support::{Gateway, free_port, hash, node22, peers, run_client, start_peer};

const ALICE: &str = "alice-identity-token-0123456789ab";
const BOB: &str = "bob-identity-token-0123456789abcd";

/// A fresh private key from openssl: `ec` P-256, else Ed25519.
fn key(dir: &Path, name: &str, ec: bool) -> std::path::PathBuf {
    let path = dir.join(name);
    let mut cmd = Command::new("openssl");
    cmd.args(["genpkey", "-out"]).arg(&path);
    if ec {
        cmd.args(["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]);
    } else {
        cmd.args(["-algorithm", "ed25519"]);
    }
    assert!(cmd.output().unwrap().status.success());
    path
}

fn seen(record: &Path) -> Vec<Value> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The TypeScript SDK v1 client with `bearer`: its call of `whoami`.
fn whoami(url: &str, bearer: &str) -> Value {
    tool_says(url, bearer, "whoami", "nothing")
}

/// The TypeScript SDK v1 client with `bearer`: what `tool` said (its text, as JSON); the
/// client then tries `hidden`.
fn tool_says(url: &str, bearer: &str, tool: &str, hidden: &str) -> Value {
    let out = run_client(
        Command::new(node22())
            .arg(peers().join("ts_client.mjs"))
            .args([url, bearer, tool, "{}", hidden]),
    );
    let v: Value = serde_json::from_str(out.trim().lines().last().unwrap()).unwrap();
    serde_json::from_str(v["call"][0].as_str().unwrap()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_knows_each_caller_from_a_token_it_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let (ec, ed) = (
        key(dir.path(), "ec.pem", true),
        key(dir.path(), "ed.pem", false),
    );
    let port = free_port();
    let audience = format!("http://127.0.0.1:{port}/mcp");
    let config = |first: &Path, second: &Path| {
        support::with_admin(format!(
            r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.kb]
url = "{audience}"
protocol = "legacy"
headers = {{ "X-Api-Key" = "static" }}
[upstreams.kb.identity]
mode = "jwt"
issuer = "https://gate.test"
key = ["${{file:{}}}", "${{file:{}}}"]
jwks_path = "/jwks.json"

# The same server as a member without identity: its requests carry no token.
[upstreams.bare]
url = "{audience}"
protocol = "legacy"

[profiles.kb]
upstream = "kb"
allow = ["*"]
[profiles.fed]
upstreams = ["kb", "bare"]
prefix = "always"
allow = ["*"]

[[routes]]
listen = "main"
path = "/mcp"
profile = "kb"
[[routes]]
listen = "main"
path = "/fed"
profile = "fed"

[[tokens]]
id = "alice"
sha256 = "{alice}"
profiles = ["kb", "fed"]
[[tokens]]
id = "bob"
sha256 = "{bob}"
profiles = ["kb"]
"#,
            first.display(),
            second.display(),
            alice = hash(ALICE),
            bob = hash(BOB),
        ))
    };
    let conf = dir.path().join("mcpgate.toml");
    std::fs::write(&conf, config(&ec, &ed)).unwrap();
    let gw = Gateway::start_at(&conf);
    let record = dir.path().join("seen.jsonl");
    let _upstream = start_peer(
        Command::new(node22())
            .current_dir(peers())
            .arg("jwt_upstream.mjs")
            .args(["--port", &port.to_string()])
            .args(["--jwks", &gw.url("/jwks.json")])
            .args(["--issuer", "https://gate.test", "--audience", &audience])
            .arg("--record")
            .arg(&record),
        port,
    );

    // Both listeners publish the same keys: the first signs, both are listed.
    let at_admin = support::send(
        http::Method::GET,
        &gw.admin_url("/.well-known/jwks.json"),
        &[],
        "",
    )
    .await;
    let on_route = support::send(http::Method::GET, &gw.url("/jwks.json"), &[], "").await;
    assert_eq!(at_admin.body, on_route.body);
    let set: Value = serde_json::from_str(&at_admin.body).unwrap();
    let algs: Vec<&str> = set["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["alg"].as_str().unwrap())
        .collect();
    assert_eq!(algs, ["ES256", "EdDSA"]);
    assert!(!at_admin.body.contains("\"d\""), "no private part");

    // Two callers at once: each is told as itself.
    let url = gw.url("/mcp");
    let (a, b) = {
        let (u1, u2) = (url.clone(), url.clone());
        let a = std::thread::spawn(move || whoami(&u1, ALICE));
        let b = std::thread::spawn(move || whoami(&u2, BOB));
        (a.join().unwrap(), b.join().unwrap())
    };
    assert_eq!(
        (a["sub"].as_str(), a["profile"].as_str()),
        (Some("alice"), Some("kb"))
    );
    assert_eq!(b["sub"].as_str(), Some("bob"));
    let all = seen(&record);
    assert!(!all.is_empty());
    assert!(all.iter().all(|r| r["ok"] == true), "{all:?}");
    let text = std::fs::read_to_string(&record).unwrap();
    assert!(
        !text.contains(ALICE) && !text.contains(BOB),
        "no caller's token upstream"
    );
    // A caller's token is kept: its requests share a jti while it is fresh.
    let jtis: std::collections::BTreeSet<&str> = all
        .iter()
        .filter(|r| r["sub"] == "alice")
        .map(|r| r["jti"].as_str().unwrap())
        .collect();
    assert_eq!(jtis.len(), 1, "{all:?}");
    assert!(
        all.iter()
            .all(|r| r["exp"].as_u64().unwrap() - r["iat"].as_u64().unwrap() == 60)
    );

    // A 2026-07-28 client, bridged to this legacy server in mcpgate's session: the same.
    let bearer = format!("Bearer {ALICE}");
    let modern = support::post(
        &url,
        &[
            ("authorization", &bearer),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "whoami"),
        ],
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"whoami","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#,
    )
    .await;
    let said = modern.messages()[0]["result"]["content"][0]["text"].clone();
    let said: Value = serde_json::from_str(said.as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {}", modern.body));
    assert_eq!(said["sub"], "alice", "{}", modern.body);

    // A federated profile: the member with identity gets alice's token (its audience),
    // the member without it gets none and refuses.
    let before = seen(&record).len();
    let fed = {
        let u = gw.url("/fed");
        tokio::task::spawn_blocking(move || tool_says(&u, ALICE, "kb__whoami", "bare__whoami"))
            .await
            .unwrap()
    };
    assert_eq!(
        (fed["sub"].as_str(), fed["profile"].as_str()),
        (Some("alice"), Some("fed")),
        "{fed}"
    );
    let later = seen(&record);
    assert!(
        later[before..]
            .iter()
            .any(|r| r["ok"] == true && r["sub"] == "alice"),
        "{later:?}"
    );
    assert!(
        later[before..]
            .iter()
            .any(|r| r["ok"] == false && r["authorization"] == ""),
        "{later:?}"
    );

    // Rotation: the Ed25519 key signs now; the upstream fetches the keys again and
    // accepts the new tokens.
    std::fs::write(&conf, config(&ed, &ec)).unwrap();
    let r = support::send(http::Method::POST, &gw.admin_url("/reload"), &[], "").await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.body);
    let before = seen(&record).len();
    let c = {
        let u = url.clone();
        tokio::task::spawn_blocking(move || whoami(&u, BOB))
            .await
            .unwrap()
    };
    assert_eq!(c["sub"].as_str(), Some("bob"));
    let after = seen(&record);
    assert!(after[before..].iter().all(|r| r["ok"] == true), "{after:?}");

    // Without identity, the same server refuses what mcpgate sends.
    let plain = Gateway::start(&format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"
[upstreams.kb]
url = "{audience}"
[profiles.kb]
upstream = "kb"
allow = ["*"]
[[routes]]
listen = "main"
path = "/mcp"
profile = "kb"
auth = "none"
"#
    ));
    let r = support::post(&plain.url("/mcp"), &[], &support::call(1, "whoami")).await;
    assert_eq!(r.status.as_u16(), 401, "{}", r.body);
    assert!(!seen(&record).last().unwrap()["ok"].as_bool().unwrap());
}

/// `mode = "exchange"`: each caller's access token from the IdP (`oidc-provider` with the
/// RFC 8693 grant registered) is exchanged for one meant for the upstream's audience, once
/// per caller token; the upstream verifies it against the IdP's keys and sees the caller.
/// The IdP refusing is 403 with its reason, failing, slow, or answering with a token for
/// another audience or an expired one is 503; none of those is forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exchanged_token_names_the_caller_for_the_upstreams_audience() {
    let dir = tempfile::tempdir().unwrap();
    let idp = support::Idp::start();
    let collector = support::Collector::start(Some(std::time::Duration::ZERO)).await;
    let (port, up_port) = (free_port(), free_port());
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let audience = "https://kb.internal/mcp";
    let gw = Gateway::start(&exchanging(
        port,
        up_port,
        &format!(
            "audience = \"{audience}\"\nclient_id = \"mcpgate\"\nclient_secret = \"mcpgate-secret\""
        ),
        &idp.issuer,
        &resource,
        &format!(
            "[admin]\naddr = \"127.0.0.1:0\"\n\n[audit]\npath = {:?}\n\n[telemetry]\notlp = \"http://{}\"\nsampling = 1.0\n",
            dir.path().join("audit.jsonl"),
            collector.addr
        ),
    ));
    let record = dir.path().join("seen.jsonl");
    let _upstream = start_peer(
        Command::new(node22())
            .current_dir(peers())
            .arg("jwt_upstream.mjs")
            .args(["--port", &up_port.to_string()])
            .args(["--jwks", &format!("{}/jwks", idp.issuer)])
            .args([
                "--issuer",
                &idp.issuer,
                "--audience",
                &format!("{audience},api://kb"),
            ])
            .arg("--record")
            .arg(&record),
        up_port,
    );
    let token = |sub: &'static str| {
        let resource = resource.clone();
        let idp = &idp;
        async move {
            idp.sign(serde_json::json!({"claims": {"sub": sub, "client_id": "chatgpt", "aud": resource, "scope": "kb.read"}}))
                .await
        }
    };
    let (alice, bob) = (token("alice").await, token("bob").await);
    let url = gw.url("/mcp");

    // Two callers at once, each through the SDK client's whole session.
    let (a, b) = {
        let (u1, u2, t1, t2) = (url.clone(), url.clone(), alice.clone(), bob.clone());
        let a = std::thread::spawn(move || whoami(&u1, &t1));
        let b = std::thread::spawn(move || whoami(&u2, &t2));
        (a.join().unwrap(), b.join().unwrap())
    };
    assert_eq!(a["sub"], "alice");
    assert_eq!(b["sub"], "bob");
    let all = seen(&record);
    assert!(all.iter().all(|r| r["ok"] == true), "{all:?}");
    assert!(all.iter().all(|r| r["act"]["sub"] == "mcpgate"), "{all:?}");
    let text = std::fs::read_to_string(&record).unwrap();
    assert!(
        !text.contains(&alice) && !text.contains(&bob),
        "no caller's token upstream"
    );
    // One exchange per caller token, however many requests its session made.
    assert!(all.len() >= 6, "{all:?}");
    assert_eq!(idp.count("exchange").await, 2);

    // Five calls at once by a new caller: one exchange.
    let carol = token("carol").await;
    let call = |t: String| {
        let url = url.clone();
        async move {
            let bearer = format!("Bearer {t}");
            support::post(
                &url,
                &[
                    ("authorization", &bearer),
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "whoami"),
                ],
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"whoami","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#,
            )
            .await
        }
    };
    let many: Vec<_> = (0..5).map(|_| tokio::spawn(call(carol.clone()))).collect();
    for r in many {
        let r = r.await.unwrap();
        assert_eq!(r.status.as_u16(), 200, "{}", r.body);
        assert!(r.body.contains(r#"\"sub\":\"carol\""#), "{}", r.body);
    }
    assert_eq!(idp.count("exchange").await, 3, "single flight");

    // The IdP's other answers, each for a caller not exchanged before; nothing forwarded.
    let before = seen(&record).len();
    for (mode, status, says) in [
        ("refuse", 403, "invalid_grant"),
        ("fail", 503, "status 500"),
        ("wrong_aud", 503, "not for https://kb.internal/mcp"),
        ("expired", 503, "expired"),
    ] {
        idp.json(
            http::Method::POST,
            "/test/exchange",
            serde_json::json!({"mode": mode}),
        )
        .await;
        let t = token(Box::leak(format!("caller-{mode}").into_boxed_str())).await;
        let r = call(t.clone()).await;
        assert_eq!(r.status.as_u16(), status, "{mode}: {}", r.body);
        assert!(r.body.contains(says), "{mode}: {}", r.body);
        assert!(
            !r.body.contains(&t),
            "{mode}: the caller's token in {}",
            r.body
        );
        assert!(!r.body.contains("mcpgate-secret"));
    }
    idp.json(
        http::Method::POST,
        "/test/exchange",
        serde_json::json!({"mode": "slow", "delay_ms": 8000}),
    )
    .await;
    let started = std::time::Instant::now();
    let r = call(token("caller-slow").await).await;
    assert_eq!(r.status.as_u16(), 503, "{}", r.body);
    assert!(r.body.contains("within 5s"), "{}", r.body);
    assert!(started.elapsed() < std::time::Duration::from_secs(7));
    assert_eq!(seen(&record).len(), before, "nothing forwarded");
    let metrics = support::send(http::Method::GET, &gw.admin_url("/metrics"), &[], "")
        .await
        .body;
    assert!(
        metrics.contains(r#"mcpgate_refusals_total{reason="identity_refused"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"mcpgate_upstream_errors_total{upstream="kb",kind="identity_unavailable"} 4"#
        ),
        "{metrics}"
    );

    // A caller whose token expires after its exchange: refused by mcpgate at once, its
    // kept exchanged token not used.
    idp.json(
        http::Method::POST,
        "/test/exchange",
        serde_json::json!({"mode": "ok"}),
    )
    .await;
    let unix = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    let exp = unix() as u64 + 2;
    let short = idp
        .sign(serde_json::json!({"claims": {"sub": "erin", "client_id": "chatgpt", "aud": resource, "scope": "kb.read", "exp": exp}}))
        .await;
    let r = call(short.clone()).await;
    assert!(r.body.contains(r#"\"sub\":\"erin\""#), "{}", r.body);
    let before = seen(&record).len();
    // Past `exp` and the one-second leeway, whatever the first call took.
    let wait = (exp as f64 + 2.5 - unix()).max(0.0);
    tokio::time::sleep(std::time::Duration::from_secs_f64(wait)).await;
    let r = call(short).await;
    assert_eq!(
        r.status.as_u16(),
        401,
        "exp {exp}, now {:.3}: {}",
        unix(),
        r.body
    );
    assert_eq!(seen(&record).len(), before, "not forwarded");

    // No caller's token, no exchanged token and no secret in the log, the audit trail or
    // the traces (every request sampled).
    let log = gw.log();
    let trail = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    let traces = format!("{:?}", collector.wait_spans(20).await);
    assert!(traces.contains("tools/call"), "spans came: {traces:.300}");
    let exchanged: Vec<String> = seen(&record)
        .iter()
        .filter_map(|r| {
            r["authorization"]
                .as_str()?
                .strip_prefix("Bearer ")
                .map(String::from)
        })
        .collect();
    assert!(!exchanged.is_empty());
    for text in [&log, &trail, &traces] {
        assert!(!text.contains(&alice) && !text.contains(&bob) && !text.contains(&carol));
        assert!(!text.contains("mcpgate-secret"));
        assert!(exchanged.iter().all(|t| !text.contains(t.as_str())));
    }
    assert!(
        trail.contains("identity_refused"),
        "the refusal is recorded"
    );

    // mcpgate's client proving itself with a key (private_key_jwt), registered with the
    // IdP by its public key.
    let pem = key(dir.path(), "client.pem", true);
    let jwk =
        mcpgate::config::identity::SigningKey::from_pem(&std::fs::read_to_string(&pem).unwrap())
            .unwrap()
            .jwk;
    let registered = support::send(
        http::Method::POST,
        &format!("{}/reg", idp.issuer),
        &[("content-type", "application/json")],
        serde_json::json!({
            "client_name": "mcpgate-key",
            "grant_types": ["urn:ietf:params:oauth:grant-type:token-exchange"],
            "response_types": [],
            "redirect_uris": [],
            "token_endpoint_auth_method": "private_key_jwt",
            "token_endpoint_auth_signing_alg": "ES256",
            "jwks": {"keys": [jwk]},
        })
        .to_string(),
    )
    .await;
    assert_eq!(registered.status.as_u16(), 201, "{}", registered.body);
    let client_id = registered.json()["client_id"].as_str().unwrap().to_string();
    let keyed_port = free_port();
    let keyed = Gateway::start(&exchanging(
        keyed_port,
        up_port,
        &format!(
            "audience = \"{audience}\"\nclient_id = \"{client_id}\"\nclient_key = \"${{file:{}}}\"",
            pem.display()
        ),
        &idp.issuer,
        &resource,
        "",
    ));
    let exchanges = idp.count("exchange").await;
    let frank = keyed_token(&idp, &resource, "frank").await;
    let said = {
        let u = keyed.url("/mcp");
        tokio::task::spawn_blocking(move || whoami(&u, &frank))
            .await
            .unwrap()
    };
    assert_eq!(said["sub"], "frank");
    assert_eq!(idp.count("exchange").await, exchanges + 1);

    // Entra ID's on-behalf-of: the upstream named by its scope.
    let obo_port = free_port();
    let obo = Gateway::start(&exchanging(
        obo_port,
        up_port,
        "grant = \"on_behalf_of\"\nscope = \"api://kb/.default\"\naudience = \"api://kb\"\nclient_id = \"mcpgate\"\nclient_secret = \"mcpgate-secret\"",
        &idp.issuer,
        &resource,
        "",
    ));
    let grace = keyed_token(&idp, &resource, "grace").await;
    let said = {
        let u = obo.url("/mcp");
        tokio::task::spawn_blocking(move || whoami(&u, &grace))
            .await
            .unwrap()
    };
    assert_eq!(said["sub"], "grace");
    assert_eq!(idp.count("exchange").await, exchanges + 2);
    let last = seen(&record);
    assert!(
        last.iter()
            .rev()
            .take(3)
            .all(|r| r["ok"] == true && r["sub"] == "grace"),
        "{last:?}"
    );
}

/// A gateway on `port` whose route `/mcp` (OAuth, `issuer`, for `resource`, scope
/// `kb.read`) reaches the legacy upstream on `up_port` with exchanged identity:
/// `identity` is the rest of that table; `more` follows the config.
fn exchanging(
    port: u16,
    up_port: u16,
    identity: &str,
    issuer: &str,
    resource: &str,
    more: &str,
) -> String {
    format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:{port}"

[upstreams.kb]
url = "http://127.0.0.1:{up_port}/mcp"
protocol = "legacy"
[upstreams.kb.identity]
mode = "exchange"
{identity}

[profiles.kb]
upstream = "kb"
allow = ["*"]

[[routes]]
listen = "main"
path = "/mcp"
profile = "kb"
auth = "oauth"

[oauth]
issuer = "{issuer}"
resource = "{resource}"
leeway = "1s"

[[oauth.grants]]
scope = "kb.read"
profiles = ["kb"]

{more}"#
    )
}

/// An access token for `sub` at the gateway whose resource is `resource`.
async fn keyed_token(idp: &support::Idp, resource: &str, sub: &str) -> String {
    idp.sign(serde_json::json!({"claims": {"sub": sub, "client_id": "chatgpt", "aud": resource, "scope": "kb.read"}}))
        .await
}

/// A stdio server is told whom it serves (docs/oauth.md): the caller that started its process
/// (`per_client`), or nobody in particular (`shared`), in `MCPGATE_IDENTITY_TOKEN` at its
/// start and in a file kept fresh for its life. The server (`jwt_stdio.mjs`) checks both
/// with `jose` against the JWKS it fetches from the admin listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_is_told_whom_it_serves() {
    let dir = tempfile::tempdir().unwrap();
    let (ec, ed) = (
        key(dir.path(), "ec.pem", true),
        key(dir.path(), "ed.pem", false),
    );
    let admin = free_port();
    let server = |audience: &str| {
        format!(
            "command = [{:?}, {:?}]\nenv = {{ JWKS_URL = \"http://127.0.0.1:{admin}/.well-known/jwks.json\", ISSUER = \"https://gate.test\", AUDIENCE = \"{audience}\" }}",
            node22().display(),
            peers().join("jwt_stdio.mjs").display(),
        )
    };
    let config = |first: &Path, second: &Path, pool_mode: &str| {
        format!(
            r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[admin]
addr = "127.0.0.1:{admin}"

[upstreams.notes]
{notes}
protocol = "legacy"
[upstreams.notes.identity]
mode = "jwt"
issuer = "https://gate.test"
key = ["${{file:{first}}}", "${{file:{second}}}"]

[upstreams.pool]
{pool}
protocol = "legacy"
sessions = "shared"
[upstreams.pool.identity]
mode = "{pool_mode}"
issuer = "https://gate.test"
key = ["${{file:{first}}}", "${{file:{second}}}"]

[profiles.notes]
upstream = "notes"
allow = ["*"]
[profiles.pool]
upstream = "pool"
allow = ["*"]
[profiles.fed]
upstreams = ["notes", "pool"]
prefix = "always"
allow = ["*"]

[[routes]]
listen = "main"
path = "/mcp"
profile = "notes"
[[routes]]
listen = "main"
path = "/pool"
profile = "pool"
[[routes]]
listen = "main"
path = "/fed"
profile = "fed"

[[tokens]]
id = "alice"
sha256 = "{alice}"
profiles = ["notes", "pool", "fed"]
[[tokens]]
id = "bob"
sha256 = "{bob}"
profiles = ["notes", "pool"]
"#,
            notes = server("notes"),
            pool = server("pool"),
            first = first.display(),
            second = second.display(),
            alice = hash(ALICE),
            bob = hash(BOB),
        )
    };
    let conf = dir.path().join("mcpgate.toml");
    std::fs::write(&conf, config(&ec, &ed, "jwt")).unwrap();
    let mut gw = Gateway::start_at(&conf);
    let url = gw.url("/mcp");
    let kids: Vec<String> = [&ec, &ed]
        .iter()
        .map(|p| {
            mcpgate::config::identity::SigningKey::from_pem(&std::fs::read_to_string(p).unwrap())
                .unwrap()
                .kid
        })
        .collect();

    // alice's own session, held open: its process serves alice.
    let auth = format!("Bearer {ALICE}");
    let headers = [("authorization", auth.as_str())];
    let init = support::post(&url, &headers, INIT).await;
    assert_eq!(init.status, 200, "{}", init.body);
    let session = init.header("mcp-session-id").to_string();
    let in_session = [
        ("authorization", auth.as_str()),
        ("mcp-session-id", session.as_str()),
    ];
    let r = support::post(
        &url,
        &in_session,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let ask = |id: u64| {
        let (url, auth, session) = (url.clone(), auth.clone(), session.clone());
        async move {
            let r = support::post(
                &url,
                &[("authorization", &auth), ("mcp-session-id", &session)],
                &support::call(id, "whoami"),
            )
            .await;
            let m = r.messages().pop().unwrap();
            let text = m["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_else(|| panic!("{m}"));
            serde_json::from_str::<Value>(text).unwrap()
        }
    };
    let first = ask(2).await;
    let start = &first["start"];
    assert_eq!(
        (
            start["sub"].as_str(),
            start["profile"].as_str(),
            start["aud"].as_str()
        ),
        (Some("alice"), Some("notes"), Some("notes")),
        "{first}"
    );
    assert_eq!(
        start["kid"].as_str(),
        Some(kids[0].as_str()),
        "the first key signs"
    );
    assert_eq!(
        start["exp"].as_u64().unwrap() - start["iat"].as_u64().unwrap(),
        60
    );
    assert_eq!(first["file"]["sub"], "alice", "{first}");
    assert_eq!(
        first["file"]["jti"], start["jti"],
        "the file starts with the same token"
    );
    let file = std::path::PathBuf::from(first["file_path"].as_str().unwrap());
    assert!(file.exists());
    // What the process was given holds no caller's token.
    let env = first["env"].to_string();
    assert!(!env.contains(ALICE) && !env.contains(BOB), "{env}");
    assert!(first["env"]["MCPGATE_IDENTITY_TOKEN"].is_string());

    // bob cannot use alice's session, whose process serves alice: it does not exist for
    // him, whatever he sends; alice's goes on.
    let bob_auth = format!("Bearer {BOB}");
    let as_bob = [
        ("authorization", bob_auth.as_str()),
        ("mcp-session-id", session.as_str()),
    ];
    let r = support::post(&url, &as_bob, &support::call(9, "whoami")).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(
        r.body.contains("session_not_found") || r.body.contains("-32001"),
        "{}",
        r.body
    );
    for method in [http::Method::GET, http::Method::DELETE] {
        let mut h = as_bob.to_vec();
        h.push(("accept", "text/event-stream"));
        let r = support::send(method.clone(), &url, &h, "").await;
        assert_eq!(r.status, 404, "{method}: {}", r.body);
    }
    assert_eq!(ask(5).await["pid"], first["pid"]);

    // bob, through the SDK client: a process of his own.
    let bob = {
        let u = url.clone();
        tokio::task::spawn_blocking(move || whoami(&u, BOB))
            .await
            .unwrap()
    };
    assert_eq!(bob["start"]["sub"], "bob", "{bob}");
    assert_ne!(bob["pid"], first["pid"]);

    // A 2026-07-28 client of this legacy server: its process serves it too.
    let modern = support::post(
        &url,
        &[
            ("authorization", auth.as_str()),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "whoami"),
        ],
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"whoami","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#,
    )
    .await;
    let m = modern.messages().pop().unwrap();
    let said: Value = serde_json::from_str(
        m["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{m}")),
    )
    .unwrap();
    assert_eq!(said["start"]["sub"], "alice", "{said}");
    assert_ne!(
        said["pid"], first["pid"],
        "a session of its own, in mcpgate's name"
    );

    // A federated profile with the stdio server as a member: alice's process there serves
    // alice, by the federated profile.
    let fed = {
        let u = gw.url("/fed");
        tokio::task::spawn_blocking(move || tool_says(&u, ALICE, "notes__whoami", "nothing"))
            .await
            .unwrap()
    };
    assert_eq!(
        (
            fed["start"]["sub"].as_str(),
            fed["start"]["profile"].as_str()
        ),
        (Some("alice"), Some("fed")),
        "{fed}"
    );

    // shared: one process for everyone, serving nobody in particular.
    let pool = gw.url("/pool");
    let (a, b) = {
        let (u1, u2) = (pool.clone(), pool.clone());
        let a = tokio::task::spawn_blocking(move || whoami(&u1, ALICE));
        let b = tokio::task::spawn_blocking(move || whoami(&u2, BOB));
        (a.await.unwrap(), b.await.unwrap())
    };
    assert_eq!(a["pid"], b["pid"]);
    for said in [&a, &b] {
        assert_eq!(
            (said["start"]["sub"].as_str(), said["start"]["aud"].as_str()),
            (Some("mcpgate"), Some("pool")),
            "{said}"
        );
        assert!(said["start"].get("profile").is_none(), "{said}");
    }

    // Rotation: the process is kept, and the file's next token (half a life after its
    // start) is signed by the new first key, which the server fetches and accepts.
    std::fs::write(&conf, config(&ed, &ec, "jwt")).unwrap();
    let r = support::send(http::Method::POST, &gw.admin_url("/reload"), &[], "").await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.body);
    let later = support::eventually(
        std::time::Duration::from_secs(45),
        "the file's token renewed",
        || async {
            let now = ask(4).await;
            (now["file"]["jti"] != first["file"]["jti"]).then_some(now)
        },
    )
    .await;
    assert_eq!(later["pid"], first["pid"], "the same process");
    assert_eq!(
        (later["file"]["sub"].as_str(), later["file"]["kid"].as_str()),
        (Some("alice"), Some(kids[1].as_str())),
        "{later}"
    );
    let renewed_after = later["file"]["iat"].as_u64().unwrap() - start["iat"].as_u64().unwrap();
    assert!(
        (29..=32).contains(&renewed_after),
        "renewed after {renewed_after} s"
    );

    // The session ends: its process goes, and its file with it.
    let r = support::send(http::Method::DELETE, &url, &in_session, "").await;
    assert!(r.status.is_success(), "{}", r.body);
    support::eventually(
        std::time::Duration::from_secs(10),
        "the file removed",
        || async { (!file.exists()).then_some(()) },
    )
    .await;
    // A reload that takes identity off the shared upstream restarts its process, which is
    // then told nothing.
    std::fs::write(&conf, config(&ed, &ec, "none")).unwrap();
    let r = support::send(http::Method::POST, &gw.admin_url("/reload"), &[], "").await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.body);
    let plain = {
        let u = pool.clone();
        tokio::task::spawn_blocking(move || whoami(&u, ALICE))
            .await
            .unwrap()
    };
    assert_ne!(plain["pid"], a["pid"], "{plain}");
    assert!(
        plain["env"].get("MCPGATE_IDENTITY_TOKEN").is_none(),
        "{plain}"
    );
    assert!(plain["start"]["error"].is_string(), "{plain}");

    // At shutdown the directory goes too.
    let files = file.parent().unwrap().to_path_buf();
    assert!(files.exists());
    gw.signal("TERM");
    assert_eq!(gw.wait_exit(std::time::Duration::from_secs(20)), Some(0));
    assert!(!files.exists(), "{}", files.display());
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// Every request mcpgate sends to an upstream with identity carries a token (docs/oauth.md):
/// the caller's where it acts for one, `sub = mcpgate` for its own. A legacy server left
/// at `protocol = "auto"` that refuses requests without a good token is probed for its
/// era (`server/discover`) with mcpgate's token, so a 2026-07-28 client's call is bridged
/// to it; a federated profile's reads of its members' lists, made because a caller named
/// a tool not known yet, are mcpgate's; health checks carry a token of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_to_an_upstream_with_identity_carries_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let ec = key(dir.path(), "ec.pem", true);
    let port = free_port();
    let audience = format!("http://127.0.0.1:{port}/mcp");
    let identity = format!(
        "mode = \"jwt\"\nissuer = \"https://gate.test\"\nkey = {:?}",
        ec.display().to_string()
    );
    let gw = Gateway::start(&support::with_admin(format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.kb]
url = "{audience}"
[upstreams.kb.identity]
{identity}
jwks_path = "/jwks.json"

[upstreams.checked]
url = "{audience}"
health = {{ interval = "1s", timeout = "1s" }}
[upstreams.checked.identity]
{identity}

[profiles.kb]
upstream = "kb"
allow = ["*"]
[profiles.fed]
upstreams = ["kb", "checked"]
prefix = "always"
allow = ["*"]

[[routes]]
listen = "main"
path = "/mcp"
profile = "kb"
[[routes]]
listen = "main"
path = "/fed"
profile = "fed"

[[tokens]]
id = "alice"
sha256 = "{alice}"
profiles = ["kb", "fed"]
"#,
        alice = hash(ALICE),
    )));
    let record = dir.path().join("seen.jsonl");
    let _upstream = start_peer(
        Command::new(node22())
            .current_dir(peers())
            .arg("jwt_upstream.mjs")
            .args(["--port", &port.to_string()])
            .args(["--jwks", &gw.url("/jwks.json")])
            .args(["--issuer", "https://gate.test", "--audience", &audience])
            .arg("--record")
            .arg(&record),
        port,
    );
    let bearer = format!("Bearer {ALICE}");
    let call = |path: &str, tool: &str| {
        let url = gw.url(path);
        let bearer = bearer.clone();
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}","arguments":{{}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{{"name":"raw","version":"1"}},"io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
        );
        let tool = tool.to_string();
        async move {
            let r = support::post(
                &url,
                &[
                    ("authorization", &bearer),
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", &tool),
                ],
                &body,
            )
            .await;
            let text = r.messages()[0]["result"]["content"][0]["text"].clone();
            serde_json::from_str::<Value>(text.as_str().unwrap_or_default())
                .unwrap_or_else(|e| panic!("{e}: {}", r.body))
        }
    };
    // One upstream: the call is refused as a modern one, the probe shows a legacy server,
    // the call is bridged.
    let said = call("/mcp", "whoami").await;
    assert_eq!(said["sub"], "alice", "{said}");
    // A federated profile whose names nobody has read yet.
    let said = call("/fed", "kb__whoami").await;
    assert_eq!(
        (&said["sub"], &said["profile"]),
        (&"alice".into(), &"fed".into())
    );
    // The health checks of `checked` carry mcpgate's token.
    let all = support::eventually(
        std::time::Duration::from_secs(10),
        "two health checks answered",
        || async {
            let all = seen(&record);
            let checks = all
                .iter()
                .filter(|r| r["method"] == "server/discover" && r["ok"] == true)
                .count();
            (checks >= 3).then_some(all)
        },
    )
    .await;
    let refused: Vec<&Value> = all.iter().filter(|r| r["ok"] != true).collect();
    assert!(
        refused.is_empty(),
        "every request had a good token: {refused:?}"
    );
    for r in &all {
        match r["method"].as_str() {
            Some("server/discover") => assert_eq!(r["sub"], "mcpgate", "{r}"),
            Some("tools/call") => assert_eq!(r["sub"], "alice", "{r}"),
            _ => {}
        }
    }
    assert!(
        all.iter()
            .any(|r| r["method"] == "tools/list" && r["sub"] == "mcpgate"),
        "the members' lists were read as mcpgate's: {all:?}"
    );
}
