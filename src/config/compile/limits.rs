//! `[limits]`: rate rules, concurrency caps and per-tool deadlines, as plain rules. The
//! state that enforces them (counters, calls in flight) is built from these by the
//! gateway and kept across reloads for rules whose signature is unchanged.

use super::{Compiler, Fail, at, check_patterns, fail};
use crate::config::glob::Matcher;
use crate::config::raw;
use crate::config::units::parse_duration;
use governor::Quota;
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
#[derive(Debug, Clone, Default)]
pub struct LimitRules {
    pub rate: Vec<RateSpec>,
    pub concurrency: Vec<ConcurrencySpec>,
    /// Per-tool deadlines, exact names first, then globs in file order.
    pub timeouts: Vec<(Matcher, String, Duration)>,
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
    pub(super) fn limits(&self, l: &raw::RawLimits) -> Result<LimitRules, Fail> {
        let mut out = LimitRules::default();
        for r in &l.rate {
            let r = r.get_ref();
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
            out.rate.push(RateSpec {
                signature,
                key,
                tools,
                auth_failure,
                quota,
                rate_text: r.rate.get_ref().clone(),
            });
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
        Ok(out)
    }
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
