//! `[profiles.*]`: what each profile may send (tools by name and by annotations, methods,
//! resources, prompts) and to which upstream.

use super::approvals::ApprovalRule;
use super::{Compiler, Fail, Upstream, at, check_patterns, fail};
use crate::config::federation::{Federation, Member, Prefix, SEPARATOR, check_separator};
use crate::config::glob::Matcher;
use crate::config::raw::{self, S};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug)]
pub struct Profile {
    pub name: Arc<str>,
    pub upstream: Arc<Upstream>,
    pub allow: Matcher,
    pub deny: Matcher,
    /// `None`: every method may be sent.
    pub methods: Option<Matcher>,
    /// `None`: every resource may be listed, read and subscribed to.
    pub resources: Option<NameRules>,
    /// `None`: every prompt may be listed and got.
    pub prompts: Option<NameRules>,
    /// Hints that also allow a tool (all must hold); empty: none.
    pub allow_annotations: HintRules,
    /// Hints that refuse a tool (all must hold); empty: none.
    pub deny_annotations: HintRules,
    /// A federated profile's members (docs/federation.md); `upstream` is then its first member's.
    pub federation: Option<Arc<Federation>>,
    /// A federated member's profile: its lists pass whole to the federated profile,
    /// whose rules judge them by the names its clients see.
    pub judged_above: bool,
    /// The `[[approvals]]` that apply to this profile, in order (docs/approvals.md).
    pub approvals: Box<[Arc<ApprovalRule>]>,
}

pub use super::hints::HintRules;
use super::hints::{hint_rules, hints_hold};

/// A tool's annotations are needed to judge it and are not known (docs/policy.md: fail closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HintsUnknown;

/// An allow and a deny list of names or URIs; deny wins.
#[derive(Debug)]
pub struct NameRules {
    pub allow: Matcher,
    pub deny: Matcher,
}

impl NameRules {
    pub fn allows(&self, name: &str) -> bool {
        self.allow.matches(name) && !self.deny.matches(name)
    }
}

impl Profile {
    /// A profile that lets everything of `upstream` through and leaves its lists as they
    /// are: a federated profile's member (judged by the federated profile), or mcpgate's
    /// own reader of an upstream's lists.
    pub fn member(name: &str, upstream: Arc<Upstream>) -> Arc<Profile> {
        Arc::new(Profile {
            name: name.into(),
            upstream,
            allow: Matcher::new(["*"]),
            deny: Matcher::new(std::iter::empty::<&str>()),
            methods: None,
            resources: None,
            prompts: None,
            allow_annotations: Box::default(),
            deny_annotations: Box::default(),
            federation: None,
            judged_above: true,
            approvals: Box::default(),
        })
    }

    /// Whether this profile may list, read or subscribe to the resource `uri` (or list
    /// the template `uri`). A URI that could name another than it seems, by a dot
    /// segment or an encoded slash, never passes rules ([`plain_uri`]).
    pub fn allows_resource(&self, uri: &str) -> bool {
        self.resources
            .as_ref()
            .is_none_or(|r| plain_uri(uri) && r.allows(uri))
    }

    /// Whether judging `tool` needs its annotations: with `deny_annotations`, always;
    /// with `allow_annotations`, when its name alone does not allow it.
    pub fn needs_hints(&self, tool: &str) -> bool {
        !self.deny_annotations.is_empty()
            || (!self.allow_annotations.is_empty() && !self.allow.matches(tool))
    }

    /// Whether this profile may call `tool` whose annotations are `hints`: allowed by
    /// name or by `allow_annotations`, and denied neither by name nor by
    /// `deny_annotations`.
    pub fn allows_tool_with(
        &self,
        tool: &str,
        hints: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<bool, HintsUnknown> {
        if self.deny.matches(tool) {
            return Ok(false);
        }
        if !self.needs_hints(tool) {
            return Ok(self.allow.matches(tool));
        }
        let hints = hints.ok_or(HintsUnknown)?;
        if !self.deny_annotations.is_empty() && hints_hold(hints, &self.deny_annotations) {
            return Ok(false);
        }
        Ok(self.allow.matches(tool)
            || (!self.allow_annotations.is_empty() && hints_hold(hints, &self.allow_annotations)))
    }

    pub fn allows_prompt(&self, name: &str) -> bool {
        self.prompts.as_ref().is_none_or(|r| r.allows(name))
    }

    /// Whether this profile may use any tool, resource or prompt at all (`kind` is the
    /// capability's name, as `server/discover` writes it): some name may pass its rules
    /// and its `methods` let it list or use them.
    pub fn may_use(&self, kind: &str) -> bool {
        let rules_allow = match kind {
            "tools" => !self.allow.is_empty() || !self.allow_annotations.is_empty(),
            "resources" => self.resources.as_ref().is_none_or(|r| !r.allow.is_empty()),
            "prompts" => self.prompts.as_ref().is_none_or(|r| !r.allow.is_empty()),
            _ => true,
        };
        let verbs: &[&str] = match kind {
            "tools" => &["tools/list", "tools/call"],
            "resources" => &[
                "resources/list",
                "resources/read",
                "resources/templates/list",
            ],
            "prompts" => &["prompts/list", "prompts/get"],
            _ => &[],
        };
        rules_allow
            && self
                .methods
                .as_ref()
                .is_none_or(|m| verbs.is_empty() || verbs.iter().any(|v| m.matches(v)))
    }
}

/// Whether `uri` means what its text says to a glob: no `.` or `..` path segment (also
/// percent-encoded), no encoded `/` or `\`, no backslash, no control character. Servers
/// that normalise or decode URIs would otherwise read `kb://docs/../private/x`, which
/// `kb://docs/*` matches, as a URI outside `docs/`.
pub fn plain_uri(uri: &str) -> bool {
    if uri.chars().any(|c| c.is_control() || c == '\\') {
        return false;
    }
    let lower = uri.to_ascii_lowercase();
    if lower.contains("%2f") || lower.contains("%5c") || lower.contains("%00") {
        return false;
    }
    let decoded_dots = lower.replace("%2e", ".");
    // The path after the scheme and authority, split into segments; the authority
    // (`//host`) only ever yields empty segments or the host, which are not dots.
    let path = decoded_dots
        .split_once(':')
        .map_or(decoded_dots.as_str(), |(_, rest)| rest);
    !path
        .split(['/', '?', '#'])
        .any(|segment| segment == "." || segment == "..")
}

/// `resources` or `prompts` of a profile.
fn name_rules(raw: Option<&S<raw::RawNameRules>>) -> Result<Option<NameRules>, Fail> {
    let Some(r) = raw else { return Ok(None) };
    let r = r.get_ref();
    if let Some(allow) = &r.allow {
        check_patterns(allow)?;
    }
    check_patterns(&r.deny)?;
    Ok(Some(NameRules {
        allow: match &r.allow {
            Some(list) => Matcher::new(list.iter().map(|s| s.get_ref().as_str())),
            None => Matcher::new(["*"]),
        },
        deny: Matcher::new(r.deny.iter().map(|s| s.get_ref().as_str())),
    }))
}

/// A profile's upstream, or a federated profile's members (docs/federation.md) and its first
/// member's upstream.
fn profile_upstreams(
    name: &str,
    span: std::ops::Range<usize>,
    p: &raw::RawProfile,
    upstreams: &BTreeMap<String, Arc<Upstream>>,
) -> Result<(Arc<Upstream>, Option<Arc<Federation>>), Fail> {
    let find = |n: &S<String>| {
        upstreams.get(n.get_ref()).cloned().ok_or_else(|| {
            (
                n.span(),
                format!("profile {name:?}: no upstream named {:?}", n.get_ref()),
            )
        })
    };
    let list = match (&p.upstream, &p.upstreams) {
        (Some(one), None) => {
            for (set, key) in [(&p.prefix, "prefix"), (&p.separator, "separator")] {
                if let Some(v) = set {
                    return fail(
                        v.span(),
                        format!(
                            "profile {name:?}: {key} is for a federated profile (upstreams = [...])"
                        ),
                    );
                }
            }
            return Ok((find(one)?, None));
        }
        (Some(one), Some(_)) => {
            return fail(
                one.span(),
                format!("profile {name:?}: upstream and upstreams cannot both be set"),
            );
        }
        (None, None) => {
            return fail(
                span,
                format!(
                    "profile {name:?}: needs upstream = \"...\" (or upstreams = [...] to federate)"
                ),
            );
        }
        (None, Some(list)) => list,
    };
    if list.get_ref().is_empty() {
        return fail(list.span(), format!("profile {name:?}: upstreams is empty"));
    }
    let prefix = match &p.prefix {
        Some(v) => at(v, Prefix::parse(v.get_ref()))?,
        None => Prefix::default(),
    };
    let separator = match &p.separator {
        Some(v) => {
            at(v, check_separator(v.get_ref()))?;
            v.get_ref().as_str()
        }
        None => SEPARATOR,
    };
    let mut members: Vec<Member> = Vec::new();
    for n in list.get_ref() {
        let upstream = find(n)?;
        if members.iter().any(|m| *m.name == **n.get_ref()) {
            return fail(
                n.span(),
                format!(
                    "profile {name:?}: upstream {:?} is listed twice",
                    n.get_ref()
                ),
            );
        }
        members.push(Member {
            name: upstream.name.clone(),
            profile: Profile::member(&format!("{name}/{}", upstream.name), upstream),
        });
    }
    let first = members[0].profile.upstream.clone();
    Ok((
        first,
        Some(Arc::new(Federation {
            members: members.into(),
            prefix,
            separator: separator.into(),
        })),
    ))
}

impl Compiler<'_> {
    pub(super) fn profiles(
        &self,
        raw: &BTreeMap<String, S<raw::RawProfile>>,
        upstreams: &BTreeMap<String, Arc<Upstream>>,
        mut approvals: BTreeMap<String, Vec<Arc<ApprovalRule>>>,
        warnings: &mut Vec<String>,
    ) -> Result<BTreeMap<String, Arc<Profile>>, Fail> {
        let mut out = BTreeMap::new();
        for (name, p) in raw {
            let span = p.span();
            let p = p.get_ref();
            let (upstream, federation) = profile_upstreams(name, span, p, upstreams)?;
            check_patterns(&p.allow)?;
            check_patterns(&p.deny)?;
            let allow = Matcher::new(p.allow.iter().map(|s| s.get_ref().as_str()));
            if allow.is_empty() && p.allow_annotations.is_none() {
                warnings.push(format!("profile {name:?} allows no tool (allow is empty)"));
            }
            let methods = match &p.methods {
                Some(list) => {
                    check_patterns(list)?;
                    let m = Matcher::new(list.iter().map(|s| s.get_ref().as_str()));
                    if !m.matches("initialize") {
                        warnings.push(format!(
                            "profile {name:?}: methods does not include \"initialize\"; MCP clients cannot connect"
                        ));
                    }
                    Some(m)
                }
                None => None,
            };
            out.insert(
                name.clone(),
                Arc::new(Profile {
                    name: name.as_str().into(),
                    upstream: upstream.clone(),
                    allow,
                    deny: Matcher::new(p.deny.iter().map(|s| s.get_ref().as_str())),
                    methods,
                    resources: name_rules(p.resources.as_ref())?,
                    prompts: name_rules(p.prompts.as_ref())?,
                    allow_annotations: hint_rules(p.allow_annotations.as_ref())?,
                    deny_annotations: hint_rules(p.deny_annotations.as_ref())?,
                    federation,
                    judged_above: false,
                    approvals: approvals.remove(name).unwrap_or_default().into(),
                }),
            );
        }
        Ok(out)
    }
}

/// Per upstream, whether some profile judges its tools by annotations (so mcpgate reads
/// its tool list).
pub(super) fn hinted(profiles: &BTreeMap<String, Arc<Profile>>, upstreams: usize) -> Box<[bool]> {
    let mut hinted = vec![false; upstreams];
    for p in profiles.values() {
        let rules_read_hints = p.approvals.iter().any(|r| !r.annotations.is_empty());
        if p.allow_annotations.is_empty() && p.deny_annotations.is_empty() && !rules_read_hints {
            continue;
        }
        // A federated profile judges its members' tools.
        let upstreams: Vec<usize> = match &p.federation {
            Some(fed) => fed
                .members
                .iter()
                .map(|m| m.profile.upstream.index)
                .collect(),
            None => vec![p.upstream.index],
        };
        for u in upstreams {
            if let Some(h) = hinted.get_mut(u) {
                *h = true;
            }
        }
    }
    hinted.into()
}

#[cfg(test)]
mod hint_tests {
    use super::*;
    use serde_json::{Value, json};

    fn hints(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn absent_hints_have_the_mcp_defaults() {
        let rule = |k: &str, v: Value| vec![(Box::from(k), v)];
        let none = hints(json!({}));
        assert!(!hints_hold(&none, &rule("readOnlyHint", json!(true))));
        assert!(hints_hold(&none, &rule("destructiveHint", json!(true))));
        assert!(hints_hold(&none, &rule("openWorldHint", json!(true))));
        assert!(!hints_hold(&none, &rule("idempotentHint", json!(true))));
        assert!(!hints_hold(&none, &rule("custom", json!(true))));
        // A read-only tool is not destructive, whatever else it says.
        let ro = hints(json!({"readOnlyHint": true, "destructiveHint": true}));
        assert!(!hints_hold(&ro, &rule("destructiveHint", json!(true))));
        // Every listed hint must hold.
        let two = vec![
            (Box::from("readOnlyHint"), json!(false)),
            (Box::from("idempotentHint"), json!(true)),
        ];
        assert!(hints_hold(&hints(json!({"idempotentHint": true})), &two));
        assert!(!hints_hold(&hints(json!({"idempotentHint": false})), &two));
    }
}
