//! The 2026-07-28 front's part in approvals (docs/approvals.md): the client is asked
//! through `input_required`, with the approval sealed into `requestState` (the caller, the
//! call's digest, the rule, an expiry); it calls again with its answer, which the approvals
//! stage opens. A client that did not declare elicitation cannot be asked, and its call is
//! refused.

use crate::error::GateError;
use crate::http::body::GateBody;
use crate::mcp::approvals as msg;
use crate::mcp::jsonrpc::Payload;
use crate::mcp::to_legacy::ClientMeta;
use crate::mcp::transport::accept::Want;
use crate::pipeline::approvals::{Question, note, sealer};
use crate::pipeline::{Ctx, Exchange, respond, rounds};
use http::Response;

/// Answers the call with `input_required`: the question, and the sealed state of the
/// approval the client's retry will carry.
pub(super) async fn ask(
    x: Exchange<'_, '_>,
    payload: &Payload<'_>,
    want: Want,
    ctx: &mut Ctx<'_>,
    q: Question,
) -> Result<Response<GateBody>, GateError> {
    let (gw, live, profile) = (x.gw, x.live, &**x.profile);
    let meta = match payload {
        Payload::Single(m) => m.meta,
        Payload::Batch(_) => None,
    };
    if !ClientMeta::of(meta).declares("elicitation") {
        let why = "this call needs a person's approval, and the client did not declare elicitation (io.modelcontextprotocol/clientCapabilities) to be asked";
        note(gw, profile, ctx, &q.rule, "refused", None, Some(why)).await?;
        return Err(GateError::NotAskable(why.into()));
    }
    let asked = msg::Asked::new(rounds::caller(ctx), q.call, q.rule.number, q.rule.timeout);
    let state = asked.seal(sealer(live, profile));
    note(gw, profile, ctx, &q.rule, "asked", None, None).await?;
    // Asked, not run: the call's own records come with its approved retry.
    ctx.calls.clear();
    let json = msg::input_required(&q.id, &q.text, &state);
    Ok(respond::own(json, want, &ctx.request_id))
}
