//! Validation and compilation of a `RawConfig` into a `Snapshot`: every reference resolved
//! (listener, upstream, profile names), every secret read, routes indexed for lookup,
//! tokens in a map keyed by their 32-byte hash, patterns compiled. A `Snapshot` is never
//! changed after it is built; the request path only reads it. Errors carry the position
//! of the offending value so `mcpgate check` can print `FILE:LINE:COL: message`.

mod admin;
mod approvals;
mod arguments;
mod audit;
mod endpoints;
mod hints;
mod limits;
mod log;
mod oauth;
mod profiles;
mod routes;
mod server;
mod snapshot;
mod stages;
mod stdio;
mod telemetry;
mod tokens;
mod tools;
mod transport;
mod upstream_identity;
mod upstreams;

pub use approvals::{ApprovalRule, Approver, DEFAULT_TIMEOUT as DEFAULT_APPROVAL_TIMEOUT};
pub use arguments::{ArgumentRule, Deprecation, pointer_tokens};
pub use audit::AuditSettings;
pub use limits::{
    ConcurrencySpec, DEFAULT_STORE_TIMEOUT, KeyKind, LimitRules, OnError, RateSpec, StoreSettings,
    parse_rate,
};
pub use oauth::{Grant, IdpUrl, Introspection, OAuthSettings, idp_url};
pub use profiles::{HintsUnknown, NameRules, Profile, plain_uri};
pub use routes::{Auth, HostRules, Listener, METADATA_PATH, OriginRules, Route};
pub use snapshot::{
    DEFAULT_SLOW_REQUEST, LogFormat, LogSettings, RouteMatch, ServerSettings, Snapshot,
    TelemetrySettings,
};
pub use stages::{Head, Judge, Read, Stages};
pub use tokens::{DigestHasher, TokenEntry, TokenMap};
pub use upstreams::{
    Address, Balance, Endpoint, HealthCheck, IDENTITY_FILE_VAR, IDENTITY_TOKEN_VAR, Outlier,
    Protocol, SessionKey, Sharing, StdioCommand, Upstream,
};

use super::pins::{self, PinMode};
use super::position::line_col;
use super::raw::{RawConfig, S};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub const DEFAULT_MAX_BODY: u64 = 1 << 20;
/// `[limits] max_json_depth` by default: deeper than any tool's arguments we have seen
/// (JSON Schema-shaped arguments nest a dozen levels), far below what breaks a server's
/// recursive parser (Python's json module: about 1,000; serde_json: 128).
pub const DEFAULT_MAX_JSON_DEPTH: u32 = 64;
pub const DEFAULT_DENY_CODE: i64 = -32602;
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
pub const DEFAULT_SSE_KEEPALIVE: Duration = Duration::from_secs(15);
pub const DEFAULT_LIST_TTL: Duration = Duration::from_secs(60);
pub const DEFAULT_INPUT_TIMEOUT: Duration = Duration::from_secs(300);
/// `[transport] fanout_timeout` when unset (docs/federation.md).
pub const DEFAULT_FANOUT_TIMEOUT: Duration = Duration::from_secs(2);
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:9901";

/// A configuration error with its position in the file, when there is one.
#[derive(Debug, Clone)]
pub struct ConfigError {
    pub file: String,
    pub position: Option<(usize, usize)>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            Some((line, col)) => write!(f, "{}:{}:{}: {}", self.file, line, col, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Reads and compiles the file at `path`.
pub fn load(path: &Path) -> Result<Snapshot, ConfigError> {
    load_with(path, true)
}

/// [`load`] for `mcpgate pin`, which writes the pins file: an `enforce` upstream needs
/// none yet.
pub fn load_for_pins(path: &Path) -> Result<Snapshot, ConfigError> {
    load_with(path, false)
}

fn load_with(path: &Path, pins_needed: bool) -> Result<Snapshot, ConfigError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: file.clone(),
        position: None,
        message: format!("cannot read configuration: {e}"),
    })?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut snapshot = compile_text(&text, &file, &base, pins_needed)?;
    snapshot.files.insert(0, path.to_path_buf());
    Ok(snapshot)
}

/// Compiles configuration text; `file` names it in errors. Relative paths in it are taken
/// from the current folder.
pub fn load_str(text: &str, file: &str) -> Result<Snapshot, ConfigError> {
    compile_text(text, file, Path::new(""), true)
}

fn compile_text(
    text: &str,
    file: &str,
    base: &Path,
    pins_needed: bool,
) -> Result<Snapshot, ConfigError> {
    let located = |span: Option<Range<usize>>, message: String| ConfigError {
        file: file.to_string(),
        position: span.map(|s| line_col(text, s.start)),
        message,
    };
    let raw: RawConfig = toml::from_str(text).map_err(|e| {
        let message = e.message().trim_end().replace('\n', " ");
        located(e.span(), message)
    })?;
    let pins_at = raw.pins.as_ref().map(|p| p.get_ref().path.span());
    let mut snapshot = Compiler {
        source: file,
        base,
        files: std::cell::RefCell::new(Vec::new()),
    }
    .compile(raw)
    .map_err(|(span, message)| located(Some(span), message))?;
    // The pins file, with its own name in its errors.
    if let Some(path) = &snapshot.pins_path {
        let enforced = snapshot
            .upstreams
            .values()
            .find(|u| u.pin == PinMode::Enforce);
        match pins::load(path) {
            Ok(Some(book)) => snapshot.pins = Arc::new(book),
            Ok(None) => {
                if let Some(u) = enforced.filter(|_| pins_needed) {
                    return Err(located(
                        pins_at,
                        format!(
                            "upstream {:?} has pin = \"enforce\" and the pins file {} does not exist: review the upstreams' tools with `mcpgate pin review -c {file}`, then write it with `mcpgate pin approve --all -c {file}`",
                            u.name,
                            path.display()
                        ),
                    ));
                }
            }
            Err(e) => {
                return Err(ConfigError {
                    file: path.display().to_string(),
                    position: e.position,
                    message: e.message,
                });
            }
        }
    }
    Ok(snapshot)
}

pub(super) type Fail = (Range<usize>, String);

pub(super) fn fail<T>(span: Range<usize>, message: impl Into<String>) -> Result<T, Fail> {
    Err((span, message.into()))
}

/// Wraps a value-parsing error with the span of the value.
pub(super) fn at<T, U>(v: &S<T>, r: Result<U, String>) -> Result<U, Fail> {
    r.map_err(|m| (v.span(), m))
}

pub(super) struct Compiler<'a> {
    source: &'a str,
    /// Relative file paths in the config are taken from here (the config's folder).
    base: &'a Path,
    files: std::cell::RefCell<Vec<PathBuf>>,
}

impl Compiler<'_> {
    fn compile(&self, raw: RawConfig) -> Result<Snapshot, Fail> {
        let mut warnings = Vec::new();

        let listeners = self.listeners(&raw.listen)?;
        let upstreams = self.upstreams(&raw.upstreams, &mut warnings)?;
        let approvals = approvals::approvals(&raw.approvals, &raw.profiles, raw.admin.is_some())?;
        let profiles = self.profiles(&raw.profiles, &upstreams, approvals, &mut warnings)?;

        let tools = tools::tools(raw.tools.as_ref())?;
        let (max_body, limits) = self.limits_section(raw.limits.as_ref())?;
        let sse_keepalive = transport::sse_keepalive(raw.transport.as_ref())?;
        let list_ttl = transport::list_ttl(raw.transport.as_ref())?;
        let input_timeout = transport::input_timeout(raw.transport.as_ref())?;
        let fanout_timeout = transport::fanout_timeout(raw.transport.as_ref())?;
        let admin = admin::admin(raw.admin.as_ref(), &mut warnings)?;
        let server = self.server(raw.server.as_ref())?;
        server::idle_warnings(
            &server,
            sse_keepalive,
            upstreams.values().map(|u| &**u),
            &mut warnings,
        );
        approvals::idle_warnings(&profiles, server.idle_timeout, &mut warnings);
        let log = log::log(raw.log.as_ref())?;
        let telemetry = telemetry::telemetry(raw.telemetry.as_ref())?;
        let audit = match &raw.audit {
            Some(a) => Some(self.audit(a.get_ref())?),
            None => None,
        };
        let oauth = match &raw.oauth {
            Some(o) => Some(Arc::new(self.oauth(o, &profiles)?)),
            None => None,
        };
        let mut listeners = listeners;
        let sections = stages::Sections {
            audit: audit.as_ref(),
            limits: &limits,
            deprecated: !tools.deprecated.is_empty(),
        };
        let routes = self.routes(
            &raw.routes,
            &mut listeners,
            &profiles,
            oauth.as_deref(),
            &sections,
            &mut warnings,
        )?;
        let tokens = self.tokens(&raw.tokens, &profiles)?;
        routes::reach_warnings(&listeners, &routes, &profiles, &tokens, &mut warnings);
        exchange_needs_oauth(&raw, &profiles)?;
        let pins_path = raw
            .pins
            .as_ref()
            .map(|p| self.path(p.get_ref().path.get_ref()));
        if pins_path.is_none() {
            for (name, u) in &raw.upstreams {
                if let Some(pin) = &u.get_ref().pin
                    && pin.get_ref() != "off"
                {
                    return fail(
                        pin.span(),
                        format!(
                            "upstream {name:?}: pin = {:?} needs the pins file: [pins] path = \"…\" (docs/pinning.md)",
                            pin.get_ref()
                        ),
                    );
                }
            }
        }

        Ok(Snapshot {
            identity_jwks: snapshot::IdentityJwks::of(upstreams.values().map(|u| &**u))
                .map(Arc::new),
            hinted: profiles::hinted(&profiles, upstreams.len()),
            source: self.source.to_string(),
            listeners,
            routes,
            upstreams,
            profiles,
            tokens,
            hidden: tools.hidden,
            deny_code: tools.deny_code,
            argument_rules: tools.argument_rules,
            deprecated: tools.deprecated,
            max_body,
            limits,
            sse_keepalive,
            list_ttl,
            input_timeout,
            fanout_timeout,
            pins: Arc::default(),
            pins_path,
            admin,
            audit,
            oauth,
            server,
            log,
            telemetry,
            files: self.files.take(),
            warnings,
        })
    }

    pub(super) fn path(&self, p: &str) -> PathBuf {
        let path = self.base.join(p);
        self.files.borrow_mut().push(path.clone());
        path
    }
}

/// An upstream whose identity is exchanged (docs/oauth.md) needs `[oauth]` and callers that
/// bring its access tokens: every route to it (or to a federation it is a member of)
/// must be `auth = "oauth"`.
fn exchange_needs_oauth(
    raw: &RawConfig,
    profiles: &std::collections::BTreeMap<String, Arc<Profile>>,
) -> Result<(), Fail> {
    let exchanged = |p: &Profile| match &p.federation {
        Some(f) => f
            .members
            .iter()
            .find(|m| m.profile.upstream.exchange.is_some())
            .map(|m| m.name.clone()),
        None => p
            .upstream
            .exchange
            .is_some()
            .then(|| p.upstream.name.clone()),
    };
    for (name, u) in &raw.upstreams {
        let exchange = u.get_ref().identity.as_ref().filter(|i| {
            i.get_ref()
                .mode
                .as_ref()
                .is_some_and(|m| m.get_ref() == "exchange")
        });
        if let (Some(i), None) = (exchange, &raw.oauth) {
            return fail(
                i.span(),
                format!(
                    "upstream {name:?}: identity mode = \"exchange\" exchanges callers' access tokens at the [oauth] issuer: configure [oauth]"
                ),
            );
        }
    }
    for r in &raw.routes {
        let route = r.get_ref();
        let oauth = route.auth.as_ref().is_some_and(|a| a.get_ref() == "oauth");
        if let Some(p) = profiles.get(route.profile.get_ref())
            && let Some(upstream) = exchanged(p)
            && !oauth
        {
            return fail(
                r.span(),
                format!(
                    "this route's profile reaches upstream {upstream:?}, whose identity is exchanged from the caller's OAuth access token: the route needs auth = \"oauth\""
                ),
            );
        }
    }
    Ok(())
}

pub(super) fn check_patterns(list: &[S<String>]) -> Result<(), Fail> {
    for p in list {
        if p.get_ref().is_empty() {
            return fail(p.span(), "empty name in list");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
