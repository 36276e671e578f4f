//! The client's address behind trusted proxies (`[server] trusted_proxies`,
//! docs/configuration.md). A request from a trusted peer names its client in
//! `X-Forwarded-For` or `Forwarded`: each proxy appends the address it got the request
//! from, so the list is read right to left, trusted hops skipped, and the first hop that
//! is not a trusted proxy is the client. Whatever stands left of it was written by that
//! client and proves nothing. A request from any other peer is that peer's: its fields
//! are not read at all.

use super::request::Peer;
use crate::config::proxies::{AddressHeader, TrustedProxies};
use std::net::{IpAddr, SocketAddr};
use wire::fields::{FieldKind, Fields};

/// The most hops read from a request's fields; a longer chain is read from its right end.
const MOST_HOPS: usize = 32;

/// The peer to serve `peer`'s request as: `None` when it is `peer` itself (no trusted
/// proxies, an untrusted peer, or no field naming a client).
pub fn client(trusted: &TrustedProxies, peer: &Peer, fields: &Fields) -> Option<Peer> {
    if trusted.nets.is_empty() || !trusted.trusts(peer.addr.ip()) {
        return None;
    }
    let hops = hops(trusted.header, fields)?;
    // Right to left: the proxies' own hops are skipped; the first other one is the client.
    // A hop that is not an address (`unknown`, an obfuscated name) ends the walk: the
    // client is the last hop we could name, a trusted proxy.
    let mut chain = vec![peer.addr.ip().to_canonical()];
    let mut client = None;
    for hop in hops.iter().rev() {
        let Some(ip) = *hop else { break };
        chain.push(ip);
        if !trusted.trusts(ip) {
            client = Some(ip);
            break;
        }
    }
    let client = match client {
        Some(c) => c,
        // Every hop is a proxy of ours: the leftmost we could read is the client.
        None => *chain.last().expect("holds the peer"),
    };
    if client == peer.addr.ip().to_canonical() && chain.len() == 1 {
        return None;
    }
    chain.reverse();
    let text = chain
        .iter()
        .map(IpAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    Some(Peer {
        addr: SocketAddr::new(client, 0),
        forwarded_for: http::HeaderValue::from_str(&text).expect("addresses are valid header text"),
    })
}

/// The hops the chosen field lists, left to right (`None` for one that is no address), or
/// `None` when the request has no such field.
fn hops(header: AddressHeader, fields: &Fields) -> Option<Vec<Option<IpAddr>>> {
    let use_xff = match header {
        AddressHeader::XForwardedFor => true,
        AddressHeader::Forwarded => false,
        AddressHeader::Either => fields.has(FieldKind::XForwardedFor),
    };
    let mut hops = Vec::new();
    if use_xff {
        for value in fields.all(FieldKind::XForwardedFor) {
            let text = std::str::from_utf8(value).ok()?;
            hops.extend(text.split(',').map(|h| address(h.trim())));
        }
    } else {
        for value in fields.all(FieldKind::Forwarded) {
            let text = std::str::from_utf8(value).ok()?;
            for element in text.split(',') {
                let node = element.split(';').find_map(|pair| {
                    let (name, value) = pair.split_once('=')?;
                    name.trim()
                        .eq_ignore_ascii_case("for")
                        .then(|| value.trim().trim_matches('"'))
                });
                // An element without `for` names no hop of the chain.
                if let Some(node) = node {
                    hops.push(address(node));
                }
            }
        }
    }
    if hops.is_empty() {
        return None;
    }
    if hops.len() > MOST_HOPS {
        hops.drain(..hops.len() - MOST_HOPS);
    }
    Some(hops)
}

/// One hop: an address, with or without a port (`1.2.3.4`, `1.2.3.4:80`, `::1`,
/// `[::1]:80`, `[::1]`).
fn address(hop: &str) -> Option<IpAddr> {
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Ok(sa) = hop.parse::<SocketAddr>() {
        return Some(sa.ip().to_canonical());
    }
    hop.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .and_then(|h| h.parse::<IpAddr>().ok())
        .map(|ip| ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::proxies::parse_net;

    fn trusted(nets: &[&str], header: AddressHeader) -> TrustedProxies {
        TrustedProxies {
            nets: nets.iter().map(|n| parse_net(n).unwrap()).collect(),
            header,
        }
    }

    fn resolve(t: &TrustedProxies, peer: &str, head: &str) -> (String, String) {
        let peer = Peer::new(peer.parse().unwrap());
        let fields = Fields::from_head(&format!("POST / HTTP/1.1\r\n{head}\r\n"));
        match client(t, &peer, &fields) {
            Some(p) => (
                p.addr.ip().to_string(),
                p.forwarded_for.to_str().unwrap().to_string(),
            ),
            None => (peer.addr.ip().to_string(), "-".into()),
        }
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_says() {
        let t = trusted(&["10.0.0.0/8"], AddressHeader::Either);
        let head = "X-Forwarded-For: 1.2.3.4\r\n";
        assert_eq!(resolve(&t, "9.9.9.9:5000", head).0, "9.9.9.9");
        let none = trusted(&[], AddressHeader::Either);
        assert_eq!(resolve(&none, "10.0.0.1:5000", head).0, "10.0.0.1");
    }

    #[test]
    fn the_rightmost_untrusted_hop_is_the_client() {
        let t = trusted(&["10.0.0.0/8", "127.0.0.1"], AddressHeader::Either);
        // The client forged the first hop; nginx appended what it saw (5.6.7.8), a second
        // proxy of ours appended nginx's address.
        let head = "X-Forwarded-For: 6.6.6.6, 5.6.7.8\r\nX-Forwarded-For: 10.0.0.7\r\n";
        assert_eq!(
            resolve(&t, "127.0.0.1:5000", head),
            ("5.6.7.8".into(), "5.6.7.8, 10.0.0.7, 127.0.0.1".into())
        );
        // Every hop trusted: the leftmost is the client.
        let head = "X-Forwarded-For: 10.0.0.9, 10.0.0.7\r\n";
        assert_eq!(resolve(&t, "127.0.0.1:5000", head).0, "10.0.0.9");
        // A hop that is no address ends the walk at the proxy right of it.
        let head = "X-Forwarded-For: 5.6.7.8, garbage, 10.0.0.7\r\n";
        assert_eq!(resolve(&t, "127.0.0.1:5000", head).0, "10.0.0.7");
        // With ports, IPv6 in brackets.
        let head = "X-Forwarded-For: [2001:db8::1]:4711, 10.0.0.7:80\r\n";
        assert_eq!(resolve(&t, "127.0.0.1:5000", head).0, "2001:db8::1");
        // No field: the proxy itself.
        assert_eq!(resolve(&t, "127.0.0.1:5000", "").0, "127.0.0.1");
    }

    #[test]
    fn forwarded_is_read_by_its_for_parameters() {
        let t = trusted(&["127.0.0.1"], AddressHeader::Either);
        let head = "Forwarded: for=6.6.6.6, for=\"[2001:db8::7]:80\";proto=https\r\n";
        assert_eq!(resolve(&t, "127.0.0.1:1", head).0, "2001:db8::7");
        let head = "Forwarded: for=unknown;proto=https\r\n";
        assert_eq!(resolve(&t, "127.0.0.1:1", head).0, "127.0.0.1");
        // Both fields: X-Forwarded-For unless told otherwise.
        let head = "Forwarded: for=1.1.1.1\r\nX-Forwarded-For: 2.2.2.2\r\n";
        assert_eq!(resolve(&t, "127.0.0.1:1", head).0, "2.2.2.2");
        let only = trusted(&["127.0.0.1"], AddressHeader::Forwarded);
        assert_eq!(resolve(&only, "127.0.0.1:1", head).0, "1.1.1.1");
        let only = trusted(&["127.0.0.1"], AddressHeader::XForwardedFor);
        let head = "Forwarded: for=1.1.1.1\r\n";
        assert_eq!(resolve(&only, "127.0.0.1:1", head).0, "127.0.0.1");
    }

    #[test]
    fn a_long_chain_is_read_from_its_right_end() {
        let t = trusted(&["10.0.0.0/8"], AddressHeader::Either);
        let many = vec!["10.1.1.1"; 100].join(", ");
        let head = format!("X-Forwarded-For: 3.3.3.3, {many}\r\n");
        // The 32 hops read are all proxies: the leftmost of those is taken.
        assert_eq!(resolve(&t, "10.0.0.1:1", &head).0, "10.1.1.1");
    }
}
