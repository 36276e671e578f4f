//! The forward stage: an admitted request goes to an endpoint of its upstream over this
//! worker's pool, within its deadline, in its session's order (`upstream::order`): after
//! the session's requests that were ready before it have been written, and a GET has been
//! answered. It returns the upstream's answer head; `respond` streams the body.
//!
//! - A request with a sealed session id (the upstream has `session_key`) goes to the
//!   endpoint the id names, carrying the upstream's own id. An id that does not open, an
//!   endpoint that left the set, is out (unhealthy, ejected) or cannot be reached: 404,
//!   the MCP signal to initialize anew.
//! - A 2026-07-28 client's request bridged to a legacy server goes likewise to the
//!   endpoint of the session mcpgate holds for it there (`upstream::bridged`).
//! - Any other request goes to the endpoint the balancer picks; if no connection could
//!   be made or the request could not be written, to another one (each at most once).
//!   A request that may have reached an endpoint is never sent again. None available:
//!   503.
//! - A session id in the answer is sealed before the client sees it.
//! - Connect errors, broken answers, 5xx and passed deadlines count against the endpoint
//!   (`upstream::endpoint`); any other answer clears its count.

use crate::config::Upstream;
use crate::error::GateError;
use crate::gateway::Live;
use crate::http::body::UpstreamBody;
use crate::runtime::deadline::Deadline;
use crate::upstream::encode::{Outgoing, encode};
use crate::upstream::endpoint::EndpointState;
use crate::upstream::pool::{PoolError, UpBody};
use crate::upstream::registry::UpstreamState;
use http::header::HeaderValue;
use http::{Method, Response, StatusCode};
use std::sync::atomic::{AtomicUsize, Ordering};
use wire::fields::FieldKind;

/// The upstream's response head and, when the deadline bounds the body too, what is left
/// of it.
pub struct Answer {
    pub response: Response<UpstreamBody>,
    pub deadline: Option<Deadline>,
    /// How long the upstream took to send the head.
    pub took: std::time::Duration,
    /// The endpoint that answered (none for a stdio server).
    pub endpoint: Option<crate::upstream::session::EndpointId>,
}

const MCP_SESSION_ID: http::HeaderName = http::HeaderName::from_static("mcp-session-id");

pub async fn send(
    live: &Live,
    upstream: &Upstream,
    out: &mut Outgoing<'_>,
) -> Result<Answer, GateError> {
    // One reading of the clock for the deadline and the upstream's time.
    let started = tokio::time::Instant::now();
    let mut deadline = Deadline::at(started + out.timeout);
    let state = live.upstream(upstream);
    authorize(live, upstream, state, out).await?;
    if let Some(stdio) = &state.stdio {
        // A stdio server: the bridge answers as its HTTP server would.
        let response = tokio::select! {
            biased;
            r = stdio.send(out) => r?,
            _ = &mut deadline => return Err(GateError::UpstreamTimeout),
        };
        return Ok(Answer {
            response,
            deadline: out.body_deadline.then_some(deadline),
            took: started.elapsed(),
            endpoint: None,
        });
    }
    let outlier = upstream.outlier.as_ref();
    // A request bridged to a legacy server is ordered in mcpgate's session there.
    // A legacy client's request bridged to a 2026-07-28 server carries the bridge's own
    // seal, which is no session of the server's (and not sent to it).
    let session = match &out.in_session {
        Some(to) => to.session,
        None if out.bridged.is_some() => None,
        None => out.fields.get(FieldKind::McpSessionId),
    };
    // The endpoint being tried, so a passed deadline counts against it.
    let trying = AtomicUsize::new(usize::MAX);
    // Waiting for the session's earlier requests counts in the deadline.
    // Pinned where it is: `select!` then holds a pointer to it, not a copy of the whole.
    let sent = std::pin::pin!(try_endpoints(upstream, state, out, session, &trying));
    // The answer first: once it is in, the deadline is not looked at again (nor a random
    // branch order drawn), and an answer that comes as the deadline passes is used.
    let (mut response, i) = tokio::select! {
        biased;
        r = sent => r?,
        _ = &mut deadline => {
            if let Some(e) = state.endpoints.get(trying.load(Ordering::Relaxed)) {
                e.failed(outlier);
            }
            return Err(GateError::UpstreamTimeout);
        }
    };
    let endpoint = &state.endpoints[i];
    if response.status().is_server_error() {
        endpoint.failed(outlier);
    } else {
        endpoint.succeeded();
    }
    if state.sealer.is_some() && out.in_session.is_none() {
        seal_answer(state, endpoint, &out.method, session, &mut response)?;
    }
    Ok(Answer {
        response: response.map(UpstreamBody::H1),
        deadline: out.body_deadline.then_some(deadline),
        took: started.elapsed(),
        endpoint: Some(endpoint.id),
    })
}

/// Who calls, in the upstream's `Authorization`: the caller's access token exchanged for
/// one meant for the upstream, or a token of mcpgate's naming the caller (docs/oauth.md).
/// The client's own credentials never go upstream.
async fn authorize(
    live: &Live,
    upstream: &Upstream,
    state: &UpstreamState,
    out: &mut Outgoing<'_>,
) -> Result<(), GateError> {
    if let Some(exchanges) = &live.exchanges[upstream.index] {
        // Boxed: only upstreams that exchange tokens carry its room.
        out.authorization = Some(Box::pin(exchanged(live, upstream, exchanges, out)).await?);
    }
    if let Some(tokens) = &state.identity {
        // Who calls, told in a token of mcpgate's (docs/oauth.md): the client's own
        // credentials never go upstream.
        let who = out
            .who
            .take()
            .unwrap_or_else(crate::upstream::identity::Who::gateway);
        out.authorization = Some(tokens.bearer(&who).map_err(|e| {
            tracing::error!(upstream = %upstream.name, error = %e, "identity token");
            GateError::UpstreamUnreachable("the identity token could not be made".into())
        })?);
    }
    Ok(())
}

/// The caller's access token, exchanged for one meant for the upstream (docs/oauth.md);
/// it stays here itself.
async fn exchanged(
    live: &Live,
    upstream: &Upstream,
    exchanges: &crate::oauth::exchange::Exchanges,
    out: &Outgoing<'_>,
) -> Result<HeaderValue, GateError> {
    let subject = super::auth::bearer(out.fields).ok_or_else(|| {
        GateError::IdentityRefused("the call carries no access token to exchange".into())
    })?;
    let verifier = live
        .verifier
        .as_deref()
        .ok_or_else(|| GateError::IdentityUnavailable("no [oauth] issuer to exchange at".into()))?;
    exchanges.bearer(verifier, subject).await.map_err(|e| {
        tracing::warn!(upstream = %upstream.name, failed = ?e, "token exchange");
        match e {
            crate::oauth::exchange::Failed::Refused(why) => GateError::IdentityRefused(why),
            crate::oauth::exchange::Failed::Unavailable(why) => GateError::IdentityUnavailable(why),
        }
    })
}

/// Sends `out` to an endpoint of `upstream`: the one that holds its session, or the
/// balancer's pick (a retry's pinned endpoint first), another only when a try cannot have
/// acted. `trying` is the endpoint being tried, so a passed deadline counts against it.
async fn try_endpoints(
    upstream: &Upstream,
    state: &UpstreamState,
    out: &Outgoing<'_>,
    session: Option<&[u8]>,
    trying: &AtomicUsize,
) -> Result<(Response<UpBody>, usize), GateError> {
    let outlier = upstream.outlier.as_ref();
    // A request in a known session goes to the endpoint that holds it or nowhere (404,
    // the signal to open another): the client's sealed session, or the one mcpgate
    // holds there for a 2026-07-28 client of a legacy server (the bridge).
    let held = match (&out.in_session, &state.sealer, session) {
        (Some(to), _, _) => to
            .endpoint
            .map(|e| (e, to.session.map(std::borrow::Cow::Borrowed))),
        (None, Some(sealer), Some(sealed)) => {
            let (id, inner) = sealer.open(sealed).ok_or(GateError::SessionNotFound)?;
            Some((id, Some(std::borrow::Cow::Owned(inner))))
        }
        _ => None,
    };
    if let Some((id, inner)) = held {
        let i = state
            .named(&id)
            .filter(|&i| state.endpoints[i].available(outlier))
            .ok_or(GateError::SessionNotFound)?;
        trying.store(i, Ordering::Relaxed);
        let request = encode(upstream, &upstream.endpoints[i], out, inner.as_deref())?;
        let endpoint = &state.endpoints[i];
        // mcpgate's own session for 2026-07-28 clients needs no order: their requests
        // stand alone (a server's question comes on the call's own stream), and the
        // session is shared by every request of the caller and client.
        let ordered = session.filter(|_| out.in_session.is_none());
        return match exchange(endpoint, out, &request, ordered).await {
            Ok(r) => Ok((r, i)),
            Err(e) => {
                endpoint.failed(outlier);
                let unsent = unsent(&e);
                let error = upstream_error(upstream, endpoint, e);
                // An endpoint that cannot be reached took the session's state with
                // it: a new session is the way on.
                Err(if unsent {
                    GateError::SessionNotFound
                } else {
                    error
                })
            }
        };
    }
    let mut tried = smallvec::SmallVec::<[usize; 4]>::new();
    let mut last = None;
    // A multi round-trip retry goes back to the endpoint that asked, while it is in.
    let pinned = out
        .pinned
        .and_then(|id| state.named(&id))
        .filter(|&i| state.endpoints[i].available(outlier));
    loop {
        let next = pinned
            .filter(|i| !tried.contains(i))
            .or_else(|| state.pick(upstream, &tried));
        let Some(i) = next else {
            return Err(last.unwrap_or(GateError::NoHealthyEndpoint));
        };
        trying.store(i, Ordering::Relaxed);
        let endpoint = &state.endpoints[i];
        let request = encode(upstream, &upstream.endpoints[i], out, None)?;
        match exchange(endpoint, out, &request, session).await {
            Ok(r) => return Ok((r, i)),
            Err(e) => {
                endpoint.failed(outlier);
                let unsent = unsent(&e);
                let error = upstream_error(upstream, endpoint, e);
                if !unsent {
                    return Err(error);
                }
                // It cannot have acted: another endpoint may take it.
                tried.push(i);
                last = Some(error);
            }
        }
    }
}

/// One try on `endpoint`, in the session's order.
async fn exchange(
    endpoint: &EndpointState,
    out: &Outgoing<'_>,
    request: &[u8],
    session: Option<&[u8]>,
) -> Result<Response<UpBody>, PoolError> {
    endpoint.metrics.requests.inc();
    let mut turn = endpoint.order.turn(session).await;
    // A GET opens the stream on which the server sends what later requests of the
    // session make it ask: the next one goes once the upstream has answered the GET
    // (its head, which servers send at once), not merely once it is written.
    let opens_stream = out.method == Method::GET;
    let sent = endpoint
        .here()
        .send(&out.method, request, &mut || {
            if !opens_stream {
                turn.written();
            }
        })
        .await;
    drop(turn);
    sent
}

/// The client gets the session id sealed, never the upstream's own; the sessions the
/// endpoint holds are counted as they are made and ended here.
fn seal_answer(
    state: &UpstreamState,
    endpoint: &EndpointState,
    method: &Method,
    session: Option<&[u8]>,
    response: &mut Response<UpBody>,
) -> Result<(), GateError> {
    let sessions = &endpoint.metrics.open_sessions;
    let status = response.status();
    if session.is_some()
        && (status == StatusCode::NOT_FOUND || (*method == Method::DELETE && status.is_success()))
        && sessions.get() > 0
    {
        sessions.dec();
    }
    let Some(inner) = response.headers().get(MCP_SESSION_ID) else {
        return Ok(());
    };
    let sealer = state.sealer.as_ref().expect("checked by the caller");
    let sealed = sealer.seal(&endpoint.id, inner.as_bytes()).ok_or_else(|| {
        GateError::UpstreamBadResponse("the upstream's session id is too long to seal".into())
    })?;
    if session != Some(sealed.as_bytes()) && status.is_success() {
        sessions.inc();
    }
    let value = HeaderValue::try_from(sealed).expect("base64url is a valid header value");
    response.headers_mut().insert(MCP_SESSION_ID, value);
    Ok(())
}

/// Whether a failure happened before the endpoint can have acted on the request.
fn unsent(e: &PoolError) -> bool {
    matches!(e, PoolError::Connect(_) | PoolError::Unsent(_))
}

/// Names the kind of failure for the client; the detail goes to the log only.
fn upstream_error(upstream: &Upstream, endpoint: &EndpointState, e: PoolError) -> GateError {
    let kind = match e {
        PoolError::Connect(_) | PoolError::Unsent(_) => "connection failed",
        PoolError::Http(_) => "connection closed before a complete answer",
    };
    tracing::warn!(
        upstream = %upstream.name,
        endpoint = %endpoint.label,
        error = %e,
        detail = ?std::error::Error::source(&e),
        "upstream request failed"
    );
    GateError::UpstreamUnreachable(kind.to_string())
}
