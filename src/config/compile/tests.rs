//! Compiling configurations: every section's defaults and mistakes (each named with
//! its position), route matching, tokens, `check`'s table.

use super::routes::Segment;
use super::*;
use std::sync::Arc;
use std::time::Duration;

const BASE: &str = r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.docs]
url = "http://127.0.0.1:9/mcp"

[profiles.gpt]
upstream = "docs"
allow = ["get_document", "delete_*"]

[[routes]]
listen = "main"
path = "/gpt-mcp/{token}/mcp"
profile = "gpt"

[[routes]]
listen = "main"
path = "/mcp"
profile = "gpt"

[[tokens]]
id = "t1"
sha256 = "0000000000000000000000000000000000000000000000000000000000000001"
profiles = ["gpt"]
"#;

fn err(text: &str) -> String {
    load_str(text, "f.toml").unwrap_err().to_string()
}

/// A stdio command that is not an executable file here is a warning (the machine that
/// runs it may have it), found as the process would be: by path, or in PATH.
#[test]
fn a_stdio_program_that_is_not_here_is_a_warning() {
    let with = |command: &str| {
        let text = BASE.replace(
            "url = \"http://127.0.0.1:9/mcp\"",
            &format!("command = [\"{command}\"]"),
        );
        load_str(&text, "f.toml").unwrap().warnings
    };
    assert!(with("sh").is_empty(), "sh is in PATH");
    assert!(with("/bin/sh").is_empty());
    let not_executable = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    for missing in [
        "/nonexistent/mcp-server",
        "no-such-mcp-server-here",
        not_executable,
    ] {
        let w = with(missing);
        assert!(
            w.iter()
                .any(|w| w.contains("is not an executable file here")),
            "{missing}: {w:?}"
        );
    }
}

/// Upstream URLs: `http://host:port/path` and `unix:/socket:/path`, whose requests go
/// to `localhost` with the path; anything else is refused, naming the form.
#[test]
fn upstream_urls_name_a_host_or_a_socket() {
    let with = |url: &str| BASE.replace("http://127.0.0.1:9/mcp", url);
    let s = load_str(&with("unix:/run/kb/mcp.sock:/mcp?x=1"), "f.toml").unwrap();
    let up = s.upstreams["docs"].first();
    assert_eq!(up.address, Address::Unix("/run/kb/mcp.sock".into()));
    assert_eq!(up.url.path_and_query().unwrap().as_str(), "/mcp?x=1");
    assert_eq!(up.host, "localhost");
    // The label (check, metrics, logs) leaves the query out: it may hold a key.
    assert!(s.describe().contains("unix:/run/kb/mcp.sock:/mcp "));
    assert!(!s.describe().contains("x=1"));
    let s = load_str(&with("http://[::1]:8000/mcp"), "f.toml").unwrap();
    let up = s.upstreams["docs"].first();
    assert_eq!(
        up.address,
        Address::Tcp {
            host: "::1".into(),
            port: 8000
        }
    );
    assert_eq!(up.host, "[::1]:8000");
    for (url, says) in [
        (
            "unix:/run/kb/mcp.sock",
            "unix:/path/to/socket:/request/path",
        ),
        (
            "unix:run/mcp.sock:/mcp",
            "unix:/path/to/socket:/request/path",
        ),
        (
            "unix:/run/mcp.sock:mcp",
            "unix:/path/to/socket:/request/path",
        ),
        (
            "ftp://127.0.0.1/mcp",
            "must start with http://, https:// or unix:",
        ),
    ] {
        let e = err(&with(url));
        assert!(e.contains(says), "{url}: {e}");
    }
    // https: port 443 by default, and TLS to the url's host unless a name is given.
    let s = load_str(&with("https://mcp.example.com/mcp"), "f.toml").unwrap();
    let up = s.upstreams["docs"].first();
    assert_eq!(
        up.address,
        Address::Tcp {
            host: "mcp.example.com".into(),
            port: 443
        }
    );
    assert_eq!(up.host, "mcp.example.com");
    let tls = up.tls.as_ref().expect("https is TLS");
    assert_eq!(
        tls.server_name,
        rustls_pki_types::ServerName::try_from("mcp.example.com").unwrap()
    );
    // The url is the last key of its table: what follows it lands in the same table.
    let with_tls = |url: &str, tls: &str| with(&format!("{url}\"\ntls = {tls}\n#\""));
    let s = load_str(
        &with_tls(
            "https://10.0.0.5:8443/mcp",
            r#"{ server_name = "mcp.internal" }"#,
        ),
        "f.toml",
    )
    .unwrap();
    let up = s.upstreams["docs"].first();
    assert_eq!(up.host, "10.0.0.5:8443");
    let other = up.tls.as_ref().unwrap();
    assert_eq!(
        other.server_name,
        rustls_pki_types::ServerName::try_from("mcp.internal").unwrap()
    );
    assert_ne!(other.identity, tls.identity);
    assert!(
        s.describe()
            .contains("    tls: server_name=mcp.internal roots=mozilla client_cert=no\n")
    );
    for (url, tls, says) in [
        (
            "http://127.0.0.1/mcp",
            r#"{ server_name = "x" }"#,
            "tls applies to https:// upstreams only",
        ),
        (
            "https://127.0.0.1/mcp",
            r#"{ cert = "/nonexistent/c.pem" }"#,
            "cert and key go together",
        ),
        (
            "https://127.0.0.1/mcp",
            r#"{ ca = "/nonexistent/ca.pem" }"#,
            "cannot read /nonexistent/ca.pem",
        ),
        (
            "https://127.0.0.1/mcp",
            r#"{ ca = "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n" }"#,
            "bad certificate PEM",
        ),
        (
            "https://127.0.0.1/mcp",
            r#"{ server_name = "not a name" }"#,
            "not a valid TLS server name",
        ),
    ] {
        let e = err(&with_tls(url, tls));
        assert!(e.contains(says), "{url} {tls}: {e}");
    }
}

#[test]
fn routes_match_exactly() {
    let s = load_str(BASE, "f.toml").unwrap();
    let m = s.match_route(0, "/gpt-mcp/abc/mcp").unwrap();
    assert_eq!(m.path_token, Some("abc"));
    assert_eq!(m.route.auth, Auth::Path);
    assert!(s.match_route(0, "/gpt-mcp//mcp").is_none());
    assert!(s.match_route(0, "/gpt-mcp/abc/mcp/").is_none());
    assert!(s.match_route(0, "/gpt-mcp/abc/def/mcp").is_none());
    assert!(s.match_route(0, "/gpt-mcp/abc").is_none());
    let m = s.match_route(0, "/mcp").unwrap();
    assert_eq!(m.route.auth, Auth::Bearer);
    assert!(s.match_route(0, "/mcp/").is_none());
    assert!(s.match_route(0, "/MCP").is_none());
}

/// Matching reads segments as `split('/')` does: a reference matcher built on it
/// agrees on every path made from the pieces templates and clients use.
#[test]
fn templates_match_as_split_segments_do() {
    let s = load_str(
        &format!(
            "{BASE}\n[[routes]]\nlisten = \"main\"\npath = \"/a/{{token}}\"\nprofile = \"gpt\"\n\n[[routes]]\nlisten = \"main\"\npath = \"/{{token}}/b/\"\nprofile = \"gpt\"\n"
        ),
        "f.toml",
    )
    .unwrap();
    let templates: Vec<&Vec<Segment>> = s.listeners[0]
        .table
        .templated
        .iter()
        .map(|(t, _)| t)
        .collect();
    assert_eq!(templates.len(), 3);
    fn reference<'p>(s: &Snapshot, path: &'p str) -> Option<(usize, Option<&'p str>)> {
        s.listeners[0]
            .table
            .templated
            .iter()
            .find_map(|(segments, i)| {
                let parts: Vec<&str> = path.split('/').collect();
                if parts.len() != segments.len() {
                    return None;
                }
                let mut token = None;
                for (seg, part) in segments.iter().zip(&parts) {
                    match seg {
                        Segment::Literal(lit) if lit == part => {}
                        Segment::Token if !part.is_empty() => token = Some(*part),
                        _ => return None,
                    }
                }
                Some((*i, token))
            })
    }
    let pieces = ["", "/", "a", "b", "gpt-mcp", "mcp", "tok", "//", "/a", "b/"];
    let mut paths = vec![String::new()];
    for _ in 0..5 {
        let longer: Vec<String> = paths
            .iter()
            .flat_map(|p| pieces.iter().map(move |x| format!("{p}{x}")))
            .collect();
        paths.extend(longer);
        paths.sort();
        paths.dedup();
        paths.truncate(20_000);
    }
    let mut matched = 0;
    for path in &paths {
        let ours = s.match_route(0, path).map(|m| {
            let i = s
                .routes
                .iter()
                .position(|r| Arc::ptr_eq(r, m.route))
                .unwrap();
            (i, m.path_token)
        });
        let exact = s.listeners[0]
            .table
            .exact
            .get(path.as_str())
            .map(|&i| (i, None));
        assert_eq!(ours, exact.or_else(|| reference(&s, path)), "{path:?}");
        matched += usize::from(ours.is_some());
    }
    assert!(matched > 10, "{matched} of {} paths matched", paths.len());
}

/// Every byte of a digest counts in its hash: digests that differ in one word only,
/// whichever word, hash apart (as the benchmark's 10,000 registered hashes do, small
/// numbers in the last word), and a map of them spreads out.
#[test]
fn token_digests_hash_on_every_word() {
    use std::hash::BuildHasher;
    let build = std::hash::BuildHasherDefault::<DigestHasher>::default();
    for word in 0..4 {
        let mut hashes = std::collections::HashSet::new();
        let mut low_bits = std::collections::HashSet::new();
        let mut tags = std::collections::HashSet::new();
        for i in 1..=10_000u64 {
            let mut digest = [0u8; 32];
            digest[word * 8..word * 8 + 8].copy_from_slice(&i.to_be_bytes());
            let h = build.hash_one(digest);
            hashes.insert(h);
            low_bits.insert(h & 0x3fff);
            tags.insert(h >> 57);
        }
        assert_eq!(hashes.len(), 10_000, "word {word}");
        assert!(
            low_bits.len() > 5_000,
            "word {word}: {} buckets",
            low_bits.len()
        );
        assert!(tags.len() > 100, "word {word}: {} tags", tags.len());
    }
    let s = load_str(BASE, "f.toml").unwrap();
    let mut t1 = [0u8; 32];
    t1[31] = 1;
    assert_eq!(s.tokens.get(&t1).map(|t| &*t.id), Some("t1"));
}

#[test]
fn unknown_key_has_position() {
    let e = err(&format!("{BASE}\n[tools]\nhiden = [\"x\"]\n"));
    assert!(e.starts_with("f.toml:"), "{e}");
    assert!(e.contains("hiden"), "{e}");
    let line: usize = e.split(':').nth(1).unwrap().parse().unwrap();
    assert_eq!(line, BASE.lines().count() + 3);
}

/// `[limits.store]`: defaults, identity (what keeps connections across reloads), the
/// password kept out of `check`, and each mistake named at its line.
#[test]
fn limits_store_compiles_and_mistakes_are_named() {
    let store = |body: &str| {
        format!(
            "{BASE}\n[limits]\nrate = [ {{ key = \"token\", rate = \"20/s\" }} ]\n[limits.store]\n{body}\n"
        )
    };
    let s = load_str(&store("redis = \"redis://127.0.0.1:6379/0\""), "f.toml").unwrap();
    let st = s.limits.store.as_deref().unwrap();
    assert_eq!(st.timeout, DEFAULT_STORE_TIMEOUT);
    assert_eq!(st.on_error, OnError::Local);
    assert_eq!(st.prefix, "mcpgate:");
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("redis-password");
    std::fs::write(&secret, "hunter2-redis\n").unwrap();
    let with_password = store(&format!(
        "redis = \"rediss://cache.internal:6380/2\"\npassword = \"${{file:{}}}\"\ntimeout = \"20ms\"\non_error = \"deny\"\nprefix = \"gw-a:\"",
        secret.display()
    ));
    let s = load_str(&with_password, "f.toml").unwrap();
    let st = s.limits.store.as_deref().unwrap();
    assert_eq!(st.password.as_deref(), Some("hunter2-redis"));
    assert_eq!(st.on_error, OnError::Deny);
    let described = s.describe();
    assert!(described.contains("store:     rediss://cache.internal:6380/2 timeout=20ms on_error=deny prefix=\"gw-a:\" password=<set>"), "{described}");
    assert!(!described.contains("hunter2") && !format!("{st:?}").contains("hunter2"));
    // Same settings, same identity; another password, another identity.
    let again = load_str(&with_password, "f.toml").unwrap();
    assert_eq!(again.limits.store.unwrap().identity, st.identity);
    std::fs::write(&secret, "other").unwrap();
    let other = load_str(&with_password, "f.toml").unwrap();
    assert_ne!(other.limits.store.unwrap().identity, st.identity);
    assert!(!st.identity.contains("hunter2"));

    let line_of = |e: &str| -> usize { e.split(':').nth(1).unwrap().parse().unwrap() };
    let store_line = BASE.lines().count() + 5;
    for (body, says) in [
        (
            "redis = \"redis://:secret@127.0.0.1:6379\"",
            "must not hold credentials",
        ),
        (
            "redis = \"redis://user:secret@127.0.0.1:6379\"",
            "must not hold credentials",
        ),
        (
            "redis = \"unix:///run/redis.sock?pass=secret\"",
            "only have db= and protocol=",
        ),
        (
            "redis = \"rediss://127.0.0.1:6380/#insecure\"",
            "never turned off",
        ),
        ("redis = \"http://127.0.0.1:6379\"", "bad redis address"),
        ("redis = \"127.0.0.1:6379\"", "bad redis address"),
        (
            "redis = \"redis://127.0.0.1\"\ntimeout = \"0ms\"",
            "greater than zero",
        ),
        (
            "redis = \"redis://127.0.0.1\"\ntimeout = \"1m\"",
            "between 1ms and 10s",
        ),
        (
            "redis = \"redis://127.0.0.1\"\non_error = \"fail\"",
            "unknown on_error",
        ),
        (
            "redis = \"redis://127.0.0.1\"\nprefix = \"a b\"",
            "visible ASCII",
        ),
        (
            "redis = \"redis://127.0.0.1\"\nurl = \"x\"",
            "unknown field",
        ),
    ] {
        let e = err(&store(body));
        assert!(e.contains(says), "{body}: {e}");
        assert!(!e.contains("secret@") && !e.contains("pass=secret"), "{e}");
        assert!(line_of(&e) >= store_line, "{body}: {e}");
    }
    let e = err(&store(
        "redis = \"redis://127.0.0.1\"\npassword = \"${env:MCPGATE_UNIT_UNSET_PASSWORD}\"",
    ));
    assert!(e.contains("MCPGATE_UNIT_UNSET_PASSWORD is not set"), "{e}");
    // `[limits]` made only by dotted headers (no `[limits]` line) reads the same.
    let implicit = format!(
        "{BASE}\n[[limits.rate]]\nkey = \"token\"\nrate = \"20/s\"\n\n[limits.store]\nredis = \"redis://127.0.0.1:6379/0\"\n"
    );
    let s = load_str(&implicit, "f.toml").unwrap();
    assert_eq!(s.limits.rate.len(), 1);
    assert!(s.limits.store.is_some());
}

#[test]
fn limits_compile_with_signatures() {
    let text = format!(
        "{BASE}\n[limits]\nrate = [ {{ key = \"token\", rate = \"20/s\", burst = 40 }}, {{ key = \"client_ip\", on = \"auth_failure\", rate = \"10/m\" }} ]\nconcurrency = [ {{ tools = [\"ingest\"], max_in_flight = 1 }} ]\ntimeouts = {{ search = \"10s\" }}\n"
    );
    let first = load_str(&text, "f.toml").unwrap();
    assert_eq!(first.limits.rate.len(), 2);
    assert!(
        first
            .describe()
            .contains("rate:      key=token 20/s burst=40")
    );
    // The same rules have the same signatures (the state the gateway keeps for them
    // is matched by these); a changed rule has another.
    let second = load_str(&text, "f.toml").unwrap();
    let third = load_str(&text.replace("20/s", "30/s"), "f.toml").unwrap();
    let signatures = |s: &Snapshot| -> Vec<String> {
        let rate = s.limits.rate.iter().map(|r| r.signature.clone());
        rate.chain(s.limits.concurrency.iter().map(|c| c.signature.clone()))
            .collect()
    };
    assert_eq!(signatures(&first), signatures(&second));
    let (a, b) = (signatures(&second), signatures(&third));
    assert_ne!(a[0], b[0]);
    assert_eq!(a[1..], b[1..]);
    assert!(err(&text.replace("key = \"token\"", "key = \"user\"")).contains("unknown rate key"));
    assert!(
        err(&text.replace("key = \"client_ip\"", "key = \"token\""))
            .contains("needs key = \"client_ip\"")
    );
    assert!(err(&text.replace("\"20/s\"", "\"20/d\"")).contains("bad rate"));
    assert!(err(&text.replace("max_in_flight = 1", "max_in_flight = 0")).contains("at least 1"));
    assert!(err(&text.replace("\"10s\"", "\"soon\"")).contains("timeouts.search"));
}

#[test]
fn references_are_checked() {
    assert!(
        err(&BASE.replace(
            "profile = \"gpt\"\n\n[[tokens]]",
            "profile = \"nope\"\n\n[[tokens]]"
        ))
        .contains("no profile named \"nope\"")
    );
    assert!(
        err(&BASE.replace("upstream = \"docs\"", "upstream = \"x\"")).contains("no upstream named")
    );
    assert!(
        err(&BASE.replace("profiles = [\"gpt\"]", "profiles = [\"gpx\"]"))
            .contains("no profile named \"gpx\"")
    );
    assert!(err(&BASE.replace("000000001\"", "00000001\"")).contains("64 hex"));
}

#[test]
fn missing_secret_is_named() {
    let text = BASE.replace(
        "url = \"http://127.0.0.1:9/mcp\"",
        "url = \"http://127.0.0.1:9/mcp\"\nheaders = { \"X-API-Key\" = \"${env:MCPGATE_UNIT_MISSING}\" }",
    );
    let e = err(&text);
    assert!(e.contains("MCPGATE_UNIT_MISSING"), "{e}");
    assert!(e.starts_with("f.toml:8:"), "{e}");
}

#[test]
fn host_and_origin_rules() {
    let s = load_str(BASE, "f.toml").unwrap();
    let l = &s.listeners[0];
    for ok in [
        "localhost",
        "LOCALHOST:8080",
        "127.0.0.1:1",
        "[::1]:443",
        "[::1]",
    ] {
        assert!(l.hosts.allows(ok), "{ok}");
    }
    for bad in [
        "evil.example.com",
        "evil.example.com:8080",
        "localhost.evil.com",
        "127.0.0.2",
    ] {
        assert!(!l.hosts.allows(bad), "{bad}");
    }
    for ok in [
        "http://localhost:3000",
        "http://localhost",
        "https://127.0.0.1:8443",
        "http://[::1]:1",
    ] {
        assert!(l.origins.allows(ok), "{ok}");
    }
    for bad in [
        "http://evil.example.com",
        "http://localhost.evil.com",
        "http://localhost:",
        "null",
        "http://localhost:80x",
    ] {
        assert!(!l.origins.allows(bad), "{bad}");
    }
    let public = load_str(&BASE.replace("127.0.0.1:0", "0.0.0.0:0"), "f.toml").unwrap();
    assert!(public.listeners[0].hosts.allows("mcp.example.com"));
    assert!(!public.listeners[0].origins.allows("https://claude.ai"));
    let listed = BASE.replace("addr = \"127.0.0.1:0\"", "addr = \"0.0.0.0:0\"\nallowed_origins = [\"https://claude.ai\"]\nallowed_hosts = [\"mcp.example.com\"]");
    let listed = load_str(&listed, "f.toml").unwrap();
    assert!(listed.listeners[0].origins.allows("https://Claude.ai"));
    assert!(
        !listed.listeners[0]
            .origins
            .allows("https://claude.ai.evil.com")
    );
    assert!(listed.listeners[0].hosts.allows("mcp.example.com:8443"));
    assert!(!listed.listeners[0].hosts.allows("other.example.com"));
}

/// `[telemetry]`: a bare collector address gets OTLP's traces path; what cannot work
/// is refused with its position.
#[test]
fn telemetry_settings() {
    let with = |t: &str| load_str(&format!("{BASE}\n[telemetry]\n{t}\n"), "t.toml");
    let s = with("otlp = \"http://127.0.0.1:4318\"\nsampling = 0.25").unwrap();
    let t = s.telemetry.unwrap();
    assert_eq!(t.otlp, "http://127.0.0.1:4318/v1/traces");
    assert_eq!(
        (t.sampling, t.queue, t.service_name.as_str()),
        (0.25, 16384, "mcpgate")
    );
    let s = with("otlp = \"http://collector:4318/custom/traces\"").unwrap();
    assert_eq!(
        s.telemetry.unwrap().otlp,
        "http://collector:4318/custom/traces"
    );
    assert!(with("sampling = 0.5").unwrap().telemetry.is_none());
    for (bad, says) in [
        ("otlp = \"https://collector:4318\"", "http:// URL"),
        ("otlp = \"http://user:pw@collector:4318\"", "credentials"),
        ("otlp = \"collector:4318\"", "http:// URL"),
        ("otlp = \"http://c:4318\"\nsampling = 1.5", "from 0 to 1"),
        ("otlp = \"http://c:4318\"\nqueue = 0", "from 1 to 1000000"),
        (
            "otlp = \"http://c:4318\"\nservice_name = \" \"",
            "empty service_name",
        ),
        ("otlp = \"http://c:4318\"\nexport = 1", "unknown field"),
    ] {
        let e = with(bad).unwrap_err().to_string();
        assert!(e.contains(says) && e.contains("t.toml:"), "{bad}: {e}");
    }
    let s = load_str(&format!("{BASE}\n[log]\nformat = \"combined\"\n"), "t.toml").unwrap();
    assert_eq!(s.log.format, LogFormat::Combined);
}

#[test]
fn describe_hides_secrets() {
    let s = load_str(BASE, "f.toml").unwrap();
    let d = s.describe();
    assert!(d.contains("/gpt-mcp/{token}/mcp"));
    assert!(!d.contains("0000000000000000000000000000000000000000000000000000000000000001"));
}

const OAUTH: &str = r#"
[oauth]
issuer = "https://idp.example.com/realms/mcp"
resource = "https://mcp.example.com/mcp"
introspection = { client_id = "mcpgate", client_secret = "s3cret-introspection" }

[[oauth.grants]]
scope = "kb.write kb.admin"
profiles = ["gpt"]

[[oauth.grants]]
claim = "groups"
value = "readers"
profiles = ["gpt"]
"#;

fn with_oauth(oauth: &str, route_auth: &str) -> String {
    BASE.replace(
        "path = \"/mcp\"\nprofile = \"gpt\"",
        &format!("path = \"/mcp\"\nprofile = \"gpt\"\nauth = \"{route_auth}\""),
    ) + oauth
}

#[test]
fn oauth_routes_and_grants_compile_and_check_prints_the_table() {
    let s = load_str(&with_oauth(OAUTH, "oauth"), "f.toml").unwrap();
    let o = s.oauth.as_deref().unwrap();
    assert_eq!(o.scope_for("gpt").as_deref(), Some("kb.write kb.admin"));
    assert_eq!(
        o.metadata_url("/mcp"),
        "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
    );
    let paths: Vec<&str> = s.listeners[0].metadata_paths.iter().map(|p| &**p).collect();
    assert_eq!(
        paths,
        [
            "/.well-known/oauth-protected-resource",
            "/.well-known/oauth-protected-resource/mcp"
        ]
    );
    let d = s.describe();
    assert!(d.contains("(oauth)"), "{d}");
    assert!(d.contains("1. scope kb.write kb.admin"), "{d}");
    assert!(d.contains("2. claim groups = \"readers\""), "{d}");
    assert!(!d.contains("s3cret-introspection"), "{d}");
    // `token` is the path or bearer kind, as the path calls for.
    let s = load_str(&with_oauth("", "token"), "f.toml").unwrap();
    assert_eq!(s.routes[1].auth, Auth::Bearer);
}

#[test]
fn oauth_mistakes_are_named() {
    let refetch = |d: &str| {
        OAUTH.replace(
            "resource = \"https://mcp.example.com/mcp\"",
            &format!("resource = \"https://mcp.example.com/mcp\"\njwks_refetch_after = \"{d}\""),
        )
    };
    let settings = load_str(&with_oauth(&refetch("5s"), "oauth"), "f.toml").unwrap();
    let oauth = settings.oauth.as_ref().unwrap();
    assert_eq!(oauth.refetch_after, Duration::from_secs(5));
    let default = load_str(&with_oauth(OAUTH, "oauth"), "f.toml").unwrap();
    assert_eq!(
        default.oauth.as_ref().unwrap().refetch_after,
        Duration::from_secs(30)
    );
    assert_ne!(oauth.identity, default.oauth.as_ref().unwrap().identity);
    let cases = [
        (
            with_oauth(&refetch("500ms"), "oauth"),
            "jwks_refetch_after must be at least 1s",
        ),
        (with_oauth("", "oauth"), "needs an [oauth] table"),
        (
            with_oauth(
                &OAUTH.replace("https://idp.example.com", "http://idp.example.com"),
                "oauth",
            ),
            "plain http only on a loopback address",
        ),
        (
            with_oauth(
                &OAUTH.replace(
                    "https://mcp.example.com/mcp",
                    "https://mcp.example.com/mcp#x",
                ),
                "oauth",
            ),
            "must not have a query or a fragment",
        ),
        (
            with_oauth(
                &OAUTH.replace("[oauth]\n", "[oauth]\nalgorithms = [\"none\"]\n"),
                "oauth",
            ),
            "\"none\" is never accepted",
        ),
        (
            with_oauth(
                &OAUTH.replace(
                    "[oauth]\n",
                    "[oauth]\nalgorithms = [\"RS256\", \"HS256\"]\n",
                ),
                "oauth",
            ),
            "HMAC needs a secret shared",
        ),
        (
            with_oauth(
                &OAUTH.replace(
                    "profiles = [\"gpt\"]\n\n[[oauth.grants]]",
                    "profiles = [\"nope\"]\n\n[[oauth.grants]]",
                ),
                "oauth",
            ),
            "no profile named \"nope\"",
        ),
        (
            with_oauth(&OAUTH.replace("claim = \"groups\"\n", ""), "oauth"),
            "claim and value go together",
        ),
        (
            with_oauth(
                &OAUTH.replace("scope = \"kb.write kb.admin\"", "scope = \"kb.\\\"write\""),
                "oauth",
            ),
            "a scope may not have",
        ),
        (
            with_oauth(
                &OAUTH
                    .replace("profiles = [\"gpt\"]", "profiles = [\"other\"]")
                    .replace(
                        "[oauth]",
                        "[profiles.other]\nupstream = \"docs\"\nallow = [\"*\"]\n\n[oauth]",
                    ),
                "oauth",
            ),
            "no [[oauth.grants]] gives profile \"gpt\"",
        ),
    ];
    for (text, want) in cases {
        let e = err(&text);
        assert!(e.contains(want), "{want}: {e}");
        assert!(e.starts_with("f.toml:"), "with a position: {e}");
    }
    // A loopback issuer may be plain http.
    let local = OAUTH.replace("https://idp.example.com", "http://127.0.0.1:8080");
    assert!(load_str(&with_oauth(&local, "oauth"), "f.toml").is_ok());
}

#[test]
fn approval_rules_compile_per_profile_and_mistakes_are_named() {
    let text = format!(
        "{BASE}\n[profiles.other]\nupstream = \"docs\"\nallow = [\"*\"]\n\n[[routes]]\nlisten = \"main\"\npath = \"/other\"\nprofile = \"other\"\n\n[admin]\n\n[[approvals]]\nprofiles = [\"gpt\"]\ntools = [\"delete_*\"]\nmessage = \"Delete {{path}}?\"\n\n[[approvals]]\nannotations = {{ destructiveHint = true }}\napprover = \"admin\"\ntimeout = \"90s\"\n"
    );
    let s = load_str(&text, "f.toml").unwrap();
    let gpt = &s.profiles["gpt"].approvals;
    assert_eq!(gpt.len(), 2);
    assert_eq!((gpt[0].number, gpt[0].approver), (1, Approver::Client));
    assert_eq!(gpt[0].timeout, DEFAULT_APPROVAL_TIMEOUT);
    assert!(gpt[0].matches("delete_document", None));
    assert!(!gpt[0].matches("get_document", None));
    assert_eq!(
        (gpt[1].approver, gpt[1].timeout),
        (Approver::Admin, Duration::from_secs(90))
    );
    let other = &s.profiles["other"].approvals;
    assert_eq!(
        other.len(),
        1,
        "a rule without profiles holds on every profile"
    );
    // By annotations: what the tool says decides; unknown, it is asked about.
    let destructive = serde_json::json!({"destructiveHint": true});
    let read_only = serde_json::json!({"readOnlyHint": true});
    assert!(other[0].matches("x", destructive.as_object()));
    assert!(!other[0].matches("x", read_only.as_object()));
    assert!(other[0].matches("x", None));
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    let long = load_str(
        &text.replace("timeout = \"90s\"", "timeout = \"10m\""),
        "f.toml",
    )
    .unwrap();
    assert!(
        long.warnings.iter().any(|w| w.contains("approval rule #2 lets a call wait 10m for an operator, longer than server.idle_timeout (5m)")),
        "{:?}",
        long.warnings
    );
    let described = s.describe();
    assert!(
        described.contains("approval #1: tools delete_*; approver=client timeout=5m"),
        "{described}"
    );
    assert!(
        described.contains(
            "approval #2: annotations destructiveHint = true; approver=admin timeout=1m 30s"
        ),
        "{described}"
    );

    for (rule, says) in [
        ("profiles = [\"gpt\"]", "names tools, annotations or both"),
        ("tools = []", "matches no call"),
        ("tools = [\"d\"]\nprofiles = []", "applies to no profile"),
        (
            "tools = [\"d\"]\nprofiles = [\"nope\"]",
            "no profile named \"nope\"",
        ),
        ("tools = [\"d\"]\nmessage = \"Delete {path\"", "not closed"),
        (
            "tools = [\"d\"]\napprover = \"boss\"",
            "\"client\" or \"admin\"",
        ),
        (
            "tools = [\"d\"]\napprover = \"admin\"",
            "needs the admin listener",
        ),
        ("tools = [\"d\"]\ntimeout = \"0s\"", "greater than zero"),
        ("tools = [\"d\"]\ntimeout = \"2d\"", "at most 24h"),
        (
            "tools = [\"d\"]\nannotations = {}",
            "empty annotations table",
        ),
        ("tools = [\"d\"]\nwho = \"x\"", "unknown field"),
    ] {
        let e = err(&format!("{BASE}\n[[approvals]]\n{rule}\n"));
        assert!(e.contains(says), "{rule}: {e}");
        assert!(e.starts_with("f.toml:"), "{rule}: {e}");
    }
}

#[test]
fn identity_compiles_and_its_mistakes_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.pem"), dir.path().join("b.pem"));
    std::fs::write(&a, crate::config::identity::tests::pem_key(true)).unwrap();
    std::fs::write(&b, crate::config::identity::tests::pem_key(false)).unwrap();
    let with = |identity: &str| {
        BASE.replace(
            "url = \"http://127.0.0.1:9/mcp\"\n",
            &format!("url = \"http://127.0.0.1:9/mcp\"\n{identity}\n"),
        )
    };
    let good = with(&format!(
        "identity = {{ mode = \"jwt\", issuer = \"https://gate\", key = [\"${{file:{}}}\", \"${{file:{}}}\"] }}",
        a.display(),
        b.display()
    ));
    let s = load_str(&good, "f.toml").unwrap();
    let i = s.upstreams["docs"].identity.as_ref().unwrap();
    assert_eq!(i.audience, "http://127.0.0.1:9/mcp", "the url by default");
    assert_eq!(i.keys.len(), 2);
    assert_eq!(i.keys[0].alg, jsonwebtoken::Algorithm::ES256);
    assert!(s.identity_jwks.as_ref().unwrap().paths.is_empty());
    let described = s.describe();
    assert!(
        described
            .contains("identity: jwt iss=https://gate aud=http://127.0.0.1:9/mcp keys=[ES256 "),
        "{described}"
    );
    assert!(!described.contains("PRIVATE"), "{described}");
    let key = format!("key = \"${{file:{}}}\"", a.display());
    for (identity, says) in [
        (
            format!("identity = {{ mode = \"jwt\", {key} }}"),
            "needs issuer",
        ),
        (
            "identity = { mode = \"jwt\", issuer = \"i\" }".to_string(),
            "needs key",
        ),
        (
            format!("identity = {{ mode = \"exchange\", {key} }}"),
            "needs client_id and client_secret",
        ),
        (
            format!(
                "identity = {{ mode = \"exchange\", client_id = \"c\", client_secret = \"s\", {key} }}"
            ),
            "key is for mode = \"jwt\"",
        ),
        (
            format!("identity = {{ mode = \"jwt\", issuer = \"i\", {key}, scope = \"x\" }}"),
            "scope is for mode = \"exchange\"",
        ),
        (
            "identity = { mode = \"exchange\", client_id = \"c\", client_secret = \"s\" }"
                .to_string(),
            "configure [oauth]",
        ),
        (
            "identity = { mode = \"exchange\", client_id = \"c\", client_secret = \"s\", grant = \"on_behalf_of\" }".to_string(),
            "names the upstream by scope",
        ),
        (
            "identity = { mode = \"exchange\", client_id = \"c\", client_secret = \"s\", grant = \"magic\" }".to_string(),
            "\"token_exchange\" or \"on_behalf_of\"",
        ),
        (
            format!("identity = {{ mode = \"jwt\", issuer = \"i\", {key}, grant = \"on_behalf_of\" }}"),
            "grant is for mode = \"exchange\"",
        ),
        (
            format!(
                "identity = {{ mode = \"exchange\", client_id = \"c\", client_secret = \"s\", client_{key} }}"
            ),
            "not both",
        ),
        (
            "identity = { mode = \"exchange\", client_id = \"c\", client_key = \"nope\" }"
                .to_string(),
            "client_key: cannot read",
        ),
        (
            format!(
                "identity = {{ mode = \"exchange\", client_id = \"c\", client_key = \"{}\" }}",
                concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")
            ),
            "client_key: the key is not PEM",
        ),
        (
            format!("identity = {{ mode = \"magic\", {key} }}"),
            "\"jwt\", \"exchange\" or \"none\"",
        ),
        (
            "identity = { mode = \"jwt\", issuer = \"i\", key = \"not a key\" }".to_string(),
            "key 1: cannot read",
        ),
        (
            "identity = { mode = \"jwt\", issuer = \"i\", key = \"${env:PATH}\" }".to_string(),
            "key 1: the key is not PEM",
        ),
        (
            format!(
                "identity = {{ mode = \"jwt\", issuer = \"i\", key = \"{}\" }}",
                concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")
            ),
            "key 1: the key is not PEM",
        ),
        (
            format!("identity = {{ mode = \"jwt\", issuer = \"i\", {key}, jwks_path = \"jwks\" }}"),
            "starts with /",
        ),
        (
            format!(
                "headers = {{ Authorization = \"Bearer x\" }}\nidentity = {{ mode = \"jwt\", issuer = \"i\", {key} }}"
            ),
            "keep one",
        ),
    ] {
        let e = err(&with(&identity));
        assert!(e.contains(says), "{identity}: {e}");
        assert!(!e.contains("MIG") && !e.contains("MC4"), "no key text: {e}");
    }
    // With [oauth], a route that is not oauth cannot reach an exchanged upstream.
    let oauth =
        "\n[oauth]\nissuer = \"https://idp.example\"\nresource = \"https://gw.example/mcp\"\n";
    let e = err(&(with(
        "identity = { mode = \"exchange\", client_id = \"c\", client_secret = \"s\" }",
    ) + oauth));
    assert!(e.contains("the route needs auth = \"oauth\""), "{e}");
    // mcpgate's own requests to an exchanged upstream carry no token: warned.
    let oauth_routes = (with(
        "identity = { mode = \"exchange\", client_id = \"c\", client_secret = \"s\" }",
    ) + oauth)
        .replace(
            "[[routes]]\nlisten = \"main\"\npath = \"/gpt-mcp/{token}/mcp\"\nprofile = \"gpt\"\n",
            "",
        )
        .replace(
            "path = \"/mcp\"\nprofile = \"gpt\"\n",
            "path = \"/mcp\"\nprofile = \"gpt\"\nauth = \"oauth\"\n",
        )
        + "\n[[oauth.grants]]\nscope = \"kb\"\nprofiles = [\"gpt\"]\n";
    let s = load_str(&oauth_routes, "f.toml").unwrap_or_else(|e| panic!("{e}"));
    assert!(
        s.warnings
            .iter()
            .any(|w| w
                .contains("mcpgate's own requests to it (the era probe of protocol = \"auto\"")),
        "{:?}",
        s.warnings
    );
    let named = oauth_routes.replace(
        "url = \"http://127.0.0.1:9/mcp\"\n",
        "url = \"http://127.0.0.1:9/mcp\"\nprotocol = \"modern\"\n",
    );
    let s = load_str(&named, "f.toml").unwrap();
    assert!(
        !s.warnings.iter().any(|w| w.contains("exchange")),
        "{:?}",
        s.warnings
    );
    // The default is none.
    let none = load_str(&with("identity = { mode = \"none\" }"), "f.toml").unwrap();
    assert!(none.upstreams["docs"].identity.is_none() && none.identity_jwks.is_none());
    // A stdio upstream: its processes are told whom they serve (jwt, audience its name by
    // default); exchange has no per-call token to give them, and the variables are mcpgate's.
    let stdio = |more: &str| {
        BASE.replace(
            "url = \"http://127.0.0.1:9/mcp\"\n",
            &format!("command = [\"server\"]\n{more}\n"),
        )
    };
    let s = load_str(
        &stdio(&format!(
            "identity = {{ mode = \"jwt\", issuer = \"https://gate\", {key} }}"
        )),
        "f.toml",
    )
    .unwrap();
    let docs = &s.upstreams["docs"];
    assert_eq!(docs.identity.as_ref().unwrap().audience, "docs");
    assert!(docs.stdio.as_ref().unwrap().identity);
    assert!(s.identity_jwks.is_some());
    let described = s.describe();
    assert!(
        described.contains("each process is told at its start whom it serves (the caller that started it), in MCPGATE_IDENTITY_TOKEN"),
        "{described}"
    );
    let e = err(&stdio(
        "identity = { mode = \"exchange\", client_id = \"c\", client_secret = \"s\" }",
    ));
    assert!(
        e.contains("identity mode = \"exchange\" does not apply to a stdio upstream"),
        "{e}"
    );
    let e = err(&stdio(&format!(
        "env = {{ MCPGATE_IDENTITY_TOKEN = \"x\" }}\nidentity = {{ mode = \"jwt\", issuer = \"i\", {key} }}"
    )));
    assert!(
        e.contains("env MCPGATE_IDENTITY_TOKEN is set by mcpgate"),
        "{e}"
    );
    // Without identity the name is the user's.
    let plain = load_str(&stdio("env = { MCPGATE_IDENTITY_TOKEN = \"x\" }"), "f.toml").unwrap();
    assert!(!plain.upstreams["docs"].stdio.as_ref().unwrap().identity);
}
