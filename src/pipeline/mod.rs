//! The request path, one stage per module, called in order from `handle`:
//! route (the snapshot's route index) → `auth` → `origin` → Accept → body limits →
//! `jsonrpc` → `policy` → `forward` → `respond`. `handle` carries a small per-request context and turns any
//! error into an answer in exactly one place.

pub mod auth;
pub mod forward;
pub mod limits;
pub mod origin;
pub mod policy;
pub mod respond;

use crate::config::{Profile, Route, Snapshot};
use crate::error::GateError;
use crate::gateway::Gateway;
use crate::http::body::ClientBody;
use crate::http::body::GateBody;
use crate::http::request::{ClientRequest, Fields, Kind};
use crate::mcp::jsonrpc;
use crate::mcp::tools_list::{ListRewrite, ToolFilter};
use crate::mcp::transport::accept::{self, Want};
use crate::mcp::transport::relay::StreamTiming;
use crate::observe::audit;
use crate::observe::log;
use crate::observe::metrics::Metrics;
use bytes::Bytes;
use http::{Method, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// The client at the other end of a connection, as every request on it needs it.
#[derive(Clone)]
pub struct Peer {
    pub addr: SocketAddr,
    /// The client's address as the `X-Forwarded-For` value, made once per connection.
    pub forwarded_for: http::HeaderValue,
}

impl Peer {
    pub fn new(addr: SocketAddr) -> Peer {
        let text = addr.ip().to_string();
        Peer {
            addr,
            forwarded_for: http::HeaderValue::from_maybe_shared(Bytes::from(text))
                .expect("an IP address is a valid header value"),
        }
    }
}

/// What one request has learned about itself so far; logged when it ends. What comes from
/// the configuration is borrowed from the request's snapshot (`'s`), not cloned: those
/// `Arc`s are shared by both worker threads, and a clone writes their counts.
struct Ctx<'s> {
    request_id: Arc<str>,
    route: Option<&'s Route>,
    token_id: Option<&'s str>,
    /// The JSON-RPC id of a single-message request, for error envelopes.
    rpc_id: Option<Box<RawValue>>,
    /// Borrowed from `KNOWN_METHODS` for the methods MCP defines (the metrics label relies
    /// on it), so the usual ones cost no copy.
    rpc_method: Option<Cow<'static, str>>,
    /// Shared with the call's audit record.
    tool: Option<Arc<str>>,
    /// The client's `Accept`, negotiated once; errors are framed as SSE when it prefers SSE.
    want: Result<Want, accept::NotAcceptable>,
    /// The caller's token hash and expiry, so its streams can be closed on revocation.
    token: Option<([u8; 32], Option<SystemTime>)>,
    proto: &'static str,
    listener: &'s str,
    peer: Peer,
    /// The tools/call elements of the payload, for the audit trail.
    calls: Vec<Arc<audit::Call>>,
    /// How long the upstream took to answer's head, if it was asked.
    upstream_ms: Option<f64>,
    started: Instant,
    /// The audit records' shared fields, once made.
    audit_base: Option<Arc<audit::Base>>,
}

/// Serves one HTTP request that arrived on listener number `listener`. The request uses the
/// configuration current when it arrived until it ends, even if a reload swaps it.
pub async fn handle(
    gw: &Gateway,
    listener: usize,
    peer: Peer,
    req: ClientRequest,
) -> Response<GateBody> {
    let started = Instant::now();
    let snapshot = gw.snapshot_here();
    let tls = snapshot
        .listeners
        .get(listener)
        .is_some_and(|l| l.tls.is_some());
    let mut ctx = Ctx {
        listener: snapshot.listeners.get(listener).map_or("", |l| &l.name),
        peer: peer.clone(),
        calls: Vec::new(),
        upstream_ms: None,
        started,
        audit_base: None,
        token: None,
        proto: if tls { "https" } else { "http" },
        want: accept::negotiate(req.fields.get(Kind::Accept)),
        request_id: request_id(&req.fields),
        route: None,
        token_id: None,
        rpc_id: None,
        rpc_method: None,
        tool: None,
    };
    let http_method = req.method.clone();
    // Every log line of the request carries its id (`logjson` explains how).
    let id = ctx.request_id.clone();
    let span = log::request_span(&id);
    let result = log::in_request(
        id.clone(),
        span.clone(),
        run(gw, &snapshot, listener, &peer, req, &mut ctx),
    )
    .await;
    let (response, reason) = match result {
        Ok(r) => (r, None),
        Err(e) => {
            let sse = ctx.want == Ok(Want::Sse);
            let r = respond::error(&e, ctx.rpc_id.as_deref(), &ctx.request_id, sse);
            (r, Some(e))
        }
    };
    let _entered = span.enter();
    let _in = log::enter_request(&id);
    // One reading of each clock serves the audit record, the log line and the metrics.
    let took = started.elapsed();
    let now = SystemTime::now();
    let head_ms = took.as_secs_f64() * 1000.0;
    let response = match &gw.audit {
        Some(a) => audit_answer(
            a,
            &ctx,
            &http_method,
            response,
            reason.as_ref(),
            Ended {
                started,
                head_ms,
                now,
            },
        ),
        None => response,
    };
    if took > snapshot.log.slow_request {
        let upstream_ms = ctx.upstream_ms.unwrap_or(0.0);
        tracing::warn!(
            total_ms = head_ms,
            upstream_ms,
            gateway_ms = head_ms - upstream_ms,
            route = ctx.route.map_or("-", |r| &*r.template),
            "slow request"
        );
    }
    let route = ctx.route.map_or("-", |r| &*r.template);
    let profile = ctx.route.map_or("-", |r| &*r.profile.name);
    let status = response.status().as_u16();
    match &reason {
        Some(e) if e.side() != crate::error::Side::Downstream => tracing::warn!(
            method = http_method.as_str(), route, profile, token = ctx.token_id.unwrap_or("-"),
            rpc = ctx.rpc_method.as_deref().unwrap_or("-"), tool = ctx.tool.as_deref().unwrap_or("-"),
            status, reason = e.reason(), error = %e, ms = head_ms, "request failed"),
        _ if tracing::enabled!(tracing::Level::INFO) => {
            let line = log::RequestLine {
                method: http_method.as_str(),
                route,
                profile,
                token: ctx.token_id.unwrap_or("-"),
                rpc: ctx.rpc_method.as_deref().unwrap_or("-"),
                tool: ctx.tool.as_deref().unwrap_or("-"),
                status,
                reason: reason.as_ref().map_or("-", GateError::reason),
                ms: crate::mcp::jsontext::to_microsecond(head_ms),
            };
            if !log::request_line(&line, now) {
                tracing::info!(
                    method = line.method,
                    route = line.route,
                    profile = line.profile,
                    token = line.token,
                    rpc = line.rpc,
                    tool = line.tool,
                    status = line.status,
                    reason = line.reason,
                    ms = line.ms,
                    "request"
                );
            }
        }
        _ => {}
    }
    record_metrics(
        &gw.metrics,
        &ctx,
        &http_method,
        status,
        reason.as_ref(),
        took,
    );
    response
}

/// The fields every audit record of this request shares.
fn audit_base(ctx: &Ctx<'_>, method: &str) -> Arc<audit::Base> {
    Arc::new(audit::Base::new(
        ctx.request_id.clone(),
        ctx.listener,
        ctx.route,
        ctx.token_id,
        ctx.peer.addr.ip(),
        method,
    ))
}

/// When a request's answer (or its head) was ready, read once for its records and its log
/// line: the monotonic start and time taken, and the wall clock.
#[derive(Clone, Copy)]
struct Ended {
    started: Instant,
    head_ms: f64,
    now: SystemTime,
}

/// Writes the audit records of a finished request: at once for refusals and failures,
/// or, for forwarded tools/call, when the answer ends (its outcome is in the answer).
fn audit_answer(
    a: &audit::Audit,
    ctx: &Ctx,
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
            let mut r = timed(audit::Record::at(audit_base(ctx, method), None, now));
            r.decision = Some("refuse");
            r.reason = Some(Some(e.reason().to_string()));
            r.total_ms = Some(head_ms);
            a.record(r);
        }
        return response;
    }
    let base = ctx
        .audit_base
        .clone()
        .unwrap_or_else(|| audit_base(ctx, method));
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
            let outcome = match e {
                GateError::UpstreamTimeout => Some("timeout"),
                e if e.side() == crate::error::Side::Upstream => Some("upstream_error"),
                _ => None,
            };
            for mut r in records {
                r.outcome = Some(outcome);
                r.total_ms = Some(head_ms);
                a.record(r);
            }
            response
        }
        None => {
            let sse = response
                .headers()
                .get(header::CONTENT_TYPE)
                .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
            if let (false, GateBody::Full(Some(json))) = (sse, response.body()) {
                // A JSON answer already whole: its outcomes are read now, no tap needed.
                audit::record_whole_answer(a, records, json, started, head_ms);
                return response;
            }
            response.map(|body| {
                GateBody::Stream(BodyExt::boxed_unsync(audit::AuditTap::new(
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

/// MCP methods that may be metric labels as they are; anything else a client invents is
/// counted as "(other)" so labels stay bounded.
const KNOWN_METHODS: [&str; 18] = [
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
fn known_method(method: &str) -> Cow<'static, str> {
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
    ctx: &Ctx,
    http: &Method,
    status: u16,
    error: Option<&GateError>,
    took: std::time::Duration,
) {
    use crate::observe::metrics::{Label, ReasonLabels, RequestKey, UpstreamErrorLabels};
    let route = ctx.route.map_or("-", |r| &*r.template);
    let profile = ctx.route.map_or("-", |r| &*r.profile.name);
    let method = method_label(ctx.rpc_method.as_ref(), http);
    let key = RequestKey {
        route,
        profile,
        method,
        status,
    };
    m.count_request(&key, took);
    if let Some(e) = error {
        match e.side() {
            crate::error::Side::Downstream => m
                .refusals
                .get_or_create(&ReasonLabels { reason: e.reason() })
                .inc(),
            crate::error::Side::Gateway => m
                .refusals
                .get_or_create(&ReasonLabels { reason: e.reason() })
                .inc(),
            crate::error::Side::Upstream => {
                let upstream = ctx.route.as_ref().map_or_else(
                    || Label::from("-"),
                    |r| Label(r.profile.upstream.name.clone()),
                );
                m.upstream_errors
                    .get_or_create(&UpstreamErrorLabels {
                        upstream,
                        kind: e.reason(),
                    })
                    .inc()
            }
        };
    }
    if let Some(tool) = &ctx.tool {
        let outcome = match error {
            None => "forwarded",
            Some(GateError::Refused { .. }) => "refused",
            Some(GateError::UpstreamTimeout) => "timeout",
            Some(e) if e.side() == crate::error::Side::Upstream => "upstream_error",
            Some(_) => "rejected",
        };
        m.count_tool_call(profile, tool, outcome);
    }
}

async fn run<'s>(
    gw: &Gateway,
    snapshot: &'s Arc<Snapshot>,
    listener: usize,
    peer: &Peer,
    req: ClientRequest,
    ctx: &mut Ctx<'s>,
) -> Result<Response<GateBody>, GateError> {
    let route = {
        let m = snapshot
            .match_route(listener, req.target.path())
            .ok_or(GateError::NoRoute)?;
        let route: &'s Arc<Route> = m.route;
        ctx.route = Some(route);
        if route.auth != crate::config::Auth::None {
            // A brute-force guard answers before the token is even looked at.
            snapshot.limits.auth_guard(peer.addr.ip())?;
        }
        let token = auth::authenticate(snapshot, route, m.path_token, &req.fields, SystemTime::now)
            .map_err(|e| snapshot.limits.auth_failed(peer.addr.ip()).unwrap_or(e))?;
        ctx.token_id = token.map(|(_, t)| &*t.id);
        ctx.token = token.map(|(hash, t)| (*hash, t.not_after));
        route
    };
    origin::check(&snapshot.listeners[listener], &req.target, &req.fields)?;
    let profile = &route.profile;
    let upstream = &profile.upstream;
    let stream_timing = StreamTiming {
        keepalive: snapshot.sse_keepalive,
        idle: Some(upstream.stream_idle_timeout),
    };
    let (body_deadline, want) = match req.method {
        Method::POST => return post(gw, snapshot, profile, peer, req, ctx).await,
        Method::GET if !accept::accepts_sse(req.fields.get(Kind::Accept)) => {
            return Err(GateError::StreamNotAcceptable);
        }
        // A GET stream is long-lived: the deadline bounds its head, an idle timeout the rest.
        Method::GET => (false, Want::Sse),
        Method::DELETE => (true, Want::Either),
        _ => return Err(GateError::MethodNotAllowed),
    };
    let caller = limits::Caller {
        token: ctx.token.as_ref().map(|(h, _)| h),
        profile: &profile.name,
        ip: peer.addr.ip(),
    };
    snapshot.limits.check(&caller, &[])?;
    let answer = forward::send(
        upstream,
        forward::Outgoing {
            method: req.method.clone(),
            timeout: upstream.timeout,
            body_deadline,
            query: req.target.query(),
            fields: &req.fields,
            body: Bytes::new(),
            forwarded_for: &peer.forwarded_for,
            proto: ctx.proto,
            request_id: &ctx.request_id,
        },
    )
    .await?;
    let shaping = respond::Shaping {
        want,
        list: None,
        pending: Default::default(),
        batch: false,
        timing: stream_timing,
        token: ctx.token,
    };
    gw.metrics.observe_upstream(&upstream.name, answer.took);
    ctx.upstream_ms = Some(answer.took.as_secs_f64() * 1000.0);
    respond::upstream(gw, answer, shaping, &ctx.request_id).await
}

async fn post(
    gw: &Gateway,
    snapshot: &Arc<Snapshot>,
    profile: &Arc<Profile>,
    peer: &Peer,
    req: ClientRequest,
    ctx: &mut Ctx<'_>,
) -> Result<Response<GateBody>, GateError> {
    let ClientRequest {
        target,
        fields,
        body,
        ..
    } = req;
    let want = ctx.want.map_err(|_| GateError::NotAcceptable)?;
    check_content_headers(&fields)?;
    let limit = snapshot.max_body;
    let declared = fields
        .get_str(Kind::ContentLength)
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(GateError::BodyTooLarge { limit });
    }
    let bytes = match body {
        ClientBody::Read(bytes) if bytes.len() as u64 <= limit => bytes,
        ClientBody::Read(_) | ClientBody::TooLarge => {
            return Err(GateError::BodyTooLarge { limit });
        }
        ClientBody::H2(body) => Limited::new(body, limit as usize)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    GateError::BodyTooLarge { limit }
                } else {
                    GateError::InvalidRequest("the request body could not be read".into())
                }
            })?
            .to_bytes(),
    };

    let payload = jsonrpc::parse(&bytes)?;
    if let jsonrpc::Payload::Single(m) = &payload {
        ctx.rpc_id = m.id.map(ToOwned::to_owned);
        ctx.rpc_method = m.method.as_deref().map(known_method);
        if let Some(jsonrpc::ToolName::Name(t)) = &m.tool {
            ctx.tool = Some(Arc::from(&**t));
        }
    } else {
        ctx.rpc_method = Some(Cow::Borrowed("(batch)"));
    }
    check_mcp_headers(&fields, &payload)?;
    if let Some(a) = &gw.audit {
        ctx.calls = payload
            .messages()
            .iter()
            .filter_map(|m| {
                let tool: Arc<str> = match m.tool.as_ref()? {
                    // A single call's name is the one the request already holds.
                    // (`ctx.tool` is set only for a single message: this one.)
                    jsonrpc::ToolName::Name(n) => match &ctx.tool {
                        Some(t) => t.clone(),
                        None => Arc::from(&**n),
                    },
                    jsonrpc::ToolName::Missing => Arc::from("(missing)"),
                    jsonrpc::ToolName::NotString => Arc::from("(not a string)"),
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

    match policy::check(snapshot, profile, &payload) {
        policy::Verdict::Forward => {}
        policy::Verdict::Refuse { refusals, batch } => {
            for r in &refusals {
                tracing::info!(tool = r.tool.as_deref().unwrap_or("-"), why = %r.message, "refused by policy");
            }
            return Err(GateError::Refused { refusals, batch });
        }
        policy::Verdict::Swallow => {
            tracing::info!("notification refused by policy and not forwarded");
            return Ok(respond::empty(StatusCode::ACCEPTED, &ctx.request_id));
        }
    }

    let tools: smallvec::SmallVec<[&str; 4]> = payload
        .messages()
        .iter()
        .filter_map(|m| match &m.tool {
            Some(jsonrpc::ToolName::Name(n)) => Some(&**n),
            _ => None,
        })
        .collect();
    let caller = limits::Caller {
        token: ctx.token.as_ref().map(|(h, _)| h),
        profile: &profile.name,
        ip: peer.addr.ip(),
    };
    let permits = snapshot.limits.check(&caller, &tools)?;
    let timeout = snapshot
        .limits
        .timeout_for(&tools, profile.upstream.timeout);
    drop(tools);
    let ids = payload.tools_list_ids();
    let list = (!ids.is_empty()).then(|| ListRewrite {
        ids,
        filter: ToolFilter::new(snapshot.clone(), profile.clone()),
    });
    let pending: crate::mcp::transport::relay::PendingIds = payload
        .messages()
        .iter()
        .filter(|m| m.kind == jsonrpc::Kind::Request)
        .filter_map(|m| m.id.map(ToOwned::to_owned))
        .collect();
    // A subscription stream (2026-07-28) lives as long as the client wants: like a GET
    // stream, an idle timeout governs it rather than the request deadline.
    let long_lived = matches!(&payload, jsonrpc::Payload::Single(m) if m.method() == Some("subscriptions/listen"));
    let batch = payload.is_batch();
    drop(payload);
    // From here the calls count as allowed; if the client leaves before their answer is
    // back (hyper then drops this future), the guard still records them.
    let mut unanswered = None;
    if let Some(a) = gw.audit.as_ref().filter(|_| !ctx.calls.is_empty()) {
        let base = audit_base(ctx, ctx.rpc_method.as_deref().unwrap_or("POST"));
        ctx.audit_base = Some(base.clone());
        // The guard holds the calls while it is armed; `handle` gets them back after.
        let u = unanswered.insert(Unanswered {
            audit: a,
            base,
            calls: std::mem::take(&mut ctx.calls),
            started: ctx.started,
            armed: true,
        });
        // Fail closed: a durable call whose `begin` record is not on disk is not forwarded.
        for i in 0..u.calls.len() {
            let call = &u.calls[i];
            if !call.durable {
                continue;
            }
            let mut r = audit::Record::new(audit_base(ctx, "tools/call"), Some(call.clone()));
            r.phase = Some("begin");
            r.decision = Some("allow");
            if let Err(e) = a.durable(r).await {
                tracing::error!(error = %e, tool = %u.calls[i].tool, "durable audit record failed; call refused");
                // Refused: `handle` records that.
                ctx.calls = u.disarm();
                return Err(GateError::AuditUnavailable);
            }
        }
    }
    let upstream = &profile.upstream;
    let answered = async {
        let answer = forward::send(
            upstream,
            forward::Outgoing {
                method: Method::POST,
                body_deadline: !long_lived,
                timeout,
                query: target.query(),
                fields: &fields,
                body: bytes,
                forwarded_for: &peer.forwarded_for,
                proto: ctx.proto,
                request_id: &ctx.request_id,
            },
        )
        .await?;
        let timing = StreamTiming {
            keepalive: snapshot.sse_keepalive,
            idle: long_lived.then_some(upstream.stream_idle_timeout),
        };
        let shaping = respond::Shaping {
            want,
            list,
            pending,
            batch,
            timing,
            token: ctx.token,
        };
        gw.metrics.observe_upstream(&upstream.name, answer.took);
        ctx.upstream_ms = Some(answer.took.as_secs_f64() * 1000.0);
        respond::upstream(gw, answer, shaping, &ctx.request_id).await
    }
    .await;
    // Answered or failed: `handle` records the outcome.
    if let Some(u) = &mut unanswered {
        ctx.calls = u.disarm();
    }
    let response = answered?;
    // A concurrency permit is held until the whole answer, streamed or not, is done.
    Ok(if permits.is_empty() {
        response
    } else {
        response.map(|b| GateBody::Held(Box::new(b), permits))
    })
}

/// The audit records of forwarded calls whose request was dropped before an answer came
/// back: the client went away (or the connection broke) while the upstream worked.
struct Unanswered<'a> {
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

/// `Content-Type` must be JSON (any parameters), and the body must not be encoded: a body
/// mcpgate did not inspect is never forwarded.
fn check_content_headers(fields: &Fields) -> Result<(), GateError> {
    let media = fields
        .get_str(Kind::ContentType)
        .map(crate::http::headval::media_type);
    if !media.is_some_and(|m| m.eq_ignore_ascii_case("application/json")) {
        return Err(GateError::UnsupportedMediaType(
            "Content-Type must be application/json",
        ));
    }
    for v in fields.all(Kind::ContentEncoding) {
        let ok = crate::http::request::visible(v).is_some_and(|v| {
            crate::http::headval::items(v)
                .all(|e| e.is_empty() || e.eq_ignore_ascii_case("identity"))
        });
        if !ok {
            return Err(GateError::UnsupportedMediaType(
                "Content-Encoding is not supported; send the body uncompressed",
            ));
        }
    }
    Ok(())
}

/// `Mcp-Method` / `Mcp-Name` (MCP 2026-07-28) must say what the body says, or an
/// intermediary routing on the header and the server reading the body would disagree.
fn check_mcp_headers(fields: &Fields, payload: &jsonrpc::Payload) -> Result<(), GateError> {
    let method = fields.get(Kind::McpMethod);
    let name = fields.get(Kind::McpName);
    if method.is_none() && name.is_none() {
        return Ok(());
    }
    let jsonrpc::Payload::Single(m) = payload else {
        return Err(GateError::InvalidRequest(
            "Mcp-Method / Mcp-Name headers cannot describe a batch".into(),
        ));
    };
    if let Some(h) = method {
        if m.method().map(str::as_bytes) != Some(h) {
            return Err(GateError::InvalidRequest(
                "the Mcp-Method header does not match the body's method".into(),
            ));
        }
    }
    if let Some(h) = name {
        if m.mcp_name.as_deref().map(str::as_bytes) != Some(h) {
            return Err(GateError::InvalidRequest(
                "the Mcp-Name header does not match the body's params".into(),
            ));
        }
    }
    Ok(())
}

/// Keeps a client's `X-Request-Id` when it is a plain token (1–128 of `A-Za-z0-9._:-`, so
/// it is safe in logs and headers); otherwise makes one: a random prefix per thread and
/// the thread's count, unique without a syscall or a shared counter per request.
fn request_id(fields: &Fields) -> Arc<str> {
    if let Some(b) = fields.get(Kind::XRequestId) {
        if (1..=128).contains(&b.len())
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || b"._:-".contains(c))
        {
            return Arc::from(String::from_utf8_lossy(b));
        }
    }
    thread_local! {
        /// This thread's random prefix and its count of ids made: the pair is unique
        /// without a counter shared (and contended) between worker threads.
        static NEXT: std::cell::Cell<(u64, u64)> = std::cell::Cell::new((random_u64(), 0));
    }
    let (prefix, n) = NEXT.with(|next| {
        let (prefix, n) = next.get();
        next.set((prefix, n.wrapping_add(1)));
        (prefix, n)
    });
    // Not `format!`: it costs more than the rest of this function many times over.
    let mut pair = [0u8; 16];
    pair[..8].copy_from_slice(&prefix.to_be_bytes());
    pair[8..].copy_from_slice(&n.to_be_bytes());
    let mut id = [0u8; 32];
    let id = crate::config::token::hex_into(&mut id, &pair);
    Arc::from(std::str::from_utf8(id).unwrap_or_default())
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    let _ = getrandom::fill(&mut b);
    u64::from_le_bytes(b)
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

    use http::{HeaderMap, HeaderValue};

    #[test]
    fn request_ids() {
        let mut h = HeaderMap::new();
        let a = request_id(&Fields::from_map(&h));
        assert_eq!(a.len(), 32);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        // The first half is fixed per thread, the second counts up.
        let b = request_id(&Fields::from_map(&h));
        assert_eq!(a[..16], b[..16]);
        assert!(
            u64::from_str_radix(&b[16..], 16).unwrap() > u64::from_str_radix(&a[16..], 16).unwrap()
        );
        assert_ne!(a, request_id(&Fields::from_map(&h)));
        // Another thread has a prefix of its own (64 random bits), so its ids never meet ours
        // even though its count starts where ours did.
        let other = std::thread::spawn(|| request_id(&Fields::new()))
            .join()
            .unwrap();
        assert_ne!(other[..16], a[..16]);
        h.insert("x-request-id", HeaderValue::from_static("abc-1.2:3"));
        assert_eq!(&*request_id(&Fields::from_map(&h)), "abc-1.2:3");
        h.insert(
            "x-request-id",
            HeaderValue::from_static("bad id\twith spaces"),
        );
        assert_eq!(request_id(&Fields::from_map(&h)).len(), 32);
    }

    #[test]
    fn content_headers() {
        let mut h = HeaderMap::new();
        assert!(check_content_headers(&Fields::from_map(&h)).is_err());
        h.insert(
            "content-type",
            HeaderValue::from_static("Application/JSON; charset=utf-8"),
        );
        assert!(check_content_headers(&Fields::from_map(&h)).is_ok());
        h.insert("content-encoding", HeaderValue::from_static("identity"));
        assert!(check_content_headers(&Fields::from_map(&h)).is_ok());
        h.insert("content-encoding", HeaderValue::from_static("gzip"));
        assert_eq!(
            check_content_headers(&Fields::from_map(&h))
                .unwrap_err()
                .status(),
            415
        );
        h.remove("content-encoding");
        h.insert("content-type", HeaderValue::from_static("text/plain"));
        assert_eq!(
            check_content_headers(&Fields::from_map(&h))
                .unwrap_err()
                .status(),
            415
        );
    }
}
