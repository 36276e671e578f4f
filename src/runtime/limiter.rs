//! The state behind `[limits]` (docs/configuration.md, §6): rate limits are GCRA (governor), one keyed
//! limiter per rule; concurrency caps are semaphores. A rule's state lives in an `Arc`
//! that [`Limits::build`] hands to the next configuration when the rule's signature is
//! unchanged, so counters and calls in flight survive reloads. Keyed state is pruned on a
//! timer and capped per rule. A refused request is refused at once, never queued.
//!
//! With `[limits.store]` the rate rules are counted in Redis instead (`runtime::store`),
//! all of a request's keys in one round trip; this replica's own counters then serve only
//! while the store fails and `on_error = "local"`. The brute-force guard (`auth_failure`)
//! and concurrency caps always stay per replica (docs/scaling.md).

use crate::config::compile::{ConcurrencySpec, KeyKind, LimitRules, OnError, RateSpec};
use crate::config::glob::Matcher;
use crate::error::GateError;
use crate::runtime::store::{Cells, Keys, RateStore};
use governor::DefaultKeyedRateLimiter;
use governor::clock::Clock;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Keys one rule may hold before it refuses new ones (after pruning): a flood of distinct
/// client addresses or tool names cannot grow memory without bound.
pub const MAX_KEYS_PER_RULE: usize = 100_000;

/// How often (in takes per thread) a rule counts its keys against [`MAX_KEYS_PER_RULE`].
const KEY_COUNT_EVERY: u32 = 32;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RateKey {
    Token([u8; 32]),
    Profile(Arc<str>),
    TokenTool([u8; 32], Box<str>),
    Global,
    Ip(IpAddr),
}

/// A rule's state per key. Keys are hashed with governor's default, SipHash keyed per
/// process: a rule keyed by client address takes keys an attacker chooses, so the hash
/// must resist collisions made on purpose.
type Keyed = DefaultKeyedRateLimiter<RateKey>;

pub struct RateRule {
    pub spec: RateSpec,
    limiter: Keyed,
    /// Set while the rule holds [`MAX_KEYS_PER_RULE`] keys (then every take counts them).
    full: AtomicBool,
    /// For `auth_failure` rules: addresses refused until the given instant.
    blocked: Mutex<HashMap<IpAddr, Instant>>,
    /// The rule's signature, hashed: a key's name in the shared store is this hash
    /// continued with the key, so names are short, fixed-length and show nothing of the
    /// caller (no token hash, tool or address in Redis).
    seed: Sha256,
}

impl std::fmt::Debug for RateRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateRule")
            .field("signature", &self.spec.signature)
            .finish_non_exhaustive()
    }
}

impl RateRule {
    pub fn new(spec: RateSpec) -> Self {
        let mut seed = Sha256::new();
        seed.update(spec.signature.as_bytes());
        seed.update([0]);
        RateRule {
            limiter: Keyed::keyed(spec.quota),
            seed,
            spec,
            full: AtomicBool::new(false),
            blocked: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one cell for `key`; on refusal, how long until one is free.
    fn take(&self, key: &RateKey) -> Result<(), Duration> {
        // Counting the keys locks every shard of the map, so it is done on every
        // `KEY_COUNT_EVERY`th take of a thread (a rule can go over its cap by at most that
        // many keys per worker before it notices), and on every take once it is full.
        thread_local! {
            static TAKES: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
        }
        let due = TAKES.with(|t| {
            let n = t.get().wrapping_add(1);
            t.set(n);
            n % KEY_COUNT_EVERY == 0
        });
        if due || self.full.load(Ordering::Relaxed) {
            let mut keys = self.limiter.len();
            if keys >= MAX_KEYS_PER_RULE {
                self.limiter.retain_recent();
                keys = self.limiter.len();
            }
            let full = keys >= MAX_KEYS_PER_RULE;
            if full != self.full.load(Ordering::Relaxed) {
                self.full.store(full, Ordering::Relaxed);
            }
            if full {
                tracing::warn!(rule = %self.spec.signature, "rate-limit rule holds too many keys; refusing until old ones expire");
                return Err(Duration::from_secs(1));
            }
        }
        self.limiter
            .check_key(key)
            .map_err(|not_until| not_until.wait_time_from(self.limiter.clock().now()))
    }

    /// Forgets keys whose state is back to "full", and expired blocks.
    pub fn prune(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
        let now = Instant::now();
        self.blocked
            .lock()
            .expect("blocked lock")
            .retain(|_, until| *until > now);
    }

    pub fn keys(&self) -> usize {
        self.limiter.len()
    }

    /// The cell `key` takes in the shared store: its name there and the rule's rate.
    fn shared_cell(&self, prefix: &str, key: &RateKey) -> Cells {
        let mut h = self.seed.clone();
        match key {
            RateKey::Token(t) => {
                h.update(b"t");
                h.update(t);
            }
            RateKey::Profile(p) => {
                h.update(b"p");
                h.update(p.as_bytes());
            }
            RateKey::TokenTool(t, tool) => {
                h.update(b"T");
                h.update(t);
                h.update(tool.as_bytes());
            }
            RateKey::Global => h.update(b"g"),
            RateKey::Ip(ip) => {
                h.update(b"i");
                match ip {
                    IpAddr::V4(a) => h.update(a.octets()),
                    IpAddr::V6(a) => h.update(a.octets()),
                }
            }
        }
        let digest = h.finalize();
        let mut name = String::with_capacity(prefix.len() + 32);
        name.push_str(prefix);
        crate::config::token::push_hex(&mut name, &digest[..16]);
        Cells {
            key: name,
            interval_us: (self.spec.quota.replenish_interval().as_micros() as u64).max(1),
            burst: self.spec.quota.burst_size().get(),
            count: 1,
        }
    }
}

#[derive(Debug)]
pub struct ConcurrencyRule {
    pub spec: ConcurrencySpec,
    in_flight: Arc<Semaphore>,
}

impl ConcurrencyRule {
    pub fn new(spec: ConcurrencySpec) -> Self {
        ConcurrencyRule {
            in_flight: Arc::new(Semaphore::new(spec.max as usize)),
            spec,
        }
    }
}

/// The limits of one configuration, with their state.
#[derive(Debug, Default)]
pub struct Limits {
    pub rate: Vec<Arc<RateRule>>,
    pub concurrency: Vec<Arc<ConcurrencyRule>>,
    /// Per-tool deadlines, exact names first, then globs in file order.
    pub timeouts: Vec<(Matcher, String, Duration)>,
    /// Where the rate rules are counted when `[limits.store]` is set.
    pub shared: Option<Shared>,
}

/// The shared store and how this configuration uses it.
#[derive(Debug)]
pub struct Shared {
    pub store: Arc<RateStore>,
    pub on_error: OnError,
    pub prefix: String,
}

/// Who is asking, for building keys.
pub struct Caller<'a> {
    pub token: Option<&'a [u8; 32]>,
    pub profile: &'a str,
    pub ip: IpAddr,
}

fn refused(wait: Duration) -> GateError {
    GateError::RateLimited {
        retry_after: wait.max(Duration::from_millis(1)),
    }
}

impl Limits {
    /// The state for `rules`: a rule or cap whose signature `previous` has too keeps its
    /// state (counters, blocked addresses, calls in flight); the others start afresh.
    /// `store` is the connection to `rules.store`, if set (the gateway keeps it across
    /// reloads that keep its address).
    pub fn build(
        rules: &LimitRules,
        previous: Option<&Limits>,
        store: Option<Arc<RateStore>>,
    ) -> Limits {
        let rate = rules
            .rate
            .iter()
            .map(|spec| {
                previous
                    .and_then(|p| p.rate.iter().find(|r| r.spec.signature == spec.signature))
                    .cloned()
                    .unwrap_or_else(|| Arc::new(RateRule::new(spec.clone())))
            })
            .collect();
        let concurrency = rules
            .concurrency
            .iter()
            .map(|spec| {
                previous
                    .and_then(|p| {
                        p.concurrency
                            .iter()
                            .find(|c| c.spec.signature == spec.signature)
                    })
                    .cloned()
                    .unwrap_or_else(|| Arc::new(ConcurrencyRule::new(spec.clone())))
            })
            .collect();
        let shared = rules
            .store
            .as_ref()
            .zip(store)
            .map(|(settings, store)| Shared {
                store,
                on_error: settings.on_error,
                prefix: settings.prefix.clone(),
            });
        Limits {
            rate,
            concurrency,
            timeouts: rules.timeouts.clone(),
            shared,
        }
    }

    /// Before the token is even looked up: an address that failed too often is refused.
    pub fn auth_guard(&self, ip: IpAddr) -> Result<(), GateError> {
        for rule in self.rate.iter().filter(|r| r.spec.auth_failure) {
            if let Some(until) = rule.blocked.lock().expect("blocked lock").get(&ip) {
                let now = Instant::now();
                if *until > now {
                    return Err(refused(*until - now));
                }
            }
        }
        Ok(())
    }

    /// Counts a failed authentication from `ip`. Past the rate, the address is blocked,
    /// and the refusal to answer this attempt with is returned.
    pub fn auth_failed(&self, ip: IpAddr) -> Option<GateError> {
        let mut refusal = None;
        for rule in self.rate.iter().filter(|r| r.spec.auth_failure) {
            if let Err(wait) = rule.take(&RateKey::Ip(ip)) {
                let mut blocked = rule.blocked.lock().expect("blocked lock");
                if blocked.len() < MAX_KEYS_PER_RULE {
                    blocked.insert(ip, Instant::now() + wait);
                }
                refusal = Some(refused(wait));
            }
        }
        refusal
    }

    /// Applies every rate rule and concurrency cap to one request whose tools/call
    /// elements name `tools`. The permits returned must live as long as the answer.
    pub async fn check(
        &self,
        caller: &Caller<'_>,
        tools: &[&str],
    ) -> Result<Vec<OwnedSemaphorePermit>, GateError> {
        match &self.shared {
            // Boxed: only a limiter with a shared store carries its round trip's room.
            Some(shared) => Box::pin(self.take_shared(shared, caller, tools)).await?,
            None => self.take_local(caller, tools)?,
        }
        let mut permits = Vec::new();
        for rule in &self.concurrency {
            let n = tools.iter().filter(|t| rule.spec.tools.matches(t)).count() as u32;
            if n == 0 {
                continue;
            }
            // Refused at once, never queued: a single-writer tool must not pile up.
            match rule.in_flight.clone().try_acquire_many_owned(n) {
                Ok(p) => permits.push(p),
                Err(_) => {
                    return Err(GateError::ConcurrencyLimited { max: rule.spec.max });
                }
            }
        }
        Ok(permits)
    }

    /// Calls `take` with each rate rule's key for the request, once per counted call:
    /// per-tool rules (and per-tool keys) count each matching tools/call, the others the
    /// request once. A rule whose key the caller lacks (a token rule without a token) does
    /// not apply. `auth_failure` rules count elsewhere.
    fn each_key(
        &self,
        caller: &Caller,
        tools: &[&str],
        mut take: impl FnMut(&RateRule, RateKey) -> Result<(), GateError>,
    ) -> Result<(), GateError> {
        for rule in self.rate.iter().filter(|r| !r.spec.auth_failure) {
            let key = |tool: Option<&str>| -> Option<RateKey> {
                Some(match rule.spec.key {
                    KeyKind::Token => RateKey::Token(*caller.token?),
                    KeyKind::TokenTool => {
                        RateKey::TokenTool(*caller.token?, tool.unwrap_or("").into())
                    }
                    KeyKind::Profile => RateKey::Profile(caller.profile.into()),
                    KeyKind::Global => RateKey::Global,
                    KeyKind::ClientIp => RateKey::Ip(caller.ip),
                })
            };
            match (&rule.spec.tools, rule.spec.key) {
                (Some(_), _) | (None, KeyKind::TokenTool) => {
                    for tool in tools
                        .iter()
                        .filter(|t| rule.spec.tools.as_ref().is_none_or(|m| m.matches(t)))
                    {
                        if let Some(k) = key(Some(tool)) {
                            take(rule, k)?;
                        }
                    }
                }
                (None, _) => {
                    if let Some(k) = key(None) {
                        take(rule, k)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// This replica's own counters.
    fn take_local(&self, caller: &Caller, tools: &[&str]) -> Result<(), GateError> {
        self.each_key(caller, tools, |rule, key| rule.take(&key).map_err(refused))
    }

    /// The shared store's counters: every key of the request in one round trip, all
    /// taken or none. When the store cannot answer, `on_error` decides.
    async fn take_shared(
        &self,
        shared: &Shared,
        caller: &Caller<'_>,
        tools: &[&str],
    ) -> Result<(), GateError> {
        let mut cells = Keys::new();
        self.each_key(caller, tools, |rule, key| {
            let cell = rule.shared_cell(&shared.prefix, &key);
            match cells.iter_mut().find(|c| c.key == cell.key) {
                Some(same) => same.count += 1,
                None => cells.push(cell),
            }
            Ok(())
        })?;
        if cells.is_empty() {
            return Ok(());
        }
        match shared.store.take(cells, shared.on_error.name()).await {
            Ok(None) => Ok(()),
            Ok(Some(wait)) => Err(refused(wait)),
            Err(_) => match shared.on_error {
                OnError::Local => self.take_local(caller, tools),
                OnError::Deny => Err(GateError::LimitStoreUnavailable),
                OnError::Allow => Ok(()),
            },
        }
    }

    /// The deadline of a request calling `tools`: the longest of their configured
    /// deadlines, so no call in a batch is cut early; `default` when none is configured.
    pub fn timeout_for(&self, tools: &[&str], default: Duration) -> Duration {
        let per_tool: Vec<Duration> = tools
            .iter()
            .filter_map(|t| {
                self.timeouts
                    .iter()
                    .find(|(m, _, _)| m.matches(t))
                    .map(|(_, _, d)| *d)
            })
            .collect();
        if per_tool.len() < tools.len() || per_tool.is_empty() {
            per_tool
                .into_iter()
                .chain([default])
                .max()
                .unwrap_or(default)
        } else {
            per_tool.into_iter().max().unwrap_or(default)
        }
    }

    pub fn prune(&self) {
        for r in &self.rate {
            r.prune();
        }
    }
}

#[cfg(test)]
mod tests;
