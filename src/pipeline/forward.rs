//! The forward stage: an admitted request goes to its upstream over this worker's pool,
//! within its deadline, in its session's order (`upstream::order`): after the session's
//! requests that were ready before it have been written, and a GET has been answered.
//! It returns the upstream's answer head; `respond` streams the body.

use crate::config::Upstream;
use crate::error::GateError;
use crate::gateway::Live;
use crate::http::fields::Kind;
use crate::runtime::deadline::Deadline;
use crate::upstream::encode::{Outgoing, encode};
use crate::upstream::pool::{PoolError, UpBody};
use http::{Method, Response};

/// The upstream's response head and, when the deadline bounds the body too, what is left
/// of it.
pub struct Answer {
    pub response: Response<UpBody>,
    pub deadline: Option<Deadline>,
    /// How long the upstream took to send the head.
    pub took: std::time::Duration,
}

pub async fn send(
    live: &Live,
    upstream: &Upstream,
    out: Outgoing<'_>,
) -> Result<Answer, GateError> {
    let request = encode(upstream, &out)?;
    // One reading of the clock for the deadline and the upstream's time.
    let started = tokio::time::Instant::now();
    let mut deadline = Deadline::at(started + out.timeout);
    // Waiting for the session's earlier requests counts in the deadline.
    let sent = async {
        let session = out.fields.get(Kind::McpSessionId);
        let mut turn = live.order(upstream).turn(session).await;
        // A GET opens the stream on which the server sends what later requests of the
        // session make it ask: the next one goes once the upstream has answered the GET
        // (its head, which servers send at once), not merely once it is written.
        let opens_stream = out.method == Method::GET;
        let sent = live
            .pool(upstream)
            .send(&out.method, &request, &mut || {
                if !opens_stream {
                    turn.written();
                }
            })
            .await;
        drop(turn);
        sent
    };
    // The answer first: once it is in, the deadline is not looked at again (nor a random
    // branch order drawn), and an answer that comes as the deadline passes is used.
    let response = tokio::select! {
        biased;
        r = sent => r.map_err(|e| upstream_error(&upstream.name, e))?,
        _ = &mut deadline => return Err(GateError::UpstreamTimeout),
    };
    Ok(Answer {
        response,
        deadline: out.body_deadline.then_some(deadline),
        took: started.elapsed(),
    })
}

/// Names the kind of failure for the client; the detail goes to the log only.
fn upstream_error(upstream: &str, e: PoolError) -> GateError {
    let kind = match e {
        PoolError::Connect(_) => "connection failed",
        PoolError::Http(_) => "connection closed before a complete answer",
    };
    tracing::warn!(upstream, error = %e, detail = ?std::error::Error::source(&e), "upstream request failed");
    GateError::UpstreamUnreachable(kind.to_string())
}
