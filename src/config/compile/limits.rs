//! `[limits]`: rate rules, concurrency caps and per-tool deadlines, as plain rules. The
//! state that enforces them (counters, calls in flight) is built from these by the
//! gateway and kept across reloads for rules whose signature is unchanged.

use super::{Compiler, DEFAULT_MAX_BODY, DEFAULT_MAX_JSON_DEPTH, Fail, at, check_patterns, fail};
use crate::config::glob::Matcher;
use crate::config::raw;
use crate::config::units::{parse_duration, parse_size, resolve_secrets_noting};
use governor::Quota;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;

/// Which part of a request a rate rule counts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Token,
    Profile,
    TokenTool,
    Global,
    ClientIp,
}

impl KeyKind {
    pub fn name(self) -> &'static str {
        match self {
            KeyKind::Token => "token",
            KeyKind::Profile => "profile",
            KeyKind::TokenTool => "token+tool",
            KeyKind::Global => "global",
            KeyKind::ClientIp => "client_ip",
        }
    }
}

/// One `[[limits.rate]]` rule.
#[derive(Debug, Clone)]
pub struct RateSpec {
    /// Everything that defines the rule; equal signatures share state across reloads.
    pub signature: String,
    pub key: KeyKind,
    /// Only tools/call of these tools count (`None`: every request).
    pub tools: Option<Matcher>,
    /// Counts failed authentications only (brute-force guard).
    pub auth_failure: bool,
    pub quota: Quota,
    /// The rate as written, for `check`'s table.
    pub rate_text: String,
}

/// One `[[limits.concurrency]]` cap.
#[derive(Debug, Clone)]
pub struct ConcurrencySpec {
    /// Everything that defines the cap; equal signatures share calls in flight across
    /// reloads.
    pub signature: String,
    pub tools: Matcher,
    pub max: u32,
}

/// The compiled `[limits]` (besides `max_body`).
#[derive(Debug, Clone)]
pub struct LimitRules {
    /// The deepest nesting of objects and arrays a request body may have (the top-level
    /// object is 1).
    pub max_json_depth: u32,
    pub rate: Vec<RateSpec>,
    pub concurrency: Vec<ConcurrencySpec>,
    /// Per-tool deadlines, exact names first, then globs in file order.
    pub timeouts: Vec<(Matcher, String, Duration)>,
    /// `[limits.store]`: rate rules counted in Redis, shared by every replica.
    pub store: Option<Arc<StoreSettings>>,
}

impl Default for LimitRules {
    fn default() -> Self {
        LimitRules {
            max_json_depth: DEFAULT_MAX_JSON_DEPTH,
            rate: Vec::new(),
            concurrency: Vec::new(),
            timeouts: Vec::new(),
            store: None,
        }
    }
}

/// What a request does when the shared store cannot answer in time (docs/scaling.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// This replica's own counters, as without a store.
    Local,
    /// 503, -32003.
    Deny,
    /// No rate rule applies.
    Allow,
}

impl OnError {
    pub fn name(self) -> &'static str {
        match self {
            OnError::Local => "local",
            OnError::Deny => "deny",
            OnError::Allow => "allow",
        }
    }
}

/// `[limits.store]`, compiled.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreSettings {
    /// As written, with `${…}` resolved; never holds credentials (refused in it).
    pub url: String,
    pub username: Option<String>,
    pub password: Option<String>,
    pub timeout: Duration,
    pub on_error: OnError,
    pub prefix: String,
    /// Everything the store depends on (the password by its hash; the timeout, which
    /// bounds its calls): a reload with the same identity keeps it and its connections.
    pub identity: String,
}

impl std::fmt::Debug for StoreSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreSettings")
            .field("url", &self.url)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("on_error", &self.on_error)
            .field("prefix", &self.prefix)
            .finish()
    }
}

pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_millis(50);

/// Checks a Redis URL: one the client reads, with no credentials (they would show in
/// `check`'s output and in logs) and no TLS shortcut (`#insecure`).
fn redis_url(text: &str) -> Result<(), String> {
    let url = redis::parse_redis_url(text).ok_or_else(|| {
        format!(
            "bad redis address {text:?}; write redis://host:6379/0, rediss://host:6380/0 or unix:///run/redis/redis.sock"
        )
    })?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "the redis address must not hold credentials: put them in username and password (with ${env:…} or ${file:…})"
                .into(),
        );
    }
    if url.fragment().is_some() {
        return Err(
            "the redis address must not have a #fragment (TLS checks are never turned off)".into(),
        );
    }
    if let Some((k, _)) = url
        .query_pairs()
        .find(|(k, _)| k != "db" && k != "protocol")
    {
        return Err(format!(
            "the redis address may only have db= and protocol= in its query, not {k}= (credentials go in username and password)"
        ));
    }
    let tcp = matches!(url.scheme(), "redis" | "rediss" | "valkey" | "valkeys");
    if tcp && url.host_str().is_none_or(str::is_empty) {
        return Err(format!("the redis address {text:?} names no host"));
    }
    Ok(())
}

/// `"20/s"`, `"10/m"`, `"1000/h"` (also `sec`, `min`, `hour`) with an optional burst
/// (default: the count, so `"10/m"` allows 10 at once, then one every 6 s).
pub fn parse_rate(text: &str, burst: Option<u32>) -> Result<Quota, String> {
    let bad = || format!("bad rate {text:?}; write e.g. \"20/s\", \"10/m\", \"1000/h\"");
    let (n, unit) = text.trim().split_once('/').ok_or_else(bad)?;
    let n: u32 = n.trim().parse().map_err(|_| bad())?;
    let per = match unit.trim() {
        "s" | "sec" | "second" => Duration::from_secs(1),
        "m" | "min" | "minute" => Duration::from_secs(60),
        "h" | "hour" => Duration::from_secs(3600),
        _ => return Err(bad()),
    };
    let count = std::num::NonZeroU32::new(n)
        .ok_or_else(|| format!("rate {text:?} must allow at least 1"))?;
    let burst = match burst {
        Some(b) => std::num::NonZeroU32::new(b).ok_or("burst must be at least 1")?,
        None => count,
    };
    let quota = Quota::with_period(per / count.get()).ok_or_else(bad)?;
    Ok(quota.allow_burst(burst))
}

impl Compiler<'_> {
    /// `[limits]`: the largest request body, and the rules.
    pub(super) fn limits_section(
        &self,
        raw: Option<&raw::RawLimits>,
    ) -> Result<(u64, LimitRules), Fail> {
        let Some(l) = raw else {
            return Ok((DEFAULT_MAX_BODY, LimitRules::default()));
        };
        let max_body = match &l.max_body {
            Some(v) => at(v, parse_size(v.get_ref()))?,
            None => DEFAULT_MAX_BODY,
        };
        Ok((max_body, self.limits(l)?))
    }

    fn limits(&self, l: &raw::RawLimits) -> Result<LimitRules, Fail> {
        let mut out = LimitRules::default();
        if let Some(v) = &l.max_json_depth {
            out.max_json_depth = match *v.get_ref() {
                d @ 3..=10_000 => d as u32,
                _ => {
                    return fail(
                        v.span(),
                        "max_json_depth must be between 3 (a call's arguments are 3 deep) and 10000",
                    );
                }
            };
        }
        for r in &l.rate {
            out.rate.push(rate_rule(r.get_ref())?);
        }
        for c in &l.concurrency {
            let c = c.get_ref();
            check_patterns(&c.tools)?;
            if c.tools.is_empty() {
                return fail(
                    c.max_in_flight.span(),
                    "concurrency needs at least one tool",
                );
            }
            let max = *c.max_in_flight.get_ref();
            if max == 0 {
                return fail(c.max_in_flight.span(), "max_in_flight must be at least 1");
            }
            let tools = Matcher::new(c.tools.iter().map(|s| s.get_ref().as_str()));
            let signature = format!("{}|{max}", tools.patterns().join(","));
            out.concurrency.push(ConcurrencySpec {
                signature,
                tools,
                max,
            });
        }
        if let Some(t) = &l.timeouts {
            let mut exact = Vec::new();
            let mut globs = Vec::new();
            for (name, value) in t.get_ref() {
                let Some(text) = value.as_str() else {
                    return fail(
                        t.span(),
                        format!("timeouts.{name} must be a duration string like \"10s\""),
                    );
                };
                let d = parse_duration(text)
                    .map_err(|m| (t.span(), format!("timeouts.{name}: {m}")))?;
                let entry = (Matcher::new([name.as_str()]), name.clone(), d);
                if name.contains('*') {
                    globs.push(entry)
                } else {
                    exact.push(entry)
                }
            }
            out.timeouts = exact.into_iter().chain(globs).collect();
        }
        if let Some(st) = &l.store {
            out.store = Some(Arc::new(self.store(st.get_ref())?));
        }
        Ok(out)
    }

    fn store(&self, st: &raw::RawStore) -> Result<StoreSettings, Fail> {
        let secret = |v: &raw::S<String>| {
            at(
                v,
                resolve_secrets_noting(v.get_ref(), &mut self.files.borrow_mut()),
            )
        };
        let url = secret(&st.redis)?;
        at(&st.redis, redis_url(&url))?;
        let username = st.username.as_ref().map(secret).transpose()?;
        let password = st.password.as_ref().map(secret).transpose()?;
        let timeout = match &st.timeout {
            Some(t) => {
                let d = at(t, parse_duration(t.get_ref()))?;
                if d < Duration::from_millis(1) || d > Duration::from_secs(10) {
                    return fail(t.span(), "store timeout must be between 1ms and 10s");
                }
                d
            }
            None => DEFAULT_STORE_TIMEOUT,
        };
        let on_error = match st.on_error.as_ref().map(|o| (o, o.get_ref().as_str())) {
            None | Some((_, "local")) => OnError::Local,
            Some((_, "deny")) => OnError::Deny,
            Some((_, "allow")) => OnError::Allow,
            Some((o, other)) => {
                return fail(
                    o.span(),
                    format!("unknown on_error = {other:?}; use \"local\", \"deny\" or \"allow\""),
                );
            }
        };
        let prefix = match &st.prefix {
            Some(p) => {
                let text = p.get_ref();
                if text.is_empty() || text.len() > 64 || !text.bytes().all(|b| b.is_ascii_graphic())
                {
                    return fail(
                        p.span(),
                        "prefix must be 1 to 64 visible ASCII characters, e.g. \"mcpgate:\"",
                    );
                }
                text.clone()
            }
            None => "mcpgate:".into(),
        };
        let password_hash = password
            .as_ref()
            .map(|p| crate::config::token::to_hex(&Sha256::digest(p.as_bytes())));
        let identity = format!(
            "{url}|{}|{}|{timeout:?}",
            username.as_deref().unwrap_or(""),
            password_hash.as_deref().unwrap_or("")
        );
        Ok(StoreSettings {
            url,
            username,
            password,
            timeout,
            on_error,
            prefix,
            identity,
        })
    }
}

/// One `[limits] rate` rule: its key, what it counts (every request, or `auth_failure`),
/// its quota and tools, and the signature a reload keeps its state by.
fn rate_rule(r: &raw::RawRate) -> Result<RateSpec, Fail> {
    let key = match r.key.get_ref().as_str() {
        "token" => KeyKind::Token,
        "profile" => KeyKind::Profile,
        "token+tool" => KeyKind::TokenTool,
        "global" => KeyKind::Global,
        "client_ip" => KeyKind::ClientIp,
        other => {
            return fail(
                r.key.span(),
                format!(
                    "unknown rate key {other:?}; use token, profile, token+tool, global or client_ip"
                ),
            );
        }
    };
    let auth_failure = match r.on.as_ref().map(|o| (o, o.get_ref().as_str())) {
        None => false,
        Some((_, "auth_failure")) if key == KeyKind::ClientIp && r.tools.is_none() => true,
        Some((o, "auth_failure")) => {
            return fail(
                o.span(),
                "on = \"auth_failure\" needs key = \"client_ip\" and no tools",
            );
        }
        Some((o, other)) => {
            return fail(
                o.span(),
                format!("unknown on = {other:?}; the only one is \"auth_failure\""),
            );
        }
    };
    let quota = at(
        &r.rate,
        parse_rate(r.rate.get_ref(), r.burst.as_ref().map(|b| *b.get_ref())),
    )?;
    let tools = match &r.tools {
        Some(t) => {
            check_patterns(t)?;
            Some(Matcher::new(t.iter().map(|s| s.get_ref().as_str())))
        }
        None => None,
    };
    let signature = format!(
        "{}|{}|{}|{}|{}",
        key.name(),
        r.rate.get_ref(),
        quota.burst_size(),
        tools
            .as_ref()
            .map(|t| t.patterns().join(","))
            .unwrap_or_default(),
        auth_failure
    );
    Ok(RateSpec {
        signature,
        key,
        tools,
        auth_failure,
        quota,
        rate_text: r.rate.get_ref().clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        assert_eq!(parse_rate("20/s", Some(40)).unwrap().burst_size().get(), 40);
        assert_eq!(
            parse_rate("10/m", None).unwrap().replenish_interval(),
            Duration::from_secs(6)
        );
        assert_eq!(parse_rate("1000/h", None).unwrap().burst_size().get(), 1000);
        for bad in ["0/s", "10", "ten/s", "10/d", "10/m/s"] {
            assert!(parse_rate(bad, None).is_err(), "{bad}");
        }
    }
}
