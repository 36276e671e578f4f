//! The access log in nginx's `combined` format (`[log] format = "combined"`), so tools
//! that read nginx's access log (goaccess, fail2ban filters, awk one-liners) keep working
//! after a switch. One line per request on stdout, as nginx's `access_log`; every other
//! event stays a JSON line on stderr, as its `error_log` would.
//!
//! ```text
//! 127.0.0.1 - gpt [26/Nov/2026:08:31:47 +0000] "POST /gpt-mcp/{token}/mcp HTTP/1.1" 200 412 "-" "python-httpx/0.28"
//! ```
//!
//! The path is the route's template, so a token in the path is never written; a request
//! no route matched shows `-` (its path may hold someone's token). `$remote_user` is the
//! token id or the OAuth `sub`. The size is the answer's body when known at its head (a
//! JSON answer), else 0 (a stream). Strings are escaped as nginx escapes them.

use std::io::Write as _;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

static ON: AtomicBool = AtomicBool::new(false);

/// Writes the access log in the combined format from now on (set once, at start).
pub fn use_combined() {
    ON.store(true, Ordering::Relaxed);
}

/// Whether requests are logged in the combined format.
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// What a combined line needs of the request beyond the JSON line's fields; taken from
/// the request only when [`on`].
#[derive(Debug, Default, Clone)]
pub struct Access {
    pub version: &'static str,
    pub referer: Option<Box<[u8]>>,
    pub agent: Option<Box<[u8]>>,
}

/// One request's line.
pub struct Line<'a> {
    pub peer: IpAddr,
    /// The token id or OAuth `sub`, or `-`.
    pub user: &'a str,
    pub now: SystemTime,
    pub method: &'a str,
    /// The route's template, `-` when none matched.
    pub path: &'a str,
    pub access: &'a Access,
    pub status: u16,
    pub bytes: u64,
}

/// Formats `line` into `out` (emptied first), ending with a newline.
pub fn format(out: &mut Vec<u8>, line: &Line<'_>) {
    out.clear();
    let _ = write!(out, "{} - ", line.peer);
    escape(out, line.user.as_bytes(), false);
    out.extend_from_slice(b" [");
    push_time(out, line.now);
    out.extend_from_slice(b"] \"");
    escape(out, line.method.as_bytes(), true);
    out.push(b' ');
    escape(out, line.path.as_bytes(), true);
    out.push(b' ');
    out.extend_from_slice(line.access.version.as_bytes());
    let _ = write!(out, "\" {} {} \"", line.status, line.bytes);
    field(out, line.access.referer.as_deref());
    out.extend_from_slice(b"\" \"");
    field(out, line.access.agent.as_deref());
    out.extend_from_slice(b"\"\n");
}

/// Writes a formatted line to stdout in one `write(2)` (stdout's own lock keeps lines
/// from several threads whole).
pub fn write(line: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line);
    let _ = out.flush();
}

fn field(out: &mut Vec<u8>, value: Option<&[u8]>) {
    match value {
        Some(v) if !v.is_empty() => escape(out, v, true),
        _ => out.push(b'-'),
    }
}

/// nginx's default escaping: `"`, `\`, control characters and bytes past ASCII as `\xHH`.
/// Outside quotes (`$remote_user`) a space is escaped too, so the line splits the same.
fn escape(out: &mut Vec<u8>, bytes: &[u8], quoted: bool) {
    for &b in bytes {
        let plain = b.is_ascii_graphic() && b != b'"' && b != b'\\' || (quoted && b == b' ');
        if plain {
            out.push(b);
        } else {
            let _ = write!(out, "\\x{b:02X}");
        }
    }
}

/// `26/Nov/2026:08:31:47 +0000` (the log is in UTC), from the HTTP date's fixed-width
/// form `Thu, 26 Nov 2026 08:31:47 GMT`.
fn push_time(out: &mut Vec<u8>, now: SystemTime) {
    let date = httpdate::fmt_http_date(now);
    let b = date.as_bytes();
    if b.len() != 29 {
        out.extend_from_slice(b"-");
        return;
    }
    out.extend_from_slice(&b[5..7]);
    out.push(b'/');
    out.extend_from_slice(&b[8..11]);
    out.push(b'/');
    out.extend_from_slice(&b[12..16]);
    out.push(b':');
    out.extend_from_slice(&b[17..25]);
    out.extend_from_slice(b" +0000");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn a_line_reads_as_nginx_writes_it() {
        let access = Access {
            version: "HTTP/1.1",
            referer: None,
            agent: Some(b"curl/8.5 \"x\"\\\x01\xc3\xa9".to_vec().into()),
        };
        let mut out = Vec::new();
        format(
            &mut out,
            &Line {
                peer: "127.0.0.1".parse().unwrap(),
                user: "gpt app",
                now: UNIX_EPOCH + Duration::from_secs(1_795_681_907),
                method: "POST",
                path: "/gpt-mcp/{token}/mcp",
                access: &access,
                status: 200,
                bytes: 412,
            },
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "127.0.0.1 - gpt\\x20app [26/Nov/2026:08:31:47 +0000] \"POST /gpt-mcp/{token}/mcp HTTP/1.1\" 200 412 \"-\" \"curl/8.5 \\x22x\\x22\\x5C\\x01\\xC3\\xA9\"\n"
        );
    }
}
