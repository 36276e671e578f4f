//! `[server] trusted_proxies`: the proxies in front of mcpgate (nginx, a load balancer)
//! whose account of the client's address is believed, and which field they write it in
//! (docs/configuration.md). Plain data; `http::forwarded` reads a request by it.

use ipnet::IpNet;
use std::net::IpAddr;

/// Which request field a trusted proxy names the client in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AddressHeader {
    /// `X-Forwarded-For` when present, else `Forwarded`.
    #[default]
    Either,
    XForwardedFor,
    Forwarded,
}

impl AddressHeader {
    pub fn describe(self) -> &'static str {
        match self {
            AddressHeader::Either => "X-Forwarded-For, else Forwarded",
            AddressHeader::XForwardedFor => "X-Forwarded-For",
            AddressHeader::Forwarded => "Forwarded",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    pub nets: Vec<IpNet>,
    pub header: AddressHeader,
}

impl TrustedProxies {
    /// Whether `ip` is one of the trusted proxies (an IPv4 address mapped into IPv6, as a
    /// dual-stack socket reports it, counts as the IPv4 one).
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|n| n.contains(&ip))
    }
}

/// A CIDR (`10.0.0.0/8`, `fd00::/8`) or a single address (`127.0.0.1`).
pub fn parse_net(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    if let Ok(net) = text.parse::<IpNet>() {
        if net.trunc() != net {
            return Err(format!(
                "{text} has bits set past its prefix length: write {}",
                net.trunc()
            ));
        }
        return Ok(net);
    }
    match text.parse::<IpAddr>() {
        Ok(ip) => Ok(IpNet::from(ip)),
        Err(_) => Err(format!(
            "{text:?} is neither an address nor a CIDR (such as \"10.0.0.0/8\" or \"127.0.0.1\")"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nets_and_single_addresses() {
        let t = TrustedProxies {
            nets: vec![
                parse_net("10.0.0.0/8").unwrap(),
                parse_net("::1").unwrap(),
                parse_net("127.0.0.1").unwrap(),
            ],
            header: AddressHeader::Either,
        };
        assert!(t.trusts("10.1.2.3".parse().unwrap()));
        assert!(t.trusts("::ffff:10.1.2.3".parse().unwrap()));
        assert!(t.trusts("::1".parse().unwrap()));
        assert!(t.trusts("127.0.0.1".parse().unwrap()));
        assert!(!t.trusts("127.0.0.2".parse().unwrap()));
        assert!(!t.trusts("11.0.0.1".parse().unwrap()));
        assert!(parse_net("10.0.0.1/8").unwrap_err().contains("10.0.0.0/8"));
        assert!(parse_net("localhost").is_err());
        assert!(parse_net("10.0.0.0/33").is_err());
    }
}
