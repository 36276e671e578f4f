//! `[[approvals]]` (docs/approvals.md): which calls a person confirms before they run, what the
//! person is asked, who answers and how long the call waits. Each profile gets the rules
//! that apply to it, in the file's order: the first that matches a call decides.

use super::hints::{HintRules, hint_rules, hints_hold};
use super::{Fail, at, check_patterns, fail};
use crate::config::glob::Matcher;
use crate::config::message::Template;
use crate::config::raw::{self, S};
use crate::config::units::parse_duration;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How long a call waits for its answer when the rule does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest wait a rule may set.
const MOST_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Who confirms a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approver {
    /// The person at the client, asked through elicitation.
    Client,
    /// An operator, on the admin listener.
    Admin,
}

impl Approver {
    pub fn as_str(self) -> &'static str {
        match self {
            Approver::Client => "client",
            Approver::Admin => "admin",
        }
    }
}

#[derive(Debug)]
pub struct ApprovalRule {
    /// Its place among the `[[approvals]]`, from 1, as logs and records name it.
    pub number: usize,
    /// `None`: any name (the annotations decide).
    pub tools: Option<Matcher>,
    /// Hints that must all hold; empty: none asked.
    pub annotations: HintRules,
    pub message: Template,
    pub approver: Approver,
    pub timeout: Duration,
}

/// The message when a rule has none.
const DEFAULT_MESSAGE: &str = "Allow this call?";

impl ApprovalRule {
    /// Whether the rule judges `tool` by its annotations (its name alone does not rule it
    /// out).
    pub fn needs_hints(&self, tool: &str) -> bool {
        !self.annotations.is_empty() && self.tools.as_ref().is_none_or(|t| t.matches(tool))
    }

    /// Whether a call of `tool`, whose annotations are `hints` (when known), needs this
    /// rule's approval. Annotations that are not known count as holding: a call is asked
    /// about rather than let through unasked (docs/policy.md: fail closed).
    pub fn matches(
        &self,
        tool: &str,
        hints: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> bool {
        if self.tools.as_ref().is_some_and(|t| !t.matches(tool)) {
            return false;
        }
        self.annotations.is_empty() || hints.is_none_or(|h| hints_hold(h, &self.annotations))
    }
}

/// Warns of rules whose calls may wait longer than a connection may stay silent: an
/// operator's answer (the client's request waits without a byte) would come after the
/// connection was closed as idle.
pub(super) fn idle_warnings(
    profiles: &BTreeMap<String, Arc<super::Profile>>,
    idle: Duration,
    warnings: &mut Vec<String>,
) {
    let mut seen = std::collections::BTreeSet::new();
    for r in profiles.values().flat_map(|p| p.approvals.iter()) {
        if seen.insert(r.number) && r.approver == Approver::Admin && r.timeout > idle {
            warnings.push(format!(
                "approval rule #{} lets a call wait {} for an operator, longer than server.idle_timeout ({}): the client's connection may be closed as idle first",
                r.number,
                humantime::format_duration(r.timeout),
                humantime::format_duration(idle)
            ));
        }
    }
}

/// Each profile's rules, by profile name (a profile no rule names is absent).
pub(super) fn approvals(
    raw: &[S<raw::RawApproval>],
    profiles: &BTreeMap<String, S<raw::RawProfile>>,
    admin: bool,
) -> Result<BTreeMap<String, Vec<Arc<ApprovalRule>>>, Fail> {
    let mut out: BTreeMap<String, Vec<Arc<ApprovalRule>>> = BTreeMap::new();
    for (i, a) in raw.iter().enumerate() {
        let span = a.span();
        let a = a.get_ref();
        if a.tools.is_none() && a.annotations.is_none() {
            return fail(
                span,
                "an approval rule names tools, annotations or both (else it would hold every call)",
            );
        }
        let tools = match &a.tools {
            Some(list) if list.is_empty() => {
                return fail(
                    span,
                    "tools = [] matches no call: leave it out or name tools",
                );
            }
            Some(list) => {
                check_patterns(list)?;
                Some(Matcher::new(list.iter().map(|s| s.get_ref().as_str())))
            }
            None => None,
        };
        let message = match &a.message {
            Some(m) => at(m, Template::parse(m.get_ref()))?,
            None => Template::parse(DEFAULT_MESSAGE).expect("the default message reads"),
        };
        let approver = match a.approver.as_ref().map(|v| (v, v.get_ref().as_str())) {
            None | Some((_, "client")) => Approver::Client,
            Some((v, "admin")) => {
                if !admin {
                    return fail(
                        v.span(),
                        "approver = \"admin\" needs the admin listener ([admin]), where operators answer",
                    );
                }
                Approver::Admin
            }
            Some((v, other)) => {
                return fail(
                    v.span(),
                    format!("approver is \"client\" or \"admin\", not {other:?}"),
                );
            }
        };
        let timeout = match &a.timeout {
            Some(t) => {
                let d = at(t, parse_duration(t.get_ref()))?;
                if d.is_zero() || d > MOST_TIMEOUT {
                    return fail(t.span(), "timeout is more than 0 and at most 24h");
                }
                d
            }
            None => DEFAULT_TIMEOUT,
        };
        let rule = Arc::new(ApprovalRule {
            number: i + 1,
            tools,
            annotations: hint_rules(a.annotations.as_ref())?,
            message,
            approver,
            timeout,
        });
        match &a.profiles {
            None => {
                for name in profiles.keys() {
                    out.entry(name.clone()).or_default().push(rule.clone());
                }
            }
            Some(list) => {
                if list.is_empty() {
                    return fail(
                        span,
                        "profiles = [] applies to no profile: leave it out to mean every profile",
                    );
                }
                for p in list {
                    if !profiles.contains_key(p.get_ref()) {
                        return fail(p.span(), format!("no profile named {:?}", p.get_ref()));
                    }
                    out.entry(p.get_ref().clone())
                        .or_default()
                        .push(rule.clone());
                }
            }
        }
    }
    Ok(out)
}
