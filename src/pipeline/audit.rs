//! The audit stages: which tools/call elements a request carries (`note_calls`), the
//! durable `begin` records written before a call is forwarded (`begin`: a call whose record
//! is not on disk is not forwarded), the records of calls whose client left before the
//! answer (`Unanswered`), and the records of a finished request (`record`: at once for
//! refusals and failures, or as the answer ends for forwarded calls, whose outcome is in
//! the answer).

use super::Ctx;
use crate::error::GateError;
use crate::gateway::Gateway;
use crate::http::body::GateBody;
use crate::mcp::jsonrpc::{Payload, ToolName};
use crate::observe::audit;
use http::{Method, Response};
use http_body_util::BodyExt;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// Notes the payload's tools/call elements for the audit trail, when there is one.
pub(super) fn note_calls(gw: &Gateway, payload: &Payload<'_>, ctx: &mut Ctx<'_>) {
    let Some(a) = &gw.audit else { return };
    ctx.calls = payload
        .messages()
        .iter()
        .filter_map(|m| {
            let tool: Arc<str> = match m.tool.as_ref()? {
                // A single call's name is the one the request already holds.
                // (`ctx.tool` is set only for a single message: this one.)
                ToolName::Name(n) => match &ctx.tool {
                    Some(t) => t.clone(),
                    None => Arc::from(&**n),
                },
                ToolName::Missing => Arc::from("(missing)"),
                ToolName::NotString => Arc::from("(not a string)"),
            };
            Some(Arc::new(audit::Call {
                rpc_id: m.id_text().map(str::to_string),
                durable: a.is_durable(&tool),
                arguments: audit::redact_arguments(m.arguments, &a.settings.redact),
                tool,
            }))
        })
        .collect();
}

/// Notes a task request (`tasks/get`, `tasks/update`, `tasks/cancel`, MCP 2026-07-28) for
/// the audit trail: it is recorded under the tool whose call made the task (without
/// arguments), its `first_request_id` that call's request id. A task's inputs and its
/// cancelling are acts on that call, so they are kept like it (durably when it is).
pub(super) fn note_task(gw: &Gateway, rpc_id: &str, tool: &str, ctx: &mut Ctx<'_>) {
    let Some(a) = &gw.audit else { return };
    let tool: Arc<str> = Arc::from(tool);
    ctx.calls = vec![Arc::new(audit::Call {
        rpc_id: Some(rpc_id.to_string()),
        durable: a.is_durable(&tool),
        arguments: None,
        tool,
    })];
}

/// Arms the guard that records the request's calls if it is dropped before an answer,
/// and writes the durable calls' `begin` records (fsynced) first. Fails closed: a durable
/// call whose record could not be written is not forwarded.
pub(super) async fn begin<'a>(
    gw: &'a Gateway,
    ctx: &mut Ctx<'_>,
) -> Result<Option<Unanswered<'a>>, GateError> {
    let Some(a) = gw.audit.as_ref().filter(|_| !ctx.calls.is_empty()) else {
        return Ok(None);
    };
    let shared = base(ctx, ctx.rpc_method.as_deref().unwrap_or("POST"));
    ctx.audit_base = Some(shared.clone());
    // The guard holds the calls while it is armed; `answered` gives them back.
    let mut guard = Unanswered {
        audit: a,
        base: shared,
        calls: std::mem::take(&mut ctx.calls),
        started: ctx.started,
        armed: true,
    };
    for i in 0..guard.calls.len() {
        let call = guard.calls[i].clone();
        if !call.durable {
            continue;
        }
        let mut r = audit::Record::new(base(ctx, "tools/call"), Some(call.clone()));
        r.phase = Some("begin");
        r.decision = Some("allow");
        if let Err(e) = a.durable(r).await {
            tracing::error!(error = %e, tool = %call.tool, "durable audit record failed; call refused");
            // Refused: `finish` records that.
            ctx.calls = guard.disarm();
            return Err(GateError::AuditUnavailable);
        }
    }
    Ok(Some(guard))
}

/// The answer (or its failure) is back: the calls go back to the request, for `finish`
/// to record with their outcome.
pub(super) fn answered(guard: &mut Option<Unanswered<'_>>, ctx: &mut Ctx<'_>) {
    if let Some(g) = guard {
        ctx.calls = g.disarm();
    }
}

/// The fields every audit record of this request shares.
pub(super) fn base(ctx: &Ctx<'_>, method: &str) -> Arc<audit::Base> {
    let base = audit::Base::new(
        ctx.request_id.clone(),
        ctx.listener,
        ctx.route.map(|r| &**r),
        ctx.token_id,
        ctx.peer.addr.ip(),
        method,
    )
    .with_first_request(ctx.first_request.as_deref())
    .with_member(ctx.member);
    Arc::new(match &ctx.caller {
        Some(c) => base.with_caller(c.sub.as_deref(), c.client_id.as_deref()),
        None => base,
    })
}

/// When a request's answer (or its head) was ready, read once for its records and its log
/// line: the monotonic start and time taken, and the wall clock.
#[derive(Clone, Copy)]
pub(super) struct Ended {
    pub(super) started: Instant,
    pub(super) head_ms: f64,
    pub(super) now: SystemTime,
}

/// Writes the audit records of a finished request: at once for refusals and failures,
/// or, for forwarded tools/call, when the answer ends (its outcome is in the answer).
pub(super) fn record(
    a: &audit::Audit,
    ctx: &Ctx<'_>,
    http_method: &Method,
    response: Response<GateBody>,
    error: Option<&GateError>,
    at: Ended,
) -> Response<GateBody> {
    let Ended {
        started,
        head_ms,
        now,
    } = at;
    let status = response.status().as_u16();
    let method = ctx.rpc_method.as_deref().unwrap_or(http_method.as_str());
    let upstream_ms = ctx.upstream_ms;
    let timed = |mut r: audit::Record| {
        r.status = Some(status);
        r.upstream_ms = Some(upstream_ms);
        r.gateway_ms = Some(head_ms - upstream_ms.unwrap_or(0.0));
        r
    };
    if ctx.calls.is_empty() {
        // Only refusals, auth failures and limit hits are recorded for other methods.
        if let Some(e) = error {
            let mut r = timed(audit::Record::at(base(ctx, method), None, now));
            r.decision = Some("refuse");
            r.reason = Some(Some(e.reason().to_string()));
            r.total_ms = Some(head_ms);
            a.record(r);
        }
        return response;
    }
    let base = ctx.audit_base.clone().unwrap_or_else(|| base(ctx, method));
    let forwarded = error.is_none_or(|e| e.side() == crate::error::Side::Upstream);
    let records = ctx.calls.iter().map(|call| {
        let mut r = timed(audit::Record::at(base.clone(), Some(call.clone()), now));
        if call.durable && forwarded {
            r.phase = Some("end");
        }
        r.decision = Some(if forwarded { "allow" } else { "refuse" });
        r.reason = Some(match error {
            Some(GateError::Refused { refusals, .. }) => Some(
                refusals
                    .iter()
                    .find(|x| x.id.as_ref().map(|i| i.get().trim()) == call.rpc_id.as_deref())
                    .map_or("batch refused".to_string(), |x| x.message.clone()),
            ),
            Some(e) => Some(e.reason().to_string()).filter(|r| !r.is_empty()),
            None => None,
        });
        r
    });
    match error {
        Some(e) => {
            let outcome = e.upstream_outcome();
            for mut r in records {
                r.outcome = Some(outcome);
                r.total_ms = Some(head_ms);
                a.record(r);
            }
            response
        }
        None => {
            let sse =
                wire::headval::body_format(response.headers()) == wire::headval::BodyFormat::Sse;
            if let (false, GateBody::Full(Some(json))) = (sse, response.body()) {
                // A JSON answer already whole: its outcomes are read now, no tap needed.
                audit::record_whole_answer(a, records, json, started, head_ms);
                return response;
            }
            response.map(|body| {
                GateBody::Boxed(BodyExt::boxed_unsync(audit::AuditTap::new(
                    body,
                    a.clone(),
                    records,
                    sse,
                    started,
                )))
            })
        }
    }
}

/// The audit records of forwarded calls whose request was dropped before an answer came
/// back: the client went away (or the connection broke) while the upstream worked.
pub(super) struct Unanswered<'a> {
    audit: &'a audit::Audit,
    base: Arc<audit::Base>,
    calls: Vec<Arc<audit::Call>>,
    started: Instant,
    /// Cleared once the answer (or its failure) is back: `handle` records it then.
    armed: bool,
}

impl Unanswered<'_> {
    /// The answer (or its failure) is back: gives the calls back for `handle` to record.
    fn disarm(&mut self) -> Vec<Arc<audit::Call>> {
        self.armed = false;
        std::mem::take(&mut self.calls)
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let total_ms = self.started.elapsed().as_secs_f64() * 1000.0;
        for call in &self.calls {
            let mut r = audit::Record::new(self.base.clone(), Some(call.clone()));
            if call.durable {
                r.phase = Some("end");
            }
            r.decision = Some("allow");
            r.reason = Some(None);
            // No answer was sent; 499 is nginx's status for a client that closed first.
            r.status = Some(499);
            r.upstream_ms = Some(None);
            r.gateway_ms = Some(total_ms);
            r.outcome = Some(Some("client_gone"));
            r.total_ms = Some(total_ms);
            self.audit.record(r);
        }
    }
}
