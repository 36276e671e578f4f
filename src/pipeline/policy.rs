//! What a profile may do with a parsed payload: which methods it may send and which tools
//! it may call. Decides only; building the answer is `respond`'s job. A batch is judged
//! whole: if any element would be refused, nothing is forwarded, so an upstream never
//! runs half of what a client sent.

use crate::config::compile::HintsUnknown;
use crate::config::pins::{PinKind, PinMode};
use crate::config::{Profile, Snapshot};
use crate::error::{GateError, Refusal, code};
use crate::mcp::jsonrpc::{Message, MessageKind, Payload, ToolName};
use crate::mcp::pointer::{self, Found};
use crate::upstream::hints::UpstreamSays;
use crate::upstream::pins::Standing;

#[derive(Debug)]
pub enum Verdict {
    Forward,
    /// Answer these errors (one per request element) and forward nothing.
    Refuse {
        refusals: Vec<Refusal>,
        batch: bool,
    },
    /// Only refused notifications or responses: there is nobody to answer, forward nothing.
    Swallow,
}

/// What the policy stage lets through.
pub enum Admit {
    Forward,
    /// Only refused notifications or responses: nobody to answer, nothing forwarded (202).
    Swallow,
}

/// The policy stage: [`check`], with its refusals logged and returned as the error that
/// answers them.
pub fn admit(
    snapshot: &Snapshot,
    profile: &Profile,
    hints: &dyn UpstreamSays,
    payload: &Payload,
) -> Result<Admit, GateError> {
    match check(snapshot, profile, hints, payload) {
        Verdict::Forward => Ok(Admit::Forward),
        Verdict::Refuse { refusals, batch } => {
            for r in &refusals {
                tracing::info!(tool = r.tool.as_deref().unwrap_or("-"), why = %r.message, "refused by policy");
            }
            Err(GateError::Refused { refusals, batch })
        }
        Verdict::Swallow => {
            tracing::info!("notification refused by policy and not forwarded");
            Ok(Admit::Swallow)
        }
    }
}

/// Names in messages are cut so a hostile name cannot bloat an error or a log line.
fn shown(name: &str) -> String {
    const MAX: usize = 128;
    match name.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &name[..i]),
        None => name.to_string(),
    }
}

/// `hints`: what the profile's upstreams say of their tools, for annotation rules.
pub fn check(
    snapshot: &Snapshot,
    profile: &Profile,
    hints: &dyn UpstreamSays,
    payload: &Payload,
) -> Verdict {
    let messages = payload.messages();
    let problem = |m: &Message| match (m.kind, m.method()) {
        (MessageKind::Response, _) | (_, None) => None,
        (_, Some(method)) => {
            if profile
                .methods
                .as_ref()
                .is_some_and(|allowed| !allowed.matches(method))
            {
                Some((
                    code::METHOD_NOT_FOUND,
                    format!("Method not allowed: {}", shown(method)),
                    None,
                ))
            } else if let Some(t) = &m.tool {
                tool_problem(snapshot, profile, hints, t, m.arguments)
            } else {
                m.target
                    .as_ref()
                    .and_then(|t| target_problem(snapshot, profile, hints, method, t))
            }
        }
    };
    // The usual answer, found without keeping anything.
    if messages.iter().all(|m| problem(m).is_none()) {
        return Verdict::Forward;
    }
    let problems: Vec<Option<(i64, String, Option<String>)>> =
        messages.iter().map(problem).collect();
    let refusals: Vec<Refusal> = messages
        .iter()
        .zip(problems)
        .filter(|(m, _)| m.kind == MessageKind::Request)
        .map(|(m, p)| {
            let (code, message, tool) = p.unwrap_or_else(|| {
                (
                    snapshot.deny_code,
                    "Batch not forwarded: another request in it was refused".to_string(),
                    None,
                )
            });
            Refusal {
                id: m.id.map(ToOwned::to_owned),
                code,
                message,
                tool,
            }
        })
        .collect();
    if refusals.is_empty() {
        Verdict::Swallow
    } else {
        Verdict::Refuse {
            refusals,
            batch: payload.is_batch(),
        }
    }
}

/// The first `[[tools.arguments]]` rule for `tool` whose value the call's arguments do
/// not satisfy. A value that is missing, `null`, an object or an array, or arguments that
/// repeat a key on the pointer's way, never satisfy one. The message names the pointer,
/// never the value (it may be a secret the audit trail redacts).
fn argument_problem(
    snapshot: &Snapshot,
    tool: &str,
    arguments: Option<&str>,
) -> Option<(i64, String, Option<String>)> {
    let rule = snapshot
        .argument_rules
        .iter()
        .filter(|r| r.tool.matches(tool))
        .find(|r| {
            let found = arguments.map(|a| pointer::lookup(a, &r.tokens));
            !match found {
                Some(Ok(Found::Text(v))) => r.admits(&v),
                Some(Ok(Found::Scalar(v))) => r.admits(v),
                _ => false,
            }
        })?;
    Some((
        snapshot.deny_code,
        format!("Argument not allowed: {}", shown(&rule.pointer)),
        Some(tool.to_string()),
    ))
}

/// A prompts/get of a prompt, or a resources/read, subscribe or unsubscribe of a URI,
/// that the profile's `prompts` or `resources` rules do not allow. Without rules, all
/// pass (as before there were any).
fn target_problem(
    snapshot: &Snapshot,
    profile: &Profile,
    says: &dyn UpstreamSays,
    method: &str,
    target: &ToolName,
) -> Option<(i64, String, Option<String>)> {
    let prompt = method == "prompts/get";
    let (what, field, ruled) = if prompt {
        ("Prompt", "params.name", profile.prompts.is_some())
    } else {
        ("Resource", "params.uri", profile.resources.is_some())
    };
    if prompt && let ToolName::Name(name) = target {
        if let Some(why) = unpinned(says, PinKind::Prompt, name) {
            let message = format!("Prompt not allowed: {} ({why})", shown(name));
            return Some((snapshot.deny_code, message, None));
        }
    }
    if !ruled {
        return None;
    }
    let deny = snapshot.deny_code;
    let name = match target {
        ToolName::Missing => {
            return Some((
                deny,
                format!("{what} not allowed: ({field} is missing)"),
                None,
            ));
        }
        ToolName::NotString => {
            return Some((
                deny,
                format!("{what} not allowed: ({field} is not a string)"),
                None,
            ));
        }
        ToolName::Name(n) => n,
    };
    let allowed = if prompt {
        profile.allows_prompt(name)
    } else {
        profile.allows_resource(name)
    };
    (!allowed).then(|| (deny, format!("{what} not allowed: {}", shown(name)), None))
}

/// Why a pinned upstream's tool or prompt may not be used under `enforce` (docs/pinning.md).
fn unpinned(says: &dyn UpstreamSays, kind: PinKind, name: &str) -> Option<&'static str> {
    match says.pinned(kind, name)? {
        (PinMode::Enforce, Standing::Changed) => Some("changed since it was approved"),
        (PinMode::Enforce, Standing::New) => Some("not approved yet"),
        (PinMode::Enforce, Standing::Unknown) => Some("its definition is not known yet"),
        _ => None,
    }
}

fn tool_problem(
    snapshot: &Snapshot,
    profile: &Profile,
    hints: &dyn UpstreamSays,
    tool: &ToolName,
    arguments: Option<&str>,
) -> Option<(i64, String, Option<String>)> {
    let deny = snapshot.deny_code;
    let name = match tool {
        ToolName::Missing => {
            return Some((deny, "Unknown tool: (params.name is missing)".into(), None));
        }
        ToolName::NotString => {
            return Some((
                deny,
                "Unknown tool: (params.name is not a string)".into(),
                None,
            ));
        }
        ToolName::Name(n) => n,
    };
    // Past its sunset a deprecated tool is gone, and the message says what replaced it.
    if let Some(d) = snapshot.deprecation(name)
        && d.gone(std::time::SystemTime::now())
    {
        return Some((
            deny,
            format!(
                "Unknown tool: {} (replaced by {})",
                shown(name),
                d.replacement
            ),
            Some(name.to_string()),
        ));
    }
    // Hidden tools must look exactly like tools that do not exist.
    if snapshot.hidden.matches(name) {
        return Some((
            deny,
            format!("Unknown tool: {}", shown(name)),
            Some(name.to_string()),
        ));
    }
    let known = if profile.needs_hints(name) {
        hints.hints_of(name)
    } else {
        None
    };
    match profile.allows_tool_with(name, known.as_deref()) {
        Ok(true) => {
            if let Some(why) = unpinned(hints, PinKind::Tool, name) {
                let message = format!("Tool not allowed: {} ({why})", shown(name));
                return Some((deny, message, Some(name.to_string())));
            }
            return argument_problem(snapshot, name, arguments);
        }
        Ok(false) => {}
        // The rules need what the upstream says of this tool, and that is not known:
        // refused rather than guessed.
        Err(HintsUnknown) => {
            return Some((
                deny,
                format!(
                    "Tool not allowed: {} (its annotations are not known yet)",
                    shown(name)
                ),
                Some(name.to_string()),
            ));
        }
    }
    let message = if snapshot.knows_tool(name) {
        "Tool not allowed"
    } else {
        "Unknown tool"
    };
    Some((
        deny,
        format!("{message}: {}", shown(name)),
        Some(name.to_string()),
    ))
}
