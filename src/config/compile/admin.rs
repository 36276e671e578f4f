//! `[admin]`: the admin listener's address, and a warning when it is reachable from the
//! network.

use super::{DEFAULT_ADMIN_ADDR, Fail, at};
use crate::config::raw::{self, S};
use std::net::SocketAddr;

/// The admin listener's address; `None` without an `[admin]` table (no admin listener).
pub(super) fn admin(
    raw: Option<&S<raw::RawAdmin>>,
    warnings: &mut Vec<String>,
) -> Result<Option<SocketAddr>, Fail> {
    let Some(a) = raw else {
        return Ok(None);
    };
    let addr: SocketAddr = match &a.get_ref().addr {
        Some(v) => at(
            v,
            v.get_ref()
                .parse()
                .map_err(|_| format!("bad admin address {:?}; write IP:PORT", v.get_ref())),
        )?,
        None => DEFAULT_ADMIN_ADDR.parse().expect("a valid default"),
    };
    if !addr.ip().is_loopback() {
        warnings.push(format!("the admin listener {addr} is not on a loopback address: /reload and /metrics are reachable from the network"));
    }
    Ok(Some(addr))
}
