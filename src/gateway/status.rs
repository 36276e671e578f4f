//! The status page's data (`observe::status::Status`) from the metrics' shards, the
//! upstreams' state and the last reload.

use super::Gateway;
use crate::observe::metrics::Row;
use crate::observe::status::{
    DecisionStatus, RefusalCount, ReloadStatus, Status, StatusEndpoint, StatusRow, StatusUpstream,
};
use std::time::SystemTime;
use wire::json::text::to_microsecond;

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn ms(seconds: Option<f64>) -> Option<f64> {
    seconds.map(|s| to_microsecond(s * 1000.0))
}

fn row(profile: &str, method: &str, tool: &str, r: &Row) -> StatusRow {
    let mut reasons = r.refusals.clone();
    reasons.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    StatusRow {
        profile: profile.to_string(),
        method: method.to_string(),
        tool: (!tool.is_empty()).then(|| tool.to_string()),
        requests: r.requests,
        refused: r.refusals.iter().map(|(_, n)| n).sum(),
        refusals: reasons
            .into_iter()
            .map(|(reason, count)| RefusalCount { reason, count })
            .collect(),
        upstream_errors: r.upstream_errors,
        p50_ms: ms(r.quantile(0.5)),
        p99_ms: ms(r.quantile(0.99)),
    }
}

impl Gateway {
    /// The status page's data, as `GET /status` serves it.
    pub fn status(&self) -> Status {
        let live = self.live();
        let now = SystemTime::now();
        let (rows, decisions) = self.metrics.status_rows();
        let rows: Vec<StatusRow> = rows
            .iter()
            .map(|(l, r)| row(&l.profile.0, l.method, &l.tool.0, r))
            .collect();
        let mut sessions = 0;
        let upstreams = live
            .config
            .upstreams
            .values()
            .map(|u| upstream(u, live.upstream(u), &mut sessions))
            .collect();
        let reload = self
            .last_reload
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|r| ReloadStatus {
                at: rfc3339(r.at),
                trigger: r.trigger.clone(),
                result: if r.error.is_some() { "error" } else { "ok" },
                error: r.error.clone(),
            });
        let decisions = decisions
            .iter()
            .map(|d| DecisionStatus {
                at: rfc3339(d.at),
                request_id: d.request_id.to_string(),
                caller: d.caller.to_string(),
                client: d.client.to_string(),
                profile: d.profile.to_string(),
                tool: d.tool.to_string(),
                outcome: d.outcome,
                reason: d.reason,
                status: d.status,
            })
            .collect();
        Status {
            version: env!("CARGO_PKG_VERSION"),
            now: rfc3339(now),
            started: rfc3339(self.started),
            uptime_seconds: now.duration_since(self.started).map_or(0, |d| d.as_secs()),
            ready: !self.is_draining(),
            requests: rows.iter().map(|r| r.requests).sum(),
            refused: rows.iter().map(|r| r.refused).sum(),
            open_streams: self.streams.len(),
            open_sessions: sessions,
            rows,
            upstreams,
            pins: self.awaiting_approval(),
            approvals: self
                .approvals
                .waiting()
                .into_iter()
                .map(|w| crate::observe::status::StatusApproval {
                    id: w.id,
                    profile: w.profile,
                    tool: w.tool,
                    caller: w.caller,
                    message: w.message,
                    arguments: w.arguments,
                    rule: w.rule,
                    asked: rfc3339(w.asked),
                    expires: rfc3339(w.expires),
                })
                .collect(),
            federation: self
                .federation
                .directories
                .members()
                .into_iter()
                .map(|m| crate::observe::status::StatusMember {
                    profile: m.profile,
                    member: m.member,
                    available: m.available,
                    at: rfc3339(m.at),
                    error: m.error,
                })
                .collect(),
            reload,
            decisions,
        }
    }
}

/// An upstream as the status page shows it; its open sessions are added to `sessions`.
fn upstream(
    u: &crate::config::Upstream,
    state: &crate::upstream::registry::UpstreamState,
    sessions: &mut usize,
) -> StatusUpstream {
    if let Some(stdio) = &state.stdio {
        let (processes, open) = stdio.counts();
        *sessions += open;
        return StatusUpstream::Stdio {
            name: u.name.to_string(),
            processes,
            sessions: open,
        };
    }
    let endpoints: Vec<StatusEndpoint> = state
        .endpoints
        .iter()
        .map(|e| {
            let open = e.metrics.open_sessions.get();
            *sessions += usize::try_from(open).unwrap_or(0);
            StatusEndpoint {
                url: e.label.to_string(),
                health: e.health(),
                requests: e.metrics.requests.get(),
                ejections: e.metrics.ejections.get(),
                sessions: open,
                protocol: e.era().map_or("unknown", |era| era.name()),
            }
        })
        .collect();
    let up = endpoints.iter().filter(|e| e.health == "up").count();
    StatusUpstream::Http {
        name: u.name.to_string(),
        health: if up == endpoints.len() {
            "up"
        } else if up == 0 {
            "down"
        } else {
            "degraded"
        },
        endpoints,
    }
}
