//! A federated profile's lists: every member asked at once with its own cursor, the pages
//! merged under a sealed cursor and the profile's rules, and the members' whole lists read
//! by mcpgate itself when a name is not known yet.

use super::{Fan, invalid};
use crate::config::pins::{PinKind, PinMode};
use crate::error::GateError;
use crate::mcp::era::Era;
use crate::mcp::federation::directory::{REREAD_AFTER, place};
use crate::mcp::federation::lists::{self, Answer, Page};
use crate::mcp::jsonrpc::ListKind;
use crate::mcp::pointer::Entries;
use crate::pipeline::Ctx;
use crate::upstream::hints::item_hints;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;

impl<'s> Fan<'_, 's> {
    /// A `kind` list of every member, merged. The client's cursor, if any, is the sealed
    /// one of an earlier page: only the members with more are asked.
    pub(super) async fn list(
        &self,
        kind: ListKind,
        id: &str,
        bytes: &Bytes,
        ctx: &Ctx<'s>,
    ) -> Result<String, GateError> {
        let given = cursor_of(bytes).map_err(|e| invalid(ctx, e))?;
        if given.is_none() && !self.dir.complete(kind) {
            // Before a first page is shown, every member's whole list is read once, so a
            // name another page holds cannot change what this page's names are.
            self.read_lists(&[kind], ctx).await;
        }
        let cursors: Vec<(usize, Option<String>)> = match &given {
            None => (0..self.fed.members.len()).map(|m| (m, None)).collect(),
            Some(sealed) => self.open_cursor(sealed, kind, ctx)?,
        };
        let method = kind_method(kind);
        let asks = cursors.iter().map(|(m, cursor)| {
            // The client's request as it is, unless it or the member has a cursor.
            let body = match (&given, cursor) {
                (None, None) => Some(bytes.clone()),
                _ => with_cursor(bytes, cursor.as_deref()).map(Bytes::from),
            };
            async move {
                match body {
                    Some(b) => self.ask(*m, method, b, ctx).await,
                    None => Err("the request cannot be rewritten".into()),
                }
            }
        });
        let answers = futures_util::future::join_all(asks).await;
        let mut pages: Vec<(usize, Page<'_>)> = Vec::new();
        let mut unavailable: Vec<&str> = Vec::new();
        let mut next: Vec<(usize, String)> = Vec::new();
        for ((m, cursor), answer) in cursors.iter().zip(&answers) {
            let name = &*self.fed.members[*m].name;
            let text = match answer {
                Ok(t) => std::str::from_utf8(t).map_err(|_| "not UTF-8".to_string()),
                Err(e) => Err(e.clone()),
            };
            let page = match text.map(|t| lists::read(t, kind)) {
                Ok(Answer::Page(p)) => p,
                Ok(Answer::Lacks) => continue,
                Ok(Answer::Failed(why)) | Err(why) => {
                    self.unavailable(&self.fed.members[*m].name, &why);
                    unavailable.push(name);
                    continue;
                }
            };
            let member = &self.fed.members[*m].name;
            self.gw
                .federation
                .directories
                .answered(&self.profile.name, member, Ok(()));
            let last = page.next.is_none();
            self.dir.learn(
                self.fed,
                kind,
                *m,
                cursor.is_none(),
                last,
                &lists::names(&page),
            );
            if let Some(n) = &page.next {
                next.push((*m, n.to_string()));
            }
            pages.push((*m, page));
        }
        let cursor = match next.is_empty() {
            true => None,
            false => Some(self.seal_cursor(kind, &next)?),
        };
        self.merged(kind, id, &pages, &unavailable, cursor.as_deref(), ctx)
    }

    /// The members' pages merged under the profile's rules and names, with the sealed
    /// `cursor` of their next pages and the members that did not answer; deprecated tools
    /// marked as for one upstream.
    fn merged(
        &self,
        kind: ListKind,
        id: &str,
        pages: &[(usize, Page<'_>)],
        unavailable: &[&str],
        cursor: Option<&str>,
        ctx: &Ctx<'s>,
    ) -> Result<String, GateError> {
        let names = match kind {
            ListKind::Tools | ListKind::Prompts => Some(self.dir.names(kind).clone()),
            _ => None,
        };
        // The profile's own rules, by the names the client sees, as the items are merged.
        let filter =
            crate::mcp::tools_list::ToolFilter::new(self.live.config.clone(), self.profile.clone());
        // With annotation rules a tool is judged by the annotations its item carries, and
        // its member's store learns them (by the member's own name).
        let read_hints = kind == ListKind::Tools && filter.judges_hints();
        let learned = std::cell::RefCell::new(vec![Vec::new(); self.fed.members.len()]);
        // A pinned member's names whose definitions are not approved (docs/pinning.md).
        let unpinned: Vec<Option<Arc<std::collections::HashSet<Box<str>>>>> = {
            let mut by_member = vec![None; self.fed.members.len()];
            for (m, page) in pages {
                by_member[*m] = self.unpinned(*m, kind, page);
            }
            by_member
        };
        let keep = |m: usize, own: &str, name: &str, item: &str| {
            if unpinned[m].as_ref().is_some_and(|h| h.contains(own)) {
                return false;
            }
            if !read_hints {
                return filter.keeps_item(kind, name);
            }
            let hints = item_hints(item);
            let keep = filter.keeps_with(name, hints.as_ref().map(|(_, h)| &**h));
            learned.borrow_mut()[m].extend(hints);
            keep
        };
        let rules = lists::Rules {
            keep: &keep,
            restricts: filter.restricts(kind),
            max_ttl_ms: filter.fresh_for().as_millis() as u64,
        };
        let to = lists::Answering {
            modern: ctx.era == Era::Modern,
            kind,
            id,
            cursor,
            unavailable,
        };
        let merged = lists::merge(to, pages, names.as_deref(), &rules);
        for (m, learned) in learned.into_inner().into_iter().enumerate() {
            let upstream = &self.fed.members[m].profile.upstream;
            self.live.upstream(upstream).hints.learn(learned);
        }
        if kind != ListKind::Tools || self.live.deprecated.is_empty() {
            return Ok(merged);
        }
        // Deprecated tools are marked (and past their sunset, left out) by the list
        // rewrite, as for one upstream.
        let rewrite = crate::mcp::tools_list::ListRewrite {
            ids: vec![(id.into(), kind)],
            discover: None,
            rounds: None,
            tasks: None,
            completes: None,
            filter,
        };
        match rewrite.apply(&merged) {
            Ok(Some(filtered)) => Ok(filtered),
            Ok(None) => Ok(merged),
            Err(e) => Err(GateError::UpstreamBadResponse(format!(
                "cannot filter the merged list: {e}"
            ))),
        }
    }

    /// The names of a member's page that its pins hide (none unless it is pinned and the
    /// list is of tools or prompts); the page is learnt either way.
    pub(super) fn unpinned(
        &self,
        m: usize,
        kind: ListKind,
        page: &Page<'_>,
    ) -> Option<Arc<std::collections::HashSet<Box<str>>>> {
        let upstream = &self.fed.members[m].profile.upstream;
        let pin_kind = match kind {
            ListKind::Tools => PinKind::Tool,
            ListKind::Prompts => PinKind::Prompt,
            _ => return None,
        };
        if upstream.pin == PinMode::Off {
            return None;
        }
        let hidden = self.live.upstream(upstream).pins.page(
            &upstream.name,
            upstream.pin,
            &self.live.config.pins,
            pin_kind,
            page.region.as_bytes(),
            page.items.iter().map(|i| i.get()),
        );
        (!hidden.is_empty()).then_some(hidden)
    }

    /// Logs and counts a member that did not answer a fan-out.
    pub(super) fn unavailable(&self, member: &Arc<str>, why: &str) {
        tracing::warn!(%member, why, "a federated member did not answer; listed as unavailable");
        self.gw
            .federation
            .directories
            .answered(&self.profile.name, member, Err(why));
    }

    pub(super) fn seal_cursor(
        &self,
        kind: ListKind,
        next: &[(usize, String)],
    ) -> Result<String, GateError> {
        let inner = serde_json::json!({
            "p": &*self.profile.name,
            "k": kind_method(kind),
            "m": next,
        })
        .to_string();
        self.sealer()
            .seal(&[0; 8], inner.as_bytes())
            .ok_or_else(|| {
                GateError::UpstreamBadResponse("the members' cursors are too long to seal".into())
            })
    }

    /// The members' cursors a sealed cursor holds; one that does not open, or was sealed
    /// for another profile or list, is refused (-32602).
    pub(super) fn open_cursor(
        &self,
        sealed: &str,
        kind: ListKind,
        ctx: &Ctx<'_>,
    ) -> Result<Vec<(usize, Option<String>)>, GateError> {
        #[derive(serde::Deserialize)]
        struct Inner {
            p: String,
            k: String,
            m: Vec<(usize, String)>,
        }
        let bad = || invalid(ctx, "Invalid cursor".into());
        let (_, inner) = self.sealer().open(sealed.as_bytes()).ok_or_else(bad)?;
        let inner: Inner = serde_json::from_slice(&inner).map_err(|_| bad())?;
        if inner.p != *self.profile.name
            || inner.k != kind_method(kind)
            || inner.m.iter().any(|(m, _)| *m >= self.fed.members.len())
        {
            return Err(bad());
        }
        Ok(inner.m.into_iter().map(|(m, c)| (m, Some(c))).collect())
    }

    pub(super) fn sealer(&self) -> &crate::upstream::session::Sealer {
        &self
            .live
            .upstream(&self.fed.members[0].profile.upstream)
            .fed_sealer
    }

    /// Reads every page of the `kinds` lists of every member, into the directory; not
    /// again within [`REREAD_AFTER`] of the last time (the lock makes callers that come
    /// together wait for one read).
    pub(super) async fn read_lists(&self, kinds: &[ListKind], ctx: &Ctx<'s>) {
        // mcpgate's own reads, whoever's request made them happen.
        let ctx = &ctx.as_own();
        let mut read_at = self.dir.read_at.lock().await;
        let kinds: Vec<ListKind> = kinds
            .iter()
            .copied()
            .filter(|k| {
                read_at[place(*k)].is_none_or(|(t, changes)| {
                    t.elapsed() >= REREAD_AFTER || changes != self.dir.changes(*k)
                })
            })
            .collect();
        let kinds = &kinds;
        let reads = self.fed.members.iter().enumerate().flat_map(|(m, member)| {
            kinds.iter().map(move |&kind| async move {
                let mut cursor: Option<String> = None;
                for _ in 0..MAX_PAGES {
                    let body = own_request(kind_method(kind), self.meta, cursor.as_deref());
                    let text = match self.ask(m, kind_method(kind), body, ctx).await {
                        Ok(t) => t,
                        Err(why) => {
                            self.unavailable(&member.name, &why);
                            return;
                        }
                    };
                    let Ok(text) = std::str::from_utf8(&text) else {
                        return;
                    };
                    let Answer::Page(page) = lists::read(text, kind) else {
                        return;
                    };
                    let last = page.next.is_none();
                    self.dir.learn(
                        self.fed,
                        kind,
                        m,
                        cursor.is_none(),
                        last,
                        &lists::names(&page),
                    );
                    // What a pinned member lists is learnt (and its changes reported).
                    self.unpinned(m, kind, &page);
                    // The member's store learns what it says of its tools, for annotation
                    // rules.
                    let upstream = &member.profile.upstream;
                    if kind == ListKind::Tools && self.live.judges_hints(upstream) {
                        let hints = page.items.iter().filter_map(|i| item_hints(i.get()));
                        self.live.upstream(upstream).hints.learn(hints.collect());
                    }
                    match page.next {
                        Some(n) => cursor = Some(n.into_owned()),
                        None => return,
                    }
                }
            })
        });
        let changes: Vec<u64> = kinds.iter().map(|k| self.dir.changes(*k)).collect();
        futures_util::future::join_all(reads).await;
        for (kind, changes) in kinds.iter().zip(changes) {
            read_at[place(*kind)] = Some((Instant::now(), changes));
        }
    }
}

/// The most pages of one member's list mcpgate reads when it reads the lists itself.
pub(super) const MAX_PAGES: usize = 16;

/// The method of a `kind` list.
pub(super) fn kind_method(kind: ListKind) -> &'static str {
    match kind {
        ListKind::Tools => "tools/list",
        ListKind::Resources => "resources/list",
        ListKind::ResourceTemplates => "resources/templates/list",
        ListKind::Prompts => "prompts/list",
    }
}

/// A list request mcpgate makes itself, with the client's `_meta` (which says its
/// revision and capabilities, as every 2026-07-28 request must).
pub(super) fn own_request(method: &str, meta: Option<&str>, cursor: Option<&str>) -> Bytes {
    let mut params = String::from("{");
    if let Some(meta) = meta {
        params.push_str("\"_meta\":");
        params.push_str(meta);
    }
    if let Some(c) = cursor {
        if params.len() > 1 {
            params.push(',');
        }
        params.push_str("\"cursor\":");
        params.push_str(&serde_json::to_string(c).expect("a string serializes"));
    }
    params.push('}');
    // Ids of their own: several may be in one member session at once.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":"mcpgate-federation-{n}","method":"{method}","params":{params}}}"#
    ))
}

/// The cursor of a list request (`params.cursor`), if it names one.
pub(super) fn cursor_of(bytes: &[u8]) -> Result<Option<String>, String> {
    #[derive(serde::Deserialize)]
    struct Request {
        params: Option<Params>,
    }
    #[derive(serde::Deserialize)]
    struct Params {
        cursor: Option<serde_json::Value>,
    }
    let r: Request = serde_json::from_slice(bytes).map_err(|e| format!("Invalid params: {e}"))?;
    match r.params.and_then(|p| p.cursor) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(c)) => Ok(Some(c)),
        Some(_) => Err("Invalid cursor: not a string".into()),
    }
}

/// The client's list request with `params.cursor` made `cursor` (or taken out), every
/// other member as it was. `None` if the request cannot be read.
pub(super) fn with_cursor(bytes: &[u8], cursor: Option<&str>) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let Entries(top) = serde_json::from_str(text).ok()?;
    let mut out = String::with_capacity(text.len() + 64);
    out.push('{');
    let mut wrote_params = false;
    for (key, value) in &top {
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(&**key).ok()?);
        out.push(':');
        if key != "params" {
            out.push_str(value.get());
            continue;
        }
        wrote_params = true;
        let Entries(params) = serde_json::from_str(value.get()).ok()?;
        out.push('{');
        let mut first = true;
        for (k, v) in params.iter().filter(|(k, _)| k != "cursor") {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(&serde_json::to_string(&**k).ok()?);
            out.push(':');
            out.push_str(v.get());
        }
        if let Some(c) = cursor {
            if !first {
                out.push(',');
            }
            out.push_str("\"cursor\":");
            out.push_str(&serde_json::to_string(c).ok()?);
        }
        out.push('}');
    }
    if !wrote_params && let Some(c) = cursor {
        out.push_str(",\"params\":{\"cursor\":");
        out.push_str(&serde_json::to_string(c).ok()?);
        out.push('}');
    }
    out.push('}');
    Some(out.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_request_gets_each_members_cursor() {
        let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"a":1},"cursor":"SEALED"}}"#;
        let out = with_cursor(body, Some("m2")).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"a":1},"cursor":"m2"}}"#
        );
        let out = with_cursor(body, None).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"a":1}}}"#
        );
        let bare = br#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#;
        let out = with_cursor(bare, Some("c")).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"cursor":"c"}}"#
        );
        assert_eq!(cursor_of(body).unwrap().as_deref(), Some("SEALED"));
        assert!(cursor_of(br#"{"params":{"cursor":5}}"#).is_err());
    }
}
