//! The status page (`GET /` on the admin listener, docs/operations.md): one HTML document with its
//! style and script inline, no external asset. One renderer ([`render`]) writes its markup
//! from the data `GET /status` serves: inside the page, so it reads without JavaScript (a
//! reload shows new numbers), and as `GET /status/fragment`, which a small script fetches
//! every 2 s to redraw. Every text from the data is escaped (a tool name comes from a
//! client), and the script runs under a Content-Security-Policy that names its hash.

use super::status::{Status, StatusUpstream};
use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;
use std::fmt::Write as _;
use std::sync::OnceLock;

const STYLE: &str = r#"
:root{color-scheme:light dark;--line:#8884;--dim:#888;--bad:#c0392b;--ok:#1e8449;--warn:#b9770e}
body{font:15px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;padding:12px;max-width:1100px}
h1{font-size:1.3em;margin:.2em 0}h2{font-size:1.05em;margin:1.4em 0 .4em}
.facts{display:flex;flex-wrap:wrap;gap:8px;margin:.6em 0;padding:0}
.facts li{list-style:none;border:1px solid var(--line);border-radius:6px;padding:4px 10px}
.facts b{font-size:1.15em;display:block}
.wide{overflow-x:auto}table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid var(--line);white-space:nowrap}
td.n,th.n{text-align:right}.dim{color:var(--dim)}
.up,.ok,.forwarded{color:var(--ok)}.down,.error,.refused,.rejected,.upstream_error,.timeout{color:var(--bad)}
.ejected,.degraded,.draining{color:var(--warn)}pre{white-space:pre-wrap;margin:.3em 0}
button{font:inherit;padding:2px 10px;border-radius:5px;border:1px solid var(--line);cursor:pointer}
button.approve{color:var(--ok)}button.decline{color:var(--bad)}
@media (max-width:600px){body{padding:8px}th,td{padding:3px 5px;font-size:13px}.facts li{padding:3px 8px}}
"#;

/// Redraws the page every 2 s with the markup the server renders (`/status/fragment`):
/// the page's one renderer is [`render`].
const SCRIPT: &str = r#"
async function poll(){
 const live=()=>document.getElementById('live');
 try{const r=await fetch('/status/fragment',{cache:'no-store'});
  if(r.ok){document.getElementById('status').innerHTML=await r.text();live().textContent='live';}}
 catch(e){live().textContent='not reachable';}
 setTimeout(poll,2000);
}
setTimeout(poll,2000);
"#;

/// The page's markup from the data: the first render inside the page, and every redraw
/// (the script fetches it as `/status/fragment`).
pub fn render(s: &Status, out: &mut String) {
    let _ = write!(
        out,
        "<ul class=facts>\
<li>state<b class={state}>{state}</b></li>\
<li>requests<b id=requests>{requests}</b></li>\
<li>refused<b id=refused>{refused}</b></li>\
<li>open streams<b id=streams>{streams}</b></li>\
<li>open sessions<b id=sessions>{sessions}</b></li>\
<li>up since<b>{started}</b></li></ul>",
        state = if s.ready { "ready" } else { "draining" },
        requests = s.requests,
        refused = s.refused,
        streams = s.open_streams,
        sessions = s.open_sessions,
        started = esc(&s.started),
    );
    requests(s, out);
    upstreams(s, out);
    waiting(s, out);
    out.push_str("<h2>Last reload</h2><div id=reload>");
    match &s.reload {
        None => out.push_str("<p class=dim>none since start</p>"),
        Some(r) => {
            let result = esc(r.result);
            let _ = write!(
                out,
                "<p><span class=\"{result}\">{result}</span> at {} ({})</p>",
                esc(&r.at),
                esc(&r.trigger),
            );
            if let Some(e) = &r.error {
                let _ = write!(out, "<pre>{}</pre>", esc(e));
            }
        }
    }
    out.push_str("</div><h2>Latest tool calls</h2><div class=wide><table id=decisions><tr><th>time</th><th>caller</th><th>profile</th><th>tool</th><th>outcome</th><th>reason</th><th class=n>status</th><th>request id</th></tr>");
    for d in &s.decisions {
        let outcome = esc(d.outcome);
        let _ = write!(
            out,
            "<tr><td title=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{outcome}\">{outcome}</td><td>{}</td><td class=n>{}</td><td class=dim>{}</td></tr>",
            esc(&d.at),
            esc(d.at.get(11..19).unwrap_or("")),
            esc(&d.caller),
            esc(&d.profile),
            esc(&d.tool),
            esc(d.reason),
            d.status,
            esc(&d.request_id),
        );
    }
    let _ = write!(
        out,
        "</table></div><p class=dim>mcpgate {} · {} · <span id=live>static</span></p>",
        esc(s.version),
        esc(&s.now),
    );
}

/// The table of requests by profile, method and tool.
fn requests(s: &Status, out: &mut String) {
    out.push_str("<h2>Requests by profile and tool</h2><div class=wide><table id=rows><tr><th>profile</th><th>method</th><th>tool</th><th class=n>requests</th><th class=n>refused</th><th>reasons</th><th class=n>upstream errors</th><th class=n>p50 ms</th><th class=n>p99 ms</th></tr>");
    for r in &s.rows {
        let reasons: Vec<String> = r
            .refusals
            .iter()
            .map(|x| format!("{} {}", esc(x.reason), x.count))
            .collect();
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td></tr>",
            esc(&r.profile),
            esc(&r.method),
            opt(r.tool.as_deref()),
            r.requests,
            r.refused,
            if reasons.is_empty() {
                DASH.to_string()
            } else {
                reasons.join(", ")
            },
            r.upstream_errors,
            opt(r.p50_ms),
            opt(r.p99_ms),
        );
    }
}

/// The table of upstreams, an endpoint or stdio server a row (it closes the table before).
fn upstreams(s: &Status, out: &mut String) {
    out.push_str("</table></div><h2>Upstreams</h2><div class=wide><table id=upstreams><tr><th>upstream</th><th>endpoint</th><th>health</th><th class=n>requests</th><th class=n>sessions</th><th class=n>ejections</th><th>protocol</th></tr>");
    for u in &s.upstreams {
        match u {
            StatusUpstream::Stdio {
                name,
                processes,
                sessions,
            } => {
                let _ = write!(
                    out,
                    "<tr><td>{}</td><td class=dim>stdio: {processes} processes</td><td class=up>up</td><td class=n>{DASH}</td><td class=n>{sessions}</td><td class=n>{DASH}</td><td>legacy</td></tr>",
                    esc(name),
                );
            }
            StatusUpstream::Http {
                name, endpoints, ..
            } => {
                for e in endpoints {
                    let health = esc(e.health);
                    let _ = write!(
                        out,
                        "<tr><td>{}</td><td>{}</td><td class=\"{health}\">{health}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td></tr>",
                        esc(name),
                        esc(&e.url),
                        e.requests,
                        e.sessions,
                        e.ejections,
                        esc(e.protocol),
                    );
                }
            }
        }
    }
    out.push_str("</table></div>");
}

/// What waits on someone: federated members' last fan-outs, calls waiting for approval,
/// pinned definitions waiting for theirs; each only when there is any.
fn waiting(s: &Status, out: &mut String) {
    if !s.federation.is_empty() {
        out.push_str("<h2>Federated members</h2><div class=wide><table id=federation><tr><th>profile</th><th>member</th><th>last fan-out</th><th>at</th><th>why</th></tr>");
        for m in &s.federation {
            let (class, said) = match m.available {
                true => ("up", "answered"),
                false => ("down", "unavailable"),
            };
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td class={class}>{said}</td><td>{}</td><td class=dim>{}</td></tr>",
                esc(&m.profile),
                esc(&m.member),
                esc(&m.at),
                esc(m.error.as_deref().unwrap_or("")),
            );
        }
        out.push_str("</table></div>");
    }
    if !s.approvals.is_empty() {
        out.push_str("<h2>Calls waiting for approval</h2><p class=dim>Each call runs only once approved here; declined or past its time, it is refused.</p><div class=wide><table id=approvals><tr><th>asked</th><th>caller</th><th>profile</th><th>tool</th><th>waits until</th><th></th></tr>");
        for a in &s.approvals {
            let id = esc(&a.id);
            let _ = write!(
                out,
                "<tr id=\"approval-{id}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><form method=post action=\"/approvals/{id}\"><button name=decision value=approve class=approve>Approve</button> <button name=decision value=decline class=decline>Decline</button></form></td></tr><tr><td colspan=6><pre>{}</pre></td></tr>",
                esc(&a.asked),
                esc(&a.caller),
                esc(&a.profile),
                esc(&a.tool),
                esc(&a.expires),
                esc(&a.message),
            );
        }
        out.push_str("</table></div>");
    }
    if !s.pins.is_empty() {
        out.push_str("<h2>Awaiting approval</h2><p class=dim>Pinned definitions that changed or are new: approve with <code>mcpgate pin approve</code> after <code>mcpgate pin review</code>.</p><div class=wide><table id=pins><tr><th>upstream</th><th>kind</th><th>name</th><th>status</th><th>pin</th><th>sha256</th></tr>");
        for p in &s.pins {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td class=down>{}</td><td>{}</td><td class=dim>{}</td></tr><tr><td colspan=6><pre>{}</pre></td></tr>",
                esc(&p.upstream),
                esc(p.kind),
                esc(&p.name),
                esc(p.standing),
                esc(p.mode),
                esc(p.sha256.get(..12).unwrap_or(&p.sha256)),
                esc(&p.diff),
            );
        }
        out.push_str("</table></div>");
    }
}

/// The fragment alone, as the script fetches it.
pub fn fragment(status: &Status) -> String {
    let mut out = String::with_capacity(16 << 10);
    render(status, &mut out);
    out
}

const DASH: &str = "<span class=dim>-</span>";

/// A value as text, escaped; `-` (dimmed) when absent.
fn opt(v: Option<impl std::fmt::Display>) -> String {
    v.map_or_else(|| DASH.to_string(), |v| esc(&v.to_string()))
}

/// HTML-escapes text for element content and quoted or unquoted attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' | '<' | '>' | '"' | '\'' | '`' => {
                let _ = write!(out, "&#{};", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// The whole script, and its CSP source (`'sha256-…'`), computed once.
fn script() -> &'static (String, String) {
    static SCRIPT_AND_HASH: OnceLock<(String, String)> = OnceLock::new();
    SCRIPT_AND_HASH.get_or_init(|| {
        use base64::Engine as _;
        use sha2::Digest as _;
        let text = SCRIPT.to_string();
        let hash = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(&text));
        (text, format!("'sha256-{hash}'"))
    })
}

/// The page for `status`.
pub fn page(status: &Status) -> String {
    let (script, _) = script();
    let mut out = String::with_capacity(16 << 10);
    out.push_str("<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width,initial-scale=1\"><title>mcpgate status</title><style>");
    out.push_str(STYLE);
    out.push_str("</style></head><body><h1>mcpgate</h1><div id=status>");
    render(status, &mut out);
    out.push_str("</div><script>");
    out.push_str(script);
    out.push_str("</script></body></html>\n");
    out
}

/// `GET /`: the page, with headers that keep it to itself (no framing, no other
/// script, nothing fetched but `/status/fragment`).
pub fn response(status: &Status) -> Response<Full<Bytes>> {
    let (_, hash) = script();
    let csp = format!(
        "default-src 'none'; style-src 'unsafe-inline'; script-src {hash}; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    );
    html(page(status), &csp)
}

/// `GET /status/fragment`: the markup alone, for the script; no script of its own may run
/// in it, whoever opens it.
pub fn fragment_response(status: &Status) -> Response<Full<Bytes>> {
    html(
        fragment(status),
        "default-src 'none'; frame-ancestors 'none'",
    )
}

/// HTML under `csp`, never sniffed as anything else nor kept by a cache.
fn html(body: String, csp: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::OK;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/html; charset=utf-8"),
    );
    if let Ok(v) = header::HeaderValue::from_str(csp) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::status::{RefusalCount, StatusRow};

    fn status(tool: &str) -> Status {
        Status {
            version: "0",
            now: "2026-11-26T12:00:00.000Z".into(),
            started: "2026-11-26T11:00:00.000Z".into(),
            uptime_seconds: 3600,
            ready: true,
            requests: 1,
            refused: 0,
            open_streams: 0,
            open_sessions: 0,
            rows: vec![StatusRow {
                profile: "gpt".into(),
                method: "tools/call".into(),
                tool: Some(tool.into()),
                requests: 1,
                refused: 0,
                refusals: vec![RefusalCount {
                    reason: "rate_limited",
                    count: 2,
                }],
                upstream_errors: 0,
                p50_ms: Some(0.1),
                p99_ms: None,
            }],
            upstreams: vec![StatusUpstream::Stdio {
                name: "local".into(),
                processes: 1,
                sessions: 2,
            }],
            // A member's error is an upstream's text: escaped like a client's.
            federation: vec![crate::observe::status::StatusMember {
                profile: "gpt".into(),
                member: "kb".into(),
                available: false,
                at: "2026-11-26T12:00:00.000Z".into(),
                error: Some(tool.into()),
            }],
            // A definition's text is the upstream's: escaped too.
            pins: vec![crate::observe::status::StatusPin {
                upstream: "kb".into(),
                kind: "tool",
                name: tool.into(),
                standing: "changed",
                mode: "enforce",
                sha256: "ab".repeat(32),
                approved_sha256: None,
                diff: format!("    + {tool}"),
            }],
            // A waiting call's tool, message and id reach the page escaped.
            approvals: vec![crate::observe::status::StatusApproval {
                id: "0123abcd".into(),
                profile: "gpt-full".into(),
                tool: tool.into(),
                caller: "alice".into(),
                message: format!("Delete {tool}?"),
                arguments: "{}".into(),
                rule: 1,
                asked: "2026-11-26T12:00:00.000Z".into(),
                expires: "2026-11-26T12:05:00.000Z".into(),
            }],
            reload: None,
            decisions: vec![],
        }
    }

    /// A tool name a client chose cannot add markup.
    #[test]
    fn client_text_is_escaped() {
        let page = page(&status("<script>alert(1)</script>"));
        assert!(!page.contains("<script>alert"));
        assert!(page.contains("&#60;script&#62;alert(1)&#60;/script&#62;"));
        assert_eq!(page.matches("<script>").count(), 1);
        assert!(page.contains("<form method=post action=\"/approvals/0123abcd\">"));
    }

    /// The page's first render and the script's redraws are one markup: the fragment the
    /// script fetches is exactly what the page holds.
    #[test]
    fn the_page_holds_the_fragment_the_script_fetches() {
        let s = status("get_document");
        let page = page(&s);
        let inner = page
            .split_once("<div id=status>")
            .and_then(|(_, rest)| rest.split_once("</div><script>"))
            .map(|(inner, _)| inner)
            .unwrap();
        assert_eq!(inner, fragment(&s));
        assert!(inner.contains("rate_limited 2"));
        assert!(inner.contains("stdio: 1 processes"));
        assert!(
            !SCRIPT.contains("<tr>"),
            "the script writes no markup of its own"
        );
    }
}
