//! The configuration file as serde types, one struct per TOML table. These mirror the file
//! exactly (unknown keys are errors) and carry spans so that `compile` can point at the
//! line of a bad value. Nothing on the request path reads these types.

use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

pub type S<T> = Spanned<T>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// Listeners: where mcpgate accepts connections.
    #[serde(default)]
    pub listen: Vec<S<RawListen>>,
    /// Admin listener: health, readiness, metrics, reload. Absent: none.
    pub admin: Option<S<RawAdmin>>,
    /// Connection hygiene and shutdown.
    pub server: Option<S<RawServer>>,
    /// The operational log.
    pub log: Option<S<RawLog>>,
    /// MCP servers to forward to, by name.
    #[serde(default)]
    pub upstreams: BTreeMap<String, S<RawUpstream>>,
    /// Global tool rules.
    #[serde(default)]
    pub tools: Option<RawTools>,
    /// Sets of rights, by name.
    #[serde(default)]
    pub profiles: BTreeMap<String, S<RawProfile>>,
    /// Listener + path → profile.
    #[serde(default)]
    pub routes: Vec<S<RawRoute>>,
    /// Token hashes and the profiles each may use.
    #[serde(default)]
    pub tokens: Vec<S<RawToken>>,
    /// Not spanned: toml cannot give a span to a table only dotted keys define
    /// (`[limits.store]` or `[[limits.rate]]` without a `[limits]` line).
    pub limits: Option<RawLimits>,
    /// Streaming behaviour shared by all listeners.
    pub transport: Option<S<RawTransport>>,
    /// The audit trail.
    pub audit: Option<S<RawAudit>>,
    /// OAuth 2.1 resource server: the issuer whose access tokens `auth = "oauth"` routes
    /// accept, and the grants that map them to profiles.
    pub oauth: Option<S<RawOAuth>>,
    /// Traces exported over OTLP/HTTP.
    pub telemetry: Option<S<RawTelemetry>>,
    /// The pins file of tool pinning (docs/pinning.md).
    pub pins: Option<S<RawPins>>,
    /// Calls a person confirms before they run (docs/approvals.md), in order: the first rule that
    /// matches a call decides.
    #[serde(default)]
    pub approvals: Vec<S<RawApproval>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApproval {
    /// The profiles the rule applies to; absent: every profile.
    pub profiles: Option<Vec<S<String>>>,
    /// Tool name globs (as the profile's clients name the tools).
    pub tools: Option<Vec<S<String>>>,
    /// Hints that must all hold, like `deny_annotations`.
    pub annotations: Option<S<BTreeMap<String, S<toml::Value>>>>,
    /// What the person is asked: `{name}` and `{/pointer}` filled from the arguments.
    pub message: Option<S<String>>,
    /// `client` (default): the person at the client; `admin`: an operator.
    pub approver: Option<S<String>>,
    /// How long a call waits for the answer. Default 5m.
    pub timeout: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPins {
    /// The approved definitions, written by `mcpgate pin approve`.
    pub path: S<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListen {
    pub name: S<String>,
    /// `IP:PORT`, e.g. `127.0.0.1:8001`.
    pub addr: S<String>,
    /// `{ cert, key, client_ca? }`: PEM files; `client_ca` requires client certificates.
    pub tls: Option<S<RawTls>>,
    /// `Host` values accepted: names (any port), `name:port`, or `"*"`. Default: on a
    /// loopback address only localhost names; elsewhere any.
    pub allowed_hosts: Option<Vec<S<String>>>,
    /// `Origin` values accepted when a browser sends one: `scheme://host[:port]`, with
    /// `:*` for any port, or `"*"`. Default: on a loopback address only localhost origins;
    /// elsewhere none. A request without `Origin` is never refused for it.
    pub allowed_origins: Option<Vec<S<String>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    /// `http://host:port/path` of the MCP endpoint (or `https://…`, `unix:/socket:/path`).
    pub url: Option<S<String>>,
    /// Replicas, each written as `url` is; instead of `url`.
    pub endpoints: Option<S<Vec<S<String>>>>,
    /// How requests without a session pick an endpoint: `least_requests` (default) or
    /// `round_robin`.
    pub balance: Option<S<String>>,
    /// Active health checks: a JSON-RPC ping to each endpoint.
    pub health: Option<S<RawHealth>>,
    /// Passive checks: an endpoint that fails this often in a row is left out for a while.
    pub outlier: Option<S<RawOutlier>>,
    /// The key (or keys, newest first) that seal session ids: 32 bytes, base64.
    pub session_key: Option<S<toml::Value>>,
    /// Which generation of MCP the upstream speaks: `auto` (probed; the default),
    /// `modern` (2026-07-28) or `legacy` (sessions).
    pub protocol: Option<S<String>>,
    /// A stdio MCP server: the program and its arguments; instead of `url`.
    pub command: Option<S<Vec<S<String>>>>,
    /// The child's environment beyond PATH, HOME and LANG; values may hold secrets.
    #[serde(default)]
    pub env: BTreeMap<String, S<String>>,
    /// The child's working folder; default the configuration's folder.
    pub cwd: Option<S<String>>,
    /// `per_client` (default): a process per MCP session; `shared`: one for all.
    pub sessions: Option<S<String>>,
    /// Processes at most (per_client); default 16.
    pub max_processes: Option<S<u32>>,
    /// A session with no request for this long ends; default `10m`.
    pub idle_timeout: Option<S<String>>,
    /// Default `5s`.
    pub connect_timeout: Option<S<String>>,
    /// Deadline of one request; default `60s`.
    pub timeout: Option<S<String>>,
    /// Long-lived streams (GET, `subscriptions/listen`) end after this long without a byte
    /// from the upstream; default `5m`.
    pub stream_idle_timeout: Option<S<String>>,
    /// Headers added to every upstream request; values may hold `${env:NAME}` / `${file:PATH}`.
    #[serde(default)]
    pub headers: BTreeMap<String, S<String>>,
    /// For an `https://` url: an extra CA, the name to verify, a client certificate.
    pub tls: Option<S<RawUpstreamTls>>,
    /// Tool pinning (docs/pinning.md): `off` (default), `warn` or `enforce`.
    pub pin: Option<S<String>>,
    /// Who is calling, told to the upstream without the caller's token (docs/oauth.md).
    pub identity: Option<S<RawIdentity>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIdentity {
    /// `jwt` or `none` (default).
    pub mode: Option<S<String>>,
    /// `iss` of the tokens mcpgate signs.
    pub issuer: Option<S<String>>,
    /// `aud` of the tokens; default the upstream's url.
    pub audience: Option<S<String>>,
    /// The signing key (PEM, with `${file:…}`), or several, newest first.
    pub key: Option<S<toml::Value>>,
    /// A path on the MCP listeners where the public keys are served as a JWKS.
    pub jwks_path: Option<S<String>>,
    /// exchange: `resource` (RFC 8707) asked for, beside `audience`.
    pub resource: Option<S<String>>,
    /// exchange: the scope asked for.
    pub scope: Option<S<String>>,
    /// exchange: mcpgate's client at the issuer.
    pub client_id: Option<S<String>>,
    /// exchange: its secret (`${env:…}` / `${file:…}`).
    pub client_secret: Option<S<String>>,
    /// exchange: instead of a secret, its private key (PEM), for `private_key_jwt`.
    pub client_key: Option<S<String>>,
    /// exchange: `token_exchange` (RFC 8693, default) or `on_behalf_of` (Entra ID).
    pub grant: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealth {
    /// Default `5s`.
    pub interval: Option<S<String>>,
    /// Default `1s`.
    pub timeout: Option<S<String>>,
    /// Failed pings in a row that make an endpoint unhealthy; default 2.
    pub unhealthy_after: Option<S<u32>>,
    /// Answered pings in a row that make it healthy again; default 2.
    pub healthy_after: Option<S<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutlier {
    /// Failures in a row (connect errors, 5xx, timeouts) that eject; default 3.
    pub consecutive_failures: Option<S<u32>>,
    /// How long an ejected endpoint gets no requests; default `30s`.
    pub eject_for: Option<S<String>>,
}

/// Each of `ca`, `cert` and `key` is a file's path or PEM text (from `${file:…}` or
/// `${env:…}`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstreamTls {
    /// CA certificates (PEM) trusted beside the built-in roots.
    pub ca: Option<S<String>>,
    /// The name sent as SNI and checked against the certificate; default the url's host.
    pub server_name: Option<S<String>>,
    /// Client certificate chain (PEM), for upstreams that ask for one (mTLS).
    pub cert: Option<S<String>>,
    /// Its private key (PEM).
    pub key: Option<S<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTools {
    /// Tools gone from every tools/list and refused as unknown; names or `*` globs.
    #[serde(default)]
    pub hidden: Vec<S<String>>,
    /// JSON-RPC code of a refused tools/call; default -32602.
    pub deny_code: Option<S<i64>>,
    /// Rules on a tool's arguments, for every profile.
    #[serde(default)]
    pub arguments: Vec<S<RawArgumentRule>>,
    /// Tools on their way out, by name.
    #[serde(default)]
    pub deprecated: BTreeMap<String, S<RawDeprecated>>,
}

/// `[tools.deprecated.NAME]`: listed and marked until `sunset`, hidden from then.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDeprecated {
    /// The tool to use instead.
    pub replacement: S<String>,
    /// A date (`2027-01-31`, midnight UTC) or an RFC 3339 time.
    pub sunset: S<String>,
}

/// `[[tools.arguments]]`: the value at `pointer` in a call's arguments must match `allow`
/// (if given) and not `deny`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawArgumentRule {
    /// A tool name or glob.
    pub tool: S<String>,
    /// A JSON pointer (RFC 6901) into `params.arguments`, e.g. `/path`.
    pub pointer: S<String>,
    pub allow: Option<Vec<S<String>>>,
    pub deny: Option<Vec<S<String>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProfile {
    /// The one upstream; or `upstreams` for a federated profile (docs/federation.md).
    pub upstream: Option<S<String>>,
    /// A federated profile's members, in the order their items are listed.
    pub upstreams: Option<S<Vec<S<String>>>>,
    /// When members' names are prefixed: `always`, `on_conflict` (default) or `never`.
    pub prefix: Option<S<String>>,
    /// What joins a member's name and its item's name; default `__`.
    pub separator: Option<S<String>>,
    #[serde(default)]
    pub allow: Vec<S<String>>,
    #[serde(default)]
    pub deny: Vec<S<String>>,
    /// JSON-RPC methods this profile may send; default all.
    pub methods: Option<Vec<S<String>>>,
    /// Resource URIs (globs) this profile may list, read and subscribe to; default all.
    pub resources: Option<S<RawNameRules>>,
    /// Prompt names (globs) this profile may list and get; default all.
    pub prompts: Option<S<RawNameRules>>,
    /// Tool annotations (hints the upstream publishes) that also allow a tool.
    pub allow_annotations: Option<S<BTreeMap<String, S<toml::Value>>>>,
    /// Tool annotations that refuse a tool, whatever else allows it.
    pub deny_annotations: Option<S<BTreeMap<String, S<toml::Value>>>>,
}

/// `{ allow = [...], deny = [...] }`: `allow` defaults to everything; deny wins.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNameRules {
    pub allow: Option<Vec<S<String>>>,
    #[serde(default)]
    pub deny: Vec<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    pub listen: S<String>,
    pub path: S<String>,
    pub profile: S<String>,
    /// `path` (default when the path has `{token}`), `bearer` (default otherwise), `token`
    /// (whichever of those two the path calls for), `oauth` or `none`.
    pub auth: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawToken {
    pub id: S<String>,
    pub sha256: S<String>,
    pub profiles: S<Vec<String>>,
    pub not_before: Option<S<String>>,
    pub not_after: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    /// Largest request body accepted; default `1MiB`.
    pub max_body: Option<S<String>>,
    /// Deepest nesting of objects and arrays a request body may have; default 64.
    pub max_json_depth: Option<S<i64>>,
    /// Rate limits, each applied on its own.
    #[serde(default)]
    pub rate: Vec<S<RawRate>>,
    /// Caps on calls of some tools in flight at once.
    #[serde(default)]
    pub concurrency: Vec<S<RawConcurrency>>,
    /// Per-tool deadlines (name or glob → duration), replacing the upstream's `timeout`.
    #[serde(default)]
    pub timeouts: Option<S<toml::Table>>,
    /// Where rate rules are counted when several replicas share them (docs/scaling.md).
    pub store: Option<S<RawStore>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    /// `redis://host:port/db`, `rediss://…` (TLS) or `unix:///path/redis.sock`; no
    /// credentials in it (they go in `username` / `password`).
    pub redis: S<String>,
    pub username: Option<S<String>>,
    /// Usually `${env:…}` or `${file:…}`.
    pub password: Option<S<String>>,
    /// How long a request waits for Redis before taking `on_error`; default `50ms`.
    pub timeout: Option<S<String>>,
    /// `local` (default), `deny` or `allow`.
    pub on_error: Option<S<String>>,
    /// Prepended to every key; default `mcpgate:`.
    pub prefix: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRate {
    /// `token`, `profile`, `token+tool`, `global` or `client_ip`.
    pub key: S<String>,
    /// `"20/s"`, `"10/m"`, `"1000/h"`.
    pub rate: S<String>,
    /// Calls allowed at once before the rate applies; default: the rate's count.
    pub burst: Option<S<u32>>,
    /// Only tools/call of these tools (names or globs) count.
    pub tools: Option<Vec<S<String>>>,
    /// `"auth_failure"`: count only failed authentications (with `key = "client_ip"`).
    pub on: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConcurrency {
    pub tools: Vec<S<String>>,
    pub max_in_flight: S<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTransport {
    /// A `: keepalive` comment goes to a client whose SSE stream was silent this long;
    /// default `15s`.
    pub sse_keepalive: Option<S<String>>,
    /// The longest `ttlMs` a list answered to a 2026-07-28 client carries; default `60s`.
    pub list_ttl: Option<S<String>>,
    /// How long a multi round-trip request's `requestState` may come back; default `5m`.
    pub input_timeout: Option<S<String>>,
    /// How long a federated list waits for a member before it is listed as unavailable;
    /// default `2s`.
    pub fanout_timeout: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    /// Certificate chain (PEM), leaf first.
    pub cert: S<String>,
    /// Private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: S<String>,
    /// CA bundle (PEM): when set, clients must present a certificate it signed (mTLS).
    pub client_ca: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    /// Default `127.0.0.1:9901`.
    pub addr: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTelemetry {
    /// The OTLP/HTTP collector, `http://host:4318` (`/v1/traces` is added to a bare
    /// address). Absent: no traces.
    pub otlp: Option<S<String>>,
    /// The share of new traces recorded, 0 to 1; default 1. A client's sampled flag wins.
    pub sampling: Option<S<f64>>,
    /// `service.name` of the spans; default `mcpgate`.
    pub service_name: Option<S<String>>,
    /// Spans waiting for export at most; more are dropped and counted. Default 16384.
    pub queue: Option<S<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    /// Time in-flight requests and streams get after SIGTERM; default `30s`.
    pub shutdown_grace: Option<S<String>>,
    /// Time to receive a request's headers, and the idle wait between HTTP/1.1 requests;
    /// default `30s`.
    pub header_read_timeout: Option<S<String>>,
    /// A connection with no byte in either direction for this long is closed; default `5m`.
    pub idle_timeout: Option<S<String>>,
    /// Connections served at once (more wait in the accept queue); default 4096.
    pub max_connections: Option<S<u32>>,
    /// Largest request header block; default `64KiB`.
    pub max_header_size: Option<S<String>>,
    /// What one chunked request body may carry in chunk extensions and trailer fields;
    /// default `16KiB`.
    pub max_chunk_overhead: Option<S<String>>,
    /// Keep request header fields whose names hold `_` (nginx's `underscores_in_headers`);
    /// default false: they are dropped.
    pub underscores_in_headers: Option<S<bool>>,
    /// Addresses (CIDRs, or single addresses) of proxies in front of mcpgate whose
    /// `X-Forwarded-For` / `Forwarded` is believed; default none.
    pub trusted_proxies: Option<Vec<S<String>>>,
    /// Which field a trusted proxy writes the client's address in: `x-forwarded-for` or
    /// `forwarded`; default: whichever is present, `X-Forwarded-For` when both are.
    pub client_address_header: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    /// `auto` (human on a terminal, JSON otherwise), `json`, `pretty`, or `combined`
    /// (request lines in nginx's combined format on stdout, the rest as JSON on stderr);
    /// default `auto`.
    pub format: Option<S<String>>,
    /// A tracing filter such as `info` or `mcpgate=debug`; `RUST_LOG` wins when set.
    pub level: Option<S<String>>,
    /// Requests slower than this log a warning with their timing split; default `1s`.
    pub slow_request: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAudit {
    /// The JSON-lines file (relative paths: from the config's folder).
    pub path: S<String>,
    /// Tools (names or globs) whose calls are written and fsynced before forwarding.
    #[serde(default)]
    pub durable: Vec<S<String>>,
    /// Argument keys whose values are recorded only as `{sha256, len}`.
    #[serde(default)]
    pub redact: Vec<S<String>>,
    /// Rotate past this size, e.g. `"100MiB"`; default: never (reopen on SIGUSR1).
    pub max_size: Option<S<String>>,
    /// Rotated files kept; default 5.
    pub keep: Option<S<u32>>,
    /// Records that may wait for the writer; default 8192.
    pub queue: Option<S<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOAuth {
    /// The authorization server's issuer URL; its metadata is read from RFC 8414 or
    /// OpenID discovery under it.
    pub issuer: S<String>,
    /// This server's resource identifier (RFC 8707), the audience its tokens must carry.
    pub resource: S<String>,
    /// Other `aud` values a token may carry instead of `resource` (an IdP that puts its
    /// own id for the API there, as Entra ID's v2 tokens do).
    pub audiences: Option<Vec<S<String>>>,
    /// Scopes named in the protected resource metadata; default the grants' scopes.
    pub scopes_supported: Option<Vec<S<String>>>,
    /// Clock skew allowed on `exp` and `nbf`; default `30s`.
    pub leeway: Option<S<String>>,
    /// The least time between two JWKS fetches that tokens cause (an unknown `kid`), and
    /// between tries while no keys are in hand; default `30s`, at least `1s`.
    pub jwks_refetch_after: Option<S<String>>,
    /// JWT signature algorithms accepted; default `["RS256", "ES256", "EdDSA"]`.
    pub algorithms: Option<Vec<S<String>>>,
    /// RFC 7662 introspection, for tokens that are not JWTs.
    pub introspection: Option<S<RawIntrospection>>,
    /// TLS towards the issuer: an extra CA, a client certificate.
    pub tls: Option<S<RawUpstreamTls>>,
    /// Claims to profiles, first match wins.
    #[serde(default)]
    pub grants: Vec<S<RawGrant>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIntrospection {
    /// Default: the issuer metadata's `introspection_endpoint`.
    pub url: Option<S<String>>,
    pub client_id: S<String>,
    pub client_secret: S<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGrant {
    /// Scopes, separated by spaces, that must all be granted.
    pub scope: Option<S<String>>,
    /// A claim that must hold `value` (equal, or among its items when it is a list).
    pub claim: Option<S<String>>,
    pub value: Option<S<String>>,
    pub profiles: S<Vec<String>>,
}
