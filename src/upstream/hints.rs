//! What each upstream says of its tools (SPEC §12): the `annotations` of its latest
//! tools/list, kept per upstream for profiles with `allow_annotations` or
//! `deny_annotations`. Filled from every tools/list answer that passes through, and by
//! [`fetch`]: mcpgate's own session (initialize, tools/list page by page, DELETE) run by
//! the tasks of [`start_fetching`], which the gateway starts anew for each configuration.
//! The hints come from the upstream, which the operator runs: they are trusted as its own
//! word about its tools.

use super::endpoint::EndpointState;
use super::pool::Pool;
use crate::config::generation::Era;
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

/// Where the policy finds what an upstream says of a tool, by the name the client calls
/// it: one upstream's store, or a federated profile's members' stores behind its names.
pub trait HintSource: Sync {
    fn hints_of(&self, tool: &str) -> Option<Hints>;
}

impl HintSource for HintStore {
    fn hints_of(&self, tool: &str) -> Option<Hints> {
        self.get(tool)
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

/// Reads the whole tool list of `upstream` from `endpoint` in a session of mcpgate's own.
pub async fn fetch(
    upstream: &Upstream,
    endpoint: &Endpoint,
    pool: &Arc<Pool>,
    era: Era,
) -> Result<Vec<(Box<str>, Hints)>, String> {
    if era == Era::Modern {
        return list_pages(upstream, endpoint, pool, None, true).await;
    }
    let init = serde_json::json!({
        "jsonrpc": "2.0", "id": "mcpgate-hints-0", "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "mcpgate", "version": env!("CARGO_PKG_VERSION")}
        }
    });
    let (session, _) =
        exchange(upstream, endpoint, pool, &Method::POST, None, &init, false).await?;
    let session = session.as_deref();
    let initialized = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    exchange(
        upstream,
        endpoint,
        pool,
        &Method::POST,
        session,
        &initialized,
        false,
    )
    .await?;
    let result = list_pages(upstream, endpoint, pool, session, false).await;
    if session.is_some() {
        // Best effort: the session ends with us either way.
        let _ = exchange(
            upstream,
            endpoint,
            pool,
            &Method::DELETE,
            session,
            &Value::Null,
            false,
        )
        .await;
    }
    result
}

/// Every page of the upstream's tool list, in `session` (legacy) or as stateless
/// 2026-07-28 requests (`modern`).
async fn list_pages(
    upstream: &Upstream,
    endpoint: &Endpoint,
    pool: &Arc<Pool>,
    session: Option<&str>,
    modern: bool,
) -> Result<Vec<(Box<str>, Hints)>, String> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    let result = loop {
        pages += 1;
        let mut list = serde_json::json!({"jsonrpc": "2.0", "id": format!("mcpgate-hints-{pages}"), "method": "tools/list"});
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
            modern,
        )
        .await?;
        let Some(result) = answer.and_then(|mut a| a.get_mut("result").map(Value::take)) else {
            break Err("tools/list answered without a result".to_string());
        };
        let tools = result["tools"]
            .as_array()
            .ok_or("a tools/list result without tools")?;
        all.extend(tools.iter().filter_map(tool_hints));
        cursor = result["nextCursor"].as_str().map(str::to_string);
        if cursor.is_none() {
            break Ok(());
        }
        if pages >= MAX_PAGES {
            break Err(format!("more than {MAX_PAGES} pages of tools"));
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
    modern: bool,
) -> Result<(Option<String>, Option<Value>), String> {
    let body = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    let fields = super::encode::modern_fields("tools/list");
    let fields: &[(&str, &str)] = if modern { &fields } else { &[] };
    let request = super::encode::own(upstream, endpoint, method, session, &body, fields);
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

/// For each HTTP upstream that a profile judges by annotations: a task that reads its
/// tool list in a session of mcpgate's own now and every [`HINTS_EVERY`], from the first
/// endpoint that takes requests. (A stdio upstream learns from the lists that pass.)
/// `state` gives each upstream's endpoints and hint store in the configuration in force.
pub fn start_fetching<'a>(
    config: &Snapshot,
    state: impl Fn(&Upstream) -> (&'a [Arc<EndpointState>], &'a Arc<HintStore>),
) -> Vec<tokio::task::AbortHandle> {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return Vec::new();
    };
    let mut tasks = Vec::new();
    for u in config.upstreams.values() {
        if u.stdio.is_some() || !config.judges_hints(u) {
            continue;
        }
        let (endpoints, store) = state(u);
        let (upstream, endpoints, store) = (u.clone(), endpoints.to_vec(), store.clone());
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
                            let era = super::health::probe(&pools[at], &probe).await;
                            if let Some(era) = era {
                                endpoints[at].set_era(era);
                            }
                            era.unwrap_or(Era::Legacy)
                        }
                    },
                };
                match fetch(&upstream, &upstream.endpoints[at], &pools[at], era)
                    .await
                {
                    Ok(tools) => {
                        tracing::debug!(upstream = %upstream.name, tools = tools.len(), "tool annotations read");
                        store.replace(tools);
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
