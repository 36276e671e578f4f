//! `mcpgate check`'s table: what a compiled configuration holds, written for a person.

use super::*;

impl Snapshot {
    /// The effective table printed by `mcpgate check`. Holds no secret: token hashes and
    /// upstream header values are left out.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "configuration {} is valid", self.source);
        let _ = writeln!(out, "\nlisteners:");
        for l in &self.listeners {
            let scheme = if l.tls.is_some() { "https" } else { "http" };
            let _ = writeln!(out, "  {:<12} {scheme}://{}", l.name, l.addr);
            if let Some(t) = &l.tls {
                let _ = writeln!(
                    out,
                    "    tls:             cert={} key={}",
                    t.files.cert.display(),
                    t.files.key.display()
                );
                if let Some(ca) = &t.files.client_ca {
                    let _ = writeln!(
                        out,
                        "    client_ca:       {} (client certificates required)",
                        ca.display()
                    );
                }
            }
            let _ = writeln!(out, "    allowed_hosts:   {}", l.hosts.describe());
            let _ = writeln!(out, "    allowed_origins: {}", l.origins.describe());
        }
        let _ = writeln!(out, "\nroutes:");
        for r in &self.routes {
            let auth = match r.auth {
                Auth::Path => "path token",
                Auth::Bearer => "bearer token",
                Auth::OAuth => "oauth",
                Auth::None => "no auth",
            };
            let _ = writeln!(
                out,
                "  {:<12} {:<28} -> profile {:<12} -> upstream {} ({auth})",
                r.listener, r.template, r.profile.name, r.profile.upstream.name
            );
            let _ = writeln!(out, "    stages: {}", r.stages.describe());
        }
        let _ = writeln!(out, "\nupstreams:");
        for u in self.upstreams.values() {
            let mut names: Vec<&str> = u.headers.keys().map(http::HeaderName::as_str).collect();
            names.dedup();
            let url = match (&*u.endpoints, &u.stdio) {
                (_, Some(c)) => format!("command={}", c.program),
                ([one], None) => one.label.to_string(),
                (_, None) => format!("{} endpoints", u.endpoints.len()),
            };
            let _ = writeln!(
                out,
                "  {:<12} {url} connect_timeout={} timeout={} stream_idle_timeout={} headers=[{}]",
                u.name,
                humantime::format_duration(u.connect_timeout),
                humantime::format_duration(u.timeout),
                humantime::format_duration(u.stream_idle_timeout),
                names.join(", ")
            );
            let _ = writeln!(
                out,
                "    protocol: {}",
                match u.protocol {
                    super::super::upstreams::Protocol::Auto if u.stdio.is_some() => {
                        "auto (each request's own generation: a process for each)"
                    }
                    super::super::upstreams::Protocol::Legacy if u.stdio.is_some() => {
                        "legacy (sessions only; 2026-07-28 clients bridged)"
                    }
                    super::super::upstreams::Protocol::Modern if u.stdio.is_some() => {
                        "modern (2026-07-28; legacy clients bridged)"
                    }
                    super::super::upstreams::Protocol::Auto => {
                        "auto (probed with server/discover: 2026-07-28 if it answers, else legacy)"
                    }
                    super::super::upstreams::Protocol::Modern => "modern (2026-07-28)",
                    super::super::upstreams::Protocol::Legacy => {
                        "legacy (sessions; 2026-07-28 clients bridged)"
                    }
                }
            );
            if let Some(i) = &u.identity {
                let kids: Vec<String> = i
                    .keys
                    .iter()
                    .map(|k| format!("{:?} {}", k.alg, &k.kid[..8]))
                    .collect();
                let _ = writeln!(
                    out,
                    "    identity: jwt iss={} aud={} keys=[{}] (the first signs) jwks_path={}",
                    i.issuer,
                    i.audience,
                    kids.join(", "),
                    i.jwks_path.as_deref().unwrap_or("-")
                );
                if let Some(c) = &u.stdio {
                    let _ = writeln!(
                        out,
                        "      each process is told at its start whom it serves ({}), in {} and in the file {} names (renewed every 30s): not each caller",
                        match c.sessions {
                            super::super::upstreams::Sharing::PerClient =>
                                "the caller that started it",
                            super::super::upstreams::Sharing::Shared => "anyone: sub=mcpgate",
                        },
                        super::super::upstreams::IDENTITY_TOKEN_VAR,
                        super::super::upstreams::IDENTITY_FILE_VAR,
                    );
                }
            }
            if let Some(e) = &u.exchange {
                let _ = writeln!(
                    out,
                    "    identity: exchange ({}) at the [oauth] issuer, audience={} client_id={}{}{}",
                    match e.grant {
                        crate::config::identity::Grant::TokenExchange => "RFC 8693",
                        crate::config::identity::Grant::OnBehalfOf => "on-behalf-of",
                    },
                    e.audience,
                    e.client_id,
                    e.resource
                        .as_deref()
                        .map_or(String::new(), |r| format!(" resource={r}")),
                    e.scope
                        .as_deref()
                        .map_or(String::new(), |s| format!(" scope={s:?}"))
                );
            }
            if u.pin != crate::config::pins::PinMode::Off {
                let approved = self.pins.of_upstream(&u.name).count();
                let _ = writeln!(
                    out,
                    "    pin: {} ({approved} definitions approved in {})",
                    u.pin.name(),
                    self.pins_path
                        .as_ref()
                        .map_or("(no pins file)".into(), |p| p.display().to_string())
                );
            }
            if let Some(c) = &u.stdio {
                let mut names: Vec<&str> = c.env.iter().map(|(k, _)| k.as_str()).collect();
                names.sort_unstable();
                let _ = writeln!(
                    out,
                    "    stdio: args={:?} cwd={} sessions={} max_processes={} idle_timeout={} env=[{}]",
                    c.args,
                    c.cwd.display(),
                    match c.sessions {
                        super::super::upstreams::Sharing::PerClient => "per_client",
                        super::super::upstreams::Sharing::Shared => "shared",
                    },
                    c.max_processes,
                    humantime::format_duration(c.idle_timeout),
                    names.join(", ")
                );
            }
            if u.endpoints.len() > 1 {
                for e in &u.endpoints {
                    let _ = writeln!(out, "    endpoint: {}", e.label);
                }
                let _ = writeln!(
                    out,
                    "    balance: {}",
                    match u.balance {
                        super::super::upstreams::Balance::LeastRequests => "least_requests",
                        super::super::upstreams::Balance::RoundRobin => "round_robin",
                    }
                );
            }
            if let Some(h) = &u.health {
                let _ = writeln!(
                    out,
                    "    health: ping every {} (timeout {}), unhealthy after {}, healthy after {}",
                    humantime::format_duration(h.interval),
                    humantime::format_duration(h.timeout),
                    h.unhealthy_after,
                    h.healthy_after
                );
            }
            if let Some(o) = &u.outlier {
                let _ = writeln!(
                    out,
                    "    outlier: eject for {} after {} failures in a row",
                    humantime::format_duration(o.eject_for),
                    o.consecutive_failures
                );
            }
            if !u.session_keys.is_empty() {
                let _ = writeln!(
                    out,
                    "    sessions: sealed ({} key{})",
                    u.session_keys.len(),
                    if u.session_keys.len() == 1 { "" } else { "s" }
                );
            }
            // The TLS settings are one table for all of an upstream's https endpoints.
            if let Some(tls) = u.endpoints.iter().find_map(|e| e.tls.as_ref()) {
                let _ = writeln!(
                    out,
                    "    tls: server_name={} roots=mozilla{} client_cert={}",
                    tls.server_name.to_str(),
                    if tls.extra_ca { "+ca" } else { "" },
                    if tls.client_cert { "yes" } else { "no" },
                );
            }
        }
        let _ = writeln!(out, "\nprofiles:");
        for p in self.profiles.values() {
            match &p.federation {
                None => {
                    let _ = writeln!(out, "  {:<12} upstream={}", p.name, p.upstream.name);
                }
                Some(f) => {
                    let members: Vec<&str> = f.members.iter().map(|m| &*m.name).collect();
                    let prefix = match f.prefix {
                        crate::config::federation::Prefix::Always => "always",
                        crate::config::federation::Prefix::OnConflict => "on_conflict",
                        crate::config::federation::Prefix::Never => "never",
                    };
                    let _ = writeln!(
                        out,
                        "  {:<12} upstreams=[{}] prefix={prefix} separator={} (names: mcpgate check --probe)",
                        p.name,
                        members.join(", "),
                        f.separator
                    );
                }
            }
            let _ = writeln!(out, "    allow:   {}", p.allow.patterns().join(", "));
            if !p.deny.is_empty() {
                let _ = writeln!(out, "    deny:    {}", p.deny.patterns().join(", "));
            }
            if let Some(m) = &p.methods {
                let _ = writeln!(out, "    methods: {}", m.patterns().join(", "));
            }
            for (what, hints) in [
                ("allow_annotations", &p.allow_annotations),
                ("deny_annotations", &p.deny_annotations),
            ] {
                if !hints.is_empty() {
                    let list: Vec<String> =
                        hints.iter().map(|(k, v)| format!("{k} = {v}")).collect();
                    let _ = writeln!(out, "    {what}: {}", list.join(", "));
                }
            }
            for r in &p.approvals {
                let mut what = Vec::new();
                if let Some(t) = &r.tools {
                    what.push(format!("tools {}", t.patterns().join(", ")));
                }
                if !r.annotations.is_empty() {
                    let list: Vec<String> = r
                        .annotations
                        .iter()
                        .map(|(k, v)| format!("{k} = {v}"))
                        .collect();
                    what.push(format!("annotations {}", list.join(", ")));
                }
                let _ = writeln!(
                    out,
                    "    approval #{}: {}; approver={} timeout={}",
                    r.number,
                    what.join("; "),
                    r.approver.as_str(),
                    humantime::format_duration(r.timeout)
                );
            }
            for (what, rules) in [("resources", &p.resources), ("prompts", &p.prompts)] {
                let Some(r) = rules else { continue };
                let deny = if r.deny.is_empty() {
                    String::new()
                } else {
                    format!("; deny {}", r.deny.patterns().join(", "))
                };
                let _ = writeln!(
                    out,
                    "    {what}: allow {}{deny}",
                    r.allow.patterns().join(", ")
                );
            }
        }
        let _ = writeln!(out, "\ntokens:");
        let mut tokens: Vec<&TokenEntry> = self.tokens.values().collect();
        tokens.sort_by(|a, b| a.id.cmp(&b.id));
        for t in tokens {
            let when = |t: Option<SystemTime>| {
                t.map_or("-".to_string(), |t| {
                    humantime::format_rfc3339_seconds(t).to_string()
                })
            };
            let _ = writeln!(
                out,
                "  {:<16} profiles=[{}] not_before={} not_after={}",
                t.id,
                t.profiles.join(", "),
                when(t.not_before),
                when(t.not_after)
            );
        }
        if let Some(o) = &self.oauth {
            describe_oauth(&mut out, o);
        }
        let _ = writeln!(out, "\ntools:");
        let _ = writeln!(out, "  hidden:    {}", self.hidden.patterns().join(", "));
        let _ = writeln!(out, "  deny_code: {}", self.deny_code);
        for (name, d) in &self.deprecated {
            let _ = writeln!(
                out,
                "  deprecated: {name} -> {} (listed and marked until {}, hidden from then){}",
                d.replacement,
                d.sunset_text,
                if d.gone(SystemTime::now()) {
                    ": gone now"
                } else {
                    ""
                }
            );
        }
        for r in &self.argument_rules {
            let allow = r.allow.as_ref().map_or(String::new(), |a| {
                format!(" allow [{}]", a.patterns().join(", "))
            });
            let deny = if r.deny.is_empty() {
                String::new()
            } else {
                format!(" deny [{}]", r.deny.patterns().join(", "))
            };
            let _ = writeln!(
                out,
                "  arguments: {} {}{allow}{deny}",
                r.tool.patterns().join(", "),
                r.pointer
            );
        }
        let _ = writeln!(out, "\nlimits:");
        let _ = writeln!(out, "  max_body:  {} bytes", self.max_body);
        let _ = writeln!(out, "  max_json_depth: {}", self.limits.max_json_depth);
        for r in &self.limits.rate {
            let tools = r.tools.as_ref().map_or(String::new(), |t| {
                format!(" tools=[{}]", t.patterns().join(", "))
            });
            let on = if r.auth_failure {
                " on=auth_failure"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "  rate:      key={} {} burst={}{tools}{on}",
                r.key.name(),
                r.rate_text,
                r.quota.burst_size()
            );
        }
        if let Some(st) = &self.limits.store {
            let _ = writeln!(
                out,
                "  store:     {} timeout={} on_error={} prefix={:?}{}",
                st.url,
                humantime::format_duration(st.timeout),
                st.on_error.name(),
                st.prefix,
                if st.password.is_some() {
                    " password=<set>"
                } else {
                    ""
                }
            );
            let _ = writeln!(
                out,
                "             rate rules above are shared by every replica; client_ip on=auth_failure and concurrency stay per replica"
            );
        }
        for c in &self.limits.concurrency {
            let _ = writeln!(
                out,
                "  concurrency: tools=[{}] max_in_flight={}",
                c.tools.patterns().join(", "),
                c.max
            );
        }
        for (_, name, d) in &self.limits.timeouts {
            let _ = writeln!(
                out,
                "  timeout:   {name} = {}",
                humantime::format_duration(*d)
            );
        }
        if let Some(a) = &self.audit {
            let _ = writeln!(out, "\naudit:");
            let _ = writeln!(out, "  path:    {}", a.path.display());
            let _ = writeln!(out, "  durable: {}", a.durable.join(", "));
            let _ = writeln!(out, "  redact:  {}", a.redact.join(", "));
            let rotate = a.max_size.map_or("on SIGUSR1 only".to_string(), |m| {
                format!("at {m} bytes, keep {}", a.keep)
            });
            let _ = writeln!(out, "  rotate:  {rotate}");
        }
        let _ = writeln!(out, "\nadmin:");
        match self.admin {
            Some(a) => {
                let _ = writeln!(
                    out,
                    "  http://{a}  / (status page) /status /healthz /readyz /metrics, POST /reload"
                );
            }
            None => {
                let _ = writeln!(out, "  (none)");
            }
        }
        if let Some(t) = &self.telemetry {
            let _ = writeln!(out, "\ntelemetry:");
            let _ = writeln!(
                out,
                "  traces to {} (OTLP/HTTP), sampling {}, service.name {}, queue {}",
                t.otlp, t.sampling, t.service_name, t.queue
            );
        }
        let sv = &self.server;
        let _ = writeln!(out, "\nserver:");
        let _ = writeln!(
            out,
            "  shutdown_grace={} header_read_timeout={} idle_timeout={} max_connections={} max_header_size={} max_chunk_overhead={} underscores_in_headers={}",
            humantime::format_duration(sv.shutdown_grace),
            humantime::format_duration(sv.header_read_timeout),
            humantime::format_duration(sv.idle_timeout),
            sv.max_connections,
            sv.max_header_size,
            sv.max_chunk_overhead,
            sv.underscores_in_headers
        );
        if !sv.trusted_proxies.nets.is_empty() {
            let _ = writeln!(
                out,
                "  trusted_proxies={} client address from {}",
                sv.trusted_proxies
                    .nets
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                sv.trusted_proxies.header.describe()
            );
        }
        let _ = writeln!(out, "\ntransport:");
        let _ = writeln!(
            out,
            "  sse_keepalive: {}",
            humantime::format_duration(self.sse_keepalive)
        );
        let _ = writeln!(
            out,
            "  list_ttl: {}",
            humantime::format_duration(self.list_ttl)
        );
        let _ = writeln!(
            out,
            "  input_timeout: {}",
            humantime::format_duration(self.input_timeout)
        );
        let _ = writeln!(
            out,
            "  fanout_timeout: {}",
            humantime::format_duration(self.fanout_timeout)
        );
        for w in &self.warnings {
            let _ = writeln!(out, "\nwarning: {w}");
        }
        out
    }
}

/// `[oauth]` for `mcpgate check`: the issuer and resource, and the grants table in the
/// order it is matched. The introspection secret is not shown.
fn describe_oauth(out: &mut String, o: &super::super::oauth::OAuthSettings) {
    let _ = writeln!(out, "\noauth:");
    let _ = writeln!(out, "  issuer:     {}", o.issuer);
    let _ = writeln!(out, "  resource:   {}", o.resource);
    if o.audiences.len() > 1 {
        let _ = writeln!(out, "  audiences:  {}", o.audiences.join(", "));
    }
    let _ = writeln!(out, "  metadata:   {}", o.metadata_url(&o.resource_path));
    let algorithms: Vec<String> = o.algorithms.iter().map(|a| format!("{a:?}")).collect();
    let _ = writeln!(
        out,
        "  algorithms: {} (leeway {})",
        algorithms.join(", "),
        humantime::format_duration(o.leeway)
    );
    if let Some(i) = &o.introspection {
        let url = i
            .url
            .as_ref()
            .map_or("the issuer's introspection_endpoint".to_string(), |u| {
                u.uri.to_string()
            });
        let _ = writeln!(out, "  introspection: {url} as client {}", i.client_id);
    }
    let _ = writeln!(out, "  grants (first match wins):");
    for (n, g) in o.grants.iter().enumerate() {
        let mut when = Vec::new();
        if !g.scopes.is_empty() {
            when.push(format!("scope {}", g.scopes.join(" ")));
        }
        if let Some((claim, value)) = &g.claim {
            when.push(format!("claim {claim} = {value:?}"));
        }
        let profiles: Vec<&str> = g.profiles.iter().map(|p| &**p).collect();
        let _ = writeln!(
            out,
            "    {}. {:<40} -> profiles [{}]",
            n + 1,
            when.join(" and "),
            profiles.join(", ")
        );
    }
}
