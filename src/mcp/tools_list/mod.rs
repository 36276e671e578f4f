//! The list rewrite. A response to a tools/list request loses the tools its profile may
//! not call, and likewise resources/list (by `uri`), resources/templates/list (by
//! `uriTemplate`) and prompts/list (by `name`); everything else stays as the upstream
//! wrote it. The rewrite splices raw
//! JSON: the kept tools are copied byte for byte into a new `tools` array, which replaces
//! the old one at its offset in the body, so unknown fields, `nextCursor` and `_meta`
//! survive untouched. Works on one JSON text (a response or a batch of responses): a JSON
//! body, or the data of one SSE event (see `transport::relay`).

use crate::config::compile::Deprecation;
use crate::config::pins::PinKind;
use crate::config::{Profile, Snapshot};
use crate::mcp::jsonrpc::{ListKind, Text};
use crate::mcp::pointer::Entries;
use crate::upstream::hints::{HintStore, tool_hints};
use crate::upstream::pins::PinStore;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::ops::Range;
use std::sync::Arc;

mod read;

pub use read::item_field;
use read::*;

/// Largest SSE event or JSON body held for a rewrite; past it the answer fails closed.
pub const MAX_REWRITE_BYTES: usize = 32 << 20;

/// What a profile may see: the global hidden list and the profile's rules.
#[derive(Clone)]
pub struct ToolFilter {
    snapshot: Arc<Snapshot>,
    profile: Arc<Profile>,
    /// Where the annotations of the tools listed are kept, when a profile of the
    /// upstream judges by them.
    hints: Option<Arc<HintStore>>,
    /// What the upstream's tools and prompts were last seen to be, when it is pinned.
    pins: Option<Arc<PinStore>>,
}

impl ToolFilter {
    pub fn new(snapshot: Arc<Snapshot>, profile: Arc<Profile>) -> Self {
        ToolFilter {
            snapshot,
            profile,
            hints: None,
            pins: None,
        }
    }

    /// The same, judging the tools and prompts of its lists against the pins file, with
    /// `store` (the pinned upstream's) learning them.
    pub fn pinning(mut self, store: Arc<PinStore>) -> Self {
        self.pins = Some(store);
        self
    }

    /// The same, teaching `store` the annotations of the tools its lists carry.
    pub fn learning(mut self, store: Arc<HintStore>) -> Self {
        self.hints = Some(store);
        self
    }

    /// `keeps`, for a tool whose annotations (from the list itself) are `hints`.
    pub fn keeps_with(
        &self,
        tool: &str,
        hints: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> bool {
        !self.snapshot.hidden.matches(tool)
            && self.profile.allows_tool_with(tool, hints).unwrap_or(false)
            && self
                .snapshot
                .deprecation(tool)
                .is_none_or(|d| !d.gone(std::time::SystemTime::now()))
    }

    /// Whether the profile judges tools by their annotations.
    pub fn judges_hints(&self) -> bool {
        !self.profile.allow_annotations.is_empty() || !self.profile.deny_annotations.is_empty()
    }

    /// Whether an item of a `kind` list, named `name`, stays.
    pub fn keeps_item(&self, kind: ListKind, name: &str) -> bool {
        match kind {
            ListKind::Tools => self.keeps_with(name, None),
            ListKind::Resources | ListKind::ResourceTemplates => self.profile.allows_resource(name),
            ListKind::Prompts => self.profile.allows_prompt(name),
        }
    }

    /// How long a list filtered now may be cached.
    pub fn fresh_for(&self) -> std::time::Duration {
        self.snapshot.list_fresh_for(std::time::SystemTime::now())
    }

    /// A list that depends on the caller's profile must not be shared by caches.
    pub fn restricts(&self, kind: ListKind) -> bool {
        match kind {
            ListKind::Tools => {
                !(self.snapshot.hidden.is_empty()
                    && self.profile.allow.matches_everything()
                    && self.profile.deny.is_empty())
            }
            ListKind::Resources | ListKind::ResourceTemplates => self.profile.resources.is_some(),
            ListKind::Prompts => self.profile.prompts.is_some(),
        }
    }
}

/// A tool object's text with its `description` prefixed and `_meta["mcpgate/deprecated"]`
/// set to `{"replacement", "sunset"}` (docs/policy.md), every other member as it was. `None` if
/// the object cannot be read (a repeated key among them).
fn mark_deprecated(tool: &str, d: &Deprecation) -> Option<String> {
    let Entries(entries) = serde_json::from_str(tool).ok()?;
    let marker = serde_json::json!({
        "replacement": &*d.replacement,
        "sunset": &*d.sunset_text,
    })
    .to_string();
    let mut out = String::with_capacity(tool.len() + 128);
    out.push('{');
    let (mut described, mut meta) = (false, false);
    for (key, value) in &entries {
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(&**key).ok()?);
        out.push(':');
        match &**key {
            "description" => {
                described = true;
                let old =
                    serde_json::from_str::<Text>(value.get()).map_or(Default::default(), |t| t.0);
                out.push_str(&serde_json::to_string(&format!("{}{old}", d.prefix())).ok()?);
            }
            "_meta" => {
                meta = true;
                let Entries(inner) =
                    serde_json::from_str(value.get()).unwrap_or(Entries(Vec::new()));
                out.push('{');
                for (k, v) in inner.iter().filter(|(k, _)| k != "mcpgate/deprecated") {
                    out.push_str(&serde_json::to_string(&**k).ok()?);
                    out.push(':');
                    out.push_str(v.get());
                    out.push(',');
                }
                out.push_str("\"mcpgate/deprecated\":");
                out.push_str(&marker);
                out.push('}');
            }
            _ => out.push_str(value.get()),
        }
    }
    if !described {
        out.push_str(",\"description\":");
        out.push_str(&serde_json::to_string(d.prefix().trim_end()).ok()?);
    }
    if !meta {
        out.push_str(",\"_meta\":{\"mcpgate/deprecated\":");
        out.push_str(&marker);
        out.push('}');
    }
    out.push('}');
    Some(out)
}

/// Rewrites the list responses (those whose id is in `ids`, each with its kind) found in
/// `text`, a JSON response or batch of responses. `Ok(None)`: nothing to change, forward
/// the original.
pub fn rewrite(
    text: &str,
    ids: &[(Box<str>, ListKind)],
    filter: &ToolFilter,
) -> Result<Option<String>, String> {
    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    if text.trim_start().starts_with('[') {
        let items: Vec<&RawValue> = serde_json::from_str(text).map_err(|e| e.to_string())?;
        for item in items {
            edits_for(text, item.get(), ids, filter, &mut edits)?;
        }
    } else {
        edits_for(text, text, ids, filter, &mut edits)?;
    }
    if edits.is_empty() {
        return Ok(None);
    }
    edits.sort_by_key(|(r, _)| r.start);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (range, replacement) in edits {
        out.push_str(&text[at..range.start]);
        out.push_str(&replacement);
        at = range.end;
    }
    out.push_str(&text[at..]);
    Ok(Some(out))
}

fn edits_for(
    whole: &str,
    message: &str,
    ids: &[(Box<str>, ListKind)],
    filter: &ToolFilter,
    edits: &mut Vec<(Range<usize>, String)>,
) -> Result<(), String> {
    if !message.trim_start().starts_with('{') {
        return Ok(());
    }
    let r: Response = serde_json::from_str(message).map_err(|e| e.to_string())?;
    let (Some(id), Some(mut list)) = (r.id, r.result) else {
        return Ok(());
    };
    let Some(&(_, kind)) = ids.iter().find(|(i, _)| **i == *id.get().trim()) else {
        return Ok(());
    };
    if let Some(why) = list.unreadable {
        return Err(why.into());
    }
    let at = ListKind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
    let Tools::Array(tools) = std::mem::take(&mut list.lists[at]) else {
        return Err(format!("the list result has no \"{}\" array", kind.array()));
    };
    if let (Some(first), Some(last)) = (tools.first(), tools.last()) {
        // The elements are replaced from the first one's start to the last one's end, so
        // the brackets and the whitespace around them stay as the upstream wrote them.
        let region = span_in(whole, first.get()).start..span_in(whole, last.get()).end;
        let mut kept = String::with_capacity(region.len());
        let mut changed = false;
        // With annotation rules the tools are read whole: the list's own annotations judge
        // them, and the upstream's store learns them.
        let read_hints =
            kind == ListKind::Tools && (filter.hints.is_some() || filter.judges_hints());
        let mut learned = Vec::new();
        let unpinned = unpinned(filter, kind, &whole[region.clone()], &tools);
        for tool in &tools {
            // An item whose name cannot be read cannot be shown to be allowed: drop it.
            let name = item_name(tool.get(), kind.key());
            let name = name.filter(|n| unpinned.as_ref().is_none_or(|h| !h.contains(&**n)));
            let keep = match &name {
                Some(n) if read_hints => {
                    let hints = serde_json::from_str::<serde_json::Value>(tool.get())
                        .ok()
                        .as_ref()
                        .and_then(tool_hints)
                        .filter(|(listed, _)| **listed == **n);
                    let keep = filter.keeps_with(n, hints.as_ref().map(|(_, h)| &**h));
                    learned.extend(hints);
                    keep
                }
                Some(n) => filter.keeps_item(kind, n),
                None => false,
            };
            let Some(name) = name.filter(|_| keep) else {
                changed = true;
                continue;
            };
            let deprecation = match kind {
                ListKind::Tools => filter.snapshot.deprecation(&name),
                _ => None,
            };
            let text = match deprecation {
                // Listed until its sunset, marked. One that cannot be marked is dropped.
                Some(d) => match mark_deprecated(tool.get(), d) {
                    Some(marked) => std::borrow::Cow::Owned(marked),
                    None => {
                        changed = true;
                        continue;
                    }
                },
                None => std::borrow::Cow::Borrowed(tool.get()),
            };
            changed |= deprecation.is_some();
            if !kept.is_empty() {
                kept.push(',');
            }
            kept.push_str(&text);
        }
        if let Some(store) = &filter.hints {
            store.learn(learned);
        }
        if changed {
            edits.push((region, kept));
        }
    }
    fresh_for(whole, list.cache_scope, list.ttl_ms, kind, filter, edits);
    Ok(())
}

/// A 2026-07-28 list's `cacheScope` and `ttlMs` (`scope`, `ttl`) as mcpgate may let it be
/// cached: `private` when the profile filters it, and no longer than until mcpgate may
/// change it.
fn fresh_for(
    whole: &str,
    scope: Option<&RawValue>,
    ttl: Option<&RawValue>,
    kind: ListKind,
    filter: &ToolFilter,
    edits: &mut Vec<(Range<usize>, String)>,
) {
    if let Some(scope) = scope
        && filter.restricts(kind)
    {
        edits.push((span_in(whole, scope.get()), "\"private\"".to_string()));
    }
    if let Some(ttl) = ttl {
        // No longer than the upstream said, nor than until mcpgate may change the list.
        let most = filter.fresh_for().as_millis() as u64;
        let given = ttl.get().parse::<u64>().ok();
        if given.is_none_or(|t| t > most) {
            edits.push((
                span_in(whole, ttl.get()),
                given.unwrap_or(0).min(most).to_string(),
            ));
        }
    }
}

/// A pinned upstream's list page (`page`, its items `tools`): the names whose definitions
/// are not approved (docs/pinning.md); `None` when all are, or nothing is pinned.
fn unpinned(
    filter: &ToolFilter,
    kind: ListKind,
    page: &str,
    tools: &[&RawValue],
) -> Option<std::sync::Arc<std::collections::HashSet<Box<str>>>> {
    let store = filter.pins.as_ref()?;
    let pin_kind = match kind {
        ListKind::Tools => PinKind::Tool,
        ListKind::Prompts => PinKind::Prompt,
        _ => return None,
    };
    let upstream = &filter.profile.upstream;
    let hidden = store.page(
        &upstream.name,
        upstream.pin,
        &filter.snapshot.pins,
        pin_kind,
        page.as_bytes(),
        tools.iter().map(|t| t.get()),
    );
    (!hidden.is_empty()).then_some(hidden)
}

/// The list requests of one payload (with what each lists) and the filter of the
/// caller's profile.
#[derive(Clone)]
pub struct ListRewrite {
    pub ids: Vec<(Box<str>, ListKind)>,
    /// The id of a `server/discover` request, whose answer is narrowed to the profile.
    pub discover: Option<Box<str>>,
    /// A request that may be answered `input_required`: that answer's state is sealed.
    pub rounds: Option<crate::mcp::rounds::Issue>,
    /// Task ids of the answers to show as the client's sealed ones.
    pub tasks: Option<crate::mcp::task_ids::Shown>,
    /// A legacy server's answer to a 2026-07-28 client: made a 2026-07-28 result first.
    pub completes: Option<crate::mcp::to_legacy::Completes>,
    pub filter: ToolFilter,
}

impl ListRewrite {
    /// Rewrites a JSON message or batch if it answers one of `ids` (or the discover
    /// request). `Ok(None)`: unchanged.
    pub fn apply(&self, text: &str) -> Result<Option<String>, String> {
        let completed = match &self.completes {
            Some(c) => c.apply(text)?,
            None => None,
        };
        let text = completed.as_deref().unwrap_or(text);
        let mut out = match self.ids.is_empty() {
            true => None,
            false => rewrite(text, &self.ids, &self.filter)?,
        };
        if let Some(id) = &self.discover {
            let base = out.as_deref().unwrap_or(text);
            let narrowed = crate::mcp::discover::narrow(
                base,
                id,
                &self.filter.profile,
                self.filter.fresh_for(),
            )?;
            out = narrowed.or(out);
        }
        if let Some(issue) = &self.rounds {
            let base = out.as_deref().unwrap_or(text);
            out = issue.seal_answer(base)?.or(out);
        }
        if let Some(shown) = &self.tasks {
            let base = out.as_deref().unwrap_or(text);
            out = shown.apply(base)?.or(out);
        }
        Ok(out.or(completed))
    }
}

#[cfg(test)]
mod tests;
