//! A route's stages against the sections that call for them.

use super::{Head, Judge, Read};
use crate::config::load_str;

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

/// A route's stages are those its configuration calls for, in the path's order: with no
/// approval rules, audit trail, limits or deprecations, a token route runs its credential,
/// origin and policy stages and nothing else; each section adds its own, to the routes it
/// bears on.
#[test]
fn a_route_runs_the_stages_its_configuration_calls_for() {
    let bare = load_str(BASE, "f.toml").unwrap();
    let stages = &bare.routes[0].stages;
    assert_eq!(*stages.head, [Head::Token, Head::Origin]);
    assert!(stages.read.is_empty());
    assert_eq!(*stages.judge, [Judge::Policy]);
    assert!(!stages.asks() && !stages.limited());
    assert_eq!(
        stages.describe(),
        "token → origin → [front] → [back opened] → policy → [back]"
    );

    let full = format!(
        "{BASE}\n[profiles.open]\nupstream = \"docs\"\nallow = [\"*\"]\n\n[[routes]]\nlisten = \"main\"\npath = \"/open\"\nprofile = \"open\"\nauth = \"none\"\n\n[audit]\npath = \"/tmp/mcpgate-stages-test.jsonl\"\n\n[[limits.rate]]\nkey = \"token\"\nrate = \"20/s\"\n\n[tools.deprecated.get_document]\nreplacement = \"read_document\"\nsunset = \"2099-01-01\"\n\n[[approvals]]\nprofiles = [\"gpt\"]\ntools = [\"delete_*\"]\n"
    );
    let s = load_str(&full, "f.toml").unwrap();
    let gpt = &s.routes[0].stages;
    assert_eq!(*gpt.head, [Head::Token, Head::Origin]);
    assert_eq!(*gpt.read, [Read::Approvals, Read::Audit]);
    assert_eq!(
        *gpt.judge,
        [Judge::Policy, Judge::Deprecated, Judge::Limits, Judge::Ask]
    );
    assert!(gpt.asks() && gpt.limited());
    // The profile without rules has no approval stage; `auth = "none"`, no credential's.
    let open = &s.routes[2].stages;
    assert_eq!(*open.head, [Head::Origin]);
    assert_eq!(*open.read, [Read::Audit]);
    assert_eq!(
        *open.judge,
        [Judge::Policy, Judge::Deprecated, Judge::Limits]
    );
    assert_eq!(
        open.describe(),
        "origin → [front] → audit → [back opened] → policy → deprecated → limits → [back]"
    );
    // `check` prints each route's.
    assert!(
        s.describe()
            .contains("stages: token → origin → [front] → approvals (hold) → audit")
    );
    // A brute-force guard counts failed credentials, not requests: no limits stage.
    let guard = format!(
        "{BASE}\n[[limits.rate]]\nkey = \"client_ip\"\nrate = \"5/m\"\non = \"auth_failure\"\n"
    );
    match load_str(&guard, "f.toml") {
        Ok(s) => assert!(!s.routes[0].stages.limited()),
        Err(e) => panic!("{e}"),
    }
}
