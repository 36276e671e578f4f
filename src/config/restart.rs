//! What a reload cannot change in a running process, and what it changes only at the next
//! restart.

use super::Snapshot;

/// Changes a running process cannot apply: sockets and their TLS shape, and the admin
/// listener. Such a reload is refused whole, with the reason.
pub fn restart_needed(current: &Snapshot, next: &Snapshot) -> Result<(), &'static str> {
    let shape = |s: &Snapshot| {
        s.listeners
            .iter()
            .map(|l| {
                (
                    l.name.clone(),
                    l.addr,
                    l.tls.as_ref().map(|t| t.files.client_ca.clone()),
                )
            })
            .collect::<Vec<_>>()
    };
    if shape(current) != shape(next) {
        return Err("listeners changed (names, addresses, TLS on/off or client_ca)");
    }
    if current.admin != next.admin {
        return Err("the admin address changed");
    }
    if current.audit != next.audit {
        return Err("[audit] changed");
    }
    if current.server.max_connections != next.server.max_connections {
        return Err("server.max_connections changed");
    }
    Ok(())
}

/// Sections a reload takes but that apply only from the next restart.
pub fn applied_at_restart(current: &Snapshot, next: &Snapshot) -> Vec<&'static str> {
    let mut out = Vec::new();
    if current.log != next.log {
        out.push("[log]");
    }
    if current.telemetry != next.telemetry {
        out.push("[telemetry]");
    }
    out
}
