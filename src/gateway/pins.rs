//! What the gateway does when a pinned upstream's definitions change or are approved
//! (docs/pinning.md): an audit record of each new definition, the `mcpgate_pin_unapproved`
//! series, and, under `enforce`, a list change told to the clients of every profile that
//! shows the upstream's tools (its own, and the federated ones it is a member of).

use super::{Gateway, Live};
use crate::config::pins::{PinKind, PinMode};
use crate::mcp::list_changes::{PROMPTS_CHANGED, TOOLS_CHANGED};
use crate::observe::audit::{Base, Call, PinNote, Record};
use crate::upstream::pins::Change;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::{Arc, Weak};

/// Pinning's room in the gateway: the tasks that watch the pinned upstreams of the
/// configuration in force, and the series they set.
pub(super) struct Pinning {
    watches: super::Tasks,
    series: Series,
}

impl Pinning {
    /// Its series registered; no watches until [`Pinning::watch`].
    pub(super) fn registered(registry: &mut prometheus_client::registry::Registry) -> Pinning {
        Pinning {
            watches: super::Tasks::default(),
            series: Series::registered(registry),
        }
    }

    /// Watches the pinned upstreams of `live` instead of those watched before.
    pub(super) fn watch(&self, gw: &Weak<Gateway>, live: &Arc<Live>) {
        self.watches.replace(watch(gw, live));
    }
}

/// `mcpgate_pin_unapproved`: per pinned upstream, its tools and prompts whose definitions
/// are not approved, each 1 while it is so.
struct Series(Family<PinLabels, Gauge>);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PinLabels {
    upstream: String,
    kind: &'static str,
    tool: String,
}

impl Series {
    fn registered(registry: &mut prometheus_client::registry::Registry) -> Series {
        let family = Family::default();
        registry.register(
            "pin_unapproved",
            "Tools (kind=\"tool\") and prompts of pinned upstreams whose definitions the pins file does not approve (1 while so)",
            family.clone(),
        );
        Series(family)
    }

    /// Sets the series of a pinned upstream: `unapproved` are its names whose definitions
    /// are not approved, `approved` the others it has; series of neither are left as
    /// they are.
    fn set(
        &self,
        upstream: &str,
        unapproved: &[(&'static str, &str)],
        approved: &[(&'static str, &str)],
    ) {
        let labels = |kind: &'static str, name: &str| PinLabels {
            upstream: upstream.to_string(),
            kind,
            tool: name.to_string(),
        };
        for (kind, name) in approved {
            self.0.remove(&labels(kind, name));
        }
        for (kind, name) in unapproved {
            self.0.get_or_create(&labels(kind, name)).set(1);
        }
    }
}

/// One task per pinned upstream: each change its store reports is recorded and told.
/// Replaced on every reload.
fn watch(gw: &Weak<Gateway>, live: &Arc<Live>) -> Vec<tokio::task::AbortHandle> {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return Vec::new();
    };
    live.config
        .upstreams
        .values()
        .filter(|u| u.pin != PinMode::Off)
        .map(|u| {
            let (gw, store, name) = (gw.clone(), live.upstream(u).pins.clone(), u.name.clone());
            rt.spawn(async move {
                loop {
                    let changes = store.take_changes();
                    if !changes.is_empty() {
                        let Some(gw) = gw.upgrade() else { return };
                        gw.pins_changed(&name, changes);
                    }
                    store.wake.notified().await;
                }
            })
            .abort_handle()
        })
        .collect()
}

impl Gateway {
    /// New definitions of `upstream`'s tools or prompts that the pins file does not
    /// approve: recorded, counted, and (under `enforce`) told as list changes.
    fn pins_changed(&self, upstream: &str, changes: Vec<Change>) {
        let live = self.live();
        let Some(u) = live.config.upstreams.get(upstream) else {
            return;
        };
        for c in &changes {
            let why = match &c.approved {
                Some(_) => "changed since it was approved",
                None => "not approved yet",
            };
            tracing::warn!(
                upstream,
                kind = c.kind.name(),
                name = ?c.name,
                fingerprint = %c.seen.hex(),
                mode = u.pin.name(),
                "pinned definition {why}; review it with `mcpgate pin review`"
            );
            if let Some(audit) = &self.audit {
                audit.record(pin_record(upstream, u.pin, c, why));
            }
        }
        self.count_pins(&live, upstream);
        if u.pin == PinMode::Enforce {
            let kinds: Vec<PinKind> = changes.iter().map(|c| c.kind).collect();
            self.tell_lists(&live, upstream, &kinds);
        }
    }

    /// Sets `mcpgate_pin_unapproved` for what `upstream` was last seen to have.
    pub(super) fn count_pins(&self, live: &Live, upstream: &str) {
        let Some(u) = live.config.upstreams.get(upstream) else {
            return;
        };
        let seen = live.upstream(u).pins.seen();
        let (mut unapproved, mut approved) = (Vec::new(), Vec::new());
        for (kind, name, now) in &seen {
            let approves = live
                .config
                .pins
                .get(upstream, *kind, name)
                .is_some_and(|a| a.sha256 == now.sha256);
            let list = match u.pin == PinMode::Off || approves {
                true => &mut approved,
                false => &mut unapproved,
            };
            list.push((kind.name(), &**name));
        }
        self.pinning.series.set(upstream, &unapproved, &approved);
    }

    /// Tells the clients of every profile showing `upstream` that its `kinds` lists
    /// changed.
    pub(super) fn tell_lists(&self, live: &Live, upstream: &str, kinds: &[PinKind]) {
        for p in live.config.profiles.values() {
            let shows = match &p.federation {
                Some(fed) => fed
                    .members
                    .iter()
                    .any(|m| &*m.profile.upstream.name == upstream),
                None => &*p.upstream.name == upstream && !p.judged_above,
            };
            if !shows {
                continue;
            }
            for method in [
                (PinKind::Tool, TOOLS_CHANGED),
                (PinKind::Prompt, PROMPTS_CHANGED),
            ]
            .into_iter()
            .filter(|(k, _)| kinds.contains(k))
            .map(|(_, m)| m)
            {
                let told = self.streams.notify(&p.name, method);
                tracing::info!(profile = %p.name, method, streams = told, "pinned list change sent");
            }
        }
    }
}

/// The audit record of a definition seen for the first time.
fn pin_record(upstream: &str, mode: PinMode, c: &Change, why: &'static str) -> Record {
    static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let method = match c.kind {
        PinKind::Tool => "tools/list",
        PinKind::Prompt => "prompts/list",
    };
    let base = Base::new(
        format!("pin-{n}").into(),
        "-",
        None,
        None,
        std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        method,
    )
    .with_member(Some(upstream));
    let call = Call {
        rpc_id: None,
        tool: Arc::from(&*c.name),
        arguments: None,
        durable: true,
    };
    let mut r = Record::new(Arc::new(base), Some(Arc::new(call)));
    r.phase = Some("pin");
    r.decision = Some(match mode {
        PinMode::Enforce => "hidden",
        _ => "warned",
    });
    r.reason = Some(Some(why.to_string()));
    r.pin = Some(Box::new(PinNote {
        kind: c.kind.name(),
        mode: mode.name(),
        old: c.approved.as_ref().map(|a| a.hex()),
        new: c.seen.hex(),
    }));
    r
}

impl Gateway {
    /// What the status page shows of pinned upstreams: every tool and prompt last seen
    /// with a definition the pins file does not approve, with its diff.
    pub(super) fn awaiting_approval(&self) -> Vec<crate::observe::status::StatusPin> {
        let live = self.live();
        let mut out = Vec::new();
        for u in live
            .config
            .upstreams
            .values()
            .filter(|u| u.pin != PinMode::Off)
        {
            let mut seen = live.upstream(u).pins.seen();
            seen.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
            for (kind, name, now) in seen {
                let approved = live.config.pins.get(&u.name, kind, &name);
                let (standing, diff) = match approved {
                    Some(a) if a.sha256 == now.sha256 => continue,
                    Some(a) => ("changed", crate::config::pins::diff(a, &now)),
                    None => {
                        let lines = crate::config::pins::lines(&now);
                        let text = lines.iter().map(|l| format!("    + {l}\n")).collect();
                        ("new", text)
                    }
                };
                out.push(crate::observe::status::StatusPin {
                    upstream: u.name.to_string(),
                    kind: kind.name(),
                    name: crate::config::pins::visible(&name),
                    standing,
                    mode: u.pin.name(),
                    sha256: now.hex(),
                    approved_sha256: approved.map(|a| a.hex()),
                    diff,
                });
            }
        }
        out
    }
}
