//! The rounds stage (MCP 2026-07-28, docs/protocol.md): a modern `tools/call`, `prompts/get` or
//! `resources/read` may be answered `input_required`, whose state mcpgate seals
//! (`mcp::rounds`), or with a task, whose id it seals (`mcp::task_ids`). A retry's state,
//! and the task id a task request names, are opened here, before the request goes on: one
//! that does not open for this caller (and request) is refused, and nothing of it reaches
//! the upstream.

use super::Ctx;
use crate::config::Profile;
use crate::error::GateError;
use crate::gateway::Live;
use crate::mcp::jsonrpc::{self, Message, MessageKind, Payload};
use crate::mcp::rounds::{self, CallerKey, Issue, Opened};
use crate::mcp::task_ids;
use crate::upstream::session::EndpointId;
use bytes::Bytes;
use std::cell::Cell;
use std::sync::Arc;

/// A request that may be asked for input: how its answer's state is sealed, and, for a
/// retry, what its own state opened to.
pub(super) struct Round {
    pub issue: Issue,
    pub retry: Option<Opened>,
}

/// The request's route, as a seal names an open one.
fn route<'c>(ctx: &'c Ctx<'_>) -> &'c str {
    ctx.route.map_or("", |r| &*r.template)
}

/// Who is asking, as a seal binds it: the credential's key, or the route on an open one.
pub(super) fn caller(ctx: &Ctx<'_>) -> CallerKey {
    rounds::caller_key(ctx.token.as_ref().map(|t| &t.key), route(ctx))
}

/// The payload's one request, with its method and id, when its method is one of `kind`.
fn single_request<'p, 'a>(
    payload: &'p Payload<'a>,
    kind: fn(&str) -> bool,
) -> Option<(&'p Message<'a>, &'p str, &'p str)> {
    let Payload::Single(m) = payload else {
        return None;
    };
    let (Some(method), Some(id)) = (m.method(), m.id_text()) else {
        return None;
    };
    (m.kind == MessageKind::Request && kind(method)).then_some((m, method, id))
}

pub(super) fn prepare(
    live: &Live,
    profile: &Arc<Profile>,
    payload: &Payload<'_>,
    ctx: &mut Ctx<'_>,
) -> Result<Option<Round>, GateError> {
    let Some((m, method, id)) = single_request(payload, rounds::may_ask) else {
        return Ok(None);
    };
    let state = live.upstream(&profile.upstream);
    let sealer = state.state_sealer.clone();
    let name = m.mcp_name.as_deref();
    let mut for_caller = rounds::Caller::Unhashed {
        credential: ctx.token.as_ref().map(|t| t.key),
        route: route(ctx).into(),
    };
    let retry = match m.request_state {
        Some(state) => {
            let key = caller(ctx);
            let approved = ctx.approval.as_ref().map(|n| &n.call);
            let opened =
                rounds::open(&sealer, state, &key, method, name, approved).map_err(|why| {
                    tracing::info!(?why, "a requestState that does not open here");
                    GateError::BadRequestState
                })?;
            ctx.first_request = Some(opened.first.as_str().into());
            for_caller = rounds::Caller::Key(key);
            Some(opened)
        }
        None => None,
    };
    let first = ctx.first_request.as_deref().unwrap_or(&ctx.request_id);
    let request = rounds::Asking {
        id,
        method,
        name,
        first,
    };
    let issue = Issue::new(
        sealer,
        state.task_sealer.clone(),
        request,
        for_caller,
        live.config.input_timeout,
    )
    .approved(ctx.approval.as_ref().map(|n| n.call));
    Ok(Some(Round { issue, retry }))
}

/// A request naming a task (`tasks/get`, `tasks/update`, `tasks/cancel`): its id opened,
/// and the client's id, which its answer shows again.
pub(super) struct TaskRequest {
    /// The request's JSON-RPC id, as JSON text.
    pub id: Box<str>,
    pub opened: task_ids::Opened,
    pub shown: task_ids::Shown,
}

/// Opens the task a modern task request names. A client that did not declare the tasks
/// extension is told it must (as the extension has a server say); an id mcpgate did not
/// seal for this caller is an unknown task (as a server says of one it does not know).
pub(super) fn task(
    live: &Live,
    profile: &Arc<Profile>,
    payload: &Payload<'_>,
    ctx: &mut Ctx<'_>,
) -> Result<Option<TaskRequest>, GateError> {
    let Some((m, _, id)) = single_request(payload, jsonrpc::is_task_method) else {
        return Ok(None);
    };
    if !m.meta.is_some_and(task_ids::declares_tasks) {
        return Err(GateError::MissingTasksCapability);
    }
    let Some(sealed) = m.mcp_name.as_deref() else {
        return Err(GateError::UnknownTask);
    };
    let sealer = &live.upstream(&profile.upstream).task_sealer;
    let opened = task_ids::open(sealer, sealed, &caller(ctx)).map_err(|why| {
        tracing::info!(?why, "a task id that does not open here");
        GateError::UnknownTask
    })?;
    ctx.first_request = Some(opened.first.as_str().into());
    let shown = task_ids::Shown::Named {
        id: id.into(),
        original: opened.original.clone(),
        sealed: sealed.to_owned(),
    };
    Ok(Some(TaskRequest {
        id: id.into(),
        opened,
        shown,
    }))
}

/// What the task ids a `subscriptions/listen` names are upstream: the server's id of each
/// one sealed for this caller, `None` for any other. `at` keeps the endpoint of the first
/// task opened, where the stream goes (a task lives on the endpoint that made it).
pub(super) fn listen_tasks<'a>(
    live: &Live,
    profile: &Arc<Profile>,
    ctx: &Ctx<'_>,
    at: &'a Cell<Option<EndpointId>>,
) -> impl Fn(&str) -> Option<String> + use<'a> {
    let caller = caller(ctx);
    let sealer = live.upstream(&profile.upstream).task_sealer.clone();
    move |sealed: &str| {
        let opened = task_ids::open(&sealer, sealed, &caller).ok()?;
        if at.get().is_none() {
            at.set(Some(opened.endpoint));
        }
        Some(opened.original)
    }
}

/// The task request's body as the upstream gets it: the server's task id.
pub(super) fn restore_task(body: &Bytes, task: &TaskRequest) -> Result<Bytes, GateError> {
    task_ids::restore(body, &task.opened.original)
        .map(Bytes::from)
        .map_err(GateError::InvalidRequest)
}

/// The retry's body as the upstream gets it: its own state back, or none.
pub(super) fn restore(body: &Bytes, retry: &Opened) -> Result<Bytes, GateError> {
    rounds::restore(body, retry.original.as_deref())
        .map(Bytes::from)
        .map_err(GateError::InvalidRequest)
}
