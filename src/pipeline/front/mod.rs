//! The fronts: what a client of each generation sends, turned into the exchange the stages
//! read, and the answers turned back; the only place a client's generation decides what
//! happens. The legacy front (`legacy`) owns a legacy client's sessions, `initialize`, its
//! GET stream, the server's questions and mcpgate's own (an approval asked on the call's
//! stream, the call held there until answered). The 2026-07-28 front (`modern`) asks
//! through `input_required`; its `_meta`, header rules and rounds are read by the `headers`
//! and `rounds` modules, which need no state of their own.

pub mod legacy;
mod modern;

use super::approvals::Question;
use super::{Ctx, Exchange, Granted};
use crate::error::GateError;
use crate::http::body::GateBody;
use crate::mcp::era::Era;
use crate::mcp::jsonrpc::Payload;
use crate::mcp::transport::accept::Want;
use bytes::Bytes;
use http::Response;

/// Asks the client about its call (docs/approvals.md), in its generation's way: the answer
/// is the question. A legacy client's call is held on that answer's stream with what the
/// stages `granted` it, and goes on from there once approved; a 2026-07-28 client calls
/// again with its answer.
pub(super) async fn ask(
    x: Exchange<'_, '_>,
    bytes: &Bytes,
    payload: &Payload<'_>,
    want: Want,
    ctx: &mut Ctx<'_>,
    question: Question,
    granted: Granted,
) -> Result<Response<GateBody>, GateError> {
    match ctx.era {
        Era::Modern => modern::ask(x, payload, want, ctx, question).await,
        Era::Legacy => legacy::ask(x, bytes, want, ctx, question, granted).await,
    }
}
