//! The last stage: every request ends here, answered or refused. A `GateError` becomes its
//! answer (`respond::error`), the audit records are written (or handed to the answer's
//! tap), and the request's log line and metrics are counted, each from one reading of the
//! clocks.

use super::Ctx;
use super::audit::{self, Ended};
use super::respond;
use crate::error::{GateError, Side};
use crate::gateway::{Gateway, Live};
use crate::http::body::GateBody;
use crate::mcp::transport::accept::Want;
use crate::observe::combined;
use crate::observe::log;
use crate::observe::metrics::Metrics;
use crate::observe::trace;
use http::{Method, Response};
use std::borrow::Cow;
use std::time::SystemTime;

pub(super) fn finish(
    gw: &Gateway,
    live: &Live,
    ctx: &Ctx<'_>,
    method: &Method,
    result: Result<Response<GateBody>, GateError>,
) -> Response<GateBody> {
    let (response, reason) = match result {
        Ok(r) => (r, None),
        Err(e) => {
            let sse = ctx.want == Ok(Want::Sse);
            let r = respond::error(&e, ctx.rpc_id.as_deref(), &ctx.request_id, sse);
            (r, Some(e))
        }
    };
    let took = ctx.started.elapsed();
    let now = SystemTime::now();
    let head_ms = took.as_secs_f64() * 1000.0;
    let response = match &gw.audit {
        Some(a) => {
            let at = Ended {
                started: ctx.started,
                head_ms,
                now,
            };
            audit::record(a, ctx, method, response, reason.as_ref(), at)
        }
        None => response,
    };
    let status = response.status().as_u16();
    if let Some(access) = &ctx.access {
        log_combined(ctx, access, method, &response, now);
    }
    log_request(live, ctx, method, status, reason.as_ref(), head_ms, now);
    if let (Some(tracer), Some(trace)) = (&gw.tracer, &ctx.trace)
        && trace.sampled
    {
        tracer.end(span(ctx, trace, method, status, reason.as_ref(), took, now));
    }
    record_metrics(&gw.metrics, ctx, method, status, reason.as_ref(), took, now);
    response
}

/// The request's line in the log: `request` (the access log) or, for a failure that is
/// not the client's, `request failed` at warn; and `slow request` past the threshold.
fn log_request(
    live: &Live,
    ctx: &Ctx<'_>,
    method: &Method,
    status: u16,
    error: Option<&GateError>,
    head_ms: f64,
    now: SystemTime,
) {
    let route = ctx.route.map_or("-", |r| &*r.template);
    if head_ms > live.log.slow_request.as_secs_f64() * 1000.0 {
        let upstream_ms = ctx.upstream_ms.unwrap_or(0.0);
        tracing::warn!(
            total_ms = head_ms,
            upstream_ms,
            gateway_ms = head_ms - upstream_ms,
            route,
            "slow request"
        );
    }
    let line = log::RequestLine {
        method: method.as_str(),
        client: ctx.peer.addr.ip(),
        route,
        profile: ctx.route.map_or("-", |r| &*r.profile.name),
        token: ctx.token_id.unwrap_or("-"),
        sub: ctx
            .caller
            .as_ref()
            .and_then(|c| c.sub.as_deref())
            .unwrap_or("-"),
        client_id: ctx
            .caller
            .as_ref()
            .and_then(|c| c.client_id.as_deref())
            .unwrap_or("-"),
        rpc: ctx.rpc_method.as_deref().unwrap_or("-"),
        tool: ctx.tool.as_deref().unwrap_or("-"),
        status,
        reason: error.map_or("-", GateError::reason),
        ms: wire::json::text::to_microsecond(head_ms),
    };
    match error {
        Some(e) if e.side() != Side::Downstream => log::request_failed(&line, e),
        _ => log::request(&line, now),
    }
}

/// The request's span, as it ended.
fn span(
    ctx: &Ctx<'_>,
    trace: &trace::Context,
    method: &Method,
    status: u16,
    error: Option<&GateError>,
    took: std::time::Duration,
    now: SystemTime,
) -> trace::Record {
    let caller = ctx.caller.as_deref();
    trace::Record {
        context: trace.clone(),
        start: now.checked_sub(took).unwrap_or(now),
        end: now,
        method: http_method_label(method),
        route: ctx.route.map(|r| Box::from(&*r.template)),
        profile: ctx.route.map(|r| Box::from(&*r.profile.name)),
        token_id: ctx.token_id.map(Box::from),
        sub: caller.and_then(|c| c.sub.as_deref()).map(Box::from),
        client_id: caller.and_then(|c| c.client_id.as_deref()).map(Box::from),
        rpc: ctx.rpc_method.clone(),
        tool: ctx.tool.clone(),
        status,
        outcome: error.map_or("ok", GateError::reason),
        failed: error.is_some_and(|e| e.side() != Side::Downstream),
        request_id: ctx.request_id.clone(),
        peer: ctx.peer.addr.ip(),
        total_ms: took.as_secs_f64() * 1000.0,
        upstream_ms: ctx.upstream_ms,
    }
}

/// The request's line in the combined access log (`observe::combined`).
fn log_combined(
    ctx: &Ctx<'_>,
    access: &combined::Access,
    method: &Method,
    response: &Response<GateBody>,
    now: SystemTime,
) {
    use http_body::Body as _;
    let line = combined::Line {
        peer: ctx.peer.addr.ip(),
        user: ctx.who(),
        now,
        method: method.as_str(),
        path: ctx.route.map_or("-", |r| &*r.template),
        access,
        status: response.status().as_u16(),
        bytes: response.body().size_hint().exact().unwrap_or(0),
    };
    thread_local! {
        static LINE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let _ = LINE.try_with(|buf| {
        if let Ok(mut buf) = buf.try_borrow_mut() {
            combined::format(&mut buf, &line);
            combined::write(&buf);
        }
    });
}

/// MCP methods that may be metric labels as they are; anything else a client invents is
/// counted as "(other)" so labels stay bounded.
const KNOWN_METHODS: [&str; 20] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "subscriptions/listen",
    "tasks/get",
    "tasks/result",
    "tasks/update",
    "tasks/cancel",
    "(batch)",
];

/// The label for an HTTP method: the standard ones by name, any other a client invents as
/// "(other)", so labels stay bounded.
fn http_method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "(other)",
    }
}

/// A JSON-RPC method as the request keeps it: borrowed from [`KNOWN_METHODS`] when MCP
/// defines it, so [`method_label`] need not look it up again.
pub(super) fn known_method(method: &str) -> Cow<'static, str> {
    match KNOWN_METHODS.iter().find(|k| **k == method) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(method.to_string()),
    }
}

/// The metrics label of a request's method: a known JSON-RPC method as it is, any other
/// notification as `notifications`, anything else a client invents as `(other)`, and the
/// HTTP method when the body had none.
fn method_label(rpc: Option<&Cow<'static, str>>, http: &Method) -> &'static str {
    match rpc {
        Some(Cow::Borrowed(known)) => known,
        Some(Cow::Owned(m)) if m.starts_with("notifications/") => "notifications",
        Some(Cow::Owned(_)) => "(other)",
        None => http_method_label(http),
    }
}

fn record_metrics(
    m: &Metrics,
    ctx: &Ctx<'_>,
    http: &Method,
    status: u16,
    error: Option<&GateError>,
    took: std::time::Duration,
    now: SystemTime,
) {
    use crate::observe::metrics::{Decision, Ending, Label, RequestKey, RowNote};
    let route = ctx.route.map_or("-", |r| &*r.template);
    let profile = ctx.route.map_or("-", |r| &*r.profile.name);
    let method = method_label(ctx.rpc_method.as_ref(), http);
    let key = RequestKey {
        route,
        profile,
        method,
        status,
    };
    let ending = match error {
        None => Ending::Answered,
        Some(e) if e.side() == Side::Upstream => Ending::UpstreamError,
        Some(e) => Ending::Refused(e.reason()),
    };
    // Requests no route took have no profile: the status page counts only routed ones.
    let row = ctx.route.map(|_| RowNote {
        tool: ctx.tool.as_deref().filter(|_| method == "tools/call"),
        ending,
    });
    m.count_request(&key, took, row.as_ref());
    if let Some(e) = error {
        match e.side() {
            Side::Downstream | Side::Gateway => m.count_refusal(e.reason()),
            Side::Upstream => {
                let upstream = ctx.route.as_ref().map_or_else(
                    || Label::from("-"),
                    |r| Label(r.profile.upstream.name.clone()),
                );
                m.count_upstream_error(upstream, e.reason())
            }
        };
    }
    if let Some(tool) = &ctx.tool {
        let outcome = match error {
            None => "forwarded",
            Some(GateError::Refused { .. }) => "refused",
            Some(e) => e.upstream_outcome().unwrap_or("rejected"),
        };
        let decision = Decision {
            at: now,
            request_id: ctx.request_id.clone(),
            caller: ctx.who().into(),
            client: ctx.peer.addr.ip(),
            profile: profile.into(),
            tool: tool.clone(),
            outcome,
            reason: error.map_or("-", GateError::reason),
            status,
        };
        m.count_tool_call(profile, tool, decision);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every method MCP defines is its own label; other notifications, invented methods
    /// and bodiless requests are labelled as documented.
    #[test]
    fn method_labels() {
        for known in KNOWN_METHODS {
            assert_eq!(
                method_label(Some(&known_method(known)), &Method::POST),
                known
            );
        }
        let label = |m: &str| method_label(Some(&known_method(m)), &Method::POST).to_string();
        assert_eq!(label("notifications/initialized"), "notifications");
        assert_eq!(label("tools/calls"), "(other)");
        assert_eq!(label("Tools/call"), "(other)");
        assert_eq!(method_label(None, &Method::GET), "GET");
    }
}
