//! The approvals stage (docs/approvals.md): a call an `[[approvals]]` rule holds runs only once a
//! person has said yes.
//!
//! - [`find`] (after the headers): which rule, if any, holds the request's one call, and
//!   the digest of what it would do. A batch with such a call is refused: the question
//!   is about one call.
//! - [`opened`]: a 2026-07-28 retry carrying an approval's `requestState` is opened
//!   (caller, call, expiry), its answer read, its single use taken; approved, it goes on
//!   without the approval's fields; otherwise it ends here, never forwarded.
//! - [`ask`] (after policy and limits, so nobody is asked about a call that would be
//!   refused anyway): with `approver = "admin"` the request waits here for an operator;
//!   otherwise the question is made ([`Question`]) and the front that holds the client
//!   asks it in its generation's way (`front::ask`: `input_required` for a 2026-07-28
//!   client, the question on a legacy client's call stream), never this stage.
//!
//! Every step is an audit record (`phase: "approval"`) and counted ([`note`]), here and
//! in the fronts.

use super::Ctx;
use super::Granted;
use crate::config::Profile;
use crate::config::compile::{ApprovalRule, Approver};
use crate::error::GateError;
use crate::gateway::{Gateway, Live};
use crate::http::body::GateBody;
use crate::mcp::approvals::{self as msg, Answer, CallDigest};
use crate::mcp::jsonrpc::{MessageKind, Payload, ToolName};
use crate::observe::audit;
use crate::runtime::approvals::{Decision, Waiting};
use crate::runtime::streams::until_revoked;
use crate::upstream::hints::UpstreamSays;
use crate::upstream::session::Sealer;
use bytes::Bytes;
use http::Response;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The call a rule holds: the rule, and the digest of the tool and arguments.
#[derive(Clone)]
pub(super) struct Need {
    pub rule: Arc<ApprovalRule>,
    pub call: CallDigest,
}

/// The ids of the questions asked of legacy clients start so.
pub(in crate::pipeline) const QUESTION: &str = "\"mcpgate-approval-";

/// The audit reason of a call whose caller was revoked while it waited.
pub(in crate::pipeline) const REVOKED: &str =
    "the caller's token was revoked or expired while the call waited for approval";

/// Notes in `ctx` the rule that holds the request's call, if any. `says` tells the
/// tools' annotations (by the names the profile's clients use).
pub(super) fn find(
    profile: &Profile,
    says: &dyn UpstreamSays,
    payload: &Payload<'_>,
    ctx: &mut Ctx<'_>,
) -> Result<(), GateError> {
    if ctx.approved.is_some() {
        return Ok(());
    }
    let rule_for = |tool: &str| {
        profile
            .approvals
            .iter()
            .find(|r| {
                let hints = if r.needs_hints(tool) {
                    says.hints_of(tool)
                } else {
                    None
                };
                r.matches(tool, hints.as_deref())
            })
            .cloned()
    };
    let called = |m: &crate::mcp::jsonrpc::Message<'_>| match (&m.kind, m.method(), &m.tool) {
        (MessageKind::Request, Some("tools/call"), Some(ToolName::Name(t))) => rule_for(t),
        _ => None,
    };
    match payload {
        Payload::Batch(all) => {
            if all.iter().any(|m| called(m).is_some()) {
                return Err(GateError::InvalidRequest(
                    "a call that needs approval cannot be sent in a batch: send it alone".into(),
                ));
            }
        }
        Payload::Single(m) => {
            if let (Some(rule), Some(ToolName::Name(tool))) = (called(m), &m.tool) {
                let call = msg::digest(tool, m.arguments).ok_or_else(|| {
                    GateError::InvalidRequest("the call's arguments are not JSON".into())
                })?;
                ctx.approval = Some(Need { rule, call });
            }
        }
    }
    Ok(())
}

/// The key an approval's state is sealed with: its profile's upstream's (a federated
/// profile's first member's).
pub(in crate::pipeline) fn sealer<'l>(live: &'l Live, profile: &Profile) -> &'l Sealer {
    &live.upstream(&profile.upstream).approval_sealer
}

/// A 2026-07-28 retry with an approval's `requestState`: `Some(body)` when approved, the
/// body to send on; `None` when the request carries no approval state (a first call, or
/// the upstream's own state of a call approved before, which the rounds stage opens).
pub(super) async fn opened(
    gw: &Gateway,
    live: &Live,
    profile: &Profile,
    payload: &Payload<'_>,
    bytes: &Bytes,
    ctx: &mut Ctx<'_>,
) -> Result<Option<Bytes>, GateError> {
    let (Some(need), Payload::Single(m)) = (&ctx.approval, payload) else {
        return Ok(None);
    };
    let Some(state) = m.request_state else {
        return Ok(None);
    };
    let (rule, call) = (need.rule.clone(), need.call);
    super::audit::note_calls(gw, payload, ctx);
    let asked = match msg::open(
        sealer(live, profile),
        state,
        &super::rounds::caller(ctx),
        &call,
    ) {
        Ok(a) => a,
        Err(msg::Refused::NotOurs) => return Ok(None),
        Err(why) => {
            let text = match why {
                msg::Refused::Expired => "this approval has expired: call again to be asked anew",
                msg::Refused::OtherCaller => "this approval was given to another caller",
                _ => {
                    "this approval was given for another call: the tool and arguments must be those shown"
                }
            };
            note(gw, profile, ctx, &rule, "refused", None, Some(text)).await?;
            return Err(GateError::BadApproval(text.into()));
        }
    };
    let answer = match msg::retry_answer(bytes) {
        Ok(a) => a,
        Err(e) => {
            note(gw, profile, ctx, &rule, "refused", None, Some(&e)).await?;
            return Err(GateError::BadApproval(e));
        }
    };
    let expires = UNIX_EPOCH + Duration::from_secs(asked.expires);
    match gw
        .approvals
        .use_once(&asked.nonce, expires, live.config.limits.store.as_deref())
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            let text = "this approval was used already: call again to be asked anew";
            note(gw, profile, ctx, &rule, "refused", None, Some(text)).await?;
            return Err(GateError::BadApproval(text.into()));
        }
        Err(e) => {
            tracing::warn!(error = %e.0, "the approval store cannot be reached");
            return Err(GateError::ApprovalStoreUnavailable);
        }
    }
    match answer {
        Answer::Approved => {
            note(gw, profile, ctx, &rule, "approved", Some("client"), None).await?;
            ctx.approved = Some("client".into());
            let body = msg::strip(bytes).map_err(GateError::InvalidRequest)?;
            Ok(Some(Bytes::from(body)))
        }
        other => {
            note(
                gw,
                profile,
                ctx,
                &rule,
                other.reason(),
                Some("client"),
                None,
            )
            .await?;
            Err(GateError::CallDeclined(other.reason()))
        }
    }
}

/// What became of a call the stage looked at: it goes on now with what it holds (no
/// question to ask, approved already, or by an operator just now), or its client is to be
/// asked, by the front that holds it (`front::ask`).
pub(super) enum Asked {
    GoOn(Granted),
    Ask(Question, Granted),
}

/// Asks for the approval the request's call needs, once policy and limits have let it
/// through; `rest` is what the call then has to do.
pub(super) async fn ask(
    x: super::Exchange<'_, '_>,
    payload: &Payload<'_>,
    ctx: &mut Ctx<'_>,
    rest: Granted,
) -> Result<Asked, GateError> {
    let (gw, profile) = (x.gw, &**x.profile);
    let (Some(need), None, Payload::Single(m)) = (&ctx.approval, &ctx.approved, payload) else {
        return Ok(Asked::GoOn(rest));
    };
    if m.request_state.is_some() {
        // The upstream's own round of a call approved before: the rounds stage opened
        // its state, which binds the call approved.
        return Ok(Asked::GoOn(rest));
    }
    let rule = need.rule.clone();
    let call = need.call;
    if ctx.calls.is_empty() {
        super::audit::note_calls(gw, payload, ctx);
    }
    let tool = match &m.tool {
        Some(ToolName::Name(t)) => t.to_string(),
        _ => return Ok(Asked::GoOn(rest)),
    };
    let arguments = m.arguments;
    let rendered = rule.message.render(parsed(arguments).as_ref());
    if rule.approver == Approver::Admin {
        // The status page shows the arguments as the audit trail keeps them (redacted).
        let kept = ctx.calls.first().map(|c| c.arguments.clone());
        let shown = match &kept {
            Some(kept) => kept.as_deref(),
            None => arguments,
        };
        let question = msg::question(&rendered, &tool, shown);
        by_operator(gw, profile, ctx, &rule, &tool, shown, question).await?;
        return Ok(Asked::GoOn(rest));
    }
    let text = msg::question(&rendered, &tool, arguments);
    let id = m.id_text().unwrap_or("null").to_string();
    // Asked by the front that holds the client, in its generation's way.
    Ok(Asked::Ask(
        Question {
            rule,
            call,
            text,
            id,
        },
        rest,
    ))
}

/// What a client is asked about its call: the rule that holds it, the digest of what it
/// does, the question, and the call's JSON-RPC id (as JSON text).
pub(in crate::pipeline) struct Question {
    pub rule: Arc<ApprovalRule>,
    pub call: CallDigest,
    pub text: String,
    pub id: String,
}

/// The arguments as JSON, for the message.
fn parsed(arguments: Option<&str>) -> Option<serde_json::Value> {
    arguments.and_then(|a| serde_json::from_str(a).ok())
}

/// Waits for an operator's answer on the admin listener (at most the rule's timeout).
async fn by_operator(
    gw: &Gateway,
    profile: &Profile,
    ctx: &mut Ctx<'_>,
    rule: &Arc<ApprovalRule>,
    tool: &str,
    arguments: Option<&str>,
    question: String,
) -> Result<Option<Response<GateBody>>, GateError> {
    let now = SystemTime::now();
    let shown = Waiting {
        id: String::new(),
        profile: profile.name.to_string(),
        tool: crate::config::message::escape(tool),
        caller: ctx.who().to_string(),
        message: question,
        arguments: arguments
            .and_then(|a| msg::canonical(a).ok())
            .map(|a| crate::config::message::escape(&a))
            .unwrap_or_else(|| "{}".into()),
        rule: rule.number,
        asked: now,
        expires: now + rule.timeout,
    };
    let mut held = gw.approvals.hold(shown);
    let mut revoked = super::auth::Credential::hold(ctx.token, gw);
    note(gw, profile, ctx, rule, "asked", None, None).await?;
    tracing::info!(approval = %held.id, tool = ?tool, "a call waits for an operator's approval");
    // A client that leaves while its call waits: the call is taken off the list (with
    // `held`) and the step recorded.
    let mut left = Left {
        gw,
        profile: profile.name.clone(),
        record: Some(record(
            super::audit::base(ctx, "tools/call"),
            ctx.calls.first().cloned(),
            rule,
            "cancelled",
            None,
            Some("the client left before an operator answered"),
        )),
    };
    let decision = tokio::select! {
        d = &mut held.answer => d.ok(),
        _ = tokio::time::sleep(rule.timeout) => None,
        () = until_revoked(&mut revoked) => {
            // Off the list before anything else: an operator can no longer approve it.
            left.record = None;
            drop(held);
            note(gw, profile, ctx, rule, "revoked", None, Some(REVOKED)).await?;
            return Err(GateError::Revoked);
        }
    };
    left.record = None;
    drop(held);
    match decision {
        Some(Decision { approve: true, by }) => {
            note(gw, profile, ctx, rule, "approved", Some(&by), None).await?;
            ctx.approved = Some(by.into());
            Ok(None)
        }
        Some(Decision { approve: false, by }) => {
            note(gw, profile, ctx, rule, "declined", Some(&by), None).await?;
            Err(GateError::CallDeclined("declined"))
        }
        None => {
            note(gw, profile, ctx, rule, "expired", None, None).await?;
            Err(GateError::CallDeclined("expired"))
        }
    }
}

/// Records a question whose client left before it was answered (the step is
/// `cancelled`), unless disarmed by taking `record`.
pub(in crate::pipeline) struct Left<'g> {
    pub(in crate::pipeline) gw: &'g Gateway,
    pub(in crate::pipeline) profile: Arc<str>,
    pub(in crate::pipeline) record: Option<audit::Record>,
}

impl Drop for Left<'_> {
    fn drop(&mut self) {
        let Some(r) = self.record.take() else { return };
        self.gw.approvals.count(&self.profile, "cancelled");
        if let Some(a) = &self.gw.audit {
            a.record(r);
        }
    }
}

/// Writes the approval record of a step (durably when the tool's records are) and counts
/// it. A durable record that cannot be written refuses the call.
pub(in crate::pipeline) async fn note(
    gw: &Gateway,
    profile: &Profile,
    ctx: &mut Ctx<'_>,
    rule: &ApprovalRule,
    decision: &'static str,
    by: Option<&str>,
    reason: Option<&str>,
) -> Result<(), GateError> {
    gw.approvals.count(&profile.name, decision);
    tracing::info!(decision, rule = rule.number, by, "approval");
    let Some(a) = &gw.audit else {
        return Ok(());
    };
    let call = ctx.calls.first().cloned();
    let r = record(
        super::audit::base(ctx, "tools/call"),
        call,
        rule,
        decision,
        by,
        reason,
    );
    write(a, r).await
}

pub(in crate::pipeline) fn record(
    base: Arc<audit::Base>,
    call: Option<Arc<audit::Call>>,
    rule: &ApprovalRule,
    decision: &'static str,
    by: Option<&str>,
    reason: Option<&str>,
) -> audit::Record {
    let mut r = audit::Record::new(base, call);
    r.phase = Some("approval");
    r.decision = Some(decision);
    r.reason = Some(reason.map(str::to_string));
    r.approval = Some(Box::new(audit::ApprovalNote {
        rule: rule.number,
        approver: rule.approver.as_str(),
        by: by.map(str::to_string),
    }));
    r
}

pub(in crate::pipeline) async fn write(
    a: &audit::Audit,
    r: audit::Record,
) -> Result<(), GateError> {
    if r.call.as_ref().is_some_and(|c| c.durable) {
        a.durable(r).await.map_err(|e| {
            tracing::error!(error = %e, "durable approval record failed; call refused");
            GateError::AuditUnavailable
        })
    } else {
        a.record(r);
        Ok(())
    }
}
