//! The module graph: imports run one way. Reads every source file under `src/`, finds the
//! modules each one names (`crate::…`, `super::…`, `use` groups included; test modules
//! left out), and checks two things:
//! - the top-level folders import only layers below them (or beside them, without a
//!   circle): `cli` → `pipeline` → `gateway` → `upstream`, `oauth`, `mcp`, `observe` → `http`,
//!   `runtime` → `config` → `error`;
//! - inside every folder, the modules side by side import each other without a circle
//!   (a parent and its own children may name each other).
//!
//! `cargo test --test layers -- --nocapture` prints the top-level graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first. A module may import its own layer's others (no circle) and
/// any lower one.
const LAYERS: &[&[&str]] = &[
    &["error"],
    &["config"],
    &["http", "runtime"],
    &["upstream", "oauth", "mcp", "observe"],
    &["gateway"],
    &["pipeline"],
    &["cli"],
];

fn rank(top: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&top))
        .unwrap_or_else(|| panic!("src/{top}: a top-level module with no layer in LAYERS"))
}

type Module = Vec<String>;

fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.last().map(String::as_str) {
        Some("mod") | Some("lib") => {
            parts.pop();
        }
        // The binary is the command line's layer.
        Some("main") if parts.len() == 1 => parts = vec!["cli".into()],
        _ => {}
    }
    parts
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text with the contents of string literals blanked (a log target such as
/// `"mcpgate::pipeline"` names no module), char literals and lifetimes left alone.
fn without_strings(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        // A char literal: `'x'`, `'\''`, `'"'`; a lifetime has no closing quote.
        if c == '\'' {
            let close = if chars.get(i + 1) == Some(&'\\') {
                3
            } else {
                2
            };
            if chars.get(i + close) == Some(&'\'') {
                out.extend(&chars[i..=i + close]);
                i += close + 1;
                continue;
            }
        }
        // A raw string: r"…", r#"…"#, br#"…"#.
        if c == 'r' && !chars[..i].last().is_some_and(|p| is_ident(*p) && *p != 'b') {
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if chars.get(i + 1 + hashes) == Some(&'"') {
                let end: String = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                let body = i + 2 + hashes;
                let rest: String = chars[body..].iter().collect();
                let len = rest.find(&end).map_or(rest.len(), |e| e + end.len());
                out.push_str("\"\"");
                i = body + rest[..len].chars().count();
                continue;
            }
        }
        if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = j + 1;
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// The text without `#[cfg(test)] mod … { … }` blocks, comments and string contents.
fn without_tests(text: &str) -> String {
    let text: &str = &without_strings(text);
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let Some(open) = after.find('{') else { break };
        let is_mod = after[..open].contains("mod ");
        if !is_mod {
            out.push_str("#[cfg(test)]");
            rest = &after["#[cfg(test)]".len()..];
            continue;
        }
        let mut depth = 0;
        let mut end = after.len();
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out.lines()
        .map(|l| match l.trim_start().starts_with("//") {
            true => "",
            false => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths a `use` tree or path expression starting at `text` names, each a list of
/// segments (a group `{a, b::c}` gives one path per member).
fn paths_at(text: &str) -> Vec<Vec<String>> {
    fn tree(chars: &[char], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut path = prefix.to_vec();
        loop {
            while *i < chars.len() && chars[*i].is_whitespace() {
                *i += 1;
            }
            if *i < chars.len() && chars[*i] == '{' {
                *i += 1;
                loop {
                    tree(chars, i, &path, out);
                    while *i < chars.len() && chars[*i].is_whitespace() {
                        *i += 1;
                    }
                    match chars.get(*i) {
                        Some(',') => *i += 1,
                        Some('}') => {
                            *i += 1;
                            return;
                        }
                        _ => return,
                    }
                    while *i < chars.len() && chars[*i].is_whitespace() {
                        *i += 1;
                    }
                    if chars.get(*i) == Some(&'}') {
                        *i += 1;
                        return;
                    }
                }
            }
            let start = *i;
            while *i < chars.len() && is_ident(chars[*i]) {
                *i += 1;
            }
            if start == *i {
                out.push(path);
                return;
            }
            path.push(chars[start..*i].iter().collect());
            if chars.get(*i) == Some(&':') && chars.get(*i + 1) == Some(&':') {
                *i += 2;
            } else {
                out.push(path);
                return;
            }
        }
    }
    let chars: Vec<char> = text.chars().take(2000).collect();
    let mut out = Vec::new();
    tree(&chars, &mut 0, &[], &mut out);
    out
}

/// Every module `text` (in module `me`) names, resolved against the known modules.
fn references(me: &Module, text: &str, known: &BTreeSet<Module>) -> BTreeSet<Module> {
    let mut found = BTreeSet::new();
    for root in ["crate::", "super::", "mcpgate::"] {
        let mut from = 0;
        while let Some(at) = text[from..].find(root) {
            let at = from + at;
            from = at + root.len();
            if text[..at].chars().next_back().is_some_and(is_ident) {
                continue;
            }
            let base: Module = match root {
                "super::" => {
                    // `super::super::x` and the like: climb once per `super`.
                    let mut base = me.clone();
                    base.pop();
                    let mut rest = &text[from..];
                    while let Some(r) = rest.strip_prefix("super::") {
                        base.pop();
                        rest = r;
                        from += "super::".len();
                    }
                    base
                }
                _ => Vec::new(),
            };
            for path in paths_at(&text[from..]) {
                let mut full = base.clone();
                full.extend(path.into_iter().filter(|s| s != "self"));
                while !full.is_empty() && !known.contains(&full) {
                    full.pop();
                }
                if !full.is_empty() {
                    found.insert(full);
                }
            }
        }
    }
    found
}

fn graph() -> BTreeMap<Module, BTreeSet<Module>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let known: BTreeSet<Module> = files.iter().map(|f| module_of(&src, f)).collect();
    let mut edges = BTreeMap::new();
    for file in &files {
        let me = module_of(&src, file);
        let text = without_tests(&std::fs::read_to_string(file).unwrap());
        let refs = references(&me, &text, &known);
        edges.entry(me).or_insert_with(BTreeSet::new).extend(refs);
    }
    edges
}

/// The edges between siblings, by the folder they sit in: a reference from `a::b::c` to
/// `a::d` is the edge `b → d` in folder `a`.
fn sibling_edges(
    edges: &BTreeMap<Module, BTreeSet<Module>>,
) -> BTreeMap<Module, BTreeSet<(String, String)>> {
    let mut by_folder: BTreeMap<Module, BTreeSet<(String, String)>> = BTreeMap::new();
    for (from, tos) in edges {
        for to in tos {
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue; // an ancestor and its descendant
            }
            by_folder
                .entry(from[..common].to_vec())
                .or_default()
                .insert((from[common].clone(), to[common].clone()));
        }
    }
    by_folder
}

/// A circle among `edges`, if there is one.
fn circle(edges: &BTreeSet<(String, String)>) -> Option<Vec<String>> {
    let nodes: BTreeSet<&String> = edges.iter().flat_map(|(a, b)| [a, b]).collect();
    // 0: not seen, 1: on the current path, 2: done.
    fn visit<'a>(
        n: &'a String,
        edges: &'a BTreeSet<(String, String)>,
        state: &mut BTreeMap<&'a String, u8>,
        path: &mut Vec<&'a String>,
    ) -> Option<Vec<String>> {
        state.insert(n, 1);
        path.push(n);
        for (_, to) in edges.iter().filter(|(a, _)| a == n) {
            match state.get(to).copied().unwrap_or(0) {
                1 => {
                    let at = path.iter().position(|p| *p == to).unwrap();
                    let mut c: Vec<String> = path[at..].iter().map(|s| s.to_string()).collect();
                    c.push(to.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(to, edges, state, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        state.insert(n, 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in nodes {
        if state.get(n).copied().unwrap_or(0) == 0
            && let Some(c) = visit(n, edges, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

#[test]
fn imports_run_one_way() {
    let by_folder = sibling_edges(&graph());
    let mut problems = Vec::new();
    for (folder, edges) in &by_folder {
        let at = if folder.is_empty() {
            "src".to_string()
        } else {
            format!("src/{}", folder.join("/"))
        };
        if let Some(c) = circle(edges) {
            problems.push(format!("{at}: circle {}", c.join(" → ")));
        }
        if folder.is_empty() {
            for (a, b) in edges {
                if rank(b) > rank(a) {
                    problems.push(format!("src: {a} imports {b}, a higher layer"));
                }
            }
            println!("top-level imports:");
            for (a, b) in edges {
                println!("  {a} → {b}");
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The checker finds what it is for: a circle between siblings, and a path named in a
/// `use` group.
#[test]
fn the_checker_sees_circles_and_groups() {
    let edges: BTreeSet<(String, String)> = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(circle(&edges).unwrap(), ["a", "b", "c", "a"]);
    let straight: BTreeSet<(String, String)> =
        edges.iter().filter(|(a, _)| a != "c").cloned().collect();
    assert_eq!(circle(&straight), None);

    let known: BTreeSet<Module> = [vec!["x"], vec!["x", "y"], vec!["z"], vec!["q", "r"]]
        .iter()
        .map(|m| m.iter().map(|s| s.to_string()).collect())
        .collect();
    let me: Module = vec!["q".into(), "r".into()];
    let refs = references(
        &me,
        "use crate::{x::y::{A, B}, z};\nfn f() { super::r::g(); crate::x::h(); }",
        &known,
    );
    let names: Vec<String> = refs.iter().map(|m| m.join("::")).collect();
    assert_eq!(names, ["q::r", "x", "x::y", "z"]);
    assert!(without_tests("a\n#[cfg(test)]\nmod tests {\n use crate::z;\n}\nb").contains('b'));
    assert!(!without_tests("#[cfg(test)]\nmod tests { use crate::z; }").contains("crate"));
    let quoted = without_tests("f(\"crate::z\", r#\"crate::q\"#, '\"', 'a); crate::x::h()");
    assert_eq!(quoted, "f(\"\", \"\", '\"', 'a); crate::x::h()");
}

/// Every module opens with a `//!` paragraph saying what it owns (STYLE.md).
#[test]
fn every_module_says_what_it_owns() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let silent: Vec<String> = files
        .iter()
        .filter(|f| {
            !std::fs::read_to_string(f)
                .unwrap()
                .trim_start()
                .starts_with("//!")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(silent.is_empty(), "no //! paragraph: {silent:?}");
}

/// The wire crate (`crates/wire`) is below everything: its manifest names no crate of the
/// gateway, no source of it names one, and its modules say what they own.
#[test]
fn the_wire_crate_depends_on_nothing_of_the_proxy() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/wire");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let dependencies: Vec<&str> = manifest
        .lines()
        .skip_while(|l| !l.starts_with("[dependencies]"))
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .collect();
    assert!(!dependencies.is_empty(), "no [dependencies] table read");
    assert!(
        dependencies.iter().all(|l| !l.contains("mcpgate")),
        "{dependencies:?}"
    );
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    assert!(files.len() >= 8, "{files:?}");
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        assert!(
            text.trim_start().starts_with("//!"),
            "{}: no //! paragraph",
            f.display()
        );
        let code: String = without_strings(&text)
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect();
        for proxy in [
            "mcpgate",
            "crate::http",
            "crate::mcp",
            "crate::upstream",
            "crate::pipeline",
            "crate::config",
            "crate::gateway",
            "crate::observe",
        ] {
            assert!(!code.contains(proxy), "{} names {proxy}", f.display());
        }
    }
}
