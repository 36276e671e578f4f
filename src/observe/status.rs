//! The status page's data, typed: what `GET /status` serves as JSON and what `page`
//! renders (the whole page, and the fragment its script fetches to redraw). Names, ids and
//! counts only: tokens never reach it (callers are token ids or OAuth subjects), nor do
//! arguments, but those of a call waiting for an operator's approval, which the operator
//! decides on (redacted as the audit trail redacts them). The gateway fills it
//! (`gateway/status.rs`).

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub version: &'static str,
    /// RFC 3339, to the millisecond.
    pub now: String,
    pub started: String,
    pub uptime_seconds: u64,
    /// False while draining for shutdown.
    pub ready: bool,
    /// Requests of every row, and how many of them mcpgate refused.
    pub requests: u64,
    pub refused: u64,
    pub open_streams: usize,
    pub open_sessions: usize,
    pub rows: Vec<StatusRow>,
    pub upstreams: Vec<StatusUpstream>,
    /// The members of federated profiles (docs/federation.md), as their last fan-out found them.
    pub federation: Vec<StatusMember>,
    /// Tools and prompts of pinned upstreams whose definitions await approval (docs/pinning.md).
    pub pins: Vec<StatusPin>,
    /// Calls waiting for an operator's approval (docs/approvals.md), oldest first.
    pub approvals: Vec<StatusApproval>,
    /// `None` before the first reload.
    pub reload: Option<ReloadStatus>,
    /// The latest tools/call decisions, newest first.
    pub decisions: Vec<DecisionStatus>,
}

/// Requests of one profile and method (and tool, for tools/call).
#[derive(Debug, Clone, Serialize)]
pub struct StatusRow {
    pub profile: String,
    pub method: String,
    pub tool: Option<String>,
    pub requests: u64,
    pub refused: u64,
    /// By reason, the most frequent first.
    pub refusals: Vec<RefusalCount>,
    pub upstream_errors: u64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RefusalCount {
    pub reason: &'static str,
    pub count: u64,
}

/// A member of a federated profile.
#[derive(Debug, Clone, Serialize)]
pub struct StatusMember {
    pub profile: String,
    pub member: String,
    /// Whether it answered the profile's last fan-out.
    pub available: bool,
    /// When that was (RFC 3339), and why it did not answer.
    pub at: String,
    pub error: Option<String>,
}

/// A call waiting for an operator: what it would do, and until when it waits. Approved
/// or declined with `POST /approvals/{id}`.
#[derive(Debug, Clone, Serialize)]
pub struct StatusApproval {
    pub id: String,
    pub profile: String,
    pub tool: String,
    pub caller: String,
    /// The rule's message, the tool and the arguments, as the approver is asked.
    pub message: String,
    pub arguments: String,
    /// The `[[approvals]]` rule, from 1.
    pub rule: usize,
    pub asked: String,
    pub expires: String,
}

/// A pinned upstream's tool or prompt whose definition is not approved.
#[derive(Debug, Clone, Serialize)]
pub struct StatusPin {
    pub upstream: String,
    /// `tool` or `prompt`.
    pub kind: &'static str,
    pub name: String,
    /// `changed` (since it was approved) or `new`.
    pub standing: &'static str,
    /// The upstream's `pin`: `enforce` (hidden until approved) or `warn`.
    pub mode: &'static str,
    pub sha256: String,
    pub approved_sha256: Option<String>,
    /// What changed, as `mcpgate pin review` prints it (the upstream's text, control
    /// characters escaped).
    pub diff: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum StatusUpstream {
    Http {
        name: String,
        /// `up`, `degraded` (some endpoints out) or `down`.
        health: &'static str,
        endpoints: Vec<StatusEndpoint>,
    },
    Stdio {
        name: String,
        processes: usize,
        sessions: usize,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct StatusEndpoint {
    pub url: String,
    /// `up`, `down` (failing its health check) or `ejected`.
    pub health: &'static str,
    pub requests: u64,
    pub ejections: u64,
    pub sessions: i64,
    /// Which generation of MCP it speaks (docs/protocol.md): `modern`, `legacy`, or `unknown`
    /// until it has answered a probe.
    pub protocol: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReloadStatus {
    pub at: String,
    pub trigger: String,
    /// `ok` or `error`.
    pub result: &'static str,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DecisionStatus {
    pub at: String,
    pub request_id: String,
    pub caller: String,
    /// The client's address (behind a trusted proxy, the one it names).
    pub client: String,
    pub profile: String,
    pub tool: String,
    pub outcome: &'static str,
    pub reason: &'static str,
    pub status: u16,
}
