//! A federated list (docs/federation.md): each member's answer read as a page of items, and the
//! pages merged into the one answer the client gets, in member order, with the names it
//! sees, a sealed cursor when any member has more, and the members that did not answer.

use super::Merged;
use crate::mcp::jsonrpc::{ListKind, Text};
use crate::mcp::tools_list::item_field;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// What one member's answer to a list request holds.
#[derive(Debug, Default)]
pub struct Page<'a> {
    pub items: Vec<&'a RawValue>,
    /// The items' text, from the first one's start to the last one's end.
    pub region: &'a str,
    /// Each item's name (`kind.key()`) and where its value is in the item, read once.
    fields: Vec<Option<(std::ops::Range<usize>, Cow<'a, str>)>>,
    /// The member's cursor of its next page.
    pub next: Option<Cow<'a, str>>,
    pub ttl_ms: Option<u64>,
    /// `cacheScope`, when the member said one.
    pub scope: Option<Cow<'a, str>>,
}

/// How a member answered.
#[derive(Debug)]
pub enum Answer<'a> {
    Page(Page<'a>),
    /// It has no such list (-32601): no items, and not unavailable.
    Lacks,
    /// An error, or an answer that is not a list; the member counts as unavailable.
    Failed(String),
}

#[derive(Deserialize)]
struct Reply<'a> {
    #[serde(borrow)]
    result: Option<ListResult<'a>>,
    error: Option<ReplyError>,
}

#[derive(Deserialize)]
struct ReplyError {
    code: Option<i64>,
    message: Option<String>,
}

/// A list result, read in one pass: the array of whichever kind it is, its cursor and
/// caching hints. A key given twice is an error.
#[derive(Deserialize)]
struct ListResult<'a> {
    #[serde(borrow)]
    tools: Option<Vec<&'a RawValue>>,
    #[serde(borrow)]
    prompts: Option<Vec<&'a RawValue>>,
    #[serde(borrow)]
    resources: Option<Vec<&'a RawValue>>,
    #[serde(borrow, rename = "resourceTemplates")]
    templates: Option<Vec<&'a RawValue>>,
    #[serde(borrow, rename = "nextCursor")]
    next: Option<&'a RawValue>,
    #[serde(borrow, rename = "ttlMs")]
    ttl: Option<&'a RawValue>,
    #[serde(borrow, rename = "cacheScope")]
    scope: Option<&'a RawValue>,
}

/// Reads a member's JSON answer to a `kind` list request.
pub fn read(text: &str, kind: ListKind) -> Answer<'_> {
    let reply: Reply = match serde_json::from_str(text) {
        Ok(r) => r,
        Err(e) => return Answer::Failed(format!("not a JSON-RPC list answer: {e}")),
    };
    if let Some(e) = reply.error {
        if e.code == Some(crate::error::code::METHOD_NOT_FOUND) {
            return Answer::Lacks;
        }
        return Answer::Failed(format!(
            "error {}: {}",
            e.code.unwrap_or(0),
            e.message.unwrap_or_default()
        ));
    }
    let Some(r) = reply.result else {
        return Answer::Failed("an answer without a result".into());
    };
    let items = match kind {
        ListKind::Tools => r.tools,
        ListKind::Prompts => r.prompts,
        ListKind::Resources => r.resources,
        ListKind::ResourceTemplates => r.templates,
    };
    let Some(items) = items else {
        return Answer::Failed(format!("the result has no \"{}\" array", kind.array()));
    };
    fn text_of(v: Option<&RawValue>) -> Option<Cow<'_, str>> {
        v.and_then(|v| serde_json::from_str::<Text>(v.get()).ok())
            .map(|t| t.0)
    }
    let fields = items
        .iter()
        .map(|i| item_field(i.get(), kind.key()))
        .collect();
    let region = match (items.first(), items.last()) {
        (Some(first), Some(last)) => {
            let start = first.get().as_ptr() as usize - text.as_ptr() as usize;
            let end = last.get().as_ptr() as usize - text.as_ptr() as usize + last.get().len();
            &text[start..end]
        }
        _ => "",
    };
    Answer::Page(Page {
        fields,
        region,
        items,
        next: text_of(r.next),
        ttl_ms: r.ttl.and_then(|t| t.get().parse().ok()),
        scope: text_of(r.scope),
    })
}

/// The names of a page's items (`kind.key()`), in order; items without a readable one
/// are left out (and so are not shown).
pub fn names<'a>(page: &Page<'a>) -> Vec<Cow<'a, str>> {
    page.fields
        .iter()
        .filter_map(|f| f.as_ref().map(|(_, n)| n.clone()))
        .collect()
}

/// `name` as a JSON string, onto `out`: as it is when it needs no escape (a tool name's
/// characters), else as serde_json writes it.
fn push_quoted(out: &mut String, name: &str) {
    if name.bytes().all(|c| c >= 0x20 && c != b'"' && c != b'\\') {
        out.push('"');
        out.push_str(name);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(name).expect("a string serializes"));
    }
}

/// What the profile's rules say of a merged list.
pub struct Rules<'f> {
    /// Whether an item stays: given its member's place, its own name, the name the client
    /// sees and the item's whole text (where annotation rules read its annotations).
    pub keep: &'f dyn Fn(usize, &str, &str, &str) -> bool,
    /// Whether the list depends on the caller's profile (`cacheScope` is then private).
    pub restricts: bool,
    /// The longest `ttlMs` it may carry.
    pub max_ttl_ms: u64,
}

/// The answer a merge makes: to which list request, and what it says besides the items.
#[derive(Clone, Copy)]
pub struct Answering<'a> {
    /// The client speaks 2026-07-28, whose results say `resultType`, `ttlMs` and
    /// `cacheScope`.
    pub modern: bool,
    pub kind: ListKind,
    /// The request's JSON-RPC id, as JSON text.
    pub id: &'a str,
    /// The sealed cursor of the members' next pages.
    pub cursor: Option<&'a str>,
    /// The members that did not answer.
    pub unavailable: &'a [&'a str],
}

/// The merged answer to the client's list request: `pages` in member order, each with its
/// member's place; tool and prompt names as `names` shows them (an item whose name another
/// member kept is left out); what `rules` does not keep left out.
pub fn merge(
    to: Answering<'_>,
    pages: &[(usize, Page<'_>)],
    names: Option<&Merged>,
    rules: &Rules<'_>,
) -> String {
    let Answering {
        modern,
        kind,
        id,
        cursor,
        unavailable,
    } = to;
    let items = items(pages, names, rules);
    let mut out = String::with_capacity(items.len() + 128);
    out.push_str(r#"{"jsonrpc":"2.0","id":"#);
    out.push_str(id);
    out.push_str(r#","result":{""#);
    out.push_str(kind.array());
    out.push_str(r#"":["#);
    out.push_str(&items);
    out.push(']');
    if modern {
        out.push_str(r#","resultType":"complete""#);
    }
    if let Some(c) = cursor {
        out.push_str(r#","nextCursor":"#);
        out.push_str(&serde_json::to_string(c).unwrap_or_default());
    }
    // The shortest freshness any member gave, no longer than the profile allows. A
    // 2026-07-28 result always says both (0 and private when no member said).
    let ttl = pages.iter().filter_map(|(_, p)| p.ttl_ms).min();
    if let Some(ttl) = ttl.or(modern.then_some(0)) {
        out.push_str(r#","ttlMs":"#);
        out.push_str(&ttl.min(rules.max_ttl_ms).to_string());
    }
    let scopes: Vec<&str> = pages
        .iter()
        .filter_map(|(_, p)| p.scope.as_deref())
        .collect();
    if !scopes.is_empty() || modern {
        // Shared by caches only when every member said so and the profile's rules take
        // nothing out.
        let public = !rules.restricts
            && !pages.is_empty()
            && scopes.len() == pages.len()
            && scopes.iter().all(|s| *s == "public");
        out.push_str(if public {
            r#","cacheScope":"public""#
        } else {
            r#","cacheScope":"private""#
        });
    }
    if !unavailable.is_empty() {
        out.push_str(r#","_meta":{"mcpgate/unavailable":"#);
        out.push_str(&serde_json::to_string(unavailable).unwrap_or_default());
        out.push('}');
    }
    out.push_str("}}");
    out
}

/// The items of every member's page, joined: each under the name the client sees (written
/// over in place where it is not the member's own), the ones `rules` drop left out, and a
/// URI two members list shown once, as the first member's (the one its reads go to).
fn items(pages: &[(usize, Page<'_>)], names: Option<&Merged>, rules: &Rules<'_>) -> String {
    let mut items = String::with_capacity(pages.iter().map(|(_, p)| p.items.len() * 256).sum());
    let mut uris: Vec<Cow<'_, str>> = Vec::new();
    for (member, page) in pages {
        for (item, field) in page.items.iter().zip(&page.fields) {
            let Some((at, own)) = field else {
                continue;
            };
            // The name the client sees, when it is not the member's own.
            let shown = match names {
                Some(names) => {
                    let Some(shown) = names.shown(*member, own) else {
                        continue;
                    };
                    if !(rules.keep)(*member, own, shown, item.get()) {
                        continue;
                    }
                    (shown != &**own).then_some(shown)
                }
                None => {
                    if uris.contains(own) || !(rules.keep)(*member, own, own, item.get()) {
                        continue;
                    }
                    uris.push(own.clone());
                    None
                }
            };
            if !items.is_empty() {
                items.push(',');
            }
            let item = item.get();
            match shown {
                // Written over in place, into the list.
                Some(shown) => {
                    items.push_str(&item[..at.start]);
                    push_quoted(&mut items, shown);
                    items.push_str(&item[at.end..]);
                }
                None => items.push_str(item),
            }
        }
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::federation::Prefix;

    #[test]
    fn pages_merge_in_member_order_with_the_names_shown() {
        let kb = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"search","description":"kb \"s\"","inputSchema":{"type":"object"}},{"name":"get_document"}],"nextCursor":"k2","ttlMs":5000}}"#;
        let tickets = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"inputSchema":{},"name":"search"},{"name":"open"}],"cacheScope":"public"}}"#;
        let (Answer::Page(a), Answer::Page(b)) =
            (read(kb, ListKind::Tools), read(tickets, ListKind::Tools))
        else {
            panic!("both are pages")
        };
        assert_eq!(a.next.as_deref(), Some("k2"));
        let own = [("kb", names(&a)), ("tickets", names(&b))];
        let own: Vec<(&str, Vec<&str>)> = own
            .iter()
            .map(|(m, n)| (*m, n.iter().map(|x| &**x).collect()))
            .collect();
        let merged = super::super::merge(&own, Prefix::OnConflict, "__");
        let keep = |_: usize, _: &str, n: &str, _: &str| n != "open";
        let rules = Rules {
            keep: &keep,
            restricts: false,
            max_ttl_ms: 60_000,
        };
        let to = Answering {
            modern: true,
            kind: ListKind::Tools,
            id: "\"x\"",
            cursor: Some("SEALED"),
            unavailable: &["cal"],
        };
        let out = merge(to, &[(0, a), (1, b)], Some(&merged), &rules);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let shown: Vec<&str> = v["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        // `open` is not kept by the rules.
        assert_eq!(shown, ["kb__search", "get_document", "tickets__search"]);
        assert_eq!(v["result"]["tools"][0]["description"], "kb \"s\"");
        assert_eq!(v["result"]["nextCursor"], "SEALED");
        assert_eq!(v["result"]["ttlMs"], 5000);
        assert_eq!(v["result"]["cacheScope"], "private");
        assert_eq!(v["result"]["_meta"]["mcpgate/unavailable"][0], "cal");
        assert_eq!(v["id"], "x");
    }

    #[test]
    fn answers_that_are_not_lists() {
        assert!(matches!(
            read(
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#,
                ListKind::Prompts
            ),
            Answer::Lacks
        ));
        assert!(matches!(
            read(
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"down"}}"#,
                ListKind::Tools
            ),
            Answer::Failed(_)
        ));
        assert!(matches!(
            read(
                r#"{"jsonrpc":"2.0","id":1,"result":{"tools":{}}}"#,
                ListKind::Tools
            ),
            Answer::Failed(_)
        ));
        assert!(matches!(
            read(
                r#"{"jsonrpc":"2.0","id":1,"result":{"prompts":[]}}"#,
                ListKind::Tools
            ),
            Answer::Failed(_)
        ));
        assert!(matches!(read("[", ListKind::Tools), Answer::Failed(_)));
    }
}
