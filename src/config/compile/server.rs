//! `[server]`: client connection limits and timeouts, and the warnings about timeouts that
//! cut each other (an idle timeout shorter than a keepalive or an upstream's answer time).

use super::{Compiler, Fail, ServerSettings, Upstream, at, fail};
use crate::config::raw::{self, S};
use crate::config::units::{parse_duration, parse_size};
use std::time::Duration;

impl Compiler<'_> {
    pub(super) fn server(&self, sv: Option<&S<raw::RawServer>>) -> Result<ServerSettings, Fail> {
        let d = ServerSettings::default();
        let Some(sv) = sv else {
            return Ok(d);
        };
        let sv = sv.get_ref();
        let duration = |v: &Option<S<String>>, default| match v {
            Some(v) => at(v, parse_duration(v.get_ref())),
            None => Ok(default),
        };
        let max_connections = match &sv.max_connections {
            Some(v) if *v.get_ref() == 0 => {
                return fail(v.span(), "max_connections must be at least 1");
            }
            Some(v) => *v.get_ref() as usize,
            None => d.max_connections,
        };
        let max_header_size = match &sv.max_header_size {
            Some(v) => {
                let n = at(v, parse_size(v.get_ref()))?;
                if !(8192..=16 << 20).contains(&n) {
                    return fail(v.span(), "max_header_size must be between 8KiB and 16MiB");
                }
                n as usize
            }
            None => d.max_header_size,
        };
        let max_chunk_overhead = match &sv.max_chunk_overhead {
            Some(v) => {
                let n = at(v, parse_size(v.get_ref()))?;
                if !(1024..=16 << 20).contains(&n) {
                    return fail(
                        v.span(),
                        "max_chunk_overhead must be between 1KiB and 16MiB",
                    );
                }
                n as usize
            }
            None => d.max_chunk_overhead,
        };
        Ok(ServerSettings {
            shutdown_grace: duration(&sv.shutdown_grace, d.shutdown_grace)?,
            header_read_timeout: duration(&sv.header_read_timeout, d.header_read_timeout)?,
            idle_timeout: duration(&sv.idle_timeout, d.idle_timeout)?,
            max_connections,
            max_header_size,
            max_chunk_overhead,
            underscores_in_headers: sv
                .underscores_in_headers
                .as_ref()
                .map_or(d.underscores_in_headers, |v| *v.get_ref()),
        })
    }
}

/// Timeouts that would cut what another setting keeps open.
pub(super) fn idle_warnings<'a>(
    server: &ServerSettings,
    sse_keepalive: Duration,
    upstreams: impl Iterator<Item = &'a Upstream>,
    warnings: &mut Vec<String>,
) {
    if server.idle_timeout <= sse_keepalive {
        warnings.push("server.idle_timeout is not longer than transport.sse_keepalive: quiet SSE streams will be cut".into());
    }
    for u in upstreams {
        if server.idle_timeout <= u.timeout {
            warnings.push(format!(
                "server.idle_timeout is not longer than upstream {:?} timeout: a slow JSON answer may be cut as idle",
                u.name
            ));
        }
    }
}
