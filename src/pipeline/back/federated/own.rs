//! The federated profiles' lists as mcpgate's own commands read them (`mcpgate pin review`,
//! `check --probe`): through a gateway that listens nowhere, as a 2026-07-28 client.

use super::Fan;
use super::listing::{MAX_PAGES, kind_method, own_request};
use crate::config::Profile;
use crate::config::federation::{Federation, Member};
use crate::config::generation::MODERN;
use crate::gateway::Gateway;
use crate::gateway::Live;
use crate::http::request::{ClientBody, ClientRequest, Peer};
use crate::mcp::era::Era;
use crate::mcp::federation::lists::{self, Answer};
use crate::mcp::jsonrpc::ListKind;
use crate::mcp::transport::accept::Want;
use crate::pipeline::Ctx;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use std::sync::Arc;
use std::time::Instant;
use wire::fields::Fields;

/// The `_meta` of the 2026-07-28 requests mcpgate's commands send (`check --probe`,
/// `pin review`).
pub(super) const OWN_META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"mcpgate-check","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}"#;

/// The client request mcpgate's commands stand in for: a 2026-07-28 JSON POST.
pub(super) fn own_client_request() -> ClientRequest {
    ClientRequest {
        method: http::Method::POST,
        target: crate::http::request::Target::parse("/").expect("a plain path"),
        fields: Fields::from_map(&HeaderMap::from_iter([
            (
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (
                http::HeaderName::from_static("mcp-protocol-version"),
                HeaderValue::from_static(MODERN),
            ),
        ])),
        body: ClientBody::Read(Bytes::new()),
    }
}

/// The context of a request of mcpgate's commands: no route, token or audit.
pub(super) fn own_ctx(peer: &Peer) -> Ctx<'static> {
    Ctx {
        request_id: Arc::from("mcpgate-check"),
        route: None,
        token_id: None,
        rpc_id: None,
        rpc_method: None,
        tool: None,
        want: Ok(Want::Json),
        token: None,
        caller: None,
        proto: "http",
        listener: "",
        peer: peer.clone(),
        calls: Vec::new(),
        upstream_ms: None,
        started: Instant::now(),
        audit_base: None,
        access: None,
        trace: None,
        era: Era::Modern,
        first_request: None,
        member: None,
        rename: None,
        approval: None,
        approved: None,
        own: true,
    }
}

/// Every tool and every prompt `upstream` lists, read page by page through the request
/// path as a 2026-07-28 client would (so a legacy, stdio or replicated upstream is read
/// as the gateway serves it), unfiltered: what `mcpgate pin review` compares with the
/// pins file. A server without prompts has none.
pub async fn own_lists(
    gw: &Gateway,
    upstream: &Arc<crate::config::Upstream>,
) -> Result<[Vec<serde_json::Value>; 2], String> {
    let here = gw.live_here();
    let live: &Arc<Live> = &here;
    let member = Profile::member(&format!("pin/{}", upstream.name), upstream.clone());
    let fed = Arc::new(Federation {
        members: vec![Member {
            name: upstream.name.clone(),
            profile: member.clone(),
        }]
        .into(),
        prefix: crate::config::federation::Prefix::Never,
        separator: "__".into(),
    });
    let (req, peer) = (
        own_client_request(),
        Peer::new(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
    );
    let ctx = own_ctx(&peer);
    let dir = crate::mcp::federation::directory::Directories::default().of(&member.name, &fed);
    let fan = Fan {
        gw,
        live,
        profile: &member,
        fed: &fed,
        dir: &dir,
        peer: &peer,
        req: &req,
        meta: Some(OWN_META),
        session: None,
    };
    let mut out: [Vec<serde_json::Value>; 2] = Default::default();
    for (at, kind) in [ListKind::Tools, ListKind::Prompts].into_iter().enumerate() {
        let method = kind_method(kind);
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let body = own_request(method, Some(OWN_META), cursor.as_deref());
            let text = fan.ask(0, method, body, &ctx).await?;
            let text = std::str::from_utf8(&text).map_err(|_| "an answer that is not UTF-8")?;
            let page = match lists::read(text, kind) {
                Answer::Page(p) => p,
                Answer::Lacks => break,
                Answer::Failed(why) => return Err(format!("{method}: {why}")),
            };
            for item in &page.items {
                let v = serde_json::from_str(item.get()).map_err(|e| e.to_string())?;
                out[at].push(v);
            }
            match page.next {
                Some(next) => cursor = Some(next.into_owned()),
                None => break,
            }
        }
    }
    Ok(out)
}

/// What `mcpgate check --probe` prints of each federated profile (docs/federation.md): the members'
/// tool lists read now as a 2026-07-28 client would, merged as the profile's clients see
/// them, the names two members would share, and the members that did not answer.
pub async fn probe(gw: &Gateway) -> String {
    use std::fmt::Write;
    let here = gw.live_here();
    let live: &Arc<Live> = &here;
    let mut out = String::new();
    let req = own_client_request();
    let peer = Peer::new(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    for profile in live.config.profiles.values() {
        let Some(fed) = &profile.federation else {
            continue;
        };
        let ctx = own_ctx(&peer);
        // A directory of its own: what the probe reads is not what the gateway serves.
        let dir = crate::mcp::federation::directory::Directories::default().of(&profile.name, fed);
        let fan = Fan {
            gw,
            live,
            profile,
            fed,
            dir: &dir,
            peer: &peer,
            req: &req,
            meta: Some(OWN_META),
            session: None,
        };
        let members: Vec<&str> = fed.members.iter().map(|m| &*m.name).collect();
        let _ = writeln!(out, "\nprofile {}: {}", profile.name, members.join(", "));
        let mut missing = Vec::new();
        for m in 0..fed.members.len() {
            if let Err(why) = read_tools(&fan, m, &ctx).await {
                missing.push(format!("{}: {why}", fed.members[m].name));
            }
        }
        let filter = crate::mcp::tools_list::ToolFilter::new(live.config.clone(), profile.clone());
        write_names(&mut out, fed, &dir.names(ListKind::Tools), &filter);
        for m in missing {
            let _ = writeln!(out, "  unavailable: {m}");
        }
    }
    out
}

/// Reads every page of member `m`'s tools into the fan's directory; why it could not.
async fn read_tools(fan: &Fan<'_, '_>, m: usize, ctx: &Ctx<'_>) -> Result<(), String> {
    let mut cursor: Option<String> = None;
    let mut first = true;
    loop {
        let body = own_request("tools/list", Some(OWN_META), cursor.as_deref());
        let text = fan.ask(m, "tools/list", body, ctx).await?;
        let text = String::from_utf8_lossy(&text).into_owned();
        let next = match lists::read(&text, ListKind::Tools) {
            Answer::Page(p) => {
                let names = lists::names(&p);
                let last = p.next.is_none();
                fan.dir
                    .learn(fan.fed, ListKind::Tools, m, first, last, &names);
                p.next.map(|n| n.into_owned())
            }
            Answer::Lacks => None,
            Answer::Failed(why) => return Err(why),
        };
        first = false;
        match next {
            Some(next) => cursor = Some(next),
            None => return Ok(()),
        }
    }
}

/// The probe's lines for a federated profile's names: each name and its member, the names
/// prefixed because members share them, and the collisions.
fn write_names(
    out: &mut String,
    fed: &Federation,
    merged: &crate::mcp::federation::Merged,
    filter: &crate::mcp::tools_list::ToolFilter,
) {
    use std::fmt::Write;
    for v in &merged.visible {
        let shown = match filter.keeps_item(ListKind::Tools, &v.name) {
            true => "",
            false => "   (not shown: policy)",
        };
        let _ = writeln!(
            out,
            "  {:<40} -> {} {}{shown}",
            v.name, fed.members[v.member].name, v.original
        );
    }
    if fed.prefix == crate::config::federation::Prefix::OnConflict {
        // The names more than one member has, which is why they are prefixed.
        let mut shared: Vec<(&str, Vec<&str>)> = Vec::new();
        for v in merged.visible.iter().filter(|v| v.name != v.original) {
            let member = &*fed.members[v.member].name;
            match shared.iter_mut().find(|(n, _)| *n == v.original) {
                Some((_, members)) => members.push(member),
                None => shared.push((&v.original, vec![member])),
            }
        }
        for (name, members) in shared.iter().filter(|(_, m)| m.len() > 1) {
            let _ = writeln!(
                out,
                "  prefixed: {name} is a tool of {}",
                members.join(", ")
            );
        }
    }
    for c in &merged.collisions {
        let claims: Vec<String> = c
            .claims
            .iter()
            .map(|(m, own)| format!("{} {own}", fed.members[*m].name))
            .collect();
        let _ = writeln!(
            out,
            "  collision: {} is claimed by {}; the first keeps it",
            c.name,
            claims.join(", ")
        );
    }
}
