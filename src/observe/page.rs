//! The status page (`GET /` on the admin listener, SPEC §14): one HTML document with its
//! style and script inline, no external asset. It is rendered whole on the server from
//! the same data `GET /status` serves, so it reads without JavaScript (a reload shows
//! new numbers); with JavaScript, a small script polls `/status` every 2 s and redraws
//! the same markup. Every text from the data is escaped (a tool name comes from a client),
//! and the script runs under a Content-Security-Policy that names its hash.

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::Full;
use serde_json::Value;
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
@media (max-width:600px){body{padding:8px}th,td{padding:3px 5px;font-size:13px}.facts li{padding:3px 8px}}
"#;

/// Redraws the page from `/status`, with the markup the server writes (`render`).
const SCRIPT: &str = r#"
const E=s=>String(s).replace(/[&<>"'`]/g,c=>'&#'+c.charCodeAt(0)+';');
const D=v=>v==null?'<span class=dim>-</span>':E(v);
function draw(s){
 const root=document.getElementById('status');
 root.innerHTML=BODY(s);
}
async function poll(){
 try{const r=await fetch('/status',{cache:'no-store'});if(r.ok)draw(await r.json());
  document.getElementById('live').textContent='live';}
 catch(e){document.getElementById('live').textContent='not reachable';}
 setTimeout(poll,2000);
}
setTimeout(poll,2000);
"#;

/// The page's markup from the data, written once in JavaScript too (`BODY` in the
/// script); the two must agree, which the page's test checks by reading both renders.
fn render(s: &Value, out: &mut String) {
    let num = |v: &Value| v.as_u64().unwrap_or(0);
    let ready = s["ready"].as_bool().unwrap_or(false);
    let _ = write!(
        out,
        "<ul class=facts>\
<li>state<b class={state}>{state}</b></li>\
<li>requests<b id=requests>{requests}</b></li>\
<li>refused<b id=refused>{refused}</b></li>\
<li>open streams<b id=streams>{streams}</b></li>\
<li>open sessions<b id=sessions>{sessions}</b></li>\
<li>up since<b>{started}</b></li></ul>",
        state = if ready { "ready" } else { "draining" },
        requests = num(&s["requests"]),
        refused = num(&s["refused"]),
        streams = num(&s["open_streams"]),
        sessions = num(&s["open_sessions"]),
        started = esc(s["started"].as_str().unwrap_or("")),
    );
    out.push_str("<h2>Requests by profile and tool</h2><div class=wide><table id=rows><tr><th>profile</th><th>method</th><th>tool</th><th class=n>requests</th><th class=n>refused</th><th>reasons</th><th class=n>upstream errors</th><th class=n>p50 ms</th><th class=n>p99 ms</th></tr>");
    for r in s["rows"].as_array().into_iter().flatten() {
        let reasons: Vec<String> = r["refusals"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|x| {
                format!(
                    "{} {}",
                    esc(x["reason"].as_str().unwrap_or("")),
                    num(&x["count"])
                )
            })
            .collect();
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td></tr>",
            opt(&r["profile"]),
            opt(&r["method"]),
            opt(&r["tool"]),
            num(&r["requests"]),
            num(&r["refused"]),
            if reasons.is_empty() {
                DASH.to_string()
            } else {
                reasons.join(", ")
            },
            num(&r["upstream_errors"]),
            opt(&r["p50_ms"]),
            opt(&r["p99_ms"]),
        );
    }
    out.push_str("</table></div><h2>Upstreams</h2><div class=wide><table id=upstreams><tr><th>upstream</th><th>endpoint</th><th>health</th><th class=n>requests</th><th class=n>sessions</th><th class=n>ejections</th></tr>");
    for u in s["upstreams"].as_array().into_iter().flatten() {
        if u["kind"] == "stdio" {
            let _ = write!(
                out,
                "<tr><td>{}</td><td class=dim>stdio: {} processes</td><td class=up>up</td><td class=n>{DASH}</td><td class=n>{}</td><td class=n>{DASH}</td></tr>",
                opt(&u["name"]),
                num(&u["processes"]),
                num(&u["sessions"]),
            );
        }
        for e in u["endpoints"].as_array().into_iter().flatten() {
            let health = esc(e["health"].as_str().unwrap_or(""));
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td class=\"{health}\">{health}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td></tr>",
                opt(&u["name"]),
                opt(&e["url"]),
                num(&e["requests"]),
                e["sessions"].as_i64().unwrap_or(0),
                num(&e["ejections"]),
            );
        }
    }
    out.push_str("</table></div><h2>Last reload</h2><div id=reload>");
    match s["reload"].as_object() {
        None => out.push_str("<p class=dim>none since start</p>"),
        Some(r) => {
            let result = esc(r["result"].as_str().unwrap_or(""));
            let _ = write!(
                out,
                "<p><span class=\"{result}\">{result}</span> at {} ({})</p>",
                opt(&r["at"]),
                opt(&r["trigger"]),
            );
            if let Some(e) = r["error"].as_str() {
                let _ = write!(out, "<pre>{}</pre>", esc(e));
            }
        }
    }
    out.push_str("</div><h2>Latest tool calls</h2><div class=wide><table id=decisions><tr><th>time</th><th>caller</th><th>profile</th><th>tool</th><th>outcome</th><th>reason</th><th class=n>status</th><th>request id</th></tr>");
    for d in s["decisions"].as_array().into_iter().flatten() {
        let outcome = esc(d["outcome"].as_str().unwrap_or(""));
        let _ = write!(
            out,
            "<tr><td title=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{outcome}\">{outcome}</td><td>{}</td><td class=n>{}</td><td class=dim>{}</td></tr>",
            esc(d["at"].as_str().unwrap_or("")),
            esc(d["at"].as_str().and_then(|t| t.get(11..19)).unwrap_or("")),
            opt(&d["caller"]),
            opt(&d["profile"]),
            opt(&d["tool"]),
            opt(&d["reason"]),
            num(&d["status"]),
            opt(&d["request_id"]),
        );
    }
    let _ = write!(
        out,
        "</table></div><p class=dim>mcpgate {} · {} · <span id=live>static</span></p>",
        esc(s["version"].as_str().unwrap_or("")),
        esc(s["now"].as_str().unwrap_or("")),
    );
}

/// The script's `BODY`: [`render`] in JavaScript.
const BODY: &str = r#"
function BODY(s){
 const n=v=>Number(v)||0;let o='';
 const st=s.ready?'ready':'draining';
 o+='<ul class=facts><li>state<b class='+st+'>'+st+'</b></li><li>requests<b id=requests>'+n(s.requests)+'</b></li><li>refused<b id=refused>'+n(s.refused)+'</b></li><li>open streams<b id=streams>'+n(s.open_streams)+'</b></li><li>open sessions<b id=sessions>'+n(s.open_sessions)+'</b></li><li>up since<b>'+E(s.started||'')+'</b></li></ul>';
 o+='<h2>Requests by profile and tool</h2><div class=wide><table id=rows><tr><th>profile</th><th>method</th><th>tool</th><th class=n>requests</th><th class=n>refused</th><th>reasons</th><th class=n>upstream errors</th><th class=n>p50 ms</th><th class=n>p99 ms</th></tr>';
 for(const r of s.rows||[]){const rs=(r.refusals||[]).map(x=>E(x.reason)+' '+n(x.count));
  o+='<tr><td>'+D(r.profile)+'</td><td>'+D(r.method)+'</td><td>'+D(r.tool)+'</td><td class=n>'+n(r.requests)+'</td><td class=n>'+n(r.refused)+'</td><td>'+(rs.length?rs.join(', '):D(null))+'</td><td class=n>'+n(r.upstream_errors)+'</td><td class=n>'+D(r.p50_ms)+'</td><td class=n>'+D(r.p99_ms)+'</td></tr>';}
 o+='</table></div><h2>Upstreams</h2><div class=wide><table id=upstreams><tr><th>upstream</th><th>endpoint</th><th>health</th><th class=n>requests</th><th class=n>sessions</th><th class=n>ejections</th></tr>';
 for(const u of s.upstreams||[]){
  if(u.kind=='stdio')o+='<tr><td>'+D(u.name)+'</td><td class=dim>stdio: '+n(u.processes)+' processes</td><td class=up>up</td><td class=n>'+D(null)+'</td><td class=n>'+n(u.sessions)+'</td><td class=n>'+D(null)+'</td></tr>';
  for(const e of u.endpoints||[]){const h=E(e.health);o+='<tr><td>'+D(u.name)+'</td><td>'+D(e.url)+'</td><td class="'+h+'">'+h+'</td><td class=n>'+n(e.requests)+'</td><td class=n>'+n(e.sessions)+'</td><td class=n>'+n(e.ejections)+'</td></tr>';}}
 o+='</table></div><h2>Last reload</h2><div id=reload>';
 if(!s.reload)o+='<p class=dim>none since start</p>';else{const r=s.reload,x=E(r.result);
  o+='<p><span class="'+x+'">'+x+'</span> at '+D(r.at)+' ('+D(r.trigger)+')</p>';if(r.error!=null)o+='<pre>'+E(r.error)+'</pre>';}
 o+='</div><h2>Latest tool calls</h2><div class=wide><table id=decisions><tr><th>time</th><th>caller</th><th>profile</th><th>tool</th><th>outcome</th><th>reason</th><th class=n>status</th><th>request id</th></tr>';
 for(const d of s.decisions||[]){const x=E(d.outcome);o+='<tr><td title="'+E(d.at||'')+'">'+E(String(d.at||'').slice(11,19))+'</td><td>'+D(d.caller)+'</td><td>'+D(d.profile)+'</td><td>'+D(d.tool)+'</td><td class="'+x+'">'+x+'</td><td>'+D(d.reason)+'</td><td class=n>'+n(d.status)+'</td><td class=dim>'+D(d.request_id)+'</td></tr>';}
 o+='</table></div><p class=dim>mcpgate '+E(s.version||'')+' · '+E(s.now||'')+' · <span id=live>live</span></p>';
 return o;
}
"#;

const DASH: &str = "<span class=dim>-</span>";

/// A value as text, escaped; `-` (dimmed) for null or absent.
fn opt(v: &Value) -> String {
    match v {
        Value::Null => DASH.to_string(),
        Value::String(s) => esc(s),
        other => esc(&other.to_string()),
    }
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
        let text = format!("{BODY}{SCRIPT}");
        let hash = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(&text));
        (text, format!("'sha256-{hash}'"))
    })
}

/// The page for `status`.
pub fn page(status: &Value) -> String {
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
/// script, nothing fetched but `/status`).
pub fn response(status: &Value) -> Response<Full<Bytes>> {
    let (_, hash) = script();
    let mut r = Response::new(Full::new(Bytes::from(page(status))));
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/html; charset=utf-8"),
    );
    let csp = format!(
        "default-src 'none'; style-src 'unsafe-inline'; script-src {hash}; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    );
    let h = r.headers_mut();
    if let Ok(v) = header::HeaderValue::from_str(&csp) {
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
    use serde_json::json;

    /// A tool name a client chose cannot add markup.
    #[test]
    fn client_text_is_escaped() {
        let s = json!({"ready": true, "rows": [{"profile": "gpt", "method": "tools/call",
            "tool": "<script>alert(1)</script>", "requests": 1, "refused": 0,
            "refusals": [], "upstream_errors": 0, "p50_ms": 0.1, "p99_ms": 0.1}],
            "upstreams": [], "decisions": [], "reload": null});
        let page = page(&s);
        assert!(!page.contains("<script>alert"));
        assert!(page.contains("&#60;script&#62;alert(1)&#60;/script&#62;"));
        assert_eq!(page.matches("<script>").count(), 1);
    }
}
