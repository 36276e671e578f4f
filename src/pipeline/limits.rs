//! The limits stage: rate rules and concurrency caps for the caller (their state is the
//! gateway's, `runtime::limiter`; with `[limits.store]` the rate rules are asked of Redis,
//! the one await of this stage), and the request's deadline from the per-tool timeouts.
//! A refused request never reaches the upstream.

use super::{Ctx, Peer};
use crate::config::Profile;
use crate::error::GateError;
use crate::gateway::Live;
use crate::http::body::GateBody;
use crate::mcp::jsonrpc::{Payload, ToolName};
use crate::runtime::limiter::Caller;
use http::Response;
use std::time::Duration;
use tokio::sync::OwnedSemaphorePermit;

/// What an admitted request holds: its concurrency permits and its deadline.
pub(super) struct Admitted {
    pub(super) permits: Vec<OwnedSemaphorePermit>,
    pub(super) timeout: Duration,
}

impl Admitted {
    /// What a request on a route without `[limits]` rules holds: no permits, and its
    /// upstream's deadline.
    pub(super) fn unlimited(profile: &Profile) -> Admitted {
        Admitted {
            permits: Vec::new(),
            timeout: profile.upstream.timeout,
        }
    }
}

/// Takes the caller's rate-rule cells and concurrency permits for a request calling
/// `tools`; the permits must live as long as the answer.
pub(super) async fn check(
    live: &Live,
    profile: &Profile,
    peer: &Peer,
    ctx: &Ctx<'_>,
    tools: &[&str],
) -> Result<Vec<OwnedSemaphorePermit>, GateError> {
    let caller = Caller {
        token: ctx.token.as_ref().map(|t| &t.key),
        profile: &profile.name,
        ip: peer.addr.ip(),
    };
    live.limiter.check(&caller, tools).await
}

/// [`check`] for a JSON-RPC payload's tools/call elements, and the deadline they get.
pub(super) async fn admit(
    live: &Live,
    profile: &Profile,
    peer: &Peer,
    ctx: &Ctx<'_>,
    payload: &Payload<'_>,
) -> Result<Admitted, GateError> {
    let tools: smallvec::SmallVec<[&str; 4]> = payload
        .messages()
        .iter()
        .filter_map(|m| match &m.tool {
            Some(ToolName::Name(n)) => Some(&**n),
            _ => None,
        })
        .collect();
    let permits = check(live, profile, peer, ctx, &tools).await?;
    let timeout = live.limiter.timeout_for(&tools, profile.upstream.timeout);
    Ok(Admitted { permits, timeout })
}

/// The answer, holding `permits` until its whole body, streamed or not, is done.
pub(super) fn hold(
    response: Response<GateBody>,
    permits: Vec<OwnedSemaphorePermit>,
) -> Response<GateBody> {
    if permits.is_empty() {
        return response;
    }
    response.map(|b| GateBody::Held(Box::new(b), permits))
}
