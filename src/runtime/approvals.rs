//! What approvals keep between requests (docs/approvals.md):
//!
//! - the calls waiting for an operator (`approver = "admin"`): each under a random id,
//!   with what the call would do, until the operator answers on the admin listener, its
//!   timeout passes or its client leaves. A waiting call costs no CPU: its request waits
//!   on a channel, with one timer;
//! - the approvals used: an approval's nonce opens once. With `[limits.store]` the mark is
//!   a Redis key (`SET … NX`, expiring with the approval), so a `requestState` used on one
//!   replica is refused on every other; without it the mark is this process's, and
//!   another replica would take the same state once more before it expires;
//! - which legacy sessions declared elicitation when they began here (a legacy client says
//!   so once, in `initialize`), so that their calls can be asked about.

use crate::config::compile::StoreSettings;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::oneshot;

/// The most legacy sessions whose elicitation is remembered.
const MOST_SESSIONS: usize = 100_000;

/// What an operator is shown of a waiting call.
#[derive(Debug, Clone)]
pub struct Waiting {
    pub id: String,
    pub profile: String,
    pub tool: String,
    /// The token id or OAuth subject of the caller, or `-`.
    pub caller: String,
    /// The rule's message, filled (values inert, docs/approvals.md).
    pub message: String,
    /// The arguments, canonical JSON, values inert.
    pub arguments: String,
    /// The `[[approvals]]` rule that holds it, from 1.
    pub rule: usize,
    pub asked: SystemTime,
    pub expires: SystemTime,
}

/// An operator's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub approve: bool,
    /// Who answered, as the audit records it.
    pub by: String,
}

struct Entry {
    shown: Waiting,
    tell: oneshot::Sender<Decision>,
}

#[derive(Default)]
pub struct Approvals {
    waiting: Mutex<BTreeMap<String, Entry>>,
    used: Mutex<HashMap<[u8; 16], SystemTime>>,
    /// The legacy sessions (a digest of the caller and session id) whose client declared
    /// elicitation when it initialized here, and when.
    elicits: Mutex<HashMap<[u8; 32], SystemTime>>,
    redis: tokio::sync::Mutex<Option<(String, redis::aio::MultiplexedConnection)>>,
    series: Series,
}

/// Approvals' series: each step by profile and decision (`mcpgate_approvals`), the calls
/// waiting for an operator and the oldest one's wait (set when scraped).
#[derive(Default)]
struct Series {
    steps: Family<StepLabels, Counter>,
    waiting: Gauge,
    oldest_wait: Gauge<f64, std::sync::atomic::AtomicU64>,
}

/// The labels of `mcpgate_approvals`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabels {
    profile: String,
    decision: &'static str,
}

/// A call's wait for its operator; dropped, the call is no longer listed.
pub struct Held {
    approvals: Arc<Approvals>,
    pub id: String,
    pub answer: oneshot::Receiver<Decision>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.approvals.lock_waiting().remove(&self.id);
    }
}

/// Why an operator's answer was not taken.
#[derive(Debug, PartialEq, Eq)]
pub struct NotWaiting;

/// Why an approval's single use could not be checked.
#[derive(Debug)]
pub struct StoreDown(pub String);

impl Approvals {
    /// Approvals' state, its series registered in `registry`.
    pub fn registered(registry: &mut Registry) -> Approvals {
        let a = Approvals::default();
        registry.register(
            "approvals",
            "Steps of calls that need a person's approval, by profile and decision (asked, approved, declined, cancelled, expired, refused)",
            a.series.steps.clone(),
        );
        registry.register(
            "approvals_waiting",
            "Calls waiting for an operator's approval on the admin listener",
            a.series.waiting.clone(),
        );
        registry.register_with_unit(
            "approval_oldest_wait",
            "How long the oldest call waiting for an operator has waited (0 when none waits)",
            Unit::Seconds,
            a.series.oldest_wait.clone(),
        );
        a
    }

    /// Counts a step of an approval on `profile`.
    pub fn count(&self, profile: &str, decision: &'static str) {
        let labels = StepLabels {
            profile: profile.to_string(),
            decision,
        };
        self.series.steps.get_or_create(&labels).inc();
    }

    /// Sets the waiting calls' series, before they are scraped.
    pub fn observe_waiting(&self) {
        let waiting = self.lock_waiting().len();
        let oldest = self.oldest().unwrap_or_default();
        self.series.waiting.set(waiting as i64);
        self.series.oldest_wait.set(oldest.as_secs_f64());
    }

    /// Lists a call for the operators: `shown.id` is replaced by a fresh random id.
    pub fn hold(self: &Arc<Self>, mut shown: Waiting) -> Held {
        let mut raw = [0u8; 16];
        getrandom::fill(&mut raw).expect("the system has a source of randomness");
        let id = crate::config::pins::hex(&raw);
        shown.id = id.clone();
        let (tell, answer) = oneshot::channel();
        self.lock_waiting()
            .insert(id.clone(), Entry { shown, tell });
        Held {
            approvals: self.clone(),
            id,
            answer,
        }
    }

    /// Hands the operator's decision to waiting call `id`.
    pub fn decide(&self, id: &str, decision: Decision) -> Result<Waiting, NotWaiting> {
        let entry = self.lock_waiting().remove(id).ok_or(NotWaiting)?;
        let shown = entry.shown;
        entry.tell.send(decision).map_err(|_| NotWaiting)?;
        Ok(shown)
    }

    /// The calls waiting, oldest first.
    pub fn waiting(&self) -> Vec<Waiting> {
        let mut all: Vec<Waiting> = self
            .lock_waiting()
            .values()
            .map(|e| e.shown.clone())
            .collect();
        all.sort_by_key(|w| w.asked);
        all
    }

    /// How long the oldest waiting call has waited.
    pub fn oldest(&self) -> Option<Duration> {
        let now = SystemTime::now();
        self.lock_waiting()
            .values()
            .map(|e| now.duration_since(e.shown.asked).unwrap_or_default())
            .max()
    }

    /// Marks approval `nonce` (valid until `expires`) used: `Ok(true)` the first time,
    /// `Ok(false)` when it was used already (here, or on a replica sharing `store`).
    pub async fn use_once(
        &self,
        nonce: &[u8; 16],
        expires: SystemTime,
        store: Option<&StoreSettings>,
    ) -> Result<bool, StoreDown> {
        match store {
            None => Ok(self.use_here(nonce, expires)),
            Some(s) => self.use_in_redis(nonce, expires, s).await,
        }
    }

    fn use_here(&self, nonce: &[u8; 16], expires: SystemTime) -> bool {
        let now = SystemTime::now();
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        if used.len() >= 1024 {
            used.retain(|_, until| *until > now);
        }
        used.insert(*nonce, expires).is_none()
    }

    async fn use_in_redis(
        &self,
        nonce: &[u8; 16],
        expires: SystemTime,
        store: &StoreSettings,
    ) -> Result<bool, StoreDown> {
        let life = expires
            .duration_since(SystemTime::now())
            .unwrap_or_default()
            .as_millis()
            .max(1) as u64;
        let key = format!(
            "{}approval:{}",
            store.prefix,
            crate::config::pins::hex(nonce)
        );
        let mut conn = self.connection(store).await?;
        let mut cmd = redis::cmd("SET");
        cmd.arg(&key).arg(1).arg("NX").arg("PX").arg(life);
        let set = cmd.query_async::<Option<String>>(&mut conn);
        match tokio::time::timeout(store.timeout, set).await {
            Ok(Ok(answer)) => Ok(answer.is_some()),
            Ok(Err(e)) => {
                *self.redis.lock().await = None;
                Err(StoreDown(e.to_string()))
            }
            Err(_) => {
                *self.redis.lock().await = None;
                Err(StoreDown("timed out".into()))
            }
        }
    }

    /// The connection to the store, made on first use and after a failure.
    async fn connection(
        &self,
        store: &StoreSettings,
    ) -> Result<redis::aio::MultiplexedConnection, StoreDown> {
        let mut held = self.redis.lock().await;
        if let Some((identity, conn)) = &*held
            && *identity == store.identity
        {
            return Ok(conn.clone());
        }
        let client = crate::runtime::store::client(store).map_err(|e| StoreDown(e.to_string()))?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(store.timeout))
            .set_response_timeout(Some(store.timeout));
        let conn = tokio::time::timeout(
            store.timeout,
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await
        .map_err(|_| StoreDown("connecting timed out".into()))?
        .map_err(|e| StoreDown(e.to_string()))?;
        *held = Some((store.identity.clone(), conn.clone()));
        Ok(conn)
    }

    /// Notes that the legacy session `session` (a digest of its caller and id) declared
    /// elicitation. At most [`MOST_SESSIONS`] are kept; past that, those older than a day
    /// go first.
    pub fn note_elicits(&self, session: [u8; 32]) {
        let now = SystemTime::now();
        let mut all = self.elicits.lock().unwrap_or_else(|p| p.into_inner());
        if all.len() >= MOST_SESSIONS {
            let day = Duration::from_secs(24 * 3600);
            all.retain(|_, at| now.duration_since(*at).unwrap_or_default() < day);
            if all.len() >= MOST_SESSIONS {
                all.clear();
            }
        }
        all.insert(session, now);
    }

    /// Whether the legacy session `session` declared elicitation here.
    pub fn elicits(&self, session: &[u8; 32]) -> bool {
        self.elicits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(session)
    }

    fn lock_waiting(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown() -> Waiting {
        Waiting {
            id: String::new(),
            profile: "p".into(),
            tool: "delete".into(),
            caller: "alice".into(),
            message: "Delete?".into(),
            arguments: "{}".into(),
            rule: 1,
            asked: SystemTime::now(),
            expires: SystemTime::now() + Duration::from_secs(60),
        }
    }

    #[tokio::test]
    async fn an_operator_answers_a_waiting_call_once() {
        let a = Arc::new(Approvals::default());
        let mut held = a.hold(shown());
        assert_eq!(a.waiting().len(), 1);
        assert_eq!(a.waiting()[0].id, held.id);
        let yes = Decision {
            approve: true,
            by: "admin".into(),
        };
        assert!(a.decide("nope", yes.clone()).is_err());
        assert_eq!(a.decide(&held.id, yes.clone()).unwrap().tool, "delete");
        assert_eq!((&mut held.answer).await.unwrap(), yes);
        assert!(a.decide(&held.id, yes.clone()).is_err());
        let gone = a.hold(shown());
        let id = gone.id.clone();
        drop(gone);
        assert!(a.waiting().is_empty());
        assert!(a.decide(&id, yes).is_err());
    }

    #[tokio::test]
    async fn a_nonce_opens_once_here() {
        let a = Approvals::default();
        let later = SystemTime::now() + Duration::from_secs(60);
        assert!(a.use_once(&[1; 16], later, None).await.unwrap());
        assert!(!a.use_once(&[1; 16], later, None).await.unwrap());
        assert!(a.use_once(&[2; 16], later, None).await.unwrap());
    }
}
