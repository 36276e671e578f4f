//! The running gateway's shared state: the configuration in force with the runtime state
//! built for it ([`Live`]: swapped atomically on reload; a request keeps the one it
//! started with), metrics, open streams, TLS certificate stores, readiness. State that
//! outlives a configuration (upstream pools, rate-limit counters) is kept here and matched
//! to the next configuration by its settings. `reload` is the one path every trigger
//! (SIGHUP, file change, `POST /reload`) goes through.

use crate::config::{self, Snapshot, Upstream};
use crate::http::tls::{CertExpiry, CertStore};
use crate::mcp::list_changes::{list_changes, watch_sunsets};
use crate::oauth::{OAuthMetrics, Verifier};
use crate::observe::audit::{Audit, AuditError};
use crate::observe::metrics::Metrics;
use crate::runtime::limiter::Limits;
use crate::runtime::store::{RateStore, StoreMetrics};
use crate::runtime::streams::StreamRegistry;
use crate::upstream::endpoint::EndpointFamilies;
use crate::upstream::registry::{Registry, UpstreamState};
use arc_swap::ArcSwap;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

mod federation;
mod pins;
mod status;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::SystemTime;

/// A configuration and the runtime state built for it: its upstreams' pools (by
/// `Upstream::index`) and its limits' state. It reads as its `Snapshot` (`Deref`), so the
/// request path names configuration fields directly.
pub struct Live {
    pub config: Arc<Snapshot>,
    /// The state of `config.limits`.
    pub limiter: Limits,
    upstreams: Box<[UpstreamState]>,
    /// The token verifier of `config.oauth`: kept across reloads that keep its settings
    /// (its keys and verified tokens with it).
    pub verifier: Option<Arc<Verifier>>,
    /// Per upstream (by `Upstream::index`), its token exchanges when its identity is
    /// exchanged (docs/oauth.md).
    pub exchanges: Box<[Option<crate::oauth::exchange::Exchanges>]>,
}

impl Live {
    fn build(
        config: Snapshot,
        registry: &Registry,
        series: &Series,
        previous: Option<&Live>,
    ) -> Live {
        let verifier = config.oauth.as_ref().map(|settings| {
            match previous.and_then(|p| p.verifier.as_ref()) {
                // Grants are read from the configuration on each request, not from here.
                Some(v) if v.settings.identity == settings.identity => v.clone(),
                _ => Verifier::start(settings.clone(), series.oauth.clone()),
            }
        });
        // The connections to Redis outlive a reload that keeps their address.
        let store = config.limits.store.as_ref().map(|settings| {
            match previous.and_then(|p| p.limiter.shared.as_ref()) {
                Some(s) if s.store.settings.identity == settings.identity => s.store.clone(),
                _ => RateStore::start(settings.clone(), series.store.clone()),
            }
        });
        let mut exchanges: Vec<Option<crate::oauth::exchange::Exchanges>> =
            (0..config.upstreams.len()).map(|_| None).collect();
        for u in config.upstreams.values() {
            if let Some(e) = &u.exchange {
                exchanges[u.index] = Some(crate::oauth::exchange::Exchanges::new(e.clone()));
            }
        }
        Live {
            exchanges: exchanges.into(),
            upstreams: registry.table(&config.upstreams, &series.endpoints),
            limiter: Limits::build(&config.limits, previous.map(|p| &p.limiter), store),
            verifier,
            config: Arc::new(config),
        }
    }

    /// The runtime state of `upstream`: its endpoints (pools, order, health) and sealer.
    pub fn upstream(&self, upstream: &Upstream) -> &UpstreamState {
        &self.upstreams[upstream.index]
    }
}

impl std::ops::Deref for Live {
    type Target = Snapshot;

    fn deref(&self) -> &Snapshot {
        &self.config
    }
}

/// A thread's own handle on a configuration snapshot. The snapshot is shared by every
/// thread, and so is the count in its `Arc`: two workers cloning and dropping that per
/// request bounce its cache line between their cores. Each thread wraps it once per
/// reload in an `Arc` of its own and clones that instead.
#[derive(Clone)]
#[allow(clippy::redundant_allocation)] // The second allocation is the point: its own count.
pub struct LiveHere(Arc<Arc<Live>>);

impl std::ops::Deref for LiveHere {
    type Target = Arc<Live>;

    fn deref(&self) -> &Arc<Live> {
        &self.0
    }
}

pub struct Gateway {
    live: ArcSwap<Live>,
    /// Endpoint state (pools, health), kept across reloads that keep an endpoint's settings.
    pools: Registry,
    /// Which gateway this is, for the per-thread cache of [`Gateway::live_here`].
    id: u64,
    /// Moved on every swap of `live`, after it.
    generation: AtomicU64,
    pub metrics: Metrics,
    /// The families the gateway's components count into, registered in `metrics`.
    series: Series,
    pub streams: Arc<StreamRegistry>,
    /// Questions bridged legacy clients were asked and have not answered yet.
    pub waits: Arc<crate::runtime::waits::Waits>,
    /// Calls waiting for an operator, approvals used, sessions that can be asked (docs/approvals.md).
    pub approvals: Arc<crate::runtime::approvals::Approvals>,
    /// Calls of 2026-07-28 clients held at legacy servers until their retry.
    pub held: Arc<crate::runtime::held::Held>,
    /// The log levels and subscriptions of bridged legacy sessions.
    pub legacy_sessions: Arc<crate::runtime::legacy_sessions::LegacySessions>,
    /// Federation's room: its profiles' directories of names and legacy clients' member
    /// sessions (docs/federation.md).
    pub federation: federation::Federating,
    /// Server certificate of each TLS listener, by listener name.
    pub certs: HashMap<String, Arc<CertStore>>,
    config_path: Option<PathBuf>,
    /// The audit trail, when `[audit]` is configured (fixed for the process's life).
    pub audit: Option<Audit>,
    audit_writer: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    draining: AtomicBool,
    reload_lock: tokio::sync::Mutex<()>,
    /// The task that tells GET streams when a deprecated tool's sunset passes.
    sunsets: Tasks,
    /// The tasks that read what upstreams say of their tools, for annotation rules.
    hint_fetches: Tasks,
    /// Pinning's tasks and series (docs/pinning.md).
    pinning: pins::Pinning,
    /// Itself, for the tasks it starts.
    me: std::sync::Weak<Gateway>,
    started: SystemTime,
    /// The last reload's time, trigger and error (for the status page).
    last_reload: std::sync::Mutex<Option<ReloadNote>>,
    /// Spans of requests, when `[telemetry]` exports them.
    pub tracer: Option<crate::observe::trace::Tracer>,
}

/// What the status page says of the last reload.
struct ReloadNote {
    at: SystemTime,
    trigger: String,
    error: Option<String>,
}

impl Gateway {
    /// `config_path`: the file reloads read; `None` for an embedded configuration. Opens
    /// the audit file, so it must run inside the runtime; fails if that file cannot be opened.
    pub fn new(snapshot: Snapshot, config_path: Option<PathBuf>) -> Result<Arc<Self>, AuditError> {
        let mut metrics = Metrics::new();
        let series = Series::register(metrics.registry());
        let streams = StreamRegistry::registered(metrics.registry());
        let federation = federation::Federating::registered(metrics.registry());
        let audit_dropped = Audit::register(metrics.registry());
        let pinning = pins::Pinning::registered(metrics.registry());
        let approvals = Arc::new(crate::runtime::approvals::Approvals::registered(
            metrics.registry(),
        ));
        let spans = crate::observe::trace::register(metrics.registry());
        let certs = snapshot
            .listeners
            .iter()
            .filter_map(|l| {
                l.tls
                    .as_ref()
                    .map(|t| (l.name.to_string(), Arc::new(CertStore::new(t.key.clone()))))
            })
            .collect();
        let (audit, audit_writer) = match &snapshot.audit {
            Some(settings) => {
                let (audit, task) = Audit::start(settings.clone(), audit_dropped)?;
                (Some(audit), Some(task))
            }
            None => (None, None),
        };
        static IDS: AtomicU64 = AtomicU64::new(0);
        let pools = Registry::default();
        let live = Live::build(snapshot, &pools, &series, None);
        let sunsets = watch_sunsets(&live.config, &streams);
        let hint_fetches = fetch_hints(&live);
        series.certs.record(&live.config.listeners);
        let tracer = live
            .config
            .telemetry
            .as_ref()
            .map(|t| crate::observe::trace::Tracer::start(t, spans));
        let live = Arc::new(live);
        Ok(Arc::new_cyclic(|me| Gateway {
            pinning: {
                pinning.watch(me, &live);
                pinning
            },
            me: me.clone(),
            live: ArcSwap::new(live),
            pools,
            id: IDS.fetch_add(1, Ordering::Relaxed),
            generation: AtomicU64::new(0),
            metrics,
            series,
            streams,
            waits: Default::default(),
            held: Default::default(),
            approvals,
            legacy_sessions: Default::default(),
            federation,
            certs,
            config_path,
            audit,
            audit_writer: std::sync::Mutex::new(audit_writer),
            draining: AtomicBool::new(false),
            reload_lock: tokio::sync::Mutex::new(()),
            sunsets: Tasks::of(sunsets),
            hint_fetches: Tasks::of(hint_fetches),
            started: SystemTime::now(),
            last_reload: std::sync::Mutex::new(None),
            tracer,
        }))
    }

    /// The tasks of the configuration now in force that watch pinned upstreams; after a
    /// reload from `old`, the clients hear of the approvals that changed what they see.
    fn rewatch_pins(&self, old: &Live, next: &Arc<Live>) {
        self.pinning.watch(&self.me, next);
        for u in next.config.upstreams.values() {
            self.count_pins(next, &u.name);
            let was = old.config.upstreams.get(&*u.name).map(|o| o.pin);
            let approvals_changed = old
                .config
                .pins
                .of_upstream(&u.name)
                .ne(next.config.pins.of_upstream(&u.name));
            if u.pin == crate::config::pins::PinMode::Enforce
                && (approvals_changed || was != Some(u.pin))
            {
                use crate::config::pins::PinKind;
                self.tell_lists(next, &u.name, &[PinKind::Tool, PinKind::Prompt]);
            }
        }
    }

    /// Closes the processes of stdio upstreams (stdin, SIGTERM, SIGKILL) and waits for
    /// them: a step of shutdown, after the listeners drained.
    pub async fn close_stdio(&self) {
        self.pools.close_stdio().await;
    }

    /// Writes every queued audit record and syncs the file; the last step of a shutdown.
    pub async fn close_audit(&self) {
        if let Some(a) = &self.audit {
            a.close().await;
        }
        let task = self.audit_writer.lock().expect("audit writer lock").take();
        if let Some(t) = task {
            let _ = t.await;
        }
    }

    /// The configuration a new request should use, for its whole life.
    pub fn live(&self) -> Arc<Live> {
        self.live.load_full()
    }

    /// The gateway itself, for work that outlives a request's stages (a call held for its
    /// client's approval, docs/approvals.md). `None` while it is being dropped.
    pub fn arc(&self) -> Option<Arc<Gateway>> {
        self.me.upgrade()
    }

    /// The same, through this thread's own handle on it (see [`LiveHere`]): what the request
    /// path uses, so that taking and dropping it per request writes no count the other
    /// worker threads share.
    pub fn live_here(&self) -> LiveHere {
        thread_local! {
            /// Per gateway: the generation and the handle this thread last made.
            static MADE: RefCell<Vec<(u64, u64, LiveHere)>> = const { RefCell::new(Vec::new()) };
        }
        let generation = self.generation.load(Ordering::Acquire);
        let fresh = || LiveHere(Arc::new(self.live.load_full()));
        MADE.try_with(|made| {
            let mut made = made.borrow_mut();
            match made.iter_mut().find(|(id, _, _)| *id == self.id) {
                Some((_, seen, here)) => {
                    if *seen != generation {
                        *seen = generation;
                        *here = fresh();
                    }
                    here.clone()
                }
                None => {
                    let here = fresh();
                    made.push((self.id, generation, here.clone()));
                    here
                }
            }
        })
        .unwrap_or_else(|_| fresh())
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Re-reads, validates and compiles the configuration off the request path, then swaps
    /// it in. On any error the running configuration stays, and the error (with its file
    /// position) is returned and logged.
    pub async fn reload(&self, trigger: &str) -> Result<(), ReloadError> {
        let _one_at_a_time = self.reload_lock.lock().await;
        let result = self.try_reload().await;
        self.series.count_reload(result.is_ok());
        *self.last_reload.lock().unwrap_or_else(|p| p.into_inner()) = Some(ReloadNote {
            at: SystemTime::now(),
            trigger: trigger.to_string(),
            error: result.as_ref().err().map(ToString::to_string),
        });
        match &result {
            Ok(revoked) => {
                tracing::info!(trigger, revoked_streams = revoked, "configuration reloaded");
            }
            Err(e) => {
                tracing::error!(trigger, error = %e, "configuration reload failed; the previous configuration keeps serving")
            }
        }
        result.map(|_| ())
    }

    async fn try_reload(&self) -> Result<usize, ReloadError> {
        let path = self.config_path.clone().ok_or(ReloadError::Embedded)?;
        let current = self.live();
        let next = tokio::task::spawn_blocking(move || config::load(&path)).await??;
        config::restart::restart_needed(&current, &next).map_err(ReloadError::RestartRequired)?;
        for section in config::restart::applied_at_restart(&current, &next) {
            tracing::warn!("{section} changes take effect at the next restart");
        }
        for l in &next.listeners {
            if let (Some(t), Some(store)) = (&l.tls, self.certs.get(&*l.name)) {
                store.replace(t.key.clone());
            }
        }
        for w in &next.warnings {
            tracing::warn!("{w}");
        }
        self.series.certs.record(&next.listeners);
        let next = Arc::new(Live::build(next, &self.pools, &self.series, Some(&current)));
        self.live.store(next.clone());
        self.generation.fetch_add(1, Ordering::Release);
        // What a profile may list changed: its clients hear of it (docs/policy.md).
        for (profile, method) in list_changes(&current, &next) {
            let told = self.streams.notify(&profile, method);
            tracing::debug!(%profile, method, streams = told, "list change sent");
        }
        self.rewatch_pins(&current, &next);
        self.hint_fetches.replace(fetch_hints(&next));
        self.sunsets
            .replace(watch_sunsets(&next.config, &self.streams));
        // Streams of tokens that are gone or expired end now, and so does every call held
        // for such a caller's answer: an approval, a question, a retry (docs/operations.md).
        let now = SystemTime::now();
        let valid = |hash: &[u8; 32]| next.tokens.get(hash).is_some_and(|t| t.valid_at(now));
        let held = self.held.revoke(valid);
        if held > 0 {
            tracing::info!(
                calls = held,
                "calls held for a 2026-07-28 client's retry ended: their caller's token was revoked"
            );
        }
        Ok(self.streams.revoke(valid) + held)
    }
}

/// Each configuration's tasks that read what upstreams say of their tools.
fn fetch_hints(live: &Live) -> Vec<tokio::task::AbortHandle> {
    crate::upstream::hints::start_fetching(&live.config, |u| {
        let state = live.upstream(u);
        (&state.endpoints[..], &state.hints, &state.pins)
    })
}

/// Tasks that serve the configuration in force: replaced, the old ones aborted, when a
/// reload brings another.
#[derive(Default)]
struct Tasks(std::sync::Mutex<Vec<tokio::task::AbortHandle>>);

impl Tasks {
    fn of(tasks: impl IntoIterator<Item = tokio::task::AbortHandle>) -> Tasks {
        Tasks(std::sync::Mutex::new(tasks.into_iter().collect()))
    }

    fn replace(&self, tasks: impl IntoIterator<Item = tokio::task::AbortHandle>) {
        let next = tasks.into_iter().collect();
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for gone in std::mem::replace(&mut *held, next) {
            gone.abort();
        }
    }
}

/// The families the gateway's components count into, each registered by its component.
struct Series {
    endpoints: EndpointFamilies,
    oauth: OAuthMetrics,
    store: StoreMetrics,
    certs: CertExpiry,
    reloads: Family<ReloadLabels, Counter>,
    last_reload_success: Gauge,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    result: &'static str,
}

impl Series {
    fn register(registry: &mut prometheus_client::registry::Registry) -> Series {
        let reloads = Family::default();
        registry.register(
            "config_reload",
            "Configuration reloads by result",
            reloads.clone(),
        );
        let last_reload_success = Gauge::default();
        registry.register(
            "config_last_reload_success",
            "1 if the last reload succeeded, 0 if it failed",
            last_reload_success.clone(),
        );
        last_reload_success.set(1);
        Series {
            endpoints: EndpointFamilies::register(registry),
            oauth: OAuthMetrics::register(registry),
            store: StoreMetrics::register(registry),
            certs: CertExpiry::register(registry),
            reloads,
            last_reload_success,
        }
    }

    fn count_reload(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.reloads.get_or_create(&ReloadLabels { result }).inc();
        self.last_reload_success.set(i64::from(ok));
    }
}

/// Why a reload was not applied; the running configuration keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("this gateway runs an embedded configuration; there is no file to reload")]
    Embedded,
    #[error("{0}")]
    Config(#[from] config::ConfigError),
    #[error("restart required: {0}; the reload was not applied")]
    RestartRequired(&'static str),
    #[error("reload task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl crate::observe::admin::Admin for Gateway {
    type Error = ReloadError;

    fn draining(&self) -> bool {
        self.is_draining()
    }

    fn metrics(&self) -> String {
        self.approvals.observe_waiting();
        self.metrics.render()
    }

    fn status(&self) -> crate::observe::status::Status {
        Gateway::status(self)
    }

    async fn reload(&self, trigger: &'static str) -> Result<(), ReloadError> {
        Gateway::reload(self, trigger).await
    }

    fn jwks(&self) -> Option<bytes::Bytes> {
        self.live().identity_jwks.as_ref().map(|j| j.json.clone())
    }

    fn decide(&self, id: &str, approve: bool, by: String) -> bool {
        let decision = crate::runtime::approvals::Decision { approve, by };
        self.approvals.decide(id, decision).is_ok()
    }
}

impl config::watch::Reload for Gateway {
    type Error = ReloadError;

    fn files(&self) -> Vec<PathBuf> {
        self.live().files.clone()
    }

    async fn reload(&self, trigger: &'static str) -> Result<(), ReloadError> {
        Gateway::reload(self, trigger).await
    }
}
