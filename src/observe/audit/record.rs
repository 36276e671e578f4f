//! What a record holds (the request's shared fields, the call, the decision, the outcome
//! and timings) and its JSON line, written by hand without the chain link, which only the
//! writer knows.

use std::sync::Arc;
use std::time::SystemTime;

/// One tools/call of a request, as the audit trail needs it.
#[derive(Debug, Clone)]
pub struct Call {
    /// The JSON-RPC id as raw JSON text (`None` for a notification).
    pub rpc_id: Option<String>,
    pub tool: Arc<str>,
    /// JSON text, from [`redact_arguments`]; `None` is written as `null`.
    pub arguments: Option<Box<str>>,
    pub durable: bool,
}

/// The fields every record of one request shares. The names come from the configuration,
/// and are copied into one buffer of the record's own: holding the configuration's `Arc`s
/// instead would write counts both worker threads (and the writer) share, per request.
#[derive(Debug)]
pub struct Base {
    pub request_id: Arc<str>,
    pub client: std::net::IpAddr,
    /// listener, route template, profile, method and token id, one after the other.
    pub(super) text: String,
    /// Where each of the first four ends in `text`; the token id, if any, is the rest.
    pub(super) ends: [usize; 4],
    pub(super) token: bool,
    /// An OAuth caller's `sub` and `client_id`, written when the request came with an
    /// access token.
    pub(super) caller: Option<Box<OAuthCaller>>,
    /// A multi round-trip retry's first request id (MCP 2026-07-28): the records of every
    /// round of one call carry it, so they read as one.
    pub(super) first_request_id: Option<Box<str>>,
    /// The member of a federated profile the request went to (docs/federation.md).
    pub(super) member: Option<Box<str>>,
}

/// `sub` and `client_id` of an OAuth caller.
#[derive(Debug)]
pub struct OAuthCaller {
    pub sub: Option<Box<str>>,
    pub client_id: Option<Box<str>>,
}

impl Base {
    /// `route`: the matched route, whose template and profile name are written (`-`
    /// without one). `method`: the JSON-RPC method, or the HTTP method when there is none.
    pub fn new(
        request_id: Arc<str>,
        listener: &str,
        route: Option<&crate::config::Route>,
        token: Option<&str>,
        client: std::net::IpAddr,
        method: &str,
    ) -> Base {
        let parts = [
            listener,
            route.map_or("-", |r| &r.template),
            route.map_or("-", |r| &r.profile.name),
            method,
        ];
        let mut text = String::with_capacity(
            parts.iter().map(|p| p.len()).sum::<usize>() + token.map_or(0, str::len),
        );
        let mut ends = [0; 4];
        for (end, part) in ends.iter_mut().zip(parts) {
            text.push_str(part);
            *end = text.len();
        }
        text.push_str(token.unwrap_or(""));
        Base {
            request_id,
            client,
            text,
            ends,
            token: token.is_some(),
            caller: None,
            first_request_id: None,
            member: None,
        }
    }

    /// The same, for a request a federated profile sent to its member `member`.
    pub fn with_member(mut self, member: Option<&str>) -> Base {
        self.member = member.map(Box::from);
        self
    }

    /// The same, for a request an OAuth access token let in: its `sub` and client.
    /// The same, for a round of a multi round-trip request whose first round was
    /// `first`.
    pub fn with_first_request(mut self, first: Option<&str>) -> Base {
        self.first_request_id = first.map(Box::from);
        self
    }

    pub fn with_caller(mut self, sub: Option<&str>, client_id: Option<&str>) -> Base {
        self.caller = Some(Box::new(OAuthCaller {
            sub: sub.map(Box::from),
            client_id: client_id.map(Box::from),
        }));
        self
    }

    pub fn listener(&self) -> &str {
        &self.text[..self.ends[0]]
    }

    pub fn route(&self) -> &str {
        &self.text[self.ends[0]..self.ends[1]]
    }

    pub fn profile(&self) -> &str {
        &self.text[self.ends[1]..self.ends[2]]
    }

    pub fn method(&self) -> &str {
        &self.text[self.ends[2]..self.ends[3]]
    }

    pub fn token(&self) -> Option<&str> {
        self.token.then(|| &self.text[self.ends[3]..])
    }
}

/// One line of the trail, besides the chain's own `genesis` and `continued` lines. A
/// field left `None` is not written; `Some(None)` is written as `null`.
#[derive(Debug, Clone)]
pub struct Record {
    pub base: Arc<Base>,
    pub time: SystemTime,
    /// `tool`, `rpc_id` and `arguments`, on the records of a tools/call.
    pub call: Option<Arc<Call>>,
    pub phase: Option<&'static str>,
    pub decision: Option<&'static str>,
    pub reason: Option<Option<String>>,
    pub status: Option<u16>,
    pub upstream_ms: Option<Option<f64>>,
    pub gateway_ms: Option<f64>,
    pub outcome: Option<Option<&'static str>>,
    pub total_ms: Option<f64>,
    /// A pinned tool's or prompt's definition seen for the first time (docs/pinning.md).
    pub pin: Option<Box<PinNote>>,
    /// A step of a call's approval (docs/approvals.md).
    pub approval: Option<Box<ApprovalNote>>,
}

/// What an approval record says: the rule that holds the call (its number among the
/// `[[approvals]]`), who is asked (`client` or `admin`), and who answered, once known.
#[derive(Debug, Clone)]
pub struct ApprovalNote {
    pub rule: usize,
    pub approver: &'static str,
    pub by: Option<String>,
}

/// What a pin record says: what changed (`kind`: `tool` or `prompt`), the upstream's
/// `pin` mode, and the approved and the new fingerprints (hex).
#[derive(Debug, Clone)]
pub struct PinNote {
    pub kind: &'static str,
    pub mode: &'static str,
    pub old: Option<String>,
    pub new: String,
}

impl Record {
    /// The JSON-RPC id of its call, as raw JSON text.
    pub(super) fn rpc_id(&self) -> Option<&str> {
        self.call.as_ref()?.rpc_id.as_deref()
    }

    /// A record of the request with nothing but its shared fields and the time, now.
    pub fn new(base: Arc<Base>, call: Option<Arc<Call>>) -> Record {
        Record::at(base, call, SystemTime::now())
    }

    /// A record of the request with nothing but its shared fields and `time`.
    pub fn at(base: Arc<Base>, call: Option<Arc<Call>>, time: SystemTime) -> Record {
        Record {
            base,
            time,
            call,
            phase: None,
            decision: None,
            reason: None,
            status: None,
            upstream_ms: None,
            gateway_ms: None,
            outcome: None,
            total_ms: None,
            pin: None,
            approval: None,
        }
    }
}

/// Appends `record` as one JSON object, its fields in name order, exactly as serde_json
/// would write the same object, but for `prev` (the chain link): the returned offset is
/// where its member, `"prev":"…",`, goes. Written by hand because it runs for every
/// audited call; a unit test holds it to serde_json's output.
pub(super) fn write_line(out: &mut String, record: &Record) -> usize {
    use wire::json::text::{push_compact, push_ms, push_plain, push_str};
    let r = record;
    let b = &*r.base;
    out.push('{');
    if let Some(a) = &r.approval {
        out.push_str("\"approval\":");
        push_approval(out, a);
        out.push(',');
    }
    if let Some(c) = &r.call {
        out.push_str("\"arguments\":");
        match &c.arguments {
            Some(text) => push_compact(out, text),
            None => out.push_str("null"),
        }
        out.push(',');
    }
    out.push_str("\"client\":\"");
    wire::json::text::push_ip(out, b.client);
    out.push('"');
    if let Some(c) = &b.caller {
        key(out, "client_id");
        optional_str(out, c.client_id.as_deref());
    }
    if let Some(d) = r.decision {
        key(out, "decision");
        push_plain(out, d);
    }
    if let Some(f) = &b.first_request_id {
        key(out, "first_request_id");
        push_str(out, f);
    }
    if let Some(g) = r.gateway_ms {
        key(out, "gateway_ms");
        push_ms(out, g);
    }
    key(out, "listener");
    push_str(out, b.listener());
    key(out, "method");
    push_str(out, b.method());
    if let Some(o) = r.outcome {
        key(out, "outcome");
        optional_str(out, o);
    }
    if let Some(p) = r.phase {
        key(out, "phase");
        push_plain(out, p);
    }
    if let Some(p) = &r.pin {
        key(out, "pin");
        push_pin(out, p);
    }
    // `prev` is never first or last: `client` comes before it and `time` after.
    out.push(',');
    let prev_at = out.len();
    write_tail(out, r);
    prev_at
}

/// The fields of a record from `profile` on, and its closing brace.
fn write_tail(out: &mut String, r: &Record) {
    use wire::json::text::{push_compact, push_ms, push_plain, push_rfc3339, push_str, push_u64};
    let b = &*r.base;
    out.push_str("\"profile\":");
    push_str(out, b.profile());
    if let Some(reason) = &r.reason {
        key(out, "reason");
        optional_str(out, reason.as_deref());
    }
    key(out, "request_id");
    push_plain(out, &b.request_id);
    key(out, "route");
    push_str(out, b.route());
    if let Some(c) = &r.call {
        // The id as the client wrote it: valid JSON, parsed with the request.
        key(out, "rpc_id");
        match c.rpc_id.as_deref() {
            Some(id) => push_compact(out, id),
            None => out.push_str("null"),
        }
    }
    if let Some(status) = r.status {
        key(out, "status");
        push_u64(out, status.into());
    }
    if let Some(c) = &b.caller {
        key(out, "sub");
        optional_str(out, c.sub.as_deref());
    }
    out.push_str(",\"time\":\"");
    push_rfc3339(out, r.time, 3);
    out.push('"');
    key(out, "token");
    optional_str(out, b.token());
    if let Some(c) = &r.call {
        key(out, "tool");
        push_str(out, &c.tool);
    }
    if let Some(t) = r.total_ms {
        key(out, "total_ms");
        push_ms(out, t);
    }
    if let Some(m) = &b.member {
        key(out, "upstream");
        push_str(out, m);
    }
    if let Some(u) = r.upstream_ms {
        key(out, "upstream_ms");
        match u {
            Some(u) => push_ms(out, u),
            None => out.push_str("null"),
        }
    }
    out.push('}');
}

/// `,"name":`, before every field of a record but the first (`approval`, `arguments` or
/// `client`).
fn key(out: &mut String, name: &str) {
    out.push_str(",\"");
    out.push_str(name);
    out.push_str("\":");
}

/// A string, or `null`.
fn optional_str(out: &mut String, v: Option<&str>) {
    match v {
        Some(v) => wire::json::text::push_str(out, v),
        None => out.push_str("null"),
    }
}

/// An approval step's `{"approver","by","rule"}`.
fn push_approval(out: &mut String, a: &ApprovalNote) {
    use wire::json::text::{push_plain, push_str, push_u64};
    out.push_str("{\"approver\":");
    push_plain(out, a.approver);
    out.push_str(",\"by\":");
    match a.by.as_deref() {
        Some(by) => push_str(out, by),
        None => out.push_str("null"),
    }
    out.push_str(",\"rule\":");
    push_u64(out, a.rule as u64);
    out.push('}');
}

/// A pin record's `{"kind","mode","new","old"}`.
fn push_pin(out: &mut String, p: &PinNote) {
    use wire::json::text::push_plain;
    out.push_str("{\"kind\":");
    push_plain(out, p.kind);
    out.push_str(",\"mode\":");
    push_plain(out, p.mode);
    out.push_str(",\"new\":");
    push_plain(out, &p.new);
    out.push_str(",\"old\":");
    match &p.old {
        Some(old) => push_plain(out, old),
        None => out.push_str("null"),
    }
    out.push('}');
}
