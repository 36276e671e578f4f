//! A route's stages (docs/architecture.md, "A route's stages"): which of the request path's
//! stages its configuration puts on its path, in their order, chosen once when the
//! configuration compiles. The pipeline runs the lists as they are; `mcpgate check` prints
//! them. A stage a route's configuration does not call for is not on its lists and costs
//! its requests nothing, not even a test of whether it is configured.
//!
//! The stages come in three groups, by what they read:
//! - [`Head`]: the request's head, before its body is read (who calls, from where);
//! - [`Read`]: the payload as read, before the back that will carry it is opened;
//! - [`Judge`]: the payload with its back opened (what it may do, how much, who says yes).
//!
//! Between the groups sit the fronts (the body read, its JSON-RPC and its generation's
//! headers) and the opening of the back; after them, the back. Those every route has, so
//! they are not listed.

use super::audit::AuditSettings;
use super::limits::LimitRules;
use super::profiles::Profile;

/// A stage on a request's head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    /// The token in the path or the `Authorization: Bearer` header (docs/configuration.md).
    Token,
    /// An OAuth access token (docs/oauth.md).
    OAuth,
    /// The `Host` and `Origin` the listener accepts.
    Origin,
}

/// A stage on the payload as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// The `[[approvals]]` rule that holds a call, and a 2026-07-28 retry's approval
    /// opened (docs/approvals.md).
    Approvals,
    /// The calls noted for the audit trail (docs/audit.md).
    Audit,
}

/// A stage on the payload with its back opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judge {
    /// Methods, tools, arguments and pins (docs/configuration.md).
    Policy,
    /// Calls of deprecated tools counted, by caller.
    Deprecated,
    /// Rate rules, concurrency caps and per-tool deadlines (docs/configuration.md).
    Limits,
    /// The person asked about a call a rule holds (docs/approvals.md).
    Ask,
}

/// What the whole configuration says that bears on every route's stages.
pub(super) struct Sections<'a> {
    pub audit: Option<&'a AuditSettings>,
    pub limits: &'a LimitRules,
    pub deprecated: bool,
}

/// A route's stages, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stages {
    pub head: Box<[Head]>,
    pub read: Box<[Read]>,
    pub judge: Box<[Judge]>,
}

impl Stages {
    /// The stages of a route to `profile` whose callers show who they are by `auth`
    /// (none on an `auth = "none"` route).
    pub(super) fn of(auth: Option<Head>, profile: &Profile, sections: &Sections<'_>) -> Stages {
        let approvals = !profile.approvals.is_empty();
        let limits = sections.limits;
        let limited = limits.rate.iter().any(|r| !r.auth_failure)
            || !limits.concurrency.is_empty()
            || !limits.timeouts.is_empty();
        let read = [
            approvals.then_some(Read::Approvals),
            sections.audit.is_some().then_some(Read::Audit),
        ];
        let judge = [
            Some(Judge::Policy),
            sections.deprecated.then_some(Judge::Deprecated),
            limited.then_some(Judge::Limits),
            approvals.then_some(Judge::Ask),
        ];
        Stages {
            head: auth.into_iter().chain([Head::Origin]).collect(),
            read: read.into_iter().flatten().collect(),
            judge: judge.into_iter().flatten().collect(),
        }
    }

    /// Whether the route asks people about calls (its profile has `[[approvals]]` rules).
    pub fn asks(&self) -> bool {
        self.judge.contains(&Judge::Ask)
    }

    /// Whether the route counts its callers against `[limits]`.
    pub fn limited(&self) -> bool {
        self.judge.contains(&Judge::Limits)
    }

    /// The path as `check` prints it: `token → origin → [front] → audit → [back opened] →
    /// policy → [back]`, the bracketed steps being those every route has.
    pub fn describe(&self) -> String {
        let head = self.head.iter().map(|h| match h {
            Head::Token => "token",
            Head::OAuth => "oauth",
            Head::Origin => "origin",
        });
        let read = self.read.iter().map(|r| match r {
            Read::Approvals => "approvals (hold)",
            Read::Audit => "audit",
        });
        let judge = self.judge.iter().map(|j| match j {
            Judge::Policy => "policy",
            Judge::Deprecated => "deprecated",
            Judge::Limits => "limits",
            Judge::Ask => "approvals (ask)",
        });
        let all: Vec<&str> = head
            .chain(["[front]"])
            .chain(read)
            .chain(["[back opened]"])
            .chain(judge)
            .chain(["[back]"])
            .collect();
        all.join(" → ")
    }
}

#[cfg(test)]
mod tests;
