//! What the status page shows (`GET /status` on the admin listener; `GET /` renders it):
//! requests and refusals per profile and tool with their latency, upstream endpoints and
//! their health, open streams and sessions, the last reload, and the latest tools/call
//! decisions. Names, ids and counts only: tokens never reach it (callers are token ids or
//! OAuth subjects), nor do arguments.

use super::Gateway;
use crate::mcp::jsontext::to_microsecond;
use crate::observe::metrics::Row;
use serde_json::{Value, json};
use std::time::SystemTime;

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn ms(seconds: Option<f64>) -> Value {
    seconds.map_or(Value::Null, |s| json!(to_microsecond(s * 1000.0)))
}

fn row(profile: &str, method: &str, tool: &str, r: &Row) -> Value {
    let refused: u64 = r.refusals.iter().map(|(_, n)| n).sum();
    let mut reasons = r.refusals.clone();
    reasons.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    json!({
        "profile": profile,
        "method": method,
        "tool": if tool.is_empty() { Value::Null } else { json!(tool) },
        "requests": r.requests,
        "refused": refused,
        "refusals": reasons.iter().map(|(reason, n)| json!({"reason": reason, "count": n})).collect::<Vec<_>>(),
        "upstream_errors": r.upstream_errors,
        "p50_ms": ms(r.quantile(0.5)),
        "p99_ms": ms(r.quantile(0.99)),
    })
}

impl Gateway {
    /// The status page's data, as `GET /status` serves it.
    pub fn status(&self) -> Value {
        let live = self.snapshot();
        let now = SystemTime::now();
        let (rows, decisions) = self.metrics.status_rows();
        let requests: u64 = rows.iter().map(|(_, r)| r.requests).sum();
        let refused: u64 = rows
            .iter()
            .flat_map(|(_, r)| r.refusals.iter().map(|(_, n)| n))
            .sum();
        let rows: Vec<Value> = rows
            .iter()
            .map(|(l, r)| row(&l.profile.0, l.method, &l.tool.0, r))
            .collect();
        let mut sessions = 0;
        let upstreams: Vec<Value> = live
            .config
            .upstreams
            .values()
            .map(|u| {
                let state = live.upstream(u);
                if let Some(stdio) = &state.stdio {
                    let (processes, open) = stdio.counts();
                    sessions += open;
                    return json!({
                        "name": &*u.name,
                        "kind": "stdio",
                        "processes": processes,
                        "sessions": open,
                        "endpoints": [],
                    });
                }
                let endpoints: Vec<Value> = state
                    .endpoints
                    .iter()
                    .map(|e| {
                        let open = e.metrics.open_sessions.get();
                        sessions += usize::try_from(open).unwrap_or(0);
                        json!({
                            "url": &*e.label,
                            "health": e.health(),
                            "requests": e.metrics.requests.get(),
                            "ejections": e.metrics.ejections.get(),
                            "sessions": open,
                        })
                    })
                    .collect();
                let up = endpoints.iter().filter(|e| e["health"] == "up").count();
                json!({
                    "name": &*u.name,
                    "kind": "http",
                    "health": if up == endpoints.len() { "up" } else if up == 0 { "down" } else { "degraded" },
                    "endpoints": endpoints,
                })
            })
            .collect();
        let reload = match &*self.last_reload.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(r) => json!({
                "at": rfc3339(r.at),
                "trigger": r.trigger,
                "result": if r.error.is_some() { "error" } else { "ok" },
                "error": r.error,
            }),
            None => Value::Null,
        };
        let decisions: Vec<Value> = decisions
            .iter()
            .map(|d| {
                json!({
                    "at": rfc3339(d.at),
                    "request_id": &*d.request_id,
                    "caller": &*d.caller,
                    "profile": &*d.profile,
                    "tool": &*d.tool,
                    "outcome": d.outcome,
                    "reason": d.reason,
                    "status": d.status,
                })
            })
            .collect();
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "now": rfc3339(now),
            "started": rfc3339(self.started),
            "uptime_seconds": now.duration_since(self.started).map_or(0, |d| d.as_secs()),
            "ready": !self.is_draining(),
            "requests": requests,
            "refused": refused,
            "open_streams": self.streams.len(),
            "open_sessions": sessions,
            "rows": rows,
            "upstreams": upstreams,
            "reload": reload,
            "decisions": decisions,
        })
    }
}
