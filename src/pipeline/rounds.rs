//! The rounds stage (MCP 2026-07-28, SPEC §15): a modern `tools/call`, `prompts/get` or
//! `resources/read` may be answered `input_required`, whose state mcpgate seals
//! (`mcp::rounds`). A retry's state is opened here, before the request goes on: one that
//! does not open for this caller and request is refused, and nothing of it reaches the
//! upstream.

use super::Ctx;
use crate::config::Profile;
use crate::error::GateError;
use crate::gateway::Live;
use crate::mcp::jsonrpc::{MessageKind, Payload};
use crate::mcp::rounds::{self, Issue, Opened};
use bytes::Bytes;
use std::sync::Arc;

/// A request that may be asked for input: how its answer's state is sealed, and, for a
/// retry, what its own state opened to.
pub(super) struct Round {
    pub issue: Issue,
    pub retry: Option<Opened>,
}

pub(super) fn prepare(
    live: &Live,
    profile: &Arc<Profile>,
    payload: &Payload<'_>,
    ctx: &mut Ctx<'_>,
) -> Result<Option<Round>, GateError> {
    let Payload::Single(m) = payload else {
        return Ok(None);
    };
    let (Some(method), Some(id)) = (m.method(), m.id_text()) else {
        return Ok(None);
    };
    if m.kind != MessageKind::Request || !rounds::may_ask(method) {
        return Ok(None);
    }
    let sealer = live.upstream(&profile.upstream).state_sealer.clone();
    let route = ctx.route.map_or("", |r| &*r.template);
    let credential = ctx.token.as_ref().map(|t| t.key);
    let name = m.mcp_name.as_deref();
    let mut caller = rounds::Caller::Unhashed {
        credential,
        route: route.into(),
    };
    let retry = match m.request_state {
        Some(state) => {
            let key = rounds::caller_key(credential.as_ref(), route);
            let opened = rounds::open(&sealer, state, &key, method, name).map_err(|why| {
                tracing::info!(?why, "a requestState that does not open here");
                GateError::BadRequestState
            })?;
            ctx.first_request = Some(opened.first.as_str().into());
            caller = rounds::Caller::Key(key);
            Some(opened)
        }
        None => None,
    };
    let first = ctx.first_request.as_deref().unwrap_or(&ctx.request_id);
    let issue = Issue::new(
        sealer,
        id,
        caller,
        method,
        name,
        first,
        live.config.input_timeout,
    );
    Ok(Some(Round { issue, retry }))
}

/// The retry's body as the upstream gets it: its own state back, or none.
pub(super) fn restore(body: &Bytes, retry: &Opened) -> Result<Bytes, GateError> {
    rounds::restore(body, retry.original.as_deref())
        .map(Bytes::from)
        .map_err(GateError::InvalidRequest)
}
