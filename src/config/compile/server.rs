//! `[server]`: client connection limits and timeouts, and the warnings about timeouts that
//! cut each other (an idle timeout shorter than a keepalive or an upstream's answer time).

use super::{Compiler, Fail, ServerSettings, Upstream, at, fail};
use crate::config::proxies::{self, AddressHeader, TrustedProxies};
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
        let trusted_proxies = self.trusted_proxies(sv)?;
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
            trusted_proxies,
        })
    }

    fn trusted_proxies(&self, sv: &raw::RawServer) -> Result<TrustedProxies, Fail> {
        let mut nets = Vec::new();
        for v in sv.trusted_proxies.iter().flatten() {
            nets.push(at(v, proxies::parse_net(v.get_ref()))?);
        }
        let header = match &sv.client_address_header {
            None => AddressHeader::Either,
            Some(v) => match v.get_ref().to_ascii_lowercase().as_str() {
                "x-forwarded-for" => AddressHeader::XForwardedFor,
                "forwarded" => AddressHeader::Forwarded,
                _ => {
                    return fail(
                        v.span(),
                        "client_address_header must be \"x-forwarded-for\" or \"forwarded\"",
                    );
                }
            },
        };
        if let Some(v) = &sv.client_address_header
            && nets.is_empty()
        {
            return fail(
                v.span(),
                "client_address_header needs trusted_proxies: without them no proxy's account of the client is believed",
            );
        }
        Ok(TrustedProxies { nets, header })
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

#[cfg(test)]
mod tests {
    use super::super::load_str;
    use crate::config::proxies::AddressHeader;

    const BASE: &str = "[[listen]]\nname = \"main\"\naddr = \"127.0.0.1:0\"\n\n[upstreams.docs]\nurl = \"http://127.0.0.1:9/mcp\"\n\n[profiles.p]\nupstream = \"docs\"\n\n[[routes]]\nlisten = \"main\"\npath = \"/mcp\"\nprofile = \"p\"\nauth = \"none\"\n";

    fn with(server: &str) -> Result<crate::config::Snapshot, String> {
        load_str(&format!("{BASE}\n[server]\n{server}\n"), "f.toml").map_err(|e| e.to_string())
    }

    #[test]
    fn trusted_proxies_are_cidrs_or_addresses_named_where_wrong() {
        let s = with("trusted_proxies = [\"127.0.0.1\", \"10.0.0.0/8\", \"fd00::/8\"]").unwrap();
        assert_eq!(s.server.trusted_proxies.nets.len(), 3);
        assert_eq!(s.server.trusted_proxies.header, AddressHeader::Either);
        let e = with("trusted_proxies = [\"127.0.0.1\", \"10.0.0.1/8\"]").unwrap_err();
        assert!(e.starts_with("f.toml:18:33:"), "{e}");
        assert!(e.contains("write 10.0.0.0/8"), "{e}");
        let e = with("trusted_proxies = [\"nginx.local\"]").unwrap_err();
        assert!(e.contains("neither an address nor a CIDR"), "{e}");
        let e = with("trusted_proxies = [\"127.0.0.1\"]\nclient_address_header = \"x-real-ip\"")
            .unwrap_err();
        assert!(e.starts_with("f.toml:19:"), "{e}");
        let e = with("client_address_header = \"forwarded\"").unwrap_err();
        assert!(e.contains("needs trusted_proxies"), "{e}");
        let s = with("trusted_proxies = [\"::1\"]\nclient_address_header = \"Forwarded\"").unwrap();
        assert_eq!(s.server.trusted_proxies.header, AddressHeader::Forwarded);
        assert!(
            s.describe()
                .contains("trusted_proxies=::1/128 client address from Forwarded")
        );
    }
}
