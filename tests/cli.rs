//! The command line as an operator uses it: `check`, `token`, startup failures, `demo`.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::*;

fn mcpgate() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mcpgate"));
    c.env_remove("MCPGATE_CONFIG")
        .env("MCPGATE_TEST_API_KEY", API_KEY);
    c
}

fn write_config(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gate.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(cmd: &mut Command) -> Out {
    let o = cmd.output().unwrap();
    Out {
        code: o.status.code(),
        stdout: String::from_utf8_lossy(&o.stdout).into(),
        stderr: String::from_utf8_lossy(&o.stderr).into(),
    }
}

#[test]
fn check_prints_the_effective_table_without_secrets() {
    let (_d, path) = write_config(&config("http://127.0.0.1:9/mcp", "10s"));
    let o = run(mcpgate().arg("check").arg("-c").arg(&path));
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    for want in [
        "/gpt-mcp/{token}/mcp",
        "-> profile gpt",
        "-> upstream docs",
        "chatgpt-app",
        "not_after=2999-01-01T00:00:00Z",
        "hidden:    move_document",
        "deny_code: -32602",
        "max_body:  65536 bytes",
        "headers=[x-api-key]",
    ] {
        assert!(
            o.stdout.contains(want),
            "missing {want:?} in:\n{}",
            o.stdout
        );
    }
    for secret in [hash(GPT), hash(READONLY), API_KEY.to_string()] {
        assert!(!o.stdout.contains(&secret) && !o.stderr.contains(&secret));
    }
    // $MCPGATE_CONFIG is the default path.
    let o = run(mcpgate().arg("check").env("MCPGATE_CONFIG", &path));
    assert_eq!(o.code, Some(0), "{}", o.stderr);
}

#[test]
fn check_points_at_the_error() {
    let base = config("http://127.0.0.1:9/mcp", "10s");
    let cases = [
        (
            base.replace("deny_code = -32602", "deny_code = -32602\nhiden = [\"x\"]"),
            "unknown field `hiden`",
            "hiden",
        ),
        (
            base.replace("timeout = \"10s\"", "timeout = \"soon\""),
            "bad duration",
            "\"soon\"",
        ),
        (
            base.replace("profile = \"readonly\"", "profile = \"reader\""),
            "no profile named \"reader\"",
            "\"reader\"",
        ),
        (
            base.replace(
                "${env:MCPGATE_TEST_API_KEY}",
                "${env:MCPGATE_NOT_SET_ANYWHERE}",
            ),
            "MCPGATE_NOT_SET_ANYWHERE",
            "\"${env:MCPGATE_NOT_SET_ANYWHERE}\"",
        ),
        (
            base.replace("${env:MCPGATE_TEST_API_KEY}", "${file:/nonexistent/key}"),
            "cannot read /nonexistent/key",
            "\"${file:/nonexistent/key}\"",
        ),
        (
            format!("{base}\n[audit]\npath = \"a.jsonl\"\nretain = 3\n"),
            "unknown field `retain`",
            "retain",
        ),
        (
            format!("{base}\n[audit]\npath = \"a.jsonl\"\nmax_size = \"lots\"\n"),
            "bad size",
            "\"lots\"",
        ),
        (
            base.replace(
                "max_body = \"64KiB\"",
                "max_body = \"64KiB\"\nrate = [ { key = \"token\", rate = \"fast\" } ]",
            ),
            "bad rate \"fast\"",
            "\"fast\"",
        ),
        (
            base.replace(
                "addr = \"127.0.0.1:0\"",
                "addr = \"127.0.0.1:0\"\ntls = { cert = \"/nonexistent/a.pem\", key = \"b\" }",
            ),
            "cannot read certificate /nonexistent/a.pem",
            "{ cert",
        ),
        (
            format!("{base}\n[admin]\naddr = \"localhost:x\"\n"),
            "bad admin address",
            "\"localhost:x\"",
        ),
        (
            format!("{base}\n[log]\nformat = \"xml\"\n"),
            "unknown log format \"xml\"",
            "\"xml\"",
        ),
        (
            format!("{base}\n[server]\nmax_header_size = \"1KiB\"\n"),
            "between 8KiB and 16MiB",
            "\"1KiB\"",
        ),
        (
            base.replace(&hash(GPT), "3b1f"),
            "64 hex digits",
            "\"3b1f\"",
        ),
        (
            base.replace("path = \"/mcp-readonly\"", "path = \"/mcp-readonly/{id}\""),
            "only placeholder",
            "\"/mcp-readonly/{id}\"",
        ),
        (
            base.replace("auth = \"none\"", "auth = \"open\""),
            "unknown auth \"open\"",
            "\"open\"",
        ),
        (
            base.replace("path = \"/mcp-readonly\"", "path = \"/mcp-gpt-full\""),
            "already has a route",
            "\"/mcp-gpt-full\"",
        ),
        (
            base.replace(
                "not_after = \"2020-01-01T00:00:00Z\"",
                "not_after = \"yesterday\"",
            ),
            "bad timestamp",
            "\"yesterday\"",
        ),
        (
            base.replace("id = \"reader\"", "id = \"chatgpt-app\""),
            "duplicate token id",
            "\"chatgpt-app\"",
        ),
        (
            base.replace(
                "url = \"http://127.0.0.1:9/mcp\"",
                "url = \"https://127.0.0.1:9/mcp\"\ntls = { ca = \"missing-ca.pem\" }",
            ),
            "missing-ca.pem",
            "\"missing-ca.pem\"",
        ),
        ("[listen\n".to_string(), "invalid table header", ""),
    ];
    for (text, message, at) in cases {
        let (_d, path) = write_config(&text);
        let o = run(mcpgate().arg("check").arg("-c").arg(&path));
        assert_eq!(o.code, Some(1), "{message}: {}", o.stdout);
        let line = o.stderr.trim_end();
        assert_eq!(line.lines().count(), 1, "one line: {line}");
        assert!(line.contains(message), "{line}");
        // FILE:LINE:COL: points at the offending text.
        let rest = line
            .strip_prefix(&format!("mcpgate: {}:", path.display()))
            .unwrap_or_else(|| panic!("{line}"));
        let mut parts = rest.splitn(3, ':');
        let l: usize = parts
            .next()
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("{line}"));
        let c: usize = parts
            .next()
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("{line}"));
        let source_line = text.lines().nth(l - 1).unwrap();
        let from_col: String = source_line.chars().skip(c - 1).collect();
        assert!(
            from_col.starts_with(at) || at.is_empty(),
            "{line}\n  points at {from_col:?}, want {at:?}"
        );
    }
}

#[test]
fn check_warns_about_open_routes_on_public_listeners() {
    let text = config("http://127.0.0.1:9/mcp", "10s")
        .replace("addr = \"127.0.0.1:0\"", "addr = \"0.0.0.0:0\"");
    let (_d, path) = write_config(&text);
    let o = run(mcpgate().arg("check").arg("-c").arg(&path));
    assert_eq!(o.code, Some(0));
    assert!(o.stdout.contains("warning: route /mcp-gpt-full on listener \"main\" has auth = \"none\" on a non-loopback address"), "{}", o.stdout);
}

#[test]
fn startup_failures_are_one_clear_line() {
    let o = run(mcpgate().args(["run", "-c", "/nonexistent/mcpgate.toml"]));
    assert_eq!(o.code, Some(1));
    assert_eq!(o.stderr.trim_end().lines().count(), 1, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("/nonexistent/mcpgate.toml: cannot read configuration")
    );

    let o = run(mcpgate()
        .arg("run")
        .env("MCPGATE_CONFIG", "/nonexistent/env.toml"));
    assert!(o.stderr.contains("/nonexistent/env.toml"), "{}", o.stderr);

    // Port in use: hold a socket and point a listener at it.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap();
    let text = config("http://127.0.0.1:9/mcp", "10s")
        .replace("addr = \"127.0.0.1:0\"", &format!("addr = \"{addr}\""));
    let (_d, path) = write_config(&text);
    let o = run(mcpgate().arg("run").arg("-c").arg(&path));
    assert_eq!(o.code, Some(1));
    let last = o.stderr.trim_end().lines().last().unwrap();
    assert!(
        last.starts_with("mcpgate: listener \"main\" cannot listen on"),
        "{}",
        o.stderr
    );
    assert!(last.contains("in use"), "{last}");
    assert!(!o.stderr.contains("panicked") && !o.stderr.contains("backtrace"));
}

/// `check` refuses what `run` would refuse before serving: an audit file in a folder that
/// does not exist (the example of docs/nginx-migration.md, copied to a fresh machine).
/// A port in use is a warning (the running instance may hold it); a configuration that
/// serves nothing, or names what nothing reaches, is warned about.
#[test]
fn check_refuses_what_run_would_refuse_and_warns_of_what_serves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-folder/audit.jsonl");
    let text = format!(
        "{}\n[audit]\npath = {:?}\n",
        config("http://127.0.0.1:9/mcp", "10s"),
        missing.display().to_string()
    );
    let (_d, path) = write_config(&text);
    let c = run(mcpgate().arg("check").arg("-c").arg(&path));
    assert_eq!(c.code, Some(1), "{}", c.stdout);
    assert!(c.stderr.contains("no-such-folder"), "{}", c.stderr);
    assert!(c.stderr.contains("does not exist"), "{}", c.stderr);
    assert!(!missing.parent().unwrap().exists(), "check creates nothing");
    let r = run(mcpgate().arg("run").arg("-c").arg(&path));
    assert_eq!(r.code, Some(1), "run refuses it too: {}", r.stderr);
    assert!(r.stderr.contains("no-such-folder"), "{}", r.stderr);
    // Made, the folder is fine; nothing is written by check.
    std::fs::create_dir(missing.parent().unwrap()).unwrap();
    let c = run(mcpgate().arg("check").arg("-c").arg(&path));
    assert_eq!(c.code, Some(0), "{}", c.stderr);
    assert!(!missing.exists());

    // A port held by another process: a warning, not an error.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap();
    let text = config("http://127.0.0.1:9/mcp", "10s")
        .replace("addr = \"127.0.0.1:0\"", &format!("addr = \"{addr}\""));
    let (_d2, path) = write_config(&text);
    let c = run(mcpgate().arg("check").arg("-c").arg(&path));
    assert_eq!(c.code, Some(0), "{}", c.stderr);
    assert!(
        c.stdout.contains(&format!(
            "warning: listener \"main\" cannot listen on {addr} now"
        )),
        "{}",
        c.stdout
    );

    // Serving nothing: an empty file, no routes, a token without profiles, a profile no
    // route reaches.
    let (_d3, path) = write_config("");
    let c = run(mcpgate().arg("check").arg("-c").arg(&path));
    assert_eq!(c.code, Some(0));
    assert!(c.stdout.contains("warning: no [[listen]]"), "{}", c.stdout);
    let (_d4, path) = write_config("[[listen]]\nname = \"main\"\naddr = \"127.0.0.1:0\"\n");
    let c = run(mcpgate().arg("check").arg("-c").arg(&path));
    assert!(c.stdout.contains("warning: no [[routes]]"), "{}", c.stdout);
    let text = format!(
        "{}\n[profiles.orphan]\nupstream = \"docs\"\n\n[[tokens]]\nid = \"nobody\"\nsha256 = \"{}\"\nprofiles = []\n",
        config("http://127.0.0.1:9/mcp", "10s"),
        "ab".repeat(32)
    );
    let (_d5, path) = write_config(&text);
    let c = run(mcpgate().arg("check").arg("-c").arg(&path));
    assert_eq!(c.code, Some(0), "{}", c.stderr);
    assert!(
        c.stdout
            .contains("warning: profile \"orphan\" is on no route"),
        "{}",
        c.stdout
    );
    assert!(
        c.stdout
            .contains("warning: token \"nobody\" has no profiles"),
        "{}",
        c.stdout
    );
    assert!(
        !c.stdout.contains("warning: profile \"gpt\""),
        "{}",
        c.stdout
    );
}

#[test]
fn token_new_and_hash_agree() {
    let o = run(mcpgate().args(["token", "new", "--id", "new-app", "--profile", "gpt"]));
    assert_eq!(o.code, Some(0));
    let token = o
        .stdout
        .lines()
        .next()
        .unwrap()
        .strip_prefix("token: ")
        .unwrap()
        .to_string();
    assert_eq!(token.len(), 43, "256 bits in base64url");
    assert!(
        token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    );
    assert!(o.stdout.contains("[[tokens]]\nid = \"new-app\"\n"));
    assert!(o.stdout.contains("profiles = [\"gpt\"]"));

    let mut child = mcpgate()
        .args(["token", "hash"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{token}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let digest = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_eq!(digest, hash(&token));
    assert!(o.stdout.contains(&format!("sha256 = \"{digest}\"")));

    // The printed TOML registers a token the gateway accepts.
    let text = format!(
        "{}\n{}",
        config("http://127.0.0.1:9/mcp", "10s"),
        o.stdout
            .split_once("\n\n")
            .unwrap()
            .1
            .lines()
            .skip(1)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let (_d, path) = write_config(&text);
    let c = run(mcpgate().arg("check").arg("-c").arg(&path));
    assert_eq!(c.code, Some(0), "{}", c.stderr);
    assert!(c.stdout.contains("new-app"));
}

#[test]
fn token_hash_matches_sha256sum() {
    let mut child = mcpgate()
        .args(["token", "hash"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"abc").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

/// The demo as a new user meets it: start it, paste every printed curl command.
#[test]
fn demo_curl_commands_answer() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = mcpgate()
        .args(["demo", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut text = String::new();
    let mut line = String::new();
    while stdout.read_line(&mut line).unwrap() > 0 {
        text.push_str(&line);
        if line.starts_with("Press Ctrl-C") {
            break;
        }
        line.clear();
    }
    let commands: Vec<&str> = text.lines().filter(|l| l.starts_with("curl ")).collect();
    assert_eq!(commands.len(), 7, "{text}");
    let mut answers = Vec::new();
    for c in &commands {
        let mut out = None;
        for _ in 0..50 {
            let o = Command::new("sh").arg("-c").arg(c).output().unwrap();
            if o.status.success() && !o.stdout.is_empty() {
                out = Some(String::from_utf8(o.stdout).unwrap());
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        answers.push(out.unwrap_or_else(|| panic!("no answer to {c}")));
    }
    let _ = child.kill();
    let _ = child.wait();

    let list: serde_json::Value = serde_json::from_str(&answers[0]).unwrap();
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, GPT_TOOLS);
    assert!(
        answers[1].contains("Tool not allowed: delete_document"),
        "{}",
        answers[1]
    );
    assert!(
        answers[2].contains("This store holds the team's notes."),
        "{}",
        answers[2]
    );
    assert!(
        answers[3].contains("Unknown tool: move_document"),
        "{}",
        answers[3]
    );
    assert!(answers[4].starts_with("HTTP/1.1 404"), "{}", answers[4]);
    // The federated route: both stores' tools, each prefixed with its store's name, the
    // deprecated ones hidden by their prefixed names.
    let list: serde_json::Value = serde_json::from_str(&answers[5]).unwrap();
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", answers[5]))
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 18, "{names:?}");
    assert!(names.contains(&"docs__get_document") && names.contains(&"notes__get_document"));
    assert!(
        !names.iter().any(|n| n.ends_with("move_document")),
        "{names:?}"
    );
    assert!(
        answers[6].contains("This store holds the team's notes."),
        "{}",
        answers[6]
    );
}

/// The sample MCP server is a documented command (in `--help`), and every tool it lists can
/// be called, the generated ones included, directly and through a gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sample_upstream_is_a_visible_command_whose_tools_all_work() {
    let help = run(mcpgate().arg("--help"));
    assert!(help.stdout.contains("sample-upstream"), "{}", help.stdout);
    let port = free_port();
    let mut child = mcpgate()
        .args([
            "sample-upstream",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--tools",
            "12",
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/mcp");
    eventually(
        Duration::from_secs(10),
        "the sample server listens",
        || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
    let listed = post(&url, &[], &list(1)).await;
    let names = listed.tool_names();
    assert_eq!(names.len(), 12);
    let gw = Gateway::start(&config(&url, "10s"));
    for target in [url.clone(), gw.url("/mcp-gpt-full")] {
        for name in &names {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"{name}","arguments":{{"q":1}}}}}}"#
            );
            let r = post(&target, &[], &body).await;
            let m = &r.messages()[0];
            assert_eq!(
                m["result"]["content"][0]["text"],
                format!("{name} called with {{\"q\":1}}"),
                "{target}: {m}"
            );
        }
        let r = post(&target, &[], &call(3, "tool_012")).await;
        assert_eq!(r.messages()[0]["error"]["code"], -32602, "{}", r.body);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// `mcpgate man | head` ends quietly (exit 0, nothing on stderr), and every page the
/// pages name exists: `mcpgate man COMMAND` prints it, `--dir` writes them all.
#[test]
fn man_pages_end_quietly_in_a_pipe_and_name_only_pages_that_exist() {
    use std::io::Read;
    let mut child = mcpgate()
        .arg("man")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let w = run(mcpgate().arg("man").arg("--dir").arg(dir.path()));
    assert_eq!(w.code, Some(0), "{}", w.stderr);
    let mut named = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        for (i, _) in text.match_indices("mcpgate\\-") {
            let rest = &text[i + "mcpgate\\-".len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_lowercase() || c == '\\' || c == '-'))
                .unwrap_or(rest.len());
            if rest[end..].starts_with("(1)") {
                named.insert(rest[..end].replace("\\-", "-"));
            }
        }
    }
    assert!(named.contains("run") && named.contains("pin"), "{named:?}");
    for page in &named {
        assert!(
            dir.path().join(format!("mcpgate-{page}.1")).exists(),
            "mcpgate-{page}(1) is named but not written"
        );
    }
    let one = run(mcpgate().args(["man", "check"]));
    assert_eq!(one.code, Some(0));
    assert!(one.stdout.contains(".TH mcpgate-check 1"), "{}", one.stdout);
    let bad = run(mcpgate().args(["man", "nope"]));
    assert_eq!(bad.code, Some(1));
    assert!(bad.stderr.contains("one of run, check"), "{}", bad.stderr);
}
