//! What each upstream says of its tools (docs/policy.md): the `annotations` of its latest
//! tools/list, kept per upstream for profiles with `allow_annotations` or
//! `deny_annotations`. Filled from every tools/list answer that passes through, and by
//! [`fetch`]: mcpgate's own session (initialize, tools/list page by page, DELETE) run by
//! the tasks of [`start_fetching`], which the gateway starts anew for each configuration.
//! The hints come from the upstream, which the operator runs: they are trusted as its own
//! word about its tools.

use super::endpoint::EndpointState;
use super::pins::{PinStore, Standing};
use super::pool::Pool;
use crate::config::generation::Era;
use crate::config::pins::{PinBook, PinKind, PinMode, Pinned};
use crate::config::{Endpoint, Protocol, Snapshot, Upstream};
use arc_swap::ArcSwap;
use bytes::BytesMut;
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;

pub type Hints = Arc<Map<String, Value>>;

/// One upstream's tools and their annotations, swapped whole.
#[derive(Default)]
pub struct HintStore {
    tools: ArcSwap<HashMap<Box<str>, Hints>>,
    /// Woken when the upstream says its tool list changed.
    stale: tokio::sync::Notify,
}

impl HintStore {
    /// The upstream announced `notifications/tools/list_changed`: read the list again.
    pub fn mark_stale(&self) {
        self.stale.notify_one();
    }

    /// Ready once the list was marked stale.
    pub async fn stale(&self) {
        self.stale.notified().await;
    }

    pub fn get(&self, tool: &str) -> Option<Hints> {
        self.tools.load().get(tool).cloned()
    }

    /// Adds what one page of a tools/list says (a later page or answer wins for a tool).
    pub fn learn(&self, page: Vec<(Box<str>, Hints)>) {
        if page.is_empty() {
            return;
        }
        self.tools.rcu(|old| {
            let mut next = HashMap::clone(old);
            next.extend(page.iter().cloned());
            next
        });
    }

    /// Replaces everything with a whole list, as mcpgate's own fetch read it.
    pub fn replace(&self, all: Vec<(Box<str>, Hints)>) {
        self.tools.store(Arc::new(all.into_iter().collect()));
    }
}

/// Where the policy finds what an upstream says of a tool or prompt, by the name the
/// client calls it: one upstream's stores, or a federated profile's members' behind its
/// names.
pub trait UpstreamSays: Sync {
    /// Its annotations, when known.
    fn hints_of(&self, tool: &str) -> Option<Hints>;
    /// How its definition stands against the pins file, when its upstream is pinned.
    fn pinned(&self, kind: PinKind, name: &str) -> Option<(PinMode, Standing)>;
}

/// [`UpstreamSays`] of one upstream, as the configuration in force pins it.
pub struct OneUpstream<'a> {
    pub upstream: &'a Upstream,
    pub hints: &'a HintStore,
    pub pins: &'a PinStore,
    pub book: &'a PinBook,
}

impl UpstreamSays for OneUpstream<'_> {
    fn hints_of(&self, tool: &str) -> Option<Hints> {
        self.hints.get(tool)
    }

    fn pinned(&self, kind: PinKind, name: &str) -> Option<(PinMode, Standing)> {
        let mode = self.upstream.pin;
        (mode != PinMode::Off).then(|| {
            let standing = self
                .pins
                .standing(self.book, &self.upstream.name, kind, name);
            (mode, standing)
        })
    }
}

/// A tool object's name and annotations (an empty map when it has none: every hint then
/// has its default), or `None` if the object cannot be read.
pub fn tool_hints(tool: &Value) -> Option<(Box<str>, Hints)> {
    let name = tool.get("name")?.as_str()?;
    let hints = match tool.get("annotations") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    Some((name.into(), Arc::new(hints)))
}

/// [`tool_hints`] of a tool object's JSON text.
pub fn item_hints(item: &str) -> Option<(Box<str>, Hints)> {
    tool_hints(&serde_json::from_str::<Value>(item).ok()?)
}

/// The most pages of a tools/list mcpgate reads itself.
const MAX_PAGES: usize = 50;
/// The most of one answer read.
const MAX_ANSWER: usize = 8 << 20;

/// What mcpgate's own read of an upstream's lists found: every tool, and (when asked for)
/// every prompt, as the upstream lists them.
#[derive(Default)]
pub struct Fetched {
    pub tools: Vec<Value>,
    pub prompts: Vec<Value>,
}

/// Reads the whole tool list (and with `prompts`, the prompt list) of `upstream` from
/// `endpoint` in a session of mcpgate's own.
pub async fn fetch(
    upstream: &Upstream,
    endpoint: &Endpoint,
    pool: &Arc<Pool>,
    era: Era,
    prompts: bool,
) -> Result<Fetched, String> {
    let lists = |session: Option<String>, modern: bool| async move {
        let session = session.as_deref();
        let tools = list_pages(upstream, endpoint, pool, session, modern, "tools").await?;
        // A server without prompts answers -32601: none to pin.
        let prompts = match prompts {
            true => list_pages(upstream, endpoint, pool, session, modern, "prompts")
                .await
                .unwrap_or_default(),
            false => Vec::new(),
        };
        Ok::<_, String>(Fetched { tools, prompts })
    };
    if era == Era::Modern {
        return lists(None, true).await;
    }
    let init = serde_json::json!({
        "jsonrpc": "2.0", "id": "mcpgate-hints-0", "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "mcpgate", "version": env!("CARGO_PKG_VERSION")}
        }
    });
    let (session, _) = exchange(upstream, endpoint, pool, &Method::POST, None, &init, None).await?;
    let session = session.as_deref();
    let initialized = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    exchange(
        upstream,
        endpoint,
        pool,
        &Method::POST,
        session,
        &initialized,
        None,
    )
    .await?;
    let result = lists(session.map(str::to_string), false).await;
    if session.is_some() {
        // Best effort: the session ends with us either way.
        let _ = exchange(
            upstream,
            endpoint,
            pool,
            &Method::DELETE,
            session,
            &Value::Null,
            None,
        )
        .await;
    }
    result
}

/// Every item of every page of the upstream's `what` list (`tools`, `prompts`), in
/// `session` (legacy) or as stateless 2026-07-28 requests (`modern`).
async fn list_pages(
    upstream: &Upstream,
    endpoint: &Endpoint,
    pool: &Arc<Pool>,
    session: Option<&str>,
    modern: bool,
    what: &str,
) -> Result<Vec<Value>, String> {
    let method = format!("{what}/list");
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    let result = loop {
        pages += 1;
        let mut list = serde_json::json!({"jsonrpc": "2.0", "id": format!("mcpgate-hints-{pages}"), "method": method});
        if let Some(c) = &cursor {
            list["params"] = serde_json::json!({ "cursor": c });
        }
        if modern {
            let meta: Value =
                serde_json::from_str(super::encode::OWN_META).expect("mcpgate's own _meta is JSON");
            list["params"]["_meta"] = meta;
        }
        let (_, answer) = exchange(
            upstream,
            endpoint,
            pool,
            &Method::POST,
            session,
            &list,
            modern.then_some(method.as_str()),
        )
        .await?;
        let Some(mut result) = answer.and_then(|mut a| a.get_mut("result").map(Value::take)) else {
            break Err(format!("{method} answered without a result"));
        };
        let Value::Array(items) = result[what].take() else {
            break Err(format!("a {method} result without {what}"));
        };
        all.extend(items);
        cursor = result["nextCursor"].as_str().map(str::to_string);
        if cursor.is_none() {
            break Ok(());
        }
        if pages >= MAX_PAGES {
            break Err(format!("more than {MAX_PAGES} pages of {what}"));
        }
    };
    result.map(|()| all)
}

/// One request of mcpgate's own session (or, `modern`, a stateless 2026-07-28 tools/list,
/// which says what it is in its headers too): the session id the answer gives and the
/// JSON-RPC message it holds (a JSON body, or the first message of an event stream).
async fn exchange(
    upstream: &Upstream,
    endpoint: &Endpoint,
    pool: &Arc<Pool>,
    method: &Method,
    session: Option<&str>,
    body: &Value,
    modern: Option<&str>,
) -> Result<(Option<String>, Option<Value>), String> {
    let body = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    let fields = modern.map(super::encode::modern_fields);
    let fields: &[(&str, &str)] = fields.as_ref().map_or(&[], |f| &f[..]);
    let request = super::encode::own(upstream, endpoint, method, session, &body, fields);
    let request = super::encode::authorized(&request, upstream);
    let answer = pool
        .send(method, &request, &mut || {})
        .await
        .map_err(|e| e.to_string())?;
    let status = answer.status();
    if !(status.is_success() || status == StatusCode::ACCEPTED) {
        return Err(format!("status {status}"));
    }
    let session = answer
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let sse = wire::headval::body_format(answer.headers()) == wire::headval::BodyFormat::Sse;
    let mut body = answer.into_body();
    let mut seen = BytesMut::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.map_err(|e| e.to_string())?.into_data() {
            seen.extend_from_slice(&data);
        }
        if sse && first_message(&seen, true).is_some() {
            break;
        }
        if seen.len() > MAX_ANSWER {
            return Err("the answer is too large".into());
        }
    }
    Ok((session, first_message(&seen, sse)))
}

/// The JSON-RPC answer in `text`: the whole body, or the first `data:` of an event
/// stream that holds a message with a result or an error.
fn first_message(text: &[u8], sse: bool) -> Option<Value> {
    if !sse {
        return serde_json::from_slice(text).ok();
    }
    text.split(|b| *b == b'\n')
        .filter_map(|line| line.strip_prefix(b"data:"))
        .filter_map(|data| serde_json::from_slice::<Value>(data.trim_ascii()).ok())
        .find(|m| m.get("result").is_some() || m.get("error").is_some())
}

/// How often mcpgate reads an upstream's tool list itself, for annotation rules.
pub const HINTS_EVERY: std::time::Duration = std::time::Duration::from_secs(300);

/// For each HTTP upstream that a profile judges by annotations, or that is pinned: a
/// task that reads its tool list (and, pinned, its prompt list) in a session of mcpgate's
/// own now, every [`HINTS_EVERY`], and when the upstream says its list changed, from the
/// first endpoint that takes requests. (A stdio upstream learns from the lists that
/// pass.) `state` gives each upstream's endpoints, hint store and pin store in the
/// configuration in force.
pub fn start_fetching<'a>(
    config: &Snapshot,
    state: impl Fn(
        &Upstream,
    ) -> (
        &'a [Arc<EndpointState>],
        &'a Arc<HintStore>,
        &'a Arc<PinStore>,
    ),
) -> Vec<tokio::task::AbortHandle> {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return Vec::new();
    };
    let mut tasks = Vec::new();
    for u in config.upstreams.values() {
        if u.stdio.is_some() || !config.reads_lists(u) {
            continue;
        }
        let hinted = config.judges_hints(u);
        let (endpoints, store, pins) = state(u);
        let (upstream, endpoints, store) = (u.clone(), endpoints.to_vec(), store.clone());
        let (pins, book) = (pins.clone(), config.pins.clone());
        let task = rt.spawn(async move {
            let pools: Vec<_> = endpoints.iter().map(|e| e.new_pool()).collect();
            loop {
                let at = endpoints
                    .iter()
                    .position(|e| e.available(upstream.outlier.as_ref()))
                    .unwrap_or(0);
                // A modern server has no session to read in: its era decides how to ask.
                let era = match upstream.protocol {
                    Protocol::Modern => Era::Modern,
                    Protocol::Legacy => Era::Legacy,
                    Protocol::Auto => match endpoints[at].era() {
                        Some(era) => era,
                        None => {
                            let probe = super::encode::discover(&upstream, &upstream.endpoints[at]);
                            let probe = super::encode::authorized(&probe, &upstream);
                            let era = super::health::probe(&pools[at], &probe).await;
                            if let Some(era) = era {
                                endpoints[at].set_era(era);
                            }
                            if era == Some(Era::Modern) {
                                super::health::legacy_probe(&pools[at], &upstream, at, &endpoints[at])
                                    .await;
                            }
                            era.unwrap_or(Era::Legacy)
                        }
                    },
                };
                let pinned = upstream.pin != PinMode::Off;
                match fetch(&upstream, &upstream.endpoints[at], &pools[at], era, pinned).await {
                    Ok(read) => {
                        tracing::debug!(upstream = %upstream.name, tools = read.tools.len(), "tool list read");
                        if hinted {
                            store.replace(read.tools.iter().filter_map(tool_hints).collect());
                        }
                        if pinned {
                            for (kind, items) in [(PinKind::Tool, &read.tools), (PinKind::Prompt, &read.prompts)] {
                                let listed = items
                                    .iter()
                                    .filter_map(|i| Some((i["name"].as_str()?.into(), Pinned::of(kind, i)?)))
                                    .collect();
                                pins.learn(&upstream.name, &book, kind, listed);
                            }
                        }
                    }
                    Err(error) => {
                        tracing::warn!(upstream = %upstream.name, %error, "cannot read the upstream's tool list; calls that need its annotations are refused until it is known");
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(HINTS_EVERY) => {}
                    _ = store.stale() => {}
                }
            }
        });
        tasks.push(task.abort_handle());
    }
    tasks
}
