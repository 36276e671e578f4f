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
            Some(shared) => self.take_shared(shared, caller, tools).await?,
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
mod tests {
    use super::*;

    use crate::config::compile::parse_rate;
    use futures_util::FutureExt;

    /// `Limits::check` without a store never waits.
    fn check(
        limits: &Limits,
        caller: &Caller,
        tools: &[&str],
    ) -> Result<Vec<OwnedSemaphorePermit>, GateError> {
        limits
            .check(caller, tools)
            .now_or_never()
            .expect("no store: answered at once")
    }

    fn spec(key: KeyKind, rate: &str, tools: Option<&[&str]>) -> RateSpec {
        RateSpec {
            signature: format!("{}|{rate}|{tools:?}", key.name()),
            key,
            tools: tools.map(|t| Matcher::new(t.iter().copied())),
            auth_failure: false,
            quota: parse_rate(rate, None).unwrap(),
            rate_text: rate.into(),
        }
    }

    fn rule(key: KeyKind, rate: &str, tools: Option<&[&str]>) -> Arc<RateRule> {
        Arc::new(RateRule::new(spec(key, rate, tools)))
    }

    #[test]
    fn token_rule_counts_per_token() {
        let limits = Limits {
            rate: vec![rule(KeyKind::Token, "2/m", None)],
            ..Default::default()
        };
        let profile = "p";
        let a = Caller {
            token: Some(&[1; 32]),
            profile,
            ip: [127, 0, 0, 1].into(),
        };
        let b = Caller {
            token: Some(&[2; 32]),
            profile,
            ip: [127, 0, 0, 1].into(),
        };
        assert!(check(&limits, &a, &[]).is_ok());
        assert!(check(&limits, &a, &[]).is_ok());
        let err = check(&limits, &a, &[]).unwrap_err();
        assert!(
            matches!(err, GateError::RateLimited { retry_after } if retry_after > Duration::from_secs(20))
        );
        assert!(
            check(&limits, &b, &[]).is_ok(),
            "other tokens are unaffected"
        );
        // No token (auth = "none"): a token rule does not apply.
        let open = Caller {
            token: None,
            profile,
            ip: [127, 0, 0, 1].into(),
        };
        for _ in 0..5 {
            assert!(check(&limits, &open, &[]).is_ok());
        }
    }

    /// A rule refuses new keys once it holds `MAX_KEYS_PER_RULE` that are not back to
    /// full, noticing within `KEY_COUNT_EVERY` takes; keys it already holds still count.
    #[test]
    fn a_rule_stops_taking_new_keys_at_its_cap() {
        let r = rule(KeyKind::Token, "1/h", None);
        let key = |n: usize| {
            let mut t = [0u8; 32];
            t[..8].copy_from_slice(&n.to_le_bytes());
            RateKey::Token(t)
        };
        for n in 0..MAX_KEYS_PER_RULE {
            assert!(r.take(&key(n)).is_ok());
        }
        let refused = (MAX_KEYS_PER_RULE..MAX_KEYS_PER_RULE + 2 * KEY_COUNT_EVERY as usize)
            .position(|n| r.take(&key(n)).is_err())
            .expect("refused once full");
        assert!(refused <= KEY_COUNT_EVERY as usize, "{refused}");
        assert!(r.keys() <= MAX_KEYS_PER_RULE + KEY_COUNT_EVERY as usize);
        // Every take is checked from now on.
        assert_eq!(r.take(&key(usize::MAX)), Err(Duration::from_secs(1)));
    }

    #[test]
    fn tool_rules_count_only_their_tools() {
        let limits = Limits {
            rate: vec![rule(KeyKind::TokenTool, "1/m", Some(&["delete_*"]))],
            ..Default::default()
        };
        let profile = "p";
        let a = Caller {
            token: Some(&[1; 32]),
            profile,
            ip: [127, 0, 0, 1].into(),
        };
        for _ in 0..3 {
            assert!(check(&limits, &a, &["get_document"]).is_ok());
        }
        assert!(check(&limits, &a, &["delete_document"]).is_ok());
        assert!(check(&limits, &a, &["delete_document"]).is_err());
        assert!(
            check(&limits, &a, &["delete_other"]).is_ok(),
            "a separate key per tool"
        );
    }

    #[test]
    fn concurrency_refuses_at_once_and_frees_on_drop() {
        let limits = Limits {
            concurrency: vec![Arc::new(ConcurrencyRule::new(ConcurrencySpec {
                signature: "c".into(),
                tools: Matcher::new(["ingest"]),
                max: 1,
            }))],
            ..Default::default()
        };
        let profile = "p";
        let c = Caller {
            token: None,
            profile,
            ip: [127, 0, 0, 1].into(),
        };
        let held = check(&limits, &c, &["ingest"]).unwrap();
        assert!(matches!(
            check(&limits, &c, &["ingest"]),
            Err(GateError::ConcurrencyLimited { max: 1 })
        ));
        assert!(check(&limits, &c, &["other"]).is_ok());
        drop(held);
        assert!(check(&limits, &c, &["ingest"]).is_ok());
    }

    #[test]
    fn per_tool_timeouts() {
        let limits = Limits {
            timeouts: vec![
                (
                    Matcher::new(["search"]),
                    "search".into(),
                    Duration::from_secs(10),
                ),
                (
                    Matcher::new(["ingest"]),
                    "ingest".into(),
                    Duration::from_secs(120),
                ),
            ],
            ..Default::default()
        };
        let d = Duration::from_secs(60);
        assert_eq!(limits.timeout_for(&["search"], d), Duration::from_secs(10));
        assert_eq!(limits.timeout_for(&["ingest"], d), Duration::from_secs(120));
        assert_eq!(limits.timeout_for(&["other"], d), d);
        assert_eq!(limits.timeout_for(&[], d), d);
        assert_eq!(
            limits.timeout_for(&["search", "other"], d),
            d,
            "the longest wins in a batch"
        );
    }

    /// Rules whose signature is unchanged keep their state across a rebuild; a changed
    /// one starts afresh.
    #[test]
    fn unchanged_rules_keep_their_state() {
        let text = |rate: &str| {
            format!(
                "[[listen]]\nname = \"m\"\naddr = \"127.0.0.1:0\"\n[upstreams.u]\nurl = \"http://127.0.0.1:9/mcp\"\n[profiles.p]\nupstream = \"u\"\nallow = [\"*\"]\n[limits]\nrate = [ {{ key = \"token\", rate = \"{rate}\" }}, {{ key = \"global\", rate = \"5/s\" }} ]\nconcurrency = [ {{ tools = [\"ingest\"], max_in_flight = 1 }} ]\n"
            )
        };
        let load = |rate: &str| crate::config::load_str(&text(rate), "f.toml").unwrap();
        let first = Limits::build(&load("20/s").limits, None, None);
        let second = Limits::build(&load("20/s").limits, Some(&first), None);
        assert!(Arc::ptr_eq(&first.rate[0], &second.rate[0]));
        assert!(Arc::ptr_eq(&first.concurrency[0], &second.concurrency[0]));
        let third = Limits::build(&load("30/s").limits, Some(&second), None);
        assert!(!Arc::ptr_eq(&second.rate[0], &third.rate[0]));
        assert!(Arc::ptr_eq(&second.rate[1], &third.rate[1]));
    }
}
