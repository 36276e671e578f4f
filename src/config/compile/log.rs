//! `[log]`: the operational log's format and level, and when a request counts as slow.

use super::{DEFAULT_SLOW_REQUEST, Fail, LogFormat, LogSettings, at, fail};
use crate::config::raw::{self, S};
use crate::config::units::parse_duration;

pub(super) fn log(raw: Option<&S<raw::RawLog>>) -> Result<LogSettings, Fail> {
    let Some(l) = raw else {
        return Ok(LogSettings {
            format: LogFormat::Auto,
            level: None,
            slow_request: DEFAULT_SLOW_REQUEST,
        });
    };
    let l = l.get_ref();
    let format = match l.format.as_ref().map(|f| (f, f.get_ref().as_str())) {
        None | Some((_, "auto")) => LogFormat::Auto,
        Some((_, "json")) => LogFormat::Json,
        Some((_, "pretty")) => LogFormat::Pretty,
        Some((_, "combined")) => LogFormat::Combined,
        Some((f, other)) => {
            return fail(
                f.span(),
                format!(
                    "unknown log format {other:?}; use \"auto\", \"json\", \"pretty\" or \"combined\""
                ),
            );
        }
    };
    let level = match &l.level {
        Some(v) => {
            at(
                v,
                tracing_subscriber::EnvFilter::try_new(v.get_ref())
                    .map(|_| ())
                    .map_err(|e| format!("bad log level: {e}")),
            )?;
            Some(v.get_ref().clone())
        }
        None => None,
    };
    let slow_request = match &l.slow_request {
        Some(v) => at(v, parse_duration(v.get_ref()))?,
        None => DEFAULT_SLOW_REQUEST,
    };
    Ok(LogSettings {
        format,
        level,
        slow_request,
    })
}
