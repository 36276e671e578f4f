//! A federated list (SPEC §16): each member's answer read as a page of items, and the
//! pages merged into the one answer the client gets, in member order, with the names it
//! sees, a sealed cursor when any member has more, and the members that did not answer.

use super::Merged;
use crate::mcp::jsonrpc::{ListKind, Text};
use crate::mcp::pointer::Entries;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// What one member's answer to a list request holds.
#[derive(Debug, Default)]
pub struct Page<'a> {
    pub items: Vec<&'a RawValue>,
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
    result: Option<Entries<'a>>,
    error: Option<ReplyError>,
}

#[derive(Deserialize)]
struct ReplyError {
    code: Option<i64>,
    message: Option<String>,
}

/// Reads a member's JSON answer to a `kind` list request.
pub fn read(text: &str, kind: ListKind) -> Answer<'_> {
    let reply: Reply = match serde_json::from_str(text) {
        Ok(r) => r,
        Err(e) => return Answer::Failed(format!("not a JSON-RPC answer: {e}")),
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
    let Some(Entries(entries)) = reply.result else {
        return Answer::Failed("an answer without a result".into());
    };
    let mut page = Page::default();
    let mut found = false;
    for (key, value) in entries {
        match &*key {
            k if k == kind.array() => {
                let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(value.get()) else {
                    return Answer::Failed(format!("\"{}\" is not an array", kind.array()));
                };
                page.items = items;
                found = true;
            }
            "nextCursor" => {
                page.next = serde_json::from_str::<Option<Text>>(value.get())
                    .ok()
                    .flatten()
                    .map(|t| t.0)
            }
            "ttlMs" => page.ttl_ms = value.get().parse().ok(),
            "cacheScope" => {
                page.scope = serde_json::from_str::<Text>(value.get()).ok().map(|t| t.0)
            }
            _ => {}
        }
    }
    match found {
        true => Answer::Page(page),
        false => Answer::Failed(format!("the result has no \"{}\" array", kind.array())),
    }
}

/// The names of a page's items (`kind.key()`), in order; items without a readable one
/// are left out (and so are not shown).
pub fn names<'a>(page: &Page<'a>, kind: ListKind) -> Vec<Cow<'a, str>> {
    page.items
        .iter()
        .filter_map(|item| name_of(item.get(), kind.key()))
        .collect()
}

fn name_of<'a>(item: &'a str, key: &str) -> Option<Cow<'a, str>> {
    let Entries(entries) = serde_json::from_str(item).ok()?;
    let (_, value) = entries.into_iter().find(|(k, _)| k == key)?;
    serde_json::from_str::<Text>(value.get()).ok().map(|t| t.0)
}

/// `item` with its `name` made `shown`, every other member as it was.
fn renamed(item: &str, shown: &str) -> Option<String> {
    let Entries(entries) = serde_json::from_str(item).ok()?;
    let mut out = String::with_capacity(item.len() + shown.len());
    out.push('{');
    for (i, (key, value)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(&**key).ok()?);
        out.push(':');
        match &**key {
            "name" => out.push_str(&serde_json::to_string(shown).ok()?),
            _ => out.push_str(value.get()),
        }
    }
    out.push('}');
    Some(out)
}

/// The merged answer to the client's list request (JSON-RPC id `id`, as JSON text):
/// `pages` in member order, each with its member's place; tool and prompt names as
/// `names` shows them (an item whose name another member kept is left out); `cursor` the
/// sealed cursor of the members' next pages; `unavailable` the members that did not
/// answer. `modern`: the client speaks 2026-07-28, whose results say `resultType`.
#[allow(clippy::too_many_arguments)]
pub fn merge(
    modern: bool,
    kind: ListKind,
    id: &str,
    pages: &[(usize, Page<'_>)],
    names: Option<&Merged>,
    cursor: Option<&str>,
    unavailable: &[&str],
) -> String {
    let mut items = String::new();
    // A URI (or template) two members list is shown once, as the first member's: the one
    // its reads go to.
    let mut uris: Vec<Cow<'_, str>> = Vec::new();
    for (member, page) in pages {
        for item in &page.items {
            if names.is_none() {
                let Some(uri) = name_of(item.get(), kind.key()) else {
                    continue;
                };
                if uris.contains(&uri) {
                    continue;
                }
                uris.push(uri);
            }
            let text = match names {
                Some(names) => {
                    let Some(own) = name_of(item.get(), kind.key()) else {
                        continue;
                    };
                    let Some(shown) = names.shown(*member, &own) else {
                        continue;
                    };
                    match shown == own {
                        true => Cow::Borrowed(item.get()),
                        false => match renamed(item.get(), shown) {
                            Some(r) => Cow::Owned(r),
                            None => continue,
                        },
                    }
                }
                None => Cow::Borrowed(item.get()),
            };
            if !items.is_empty() {
                items.push(',');
            }
            items.push_str(&text);
        }
    }
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
    // The shortest freshness any member gave; the profile's filter bounds it further. A
    // 2026-07-28 result always says both (0 and private when no member said).
    let ttl = pages.iter().filter_map(|(_, p)| p.ttl_ms).min();
    if let Some(ttl) = ttl.or(modern.then_some(0)) {
        out.push_str(r#","ttlMs":"#);
        out.push_str(&ttl.to_string());
    }
    let scopes: Vec<&str> = pages
        .iter()
        .filter_map(|(_, p)| p.scope.as_deref())
        .collect();
    if !scopes.is_empty() || modern {
        // Shared by caches only when every member said so.
        let public = !pages.is_empty()
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
        let own = [
            ("kb", names(&a, ListKind::Tools)),
            ("tickets", names(&b, ListKind::Tools)),
        ];
        let own: Vec<(&str, Vec<&str>)> = own
            .iter()
            .map(|(m, n)| (*m, n.iter().map(|x| &**x).collect()))
            .collect();
        let merged = super::super::merge(&own, Prefix::OnConflict, "__");
        let out = merge(
            true,
            ListKind::Tools,
            "\"x\"",
            &[(0, a), (1, b)],
            Some(&merged),
            Some("SEALED"),
            &["cal"],
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let shown: Vec<&str> = v["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            shown,
            ["kb__search", "get_document", "tickets__search", "open"]
        );
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
