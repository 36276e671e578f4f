//! The gateway's per-endpoint state (pools, session order, health, metrics), kept across
//! reloads. An endpoint's state is keyed by its upstream's name and what its connections
//! depend on (host and port or socket path, connect timeout, TLS settings): a reload that
//! keeps those (a token rotation, a new profile, a changed timeout) keeps its pools, their
//! open connections, its health and ejection; a changed address gets new state, and the
//! old one closes once the last request of the old configuration is done with it.
//! Each table also carries per-upstream state made anew with the configuration: the
//! session sealer and the round-robin position.

use super::endpoint::{EndpointFamilies, EndpointState};
use super::hints::HintStore;
use super::pins::PinStore;
use super::session::{EndpointId, Purpose, Sealer};
use crate::config::Protocol;
use crate::config::generation::Era;

/// The key of this process's seals when an upstream has no `session_key`: drawn at start,
/// so what it sealed opens only here.
static PROCESS_KEY: std::sync::LazyLock<crate::config::SessionKey> =
    std::sync::LazyLock::new(|| {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).expect("the system has a source of randomness");
        crate::config::SessionKey(key)
    });
use super::identity::Tokens;
use super::stdio::StdioUpstream;
use crate::config::{Address, Balance, Endpoint, StdioCommand, Upstream};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What an endpoint's state is kept by; equal keys share it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    upstream: Arc<str>,
    address: Address,
    connect_timeout: Duration,
    /// The TLS settings' digest (`UpstreamTls::identity`), for an https endpoint.
    tls: Option<[u8; 32]>,
}

impl Key {
    fn of(upstream: &Upstream, endpoint: &Endpoint) -> Key {
        Key {
            upstream: upstream.name.clone(),
            address: endpoint.address.clone(),
            connect_timeout: upstream.connect_timeout,
            tls: endpoint.tls.as_ref().map(|t| t.identity),
        }
    }
}

/// One upstream's runtime state for one configuration.
pub struct UpstreamState {
    /// In the order of `Upstream::endpoints`.
    pub endpoints: Box<[Arc<EndpointState>]>,
    /// With `session_key`: seals and opens the session ids clients hold.
    pub sealer: Option<Sealer>,
    /// Seals and opens the `requestState` of multi round-trip requests (MCP 2026-07-28):
    /// with the upstream's `session_key` when it has one (so every replica of mcpgate
    /// opens it), else with a key this process drew at start.
    pub state_sealer: Arc<Sealer>,
    /// Seals the task ids of the tasks extension (MCP 2026-07-28), with the same keys.
    pub task_sealer: Arc<Sealer>,
    /// Seals the session ids of legacy clients bridged to a 2026-07-28 server, with the
    /// same keys.
    pub bridge_sealer: Sealer,
    /// Seals the cursors and legacy session ids of the federated profiles whose first
    /// member this upstream is.
    pub fed_sealer: Sealer,
    /// Seals the `requestState` of the approvals asked of 2026-07-28 clients (docs/approvals.md)
    /// on profiles of this upstream (a federated one's: its first member's).
    pub approval_sealer: Sealer,
    /// The identity tokens of its callers, when it has `identity` (docs/oauth.md).
    pub identity: Option<super::identity::Tokens>,
    /// A stdio upstream (`command`): its sessions and processes.
    pub stdio: Option<Arc<StdioUpstream>>,
    /// What the upstream says of its tools, kept by upstream name across reloads.
    pub hints: Arc<HintStore>,
    /// What its tools and prompts were last seen to be (pinning), kept by upstream name
    /// across reloads.
    pub pins: Arc<PinStore>,
    /// The `x-mcp-header` marks of a legacy server's tools, learnt from the lists bridged
    /// to 2026-07-28 clients: mcpgate checks their `Mcp-Param-*` headers for it.
    pub bridge_params: Arc<crate::upstream::stdio::params::ParamHeaders>,
    /// The next endpoint `round_robin` tries first.
    next: AtomicUsize,
}

impl UpstreamState {
    /// The place of the endpoint a sealed session names, if it is still in the set.
    pub fn named(&self, id: &EndpointId) -> Option<usize> {
        self.endpoints.iter().position(|e| e.id == *id)
    }

    /// The generation the upstream speaks, as configured or as its endpoints showed when
    /// probed (the first that has answered); `None` while unknown. A stdio upstream runs
    /// its processes in the generation of each request, unless it is `modern` or `legacy`.
    pub fn era(&self, upstream: &Upstream) -> Option<Era> {
        if self.stdio.is_some() {
            return match upstream.protocol {
                Protocol::Modern => Some(Era::Modern),
                Protocol::Legacy => Some(Era::Legacy),
                Protocol::Auto => None,
            };
        }
        match upstream.protocol {
            Protocol::Modern => Some(Era::Modern),
            Protocol::Legacy => Some(Era::Legacy),
            Protocol::Auto => self.endpoints.iter().find_map(|e| e.era()),
        }
    }

    /// Whether its legacy clients are bridged (docs/protocol.md): it is marked `protocol =
    /// "modern"`, or (`auto`) it refused a legacy `initialize` as a server of 2026-07-28
    /// only does (an HTTP endpoint, or a stdio child). A server that speaks both
    /// generations serves each client in its own: a `server/discover` answer cannot tell
    /// it from one of 2026-07-28 only (both list 2026-07-28 alone), so its first legacy
    /// `initialize` is how mcpgate learns which it is.
    pub fn bridges_legacy(&self, upstream: &Upstream) -> bool {
        match upstream.protocol {
            Protocol::Modern => true,
            Protocol::Legacy => false,
            Protocol::Auto => match &self.stdio {
                Some(stdio) => stdio.modern_only(),
                None => self.endpoints.iter().any(|e| e.modern_only()),
            },
        }
    }

    /// The endpoint a request without a session goes to: an available one not in
    /// `tried`, picked by the upstream's `balance`. `None` when there is none.
    pub fn pick(&self, upstream: &Upstream, tried: &[usize]) -> Option<usize> {
        let outlier = upstream.outlier.as_ref();
        let usable = |i: usize| !tried.contains(&i) && self.endpoints[i].available(outlier);
        let n = self.endpoints.len();
        if n == 1 {
            return usable(0).then_some(0);
        }
        match upstream.balance {
            Balance::RoundRobin => {
                // A retry goes on from the endpoint that failed, not from the next turn.
                let start = match tried.last() {
                    Some(&failed) => failed + 1,
                    None => self.next.fetch_add(1, Ordering::Relaxed),
                };
                (0..n).map(|k| (start + k) % n).find(|&i| usable(i))
            }
            Balance::LeastRequests => {
                let candidates: smallvec::SmallVec<[usize; 8]> =
                    (0..n).filter(|&i| usable(i)).collect();
                match candidates.len() {
                    0 => None,
                    1 => Some(candidates[0]),
                    len => {
                        // Two distinct draws; the one with fewer requests in flight here.
                        let a = fastrand::usize(..len);
                        let b = (a + 1 + fastrand::usize(..len - 1)) % len;
                        let (a, b) = (candidates[a], candidates[b]);
                        let busy = |i: usize| self.endpoints[i].here().busy();
                        Some(if busy(b) < busy(a) { b } else { a })
                    }
                }
            }
        }
    }
}

/// A stdio upstream is kept by its name and all its settings.
type StdioKey = (Arc<str>, Arc<StdioCommand>);

/// The endpoint state of the configuration in force, by key.
#[derive(Default)]
pub struct Registry {
    current: Mutex<HashMap<Key, Arc<EndpointState>>>,
    /// stdio upstreams by name and settings.
    stdio: Mutex<HashMap<StdioKey, Arc<StdioUpstream>>>,
    /// What each upstream says of its tools, by upstream name.
    hints: Mutex<HashMap<String, Arc<HintStore>>>,
    /// What each upstream's tools and prompts were last seen to be, for pinning.
    pins: Mutex<HashMap<String, Arc<PinStore>>>,
}

impl Registry {
    /// The state for `upstreams`, in their order (an upstream's `index`): endpoints whose
    /// key the current configuration has too are kept, the others made. State no endpoint
    /// names any more is let go, and its series removed. Health checks are started,
    /// restarted with new settings, or stopped, so this runs inside a runtime.
    pub fn table(
        &self,
        upstreams: &BTreeMap<String, Arc<Upstream>>,
        metrics: &EndpointFamilies,
    ) -> Box<[UpstreamState]> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let mut next: HashMap<Key, Arc<EndpointState>> = HashMap::new();
        let mut stdio_current = self.stdio.lock().unwrap_or_else(|p| p.into_inner());
        let mut stdio_next = HashMap::new();
        let mut hints_current = self.hints.lock().unwrap_or_else(|p| p.into_inner());
        let mut hints_next: HashMap<String, Arc<HintStore>> = HashMap::new();
        let mut pins_current = self.pins.lock().unwrap_or_else(|p| p.into_inner());
        let mut pins_next: HashMap<String, Arc<PinStore>> = HashMap::new();
        let mut ordered: Vec<&Arc<Upstream>> = upstreams.values().collect();
        ordered.sort_by_key(|u| u.index);
        let table = ordered
            .into_iter()
            .map(|u| {
                let endpoints = u
                    .endpoints
                    .iter()
                    .enumerate()
                    .map(|(at, e)| endpoint_state(u, at, e, &current, &mut next, metrics))
                    .collect();
                let stdio = u.stdio.as_ref().map(|command| {
                    let key = (u.name.clone(), command.clone());
                    let up = stdio_current.get(&key).cloned().unwrap_or_else(|| {
                        StdioUpstream::new(
                            u.name.clone(),
                            command.clone(),
                            metrics.processes(&u.name),
                        )
                    });
                    // Its processes are told who they serve at their start (docs/oauth.md).
                    up.identify(u.identity.clone().map(|i| Arc::new(Tokens::new(i))));
                    stdio_next.insert(key, up.clone());
                    up
                });
                let hints = hints_current.get(&*u.name).cloned().unwrap_or_default();
                hints_next.insert(u.name.to_string(), hints.clone());
                let pins = pins_current.get(&*u.name).cloned().unwrap_or_default();
                pins_next.insert(u.name.to_string(), pins.clone());
                upstream_state(u, endpoints, stdio, hints, pins)
            })
            .collect();
        for (key, gone) in current.iter() {
            if !next.contains_key(key) {
                metrics.forget(&key.upstream, &gone.label);
                gone.stop_checking();
            }
        }
        *current = next;
        // stdio upstreams removed or changed: their sessions end, their processes close.
        for (key, gone) in stdio_current.drain() {
            if !stdio_next.contains_key(&key) {
                tracing::info!(upstream = %key.0, "stdio upstream removed or changed; closing its processes");
                super::stdio::background(async move { gone.close_all().await });
            }
        }
        *stdio_current = stdio_next;
        *hints_current = hints_next;
        *pins_current = pins_next;
        table
    }

    /// Closes every stdio upstream's processes and waits for them: the end of a shutdown.
    pub async fn close_stdio(&self) {
        let all: Vec<Arc<StdioUpstream>> = self
            .stdio
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, u)| u)
            .collect();
        futures_util::future::join_all(all.iter().map(|u| u.close_all())).await;
        super::stdio::identity::remove_dir();
    }
}

/// The state of endpoint `e` (number `at`) of upstream `u` in a new table: the one it had
/// (in `next` already, or in `current`), or a new one; its health checks started.
fn endpoint_state(
    u: &Arc<Upstream>,
    at: usize,
    e: &Endpoint,
    current: &HashMap<Key, Arc<EndpointState>>,
    next: &mut HashMap<Key, Arc<EndpointState>>,
    metrics: &EndpointFamilies,
) -> Arc<EndpointState> {
    let key = Key::of(u, e);
    let state = next
        .get(&key)
        .or_else(|| current.get(&key))
        .cloned()
        .unwrap_or_else(|| {
            Arc::new(EndpointState::new(
                e,
                u.connect_timeout,
                metrics.series(&u.name, &e.label),
            ))
        });
    if tokio::runtime::Handle::try_current().is_ok() {
        // A server that may speak 2026-07-28 is checked (and its era learnt) with
        // `server/discover`; a legacy one with `ping`.
        let check = match u.protocol {
            Protocol::Legacy => super::encode::ping(u, e),
            _ => super::encode::discover(u, e),
        };
        // Without checks, `auto` learns the era when mcpgate first needs it (reading
        // hints): it sends nothing a client did not ask for.
        match u.protocol {
            Protocol::Modern => state.set_era(Era::Modern),
            Protocol::Legacy => state.set_era(Era::Legacy),
            Protocol::Auto => {}
        }
        let learns_era = u.protocol == Protocol::Auto;
        super::health::ensure(&state, u.health, check, learns_era, u, at);
    }
    next.insert(key, state.clone());
    state
}

/// Upstream `u`'s state in a new table, around what it keeps across reloads: its
/// endpoints, stdio processes, hints and pins; its sealers made from its session keys.
fn upstream_state(
    u: &Upstream,
    endpoints: Box<[Arc<EndpointState>]>,
    stdio: Option<Arc<StdioUpstream>>,
    hints: Arc<HintStore>,
    pins: Arc<PinStore>,
) -> UpstreamState {
    let keys = if u.session_keys.is_empty() {
        std::slice::from_ref(&*PROCESS_KEY)
    } else {
        &u.session_keys
    };
    UpstreamState {
        hints,
        pins,
        endpoints,
        sealer: (!u.session_keys.is_empty()).then(|| Sealer::new(&u.name, &u.session_keys)),
        state_sealer: Arc::new(Sealer::for_purpose(&u.name, keys, Purpose::RequestState)),
        task_sealer: Arc::new(Sealer::for_purpose(&u.name, keys, Purpose::TaskId)),
        bridge_sealer: Sealer::for_purpose(&u.name, keys, Purpose::BridgedSession),
        fed_sealer: Sealer::for_purpose(&u.name, keys, Purpose::Federation),
        approval_sealer: Sealer::for_purpose(&u.name, keys, Purpose::Approval),
        // A stdio upstream's tokens are its processes' (above), not per request.
        identity: u
            .identity
            .clone()
            .filter(|_| u.stdio.is_none())
            .map(Tokens::new),
        bridge_params: Default::default(),
        stdio,
        next: AtomicUsize::new(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstreams(url: &str, timeout: &str) -> BTreeMap<String, Arc<Upstream>> {
        let text = format!(
            "[[listen]]\nname = \"m\"\naddr = \"127.0.0.1:0\"\n[upstreams.a]\nurl = \"{url}\"\nconnect_timeout = \"{timeout}\"\n[upstreams.b]\nurl = \"http://127.0.0.1:9/mcp\"\n[profiles.p]\nupstream = \"a\"\nallow = [\"*\"]\n"
        );
        crate::config::load_str(&text, "f.toml").unwrap().upstreams
    }

    /// Endpoint state is matched by address and connect timeout: the same ones are kept, a
    /// changed one is made anew, and the table follows the upstreams' order.
    #[test]
    fn pools_are_kept_by_their_settings() {
        let registry = Registry::default();
        let table = |url: &str, timeout: &str| {
            registry
                .table(&upstreams(url, timeout), &EndpointFamilies::default())
                .iter()
                .map(|u| u.endpoints[0].clone())
                .collect::<Vec<_>>()
        };
        let first = table("http://127.0.0.1:8000/mcp", "5s");
        let again = table("http://127.0.0.1:8000/other", "5s");
        assert!(
            Arc::ptr_eq(&first[0], &again[0]),
            "the path is not a connection setting"
        );
        assert!(Arc::ptr_eq(&first[1], &again[1]));
        let moved = table("http://127.0.0.1:8001/mcp", "5s");
        assert!(!Arc::ptr_eq(&again[0], &moved[0]), "another port");
        assert!(Arc::ptr_eq(&again[1], &moved[1]));
        let slower = table("http://127.0.0.1:8001/mcp", "9s");
        assert!(
            !Arc::ptr_eq(&moved[0], &slower[0]),
            "another connect timeout"
        );
        // A pool no configuration names any more is let go, not kept for later.
        let back = table("http://127.0.0.1:8000/mcp", "5s");
        assert!(!Arc::ptr_eq(&first[0], &back[0]));
    }
}
