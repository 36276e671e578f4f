//! The documentation cannot drift from the code: every TOML example in the README and in
//! `docs/`, every file in `config/` and the config `docker/compose.yaml` mounts pass
//! `mcpgate check` (the Kubernetes ConfigMap's is checked in tests/deploy.rs). A complete example (it has a
//! `[[listen]]`, or upstreams and routes) is checked as it is; a fragment is merged into a
//! small base first.

mod support;

use std::path::PathBuf;
use std::process::Command;
use support::*;

const BASE: &str = r#"
[[listen]]
name = "public"
addr = "127.0.0.1:0"

[upstreams.agent-data]
url = "http://127.0.0.1:8000/mcp"

[profiles.readonly]
upstream = "agent-data"
allow = ["*"]

[profiles.gpt]
upstream = "agent-data"
allow = ["*"]

[profiles.gpt-full]
upstream = "agent-data"
allow = ["*"]
"#;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn check(text: &str, what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("example.toml");
    // The folder the installation steps make for the audit trail (deploy/mcpgate.service,
    // the Dockerfile), made here in its stead: `check` refuses an audit file `run` could
    // not create.
    let logs = dir.path().join("var-log-mcpgate");
    std::fs::create_dir(&logs).unwrap();
    let text = &text.replace("/var/log/mcpgate", &logs.display().to_string());
    std::fs::write(&path, text).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .arg("check")
        .arg("-c")
        .arg(&path)
        .env("AGENT_DATA_API_KEY", "doc-test")
        .env("NOTES_API_KEY", "doc-test")
        .env("MCPGATE_REDIS_PASSWORD", "doc-test")
        .env(
            "MCPGATE_SESSION_KEY",
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
        )
        .env(
            "MCPGATE_SESSION_KEY_OLD",
            "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80=",
        )
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{what} fails `mcpgate check`:\n{}\n---\n{text}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn merge(base: &mut toml::Table, fragment: toml::Table) {
    for (k, v) in fragment {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(f)) => merge(b, f),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

fn toml_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match &mut current {
            None if line.trim_start() == "```toml" => current = Some(String::new()),
            Some(b) if line.trim_start() == "```" => {
                blocks.push(std::mem::take(b));
                current = None;
            }
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
            None => {}
        }
    }
    blocks
}

#[test]
fn every_toml_example_in_the_docs_passes_check() {
    let mut files: Vec<PathBuf> = vec![root().join("README.md")];
    for e in std::fs::read_dir(root().join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            files.push(p);
        }
    }
    let mut checked = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (i, block) in toml_blocks(&text).into_iter().enumerate() {
            if block.contains("not run by the doc test") {
                continue;
            }
            let what = format!("{} block {}", f.display(), i + 1);
            // A block that has listeners, or upstreams and routes, reads as a whole
            // configuration: it must pass as it is, as a reader would copy it.
            let whole = block.contains("[[listen]]")
                || (block.contains("[upstreams.") && block.contains("[[routes]]"));
            if whole {
                check(&block, &what);
            } else {
                let fragment: toml::Table =
                    toml::from_str(&block).unwrap_or_else(|e| panic!("{what}: {e}"));
                let mut base: toml::Table = toml::from_str(BASE).unwrap();
                merge(&mut base, fragment);
                check(&toml::to_string(&base).unwrap(), &what);
            }
            checked += 1;
        }
    }
    assert!(checked >= 12, "only {checked} examples found");
}

#[test]
fn shipped_configs_pass_check() {
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in ["config", "docker"] {
        for e in std::fs::read_dir(root().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                files.push(p);
            }
        }
    }
    assert!(
        files.iter().any(|f| f.ends_with("docker/mcpgate.toml")),
        "the config compose mounts"
    );
    for f in files {
        check(
            &std::fs::read_to_string(&f).unwrap(),
            &f.display().to_string(),
        );
    }
}

#[test]
fn packaging_files_say_what_they_must() {
    let docker = std::fs::read_to_string(root().join("docker/Dockerfile")).unwrap();
    for want in [
        "AS build",
        "USER mcpgate",
        "HEALTHCHECK",
        "healthcheck",
        "STOPSIGNAL SIGTERM",
        "/etc/mcpgate/mcpgate.toml",
    ] {
        assert!(docker.contains(want), "Dockerfile lacks {want}");
    }
    let compose = std::fs::read_to_string(root().join("docker/compose.yaml")).unwrap();
    assert!(
        compose.contains("./mcpgate.toml:/etc/mcpgate/mcpgate.toml:ro")
            && compose.contains("sample-upstream")
    );
    let unit = std::fs::read_to_string(root().join("deploy/mcpgate.service")).unwrap();
    for want in [
        "User=mcpgate",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=CAP_NET_BIND_SERVICE",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ] {
        assert!(unit.contains(want), "unit lacks {want}");
    }
    let rotate = std::fs::read_to_string(root().join("deploy/logrotate/mcpgate")).unwrap();
    assert!(rotate.contains("USR1") && !rotate.contains("\n    copytruncate"));
}

#[test]
fn completions_and_man_page() {
    for shell in ["bash", "zsh", "fish"] {
        let o = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("mcpgate"));
    }
    let o = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .arg("man")
        .output()
        .unwrap();
    let man = String::from_utf8_lossy(&o.stdout);
    assert!(man.contains(".TH mcpgate 1") && man.contains("check"));
}

/// The migration guide's worked example, pointed at the sample upstream, really serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migration_example_serves_the_sample_upstream() {
    let guide = std::fs::read_to_string(root().join("docs/nginx-migration.md")).unwrap();
    let example = toml_blocks(&guide)
        .into_iter()
        .find(|b| b.contains("[[listen]]"))
        .expect("the worked example");
    let up = json_upstream().await;
    let audit = tempfile::tempdir().unwrap();
    let mut text = example
        .replace("0.0.0.0:8443", "127.0.0.1:0")
        .replace("127.0.0.1:8001", "127.0.0.1:0")
        .replace("127.0.0.1:9901", "127.0.0.1:0")
        .replace("http://127.0.0.1:8000/mcp", &up.url())
        .replace("${env:AGENT_DATA_API_KEY}", "${env:MCPGATE_TEST_API_KEY}")
        .replace(
            "/var/log/mcpgate/audit.jsonl",
            &audit.path().join("audit.jsonl").display().to_string(),
        );
    let hashes: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("sha256 = \""))
        .map(|h| h.trim_end_matches('"').to_string())
        .collect();
    assert_eq!(hashes.len(), 2);
    text = text
        .replace(&hashes[0], &hash(GPT))
        .replace(&hashes[1], &hash(READONLY));
    let gw = Gateway::start(&text);

    let r = post(
        &format!("http://{}/gpt-mcp/{GPT}/mcp", gw.listeners["public"]),
        &[],
        &list(1),
    )
    .await;
    assert_eq!(r.tool_names(), GPT_TOOLS);
    let reader = bearer(READONLY);
    let r = post(
        &format!("http://{}/mcp-readonly", gw.listeners["public"]),
        &[("authorization", &reader)],
        &list(2),
    )
    .await;
    assert_eq!(
        r.tool_names(),
        [
            "search_knowledge",
            "list_documents",
            "get_document",
            "batch_read"
        ]
    );
    let r = post(
        &format!("http://{}/mcp-gpt-full", gw.listeners["internal"]),
        &[],
        &call(3, "move_document"),
    )
    .await;
    assert_eq!(r.json()["error"]["message"], "Unknown tool: move_document");
    let r = post(
        &format!("http://{}/mcp-gpt-full", gw.listeners["internal"]),
        &[],
        &call(4, "delete_document"),
    )
    .await;
    assert_eq!(r.json()["result"]["content"][0]["text"], "deleted welcome");
    assert_eq!(up.received()[0].headers["x-api-key"], API_KEY);
}

/// Every source text of the repository, for the checks below: the crate sources, the
/// docs, the tests and the deployment files (not what the tests install).
fn repository_texts() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut dirs: Vec<PathBuf> = [
        "src", "crates", "docs", "tests", "bench", "deploy", "config", "docker", "scripts", "fuzz",
        ".ci",
    ]
    .iter()
    .map(|d| root().join(d))
    .collect();
    for f in ["README.md", "Cargo.toml"] {
        out.push((
            root().join(f),
            std::fs::read_to_string(root().join(f)).unwrap(),
        ));
    }
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            // What the tests and benchmarks install (node_modules, venvs in hidden folders)
            // is not the repository's.
            if name.starts_with('.') || ["node_modules", "target"].contains(&name.as_str()) {
                continue;
            }
            if p.is_dir() {
                dirs.push(p);
            } else if let Ok(text) = std::fs::read_to_string(&p) {
                out.push((p, text));
            }
        }
    }
    out
}

/// The repository cites itself: no rule points to a document outside it (the design
/// contract it was built from is not shipped), each to the docs page that states it.
#[test]
fn nothing_cites_a_document_outside_the_repository() {
    // Spelled in two halves, so that this file does not cite it either.
    let needle = format!("{}{}", "SP", "EC");
    let mut cited = Vec::new();
    for (path, text) in repository_texts() {
        for (i, line) in text.lines().enumerate() {
            let bytes = line.as_bytes();
            let found = line.match_indices(&needle).any(|(at, _)| {
                let before = at.checked_sub(1).map(|b| bytes[b]);
                let after = bytes.get(at + needle.len()).copied();
                let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
                !before.is_some_and(word) && !after.is_some_and(word)
            });
            if found {
                cited.push(format!("{}:{}: {line}", path.display(), i + 1));
            }
        }
    }
    assert!(cited.is_empty(), "{}", cited.join("\n"));
}

/// docs/architecture.md names every module of `src/`: a file by its path, or a folder's
/// files by the folder (`pipeline/back/federated/`) and their names. Test-only files aside.
#[test]
fn the_architecture_table_names_every_module() {
    let table = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let src = root().join("src");
    let mut missing = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
                continue;
            }
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if !name.ends_with(".rs") || name == "tests.rs" {
                continue;
            }
            let rel = p
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let folder = rel.rsplit_once('/').map(|(f, _)| format!("{f}/"));
            let named = table.contains(&rel)
                || folder.is_some_and(|f| {
                    table.contains(&f)
                        && (name == "mod.rs" || table.contains(name.trim_end_matches(".rs")))
                });
            if !named {
                missing.push(rel);
            }
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "not in docs/architecture.md: {missing:?}"
    );
}
