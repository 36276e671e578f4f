//! The running gateway's shared state: the configuration in force with the runtime state
//! built for it ([`Live`]: swapped atomically on reload; a request keeps the one it
//! started with), metrics, open streams, TLS certificate stores, readiness. State that
//! outlives a configuration (upstream pools, rate-limit counters) is kept here and matched
//! to the next configuration by its settings. `reload` is the one path every trigger
//! (SIGHUP, file change, `POST /reload`) goes through.

use crate::config::{self, Snapshot, Upstream};
use crate::http::tls::CertStore;
use crate::oauth::{OAuthMetrics, Verifier};
use crate::observe::audit::{Audit, AuditError};
use crate::observe::metrics::EndpointLabels;
use crate::observe::metrics::{Metrics, ResultLabels};
use crate::runtime::limiter::Limits;
use crate::runtime::store::{RateStore, StoreMetrics};
use crate::runtime::streams::StreamRegistry;
use crate::upstream::endpoint::EndpointMetrics;
use crate::upstream::registry::{EndpointSeries, Registry, UpstreamState};
use arc_swap::ArcSwap;

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
}

impl Live {
    fn build(
        config: Snapshot,
        registry: &Registry,
        metrics: &Metrics,
        previous: Option<&Live>,
    ) -> Live {
        let verifier = config.oauth.as_ref().map(|settings| {
            match previous.and_then(|p| p.verifier.as_ref()) {
                // Grants are read from the configuration on each request, not from here.
                Some(v) if v.settings.identity == settings.identity => v.clone(),
                _ => Verifier::start(settings.clone(), oauth_metrics(metrics)),
            }
        });
        // The connections to Redis outlive a reload that keeps their address.
        let store = config.limits.store.as_ref().map(|settings| {
            match previous.and_then(|p| p.limiter.shared.as_ref()) {
                Some(s) if s.store.settings.identity == settings.identity => s.store.clone(),
                _ => RateStore::start(settings.clone(), store_metrics(metrics)),
            }
        });
        Live {
            upstreams: registry.table(&config.upstreams, metrics),
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
pub struct Here(Arc<Arc<Live>>);

impl std::ops::Deref for Here {
    type Target = Arc<Live>;

    fn deref(&self) -> &Arc<Live> {
        &self.0
    }
}

pub struct Gateway {
    snapshot: ArcSwap<Live>,
    /// Endpoint state (pools, health), kept across reloads that keep an endpoint's settings.
    pools: Registry,
    /// Which gateway this is, for the per-thread cache of [`Gateway::snapshot_here`].
    id: u64,
    /// Moved on every swap of `snapshot`, after it.
    generation: AtomicU64,
    pub metrics: Metrics,
    pub streams: Arc<StreamRegistry>,
    /// Server certificate of each TLS listener, by listener name.
    pub certs: HashMap<String, Arc<CertStore>>,
    config_path: Option<PathBuf>,
    /// The audit trail, when `[audit]` is configured (fixed for the process's life).
    pub audit: Option<Audit>,
    audit_writer: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    draining: AtomicBool,
    reload_lock: tokio::sync::Mutex<()>,
    /// The task that tells GET streams when a deprecated tool's sunset passes.
    sunsets: std::sync::Mutex<Option<tokio::task::AbortHandle>>,
    /// The tasks that read what upstreams say of their tools, for annotation rules.
    hint_fetches: std::sync::Mutex<Vec<tokio::task::AbortHandle>>,
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
        let metrics = Metrics::new();
        let streams = StreamRegistry::new(metrics.open_streams.clone());
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
                let (audit, task) = Audit::start(settings.clone(), metrics.audit_dropped.clone())?;
                (Some(audit), Some(task))
            }
            None => (None, None),
        };
        static IDS: AtomicU64 = AtomicU64::new(0);
        let pools = Registry::default();
        let live = Live::build(snapshot, &pools, &metrics, None);
        let sunsets = watch_sunsets(&live.config, &streams);
        let hint_fetches = fetch_hints(&live);
        show_cert_expiry(&metrics, &live.config);
        let tracer = live
            .config
            .telemetry
            .as_ref()
            .map(|t| crate::observe::trace::Tracer::start(t, metrics.trace_spans.clone()));
        Ok(Arc::new(Gateway {
            snapshot: ArcSwap::from_pointee(live),
            pools,
            id: IDS.fetch_add(1, Ordering::Relaxed),
            generation: AtomicU64::new(0),
            metrics,
            streams,
            certs,
            config_path,
            audit,
            audit_writer: std::sync::Mutex::new(audit_writer),
            draining: AtomicBool::new(false),
            reload_lock: tokio::sync::Mutex::new(()),
            sunsets: std::sync::Mutex::new(sunsets),
            hint_fetches: std::sync::Mutex::new(hint_fetches),
            started: SystemTime::now(),
            last_reload: std::sync::Mutex::new(None),
            tracer,
        }))
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
    pub fn snapshot(&self) -> Arc<Live> {
        self.snapshot.load_full()
    }

    /// The same, through this thread's own handle on it (see [`Here`]): what the request
    /// path uses, so that taking and dropping it per request writes no count the other
    /// worker threads share.
    pub fn snapshot_here(&self) -> Here {
        thread_local! {
            /// Per gateway: the generation and the handle this thread last made.
            static MADE: RefCell<Vec<(u64, u64, Here)>> = const { RefCell::new(Vec::new()) };
        }
        let generation = self.generation.load(Ordering::Acquire);
        let fresh = || Here(Arc::new(self.snapshot.load_full()));
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
        let label = if result.is_ok() { "ok" } else { "error" };
        self.metrics
            .reloads
            .get_or_create(&ResultLabels { result: label })
            .inc();
        self.metrics
            .last_reload_success
            .set(i64::from(result.is_ok()));
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
        let current = self.snapshot();
        let next = tokio::task::spawn_blocking(move || config::load(&path)).await??;
        restart_needed(&current, &next)?;
        if current.log != next.log {
            tracing::warn!("[log] changes take effect at the next restart");
        }
        if current.telemetry != next.telemetry {
            tracing::warn!("[telemetry] changes take effect at the next restart");
        }
        for l in &next.listeners {
            if let (Some(t), Some(store)) = (&l.tls, self.certs.get(&*l.name)) {
                store.replace(t.key.clone());
            }
        }
        for w in &next.warnings {
            tracing::warn!("{w}");
        }
        show_cert_expiry(&self.metrics, &next);
        let next = Arc::new(Live::build(
            next,
            &self.pools,
            &self.metrics,
            Some(&current),
        ));
        self.snapshot.store(next.clone());
        self.generation.fetch_add(1, Ordering::Release);
        // What a profile may list changed: its clients hear of it (SPEC §12).
        for (profile, method) in list_changes(&current, &next) {
            let told = self.streams.notify(&profile, method);
            tracing::debug!(%profile, method, streams = told, "list change sent");
        }
        let fetches = fetch_hints(&next);
        for old in std::mem::replace(
            &mut *self.hint_fetches.lock().unwrap_or_else(|p| p.into_inner()),
            fetches,
        ) {
            old.abort();
        }
        let watcher = watch_sunsets(&next.config, &self.streams);
        if let Some(old) = std::mem::replace(
            &mut *self.sunsets.lock().unwrap_or_else(|p| p.into_inner()),
            watcher,
        ) {
            old.abort();
        }
        // Streams of tokens that are gone or expired end now (SPEC §8).
        let now = SystemTime::now();
        Ok(self
            .streams
            .revoke(|hash| next.tokens.get(hash).is_some_and(|t| t.valid_at(now))))
    }
}

/// Sets each TLS listener's certificate expiry metric from the certificate it serves.
fn show_cert_expiry(metrics: &Metrics, config: &Snapshot) {
    use crate::observe::metrics::{Label, ListenerLabels};
    for l in &config.listeners {
        let Some(tls) = &l.tls else { continue };
        let Some(cert) = tls.key.cert.first() else {
            continue;
        };
        match x509_parser::parse_x509_certificate(cert.as_ref()) {
            Ok((_, parsed)) => {
                let labels = ListenerLabels {
                    listener: Label(l.name.clone()),
                };
                let not_after = parsed.validity().not_after.timestamp();
                metrics.cert_expiry.get_or_create(&labels).set(not_after);
            }
            Err(error) => {
                tracing::warn!(listener = %l.name, %error, "cannot read the certificate's expiry");
            }
        }
    }
}

const TOOLS_CHANGED: &str = "notifications/tools/list_changed";
const RESOURCES_CHANGED: &str = "notifications/resources/list_changed";
const PROMPTS_CHANGED: &str = "notifications/prompts/list_changed";

/// The list notifications a change from `old` to `new` owes each profile's clients: for
/// each profile in both, whether what it may see of tools, resources and prompts differs
/// (its upstream, rules, the hidden list, deprecations and whether they are past).
fn list_changes(old: &Snapshot, new: &Snapshot) -> Vec<(Arc<str>, &'static str)> {
    let now = SystemTime::now();
    let tools = |s: &Snapshot, p: &config::Profile| {
        let deprecated: Vec<String> = s
            .deprecated
            .iter()
            .map(|(n, d)| format!("{n}>{}@{}:{}", d.replacement, d.sunset_text, d.gone(now)))
            .collect();
        (
            p.upstream.name.clone(),
            p.allow.patterns().join("\n"),
            p.deny.patterns().join("\n"),
            s.hidden.patterns().join("\n"),
            deprecated,
        )
    };
    let rules = |r: &Option<config::compile::NameRules>| {
        r.as_ref()
            .map(|r| (r.allow.patterns().join("\n"), r.deny.patterns().join("\n")))
    };
    let mut out = Vec::new();
    for (name, p) in &new.profiles {
        let Some(o) = old.profiles.get(name) else {
            continue;
        };
        if tools(old, o) != tools(new, p) {
            out.push((p.name.clone(), TOOLS_CHANGED));
        }
        if o.upstream.name != p.upstream.name || rules(&o.resources) != rules(&p.resources) {
            out.push((p.name.clone(), RESOURCES_CHANGED));
        }
        if o.upstream.name != p.upstream.name || rules(&o.prompts) != rules(&p.prompts) {
            out.push((p.name.clone(), PROMPTS_CHANGED));
        }
    }
    out
}

/// A task that, as each future sunset of `config`'s deprecated tools passes, tells the
/// GET streams of the profiles that could call the tool that their tool list changed.
/// Replaced on every reload; none without future sunsets or outside a runtime.
fn watch_sunsets(
    config: &Arc<Snapshot>,
    streams: &Arc<StreamRegistry>,
) -> Option<tokio::task::AbortHandle> {
    let now = SystemTime::now();
    let mut due: Vec<(SystemTime, Box<str>)> = config
        .deprecated
        .iter()
        .filter(|(_, d)| !d.gone(now))
        .map(|(n, d)| (d.sunset, n.clone()))
        .collect();
    if due.is_empty() {
        return None;
    }
    due.sort();
    let rt = tokio::runtime::Handle::try_current().ok()?;
    let (config, streams) = (config.clone(), streams.clone());
    let task = rt.spawn(async move {
        for (at, tool) in due {
            let wait = at.duration_since(SystemTime::now()).unwrap_or_default();
            tokio::time::sleep(wait).await;
            // A profile that may call it, by name or (its hints unknown here) perhaps
            // by annotations.
            let could_see = |p: &&Arc<config::Profile>| p.allows_tool_with(&tool, None).unwrap_or(true);
            for p in config.profiles.values().filter(could_see) {
                let told = streams.notify(&p.name, TOOLS_CHANGED);
                tracing::info!(%tool, profile = %p.name, streams = told, "sunset passed: tool list change sent");
            }
        }
    });
    Some(task.abort_handle())
}

/// How often mcpgate reads an upstream's tool list itself, for annotation rules.
pub const HINTS_EVERY: std::time::Duration = std::time::Duration::from_secs(300);

/// For each HTTP upstream that a profile judges by annotations: a task that reads its
/// tool list in a session of mcpgate's own now and every [`HINTS_EVERY`], from the first
/// endpoint that takes requests. (A stdio upstream learns from the lists that pass.)
fn fetch_hints(live: &Live) -> Vec<tokio::task::AbortHandle> {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return Vec::new();
    };
    let mut tasks = Vec::new();
    for u in live.config.upstreams.values() {
        if u.stdio.is_some() || !live.config.judges_hints(u) {
            continue;
        }
        let state = live.upstream(u);
        let (upstream, endpoints, store) =
            (u.clone(), state.endpoints.clone(), state.hints.clone());
        let task = rt.spawn(async move {
            let pools: Vec<_> = endpoints.iter().map(|e| e.new_pool()).collect();
            loop {
                let at = endpoints
                    .iter()
                    .position(|e| e.available(upstream.outlier.as_ref()))
                    .unwrap_or(0);
                match crate::upstream::hints::fetch(&upstream, &upstream.endpoints[at], &pools[at])
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

/// The verifier's series. Each handle is taken on its own: a family's read guard lives
/// as long as the expression that took it, and a second `get_or_create` beside it would
/// wait for it forever.
fn oauth_metrics(metrics: &Metrics) -> OAuthMetrics {
    let fetches = |result| {
        metrics
            .oauth_key_fetches
            .get_or_create(&ResultLabels { result })
            .clone()
    };
    let fetched = fetches("ok");
    let fetch_failed = fetches("error");
    OAuthMetrics {
        fetched,
        fetch_failed,
        keys: metrics.oauth_signing_keys.clone(),
    }
}

/// The rate-limit store's series (one handle per expression, as above).
fn store_metrics(metrics: &Metrics) -> StoreMetrics {
    let errors = |reason| {
        metrics
            .limit_store_errors
            .get_or_create(&crate::observe::metrics::ReasonLabels { reason })
            .clone()
    };
    let timeouts = errors("timeout");
    let failed = errors("error");
    let unavailable = errors("unavailable");
    StoreMetrics {
        up: metrics.limit_store_up.clone(),
        timeouts,
        errors: failed,
        unavailable,
        latency: metrics.limit_store_seconds.clone(),
    }
}

/// Each endpoint counts into series of its own, by upstream and endpoint.
impl EndpointSeries for Metrics {
    fn series(&self, upstream: &str, endpoint: &str) -> EndpointMetrics {
        let labels = EndpointLabels {
            upstream: upstream.into(),
            endpoint: endpoint.into(),
        };
        EndpointMetrics {
            healthy: self.endpoint_healthy.get_or_create(&labels).clone(),
            ejections: self.endpoint_ejections.get_or_create(&labels).clone(),
            requests: self.endpoint_requests.get_or_create(&labels).clone(),
            open_sessions: self.endpoint_open_sessions.get_or_create(&labels).clone(),
        }
    }

    fn forget(&self, upstream: &str, endpoint: &str) {
        let labels = EndpointLabels {
            upstream: upstream.into(),
            endpoint: endpoint.into(),
        };
        self.endpoint_healthy.remove(&labels);
        self.endpoint_ejections.remove(&labels);
        self.endpoint_requests.remove(&labels);
        self.endpoint_open_sessions.remove(&labels);
    }

    fn processes(&self, upstream: &str) -> prometheus_client::metrics::gauge::Gauge {
        let labels = crate::observe::metrics::UpstreamLabels {
            upstream: upstream.into(),
        };
        self.stdio_processes.get_or_create(&labels).clone()
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

/// Changes a running process cannot apply: sockets and their TLS shape, and the admin
/// listener. Such a reload is refused whole, with the reason.
fn restart_needed(current: &Snapshot, next: &Snapshot) -> Result<(), ReloadError> {
    let shape = |s: &Snapshot| {
        s.listeners
            .iter()
            .map(|l| {
                (
                    l.name.clone(),
                    l.addr,
                    l.tls.as_ref().map(|t| t.files.client_ca.clone()),
                )
            })
            .collect::<Vec<_>>()
    };
    if shape(current) != shape(next) {
        return Err(ReloadError::RestartRequired(
            "listeners changed (names, addresses, TLS on/off or client_ca)",
        ));
    }
    if current.admin != next.admin {
        return Err(ReloadError::RestartRequired("the admin address changed"));
    }
    if current.audit != next.audit {
        return Err(ReloadError::RestartRequired("[audit] changed"));
    }
    if current.server.max_connections != next.server.max_connections {
        return Err(ReloadError::RestartRequired(
            "server.max_connections changed",
        ));
    }
    Ok(())
}

impl crate::observe::admin::Admin for Gateway {
    type Error = ReloadError;

    fn draining(&self) -> bool {
        self.is_draining()
    }

    fn metrics(&self) -> String {
        self.metrics.render()
    }

    fn status(&self) -> serde_json::Value {
        Gateway::status(self)
    }

    async fn reload(&self, trigger: &'static str) -> Result<(), ReloadError> {
        Gateway::reload(self, trigger).await
    }
}

impl config::watch::Reload for Gateway {
    type Error = ReloadError;

    fn files(&self) -> Vec<PathBuf> {
        self.snapshot().files.clone()
    }

    async fn reload(&self, trigger: &'static str) -> Result<(), ReloadError> {
        Gateway::reload(self, trigger).await
    }
}
