//! The one error type of the request path, and the three methods that say how each case
//! is answered (HTTP status, JSON-RPC code, which side caused it). The error table of
//! docs/behaviour.md reads straight off `status` and `rpc_code`. The JSON-RPC error envelope is written
//! by [`envelope`] and [`envelopes`] here, for every error mcpgate answers (whole answers in
//! `pipeline::respond`, error events inside a relayed stream in `mcp::transport::relay`).

use http::StatusCode;
use serde_json::value::RawValue;

/// JSON-RPC codes mcpgate answers with itself (docs/behaviour.md).
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    // mcpgate's own codes stay in -32000…-32019, which JSON-RPC leaves to implementations
    // and MCP 2026-07-28 gives no meaning but -32002's (resource not found, retired):
    // -32020…-32099 belong to the MCP specification.
    pub const UNAUTHORIZED: i64 = -32001;
    pub const UNAVAILABLE: i64 = -32003;
    pub const UPSTREAM_TIMEOUT: i64 = -32004;
    pub const RATE_LIMITED: i64 = -32005;
    pub const UPSTREAM: i64 = -32006;
    /// A call that needs a person's approval (docs/approvals.md) and was declined, cancelled or
    /// not answered in time, or whose client cannot be asked.
    pub const APPROVAL: i64 = -32007;
    /// MCP 2026-07-28's HeaderMismatch: a mirrored header missing, doubled, or saying
    /// something the body does not.
    pub const HEADER_MISMATCH: i64 = -32020;
    /// MCP 2026-07-28's MissingRequiredClientCapability.
    pub const MISSING_CAPABILITY: i64 = -32021;
    /// MCP 2026-07-28's UnsupportedProtocolVersion.
    pub const UNSUPPORTED_VERSION: i64 = -32022;

    /// The `data.reason` of an error event mcpgate writes into a stream that failed with
    /// `code`.
    pub fn stream_reason(code: i64) -> &'static str {
        match code {
            UPSTREAM_TIMEOUT => "upstream_timeout",
            _ => "upstream_bad_response",
        }
    }

    /// The outcome of a call (audit records, the status page) whose answer is an error
    /// with `code`.
    pub fn outcome(code: i64) -> &'static str {
        match code {
            UPSTREAM_TIMEOUT => "timeout",
            UPSTREAM => "upstream_error",
            _ => "jsonrpc_error",
        }
    }
}

/// One JSON-RPC error answer mcpgate owes a request element.
#[derive(Debug)]
pub struct Refusal {
    pub id: Option<Box<serde_json::value::RawValue>>,
    pub code: i64,
    pub message: String,
    /// The tool named by a refused tools/call, for logs.
    pub tool: Option<String>,
}

/// A JSON-RPC error answer as mcpgate writes it: the id of the request it answers (`null`
/// when unknown), the code and message, and in `error.data` the request id of the log
/// line and, for a refusal to retry, how long to wait.
#[derive(serde::Serialize)]
pub struct Envelope<'a> {
    jsonrpc: &'static str,
    id: Option<&'a RawValue>,
    error: ErrorObject<'a>,
}

#[derive(serde::Serialize)]
struct ErrorObject<'a> {
    code: i64,
    message: &'a str,
    data: ErrorData<'a>,
}

#[derive(serde::Serialize)]
struct ErrorData<'a> {
    request_id: &'a str,
    /// Why, as the log line and the metrics say it (`GateError::reason`).
    reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_ms: Option<u64>,
    /// UnsupportedProtocolVersion: the revisions mcpgate serves, and the one asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    supported: Option<&'static [&'static str]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    requested: Option<&'a str>,
    /// MissingRequiredClientCapability: what the client must declare.
    #[serde(
        rename = "requiredCapabilities",
        skip_serializing_if = "Option::is_none"
    )]
    required: Option<&'a RawValue>,
}

impl<'a> Envelope<'a> {
    pub fn new(
        id: Option<&'a RawValue>,
        code: i64,
        message: &'a str,
        reason: &'a str,
        request_id: &'a str,
    ) -> Self {
        Envelope {
            jsonrpc: "2.0",
            id,
            error: ErrorObject {
                code,
                message,
                data: ErrorData {
                    request_id,
                    reason,
                    retry_after_ms: None,
                    supported: None,
                    requested: None,
                    required: None,
                },
            },
        }
    }

    /// Adds the wait a client should keep before retrying, rounded up to whole ms (so a
    /// client that waits this long is not refused again for being early).
    pub fn retry_after(mut self, wait: Option<std::time::Duration>) -> Self {
        self.error.data.retry_after_ms = wait.map(|d| d.as_micros().div_ceil(1000).max(1) as u64);
        self
    }

    /// Names the revisions served and the one asked for (UnsupportedProtocolVersion).
    pub fn versions(mut self, versions: Option<(&'a str, &'static [&'static str])>) -> Self {
        if let Some((requested, supported)) = versions {
            self.error.data.supported = Some(supported);
            self.error.data.requested = Some(requested);
        }
        self
    }

    /// Names the capabilities the client must declare (MissingRequiredClientCapability).
    pub fn required(mut self, required: Option<&'a RawValue>) -> Self {
        self.error.data.required = required;
        self
    }

    pub fn to_vec(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an envelope of strings and numbers serialises")
    }
}

/// The one error envelope of `err` for the request `id` (not for `Refused`, which has one
/// per element: [`envelopes`]).
pub fn envelope(err: &GateError, id: Option<&RawValue>, request_id: &str) -> Vec<u8> {
    let message = err.to_string();
    Envelope::new(id, err.rpc_code(), &message, err.reason(), request_id)
        .retry_after(err.retry_after())
        .versions(match err {
            GateError::UnsupportedVersion {
                requested,
                supported,
            } => Some((requested, supported)),
            _ => None,
        })
        .required(match err {
            GateError::MissingTasksCapability => Some(tasks_capability()),
            GateError::MissingClientCapability(name) => Some(client_capability(name)),
            _ => None,
        })
        .to_vec()
}

/// The capability object naming one of the client capabilities a server may ask of:
/// `{"elicitation":{}}`, `{"sampling":{}}` or `{"roots":{}}`.
fn client_capability(name: &str) -> &'static RawValue {
    use std::sync::OnceLock;
    static ELICITATION: OnceLock<Box<RawValue>> = OnceLock::new();
    static SAMPLING: OnceLock<Box<RawValue>> = OnceLock::new();
    static ROOTS: OnceLock<Box<RawValue>> = OnceLock::new();
    let (cell, name) = match name {
        "sampling" => (&SAMPLING, "sampling"),
        "roots" => (&ROOTS, "roots"),
        _ => (&ELICITATION, "elicitation"),
    };
    cell.get_or_init(|| {
        RawValue::from_string(format!(r#"{{"{name}":{{}}}}"#)).expect("the capability is JSON")
    })
}

/// The capabilities a client must declare to use tasks: the tasks extension.
fn tasks_capability() -> &'static RawValue {
    static TASKS: std::sync::OnceLock<Box<RawValue>> = std::sync::OnceLock::new();
    TASKS.get_or_init(|| {
        RawValue::from_string(r#"{"extensions":{"io.modelcontextprotocol/tasks":{}}}"#.into())
            .expect("the capability is JSON")
    })
}

/// One envelope per refused request element: an object for a single message, an array
/// for a batch.
pub fn envelopes(refusals: &[Refusal], batch: bool, request_id: &str) -> Vec<u8> {
    let all: Vec<Envelope> = refusals
        .iter()
        .map(|r| Envelope::new(r.id.as_deref(), r.code, &r.message, "policy", request_id))
        .collect();
    if batch || all.len() != 1 {
        serde_json::to_vec(&all)
    } else {
        serde_json::to_vec(&all[0])
    }
    .expect("envelopes serialise")
}

/// Who caused an error; also the label of the error metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Downstream,
    Upstream,
    /// mcpgate itself (its audit trail could not be written, its rate-limit store is
    /// out of reach).
    Gateway,
}

/// An `auth = "oauth"` route's refusal (docs/oauth.md): 401 for a missing or bad token, 403
/// for one whose grants do not reach the route, 503 when the token cannot be checked;
/// each with the `WWW-Authenticate` challenge that tells the client what to do.
#[derive(Debug)]
pub struct Challenge {
    pub status: StatusCode,
    /// None for a 503: the token may be fine.
    pub www_authenticate: Option<http::HeaderValue>,
    /// The log's and metrics' short name of the failure.
    pub reason: &'static str,
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("Not found")]
    NoRoute,
    /// A path-token route whose token is wrong answers exactly like a missing route, so a
    /// guessed URL teaches nothing.
    #[error("Not found")]
    BadPathToken,
    #[error("Unauthorized: a valid bearer token is required")]
    Unauthorized,
    /// The caller's credential was revoked by a reload, or expired, while its call was held
    /// for an answer (an approval, a question): the call ends without running.
    #[error("Unauthorized: the token was revoked or has expired")]
    Revoked,
    #[error("{}", .0.message)]
    OAuth(Box<Challenge>),
    /// A second GET stream for a session that has one open (a stdio upstream's; an HTTP
    /// upstream answers this itself).
    #[error("Conflict: this session's stream is already open")]
    StreamConflict,
    #[error("Method not allowed: use POST, GET or DELETE")]
    MethodNotAllowed,
    #[error("Forbidden: Host not allowed on this listener")]
    HostRefused,
    #[error("Forbidden: Origin not allowed")]
    OriginRefused,
    #[error("Not acceptable: accept application/json or text/event-stream")]
    NotAcceptable,
    #[error("Not acceptable: a GET stream needs Accept: text/event-stream")]
    StreamNotAcceptable,
    #[error("Body too large: the limit is {limit} bytes")]
    BodyTooLarge { limit: u64 },
    #[error("Unsupported media type: {0}")]
    UnsupportedMediaType(&'static str),
    #[error("Parse error: {0}")]
    Parse(String),
    #[error("Invalid request: {0}")]
    InvalidRequest(String),
    #[error("Header mismatch: {0}")]
    HeaderMismatch(String),
    /// A request that claims 2026-07-28 (by its header) without saying so in
    /// `params._meta`, where the per-request envelope must be.
    #[error("Invalid params: {0}")]
    InvalidMeta(String),
    /// A request shaped as 2026-07-28 (its `_meta` names a revision) for a revision a
    /// stdio upstream's HTTP face does not serve.
    #[error("Unsupported protocol version: {requested}")]
    UnsupportedVersion {
        requested: String,
        supported: &'static [&'static str],
    },
    /// A multi round-trip retry whose `requestState` mcpgate did not seal for this caller
    /// and request, or that has expired. Which of those is not said.
    #[error(
        "Invalid params: requestState was not issued by this gateway for this caller and request, or has expired"
    )]
    BadRequestState,
    /// A task request (`tasks/get`, `tasks/update`, `tasks/cancel`) whose `taskId` mcpgate
    /// did not seal for this caller, or that has expired. Which of those is not said.
    #[error(
        "Invalid params: taskId was not issued by this gateway for this caller, or has expired"
    )]
    UnknownTask,
    /// A task request from a client that did not declare the tasks extension, which the
    /// extension requires of it.
    #[error(
        "Missing required client capability: the tasks extension (io.modelcontextprotocol/tasks)"
    )]
    MissingTasksCapability,
    /// A bridged call whose legacy server asked the 2026-07-28 client for something it did
    /// not declare it can answer (`elicitation`, `sampling`, `roots`).
    #[error("Missing required client capability: the server asks for `{0}`")]
    MissingClientCapability(&'static str),
    /// A method 2026-07-28 does not have (one it removed, or one the bridged legacy server
    /// does not know), asked of mcpgate as a 2026-07-28 server: HTTP 404, as that
    /// revision's transport says.
    #[error("Method not found: {0}")]
    MethodNotFound(String),
    /// A request (or a whole batch) refused by policy: HTTP 200 and one JSON-RPC error per
    /// request element, already built by the policy stage.
    #[error("refused by policy")]
    Refused { refusals: Vec<Refusal>, batch: bool },
    #[error("Rate limit exceeded: retry after {} ms", retry_after.as_micros().div_ceil(1000))]
    RateLimited { retry_after: std::time::Duration },
    #[error("Too many calls of this tool in flight (at most {max}): retry later")]
    ConcurrencyLimited { max: u32 },
    #[error(
        "Service unavailable: the audit trail cannot be written, so this call is not forwarded"
    )]
    AuditUnavailable,
    /// `[limits.store]` could not answer and `on_error = "deny"`.
    #[error("Service unavailable: the rate-limit store cannot be reached; retry later")]
    LimitStoreUnavailable,
    /// A bridged call whose server needs input the client cannot be asked for (it accepts
    /// only JSON, or did not declare the capability), or did not give.
    #[error("Input required: {0}")]
    InputNotBridged(String),
    /// A call that needs approval (docs/approvals.md), not approved: `declined`, `cancelled` (by
    /// the person at the client) or `expired` (no answer in time). Never forwarded.
    #[error("Call declined")]
    CallDeclined(&'static str),
    /// A call that needs approval by the person at a client that cannot be asked: why.
    #[error("Approval required: {0}")]
    NotAskable(String),
    /// A retry whose approval is not valid for it (another caller's, another call's,
    /// expired, used already) or whose answer is not the form's one boolean.
    #[error("Invalid params: {0}")]
    BadApproval(String),
    /// `[limits.store]` could not say whether an approval was used already.
    #[error(
        "Service unavailable: the store that keeps approvals single-use cannot be reached; retry later"
    )]
    ApprovalStoreUnavailable,
    /// The `[oauth]` issuer refused to exchange the caller's token for the upstream's
    /// (docs/oauth.md): its reason.
    #[error("Forbidden: the identity provider refused a token for the upstream: {0}")]
    IdentityRefused(String),
    /// The issuer could not exchange the caller's token: why.
    #[error("Service unavailable: no token for the upstream: {0}")]
    IdentityUnavailable(String),
    #[error("Upstream unreachable: {0}")]
    UpstreamUnreachable(String),
    #[error("Upstream error: {0}")]
    UpstreamBadResponse(String),
    #[error("Upstream timeout: no complete answer within the deadline")]
    UpstreamTimeout,
    /// A session id that does not open with the upstream's keys, names an endpoint that
    /// left the set, or whose endpoint cannot be reached: the MCP signal to initialize anew.
    #[error("Session not found: initialize a new session")]
    SessionNotFound,
    #[error("Service unavailable: no healthy endpoint for this upstream")]
    NoHealthyEndpoint,
    /// A stdio upstream runs as many processes as it may.
    #[error("Service unavailable: this server runs its most sessions ({max}); try again later")]
    TooManyProcesses { max: usize },
}

impl GateError {
    pub fn status(&self) -> StatusCode {
        use GateError::*;
        match self {
            NoRoute | BadPathToken | SessionNotFound => StatusCode::NOT_FOUND,
            Unauthorized | Revoked => StatusCode::UNAUTHORIZED,
            OAuth(c) => c.status,
            MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            StreamConflict => StatusCode::CONFLICT,
            HostRefused | OriginRefused | IdentityRefused(_) => StatusCode::FORBIDDEN,
            NotAcceptable | StreamNotAcceptable => StatusCode::NOT_ACCEPTABLE,
            BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Parse(_)
            | InvalidRequest(_)
            | HeaderMismatch(_)
            | InvalidMeta(_)
            | UnsupportedVersion { .. }
            | MissingTasksCapability
            | MissingClientCapability(_) => StatusCode::BAD_REQUEST,
            MethodNotFound(_) => StatusCode::NOT_FOUND,
            Refused { .. }
            | BadRequestState
            | UnknownTask
            | InputNotBridged(_)
            | CallDeclined(_)
            | NotAskable(_)
            | BadApproval(_) => StatusCode::OK,
            RateLimited { .. } | ConcurrencyLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            UpstreamUnreachable(_) | UpstreamBadResponse(_) => StatusCode::BAD_GATEWAY,
            UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            AuditUnavailable
            | LimitStoreUnavailable
            | ApprovalStoreUnavailable
            | IdentityUnavailable(_)
            | NoHealthyEndpoint
            | TooManyProcesses { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The JSON-RPC code of the envelope. `Refused` carries one code per element instead.
    pub fn rpc_code(&self) -> i64 {
        use GateError::*;
        match self {
            NoRoute | BadPathToken | Unauthorized | Revoked | HostRefused | OriginRefused
            | SessionNotFound | IdentityRefused(_) => code::UNAUTHORIZED,
            OAuth(c) if c.status == StatusCode::SERVICE_UNAVAILABLE => code::UNAVAILABLE,
            OAuth(_) => code::UNAUTHORIZED,
            NotAcceptable | StreamNotAcceptable => code::INVALID_REQUEST,
            Parse(_) => code::PARSE_ERROR,
            HeaderMismatch(_) => code::HEADER_MISMATCH,
            UnsupportedVersion { .. } => code::UNSUPPORTED_VERSION,
            MissingTasksCapability | MissingClientCapability(_) => code::MISSING_CAPABILITY,
            MethodNotFound(_) => code::METHOD_NOT_FOUND,
            BadRequestState | UnknownTask | InvalidMeta(_) | BadApproval(_) => code::INVALID_PARAMS,
            CallDeclined(_) | NotAskable(_) => code::APPROVAL,
            MethodNotAllowed
            | StreamConflict
            | BodyTooLarge { .. }
            | UnsupportedMediaType(_)
            | InvalidRequest(_) => code::INVALID_REQUEST,
            Refused { .. } => code::INVALID_REQUEST,
            InputNotBridged(_) => code::INVALID_REQUEST,
            RateLimited { .. } | ConcurrencyLimited { .. } => code::RATE_LIMITED,
            UpstreamUnreachable(_) | UpstreamBadResponse(_) => code::UPSTREAM,
            UpstreamTimeout => code::UPSTREAM_TIMEOUT,
            AuditUnavailable
            | LimitStoreUnavailable
            | ApprovalStoreUnavailable
            | IdentityUnavailable(_)
            | NoHealthyEndpoint
            | TooManyProcesses { .. } => code::UNAVAILABLE,
        }
    }

    pub fn side(&self) -> Side {
        use GateError::*;
        match self {
            UpstreamUnreachable(_)
            | UpstreamBadResponse(_)
            | UpstreamTimeout
            | SessionNotFound
            | NoHealthyEndpoint
            | IdentityUnavailable(_)
            | TooManyProcesses { .. } => Side::Upstream,
            AuditUnavailable | LimitStoreUnavailable | ApprovalStoreUnavailable => Side::Gateway,
            // The issuer could not be asked: not the client's doing.
            OAuth(c) if c.status == StatusCode::SERVICE_UNAVAILABLE => Side::Upstream,
            _ => Side::Downstream,
        }
    }

    /// The outcome of a forwarded call that ended in this error: `timeout` or
    /// `upstream_error` (as [`code::outcome`] reads them from an answer); `None` for an
    /// error mcpgate answered before forwarding.
    pub fn upstream_outcome(&self) -> Option<&'static str> {
        match self {
            GateError::UpstreamTimeout => Some("timeout"),
            e if e.side() == Side::Upstream => Some("upstream_error"),
            _ => None,
        }
    }

    /// How long a refused client should wait before retrying (429 answers).
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            GateError::RateLimited { retry_after } => Some(*retry_after),
            // A concurrency cap frees when a call ends: a short, fixed hint.
            GateError::ConcurrencyLimited { .. } => Some(std::time::Duration::from_secs(1)),
            // The store reconnects by itself within seconds.
            GateError::LimitStoreUnavailable | GateError::ApprovalStoreUnavailable => {
                Some(std::time::Duration::from_secs(1))
            }
            _ => None,
        }
    }

    /// A short stable name for logs and metrics.
    pub fn reason(&self) -> &'static str {
        use GateError::*;
        match self {
            NoRoute => "no_route",
            BadPathToken => "bad_path_token",
            Unauthorized => "unauthorized",
            Revoked => "revoked",
            OAuth(c) => c.reason,
            MethodNotAllowed => "method_not_allowed",
            StreamConflict => "stream_conflict",
            HostRefused => "host_refused",
            OriginRefused => "origin_refused",
            NotAcceptable | StreamNotAcceptable => "not_acceptable",
            BodyTooLarge { .. } => "body_too_large",
            UnsupportedMediaType(_) => "unsupported_media_type",
            Parse(_) => "parse_error",
            InvalidRequest(_) => "invalid_request",
            HeaderMismatch(_) => "header_mismatch",
            BadRequestState => "bad_request_state",
            UnknownTask => "unknown_task",
            MissingTasksCapability | MissingClientCapability(_) => "missing_capability",
            MethodNotFound(_) => "method_not_found",
            InvalidMeta(_) => "invalid_meta",
            UnsupportedVersion { .. } => "unsupported_version",
            Refused { .. } => "policy",
            InputNotBridged(_) => "input_not_bridged",
            RateLimited { .. } => "rate_limited",
            ConcurrencyLimited { .. } => "concurrency_limited",
            UpstreamUnreachable(_) => "upstream_unreachable",
            UpstreamBadResponse(_) => "upstream_bad_response",
            UpstreamTimeout => "upstream_timeout",
            AuditUnavailable => "audit_unavailable",
            LimitStoreUnavailable => "limit_store_unavailable",
            CallDeclined(reason) => reason,
            NotAskable(_) => "approval_not_askable",
            BadApproval(_) => "bad_approval",
            ApprovalStoreUnavailable => "approval_store_unavailable",
            IdentityRefused(_) => "identity_refused",
            IdentityUnavailable(_) => "identity_unavailable",
            SessionNotFound => "session_not_found",
            NoHealthyEndpoint => "no_healthy_endpoint",
            TooManyProcesses { .. } => "too_many_processes",
        }
    }
}
