//! An `[upstreams.*]` with `command`: a stdio server compiled (its program, arguments,
//! environment, sessions per client or shared, process limits).

use super::upstreams::*;
use super::{
    Compiler, DEFAULT_CONNECT_TIMEOUT, DEFAULT_STREAM_IDLE_TIMEOUT, DEFAULT_TIMEOUT, Fail, at, fail,
};
use crate::config::raw::{self, S};
use crate::config::units::resolve_secrets_noting;
use http::HeaderMap;
use std::sync::Arc;
use std::time::Duration;

impl Compiler<'_> {
    /// `command = [...]`: a stdio upstream. Keys of HTTP upstreams are refused with it.
    pub(super) fn stdio_upstream(
        &self,
        name: &str,
        whole: &S<raw::RawUpstream>,
        command: &S<Vec<S<String>>>,
    ) -> Result<Upstream, Fail> {
        let u = whole.get_ref();
        for (key, given) in [
            ("url", u.url.as_ref().map(S::span)),
            ("endpoints", u.endpoints.as_ref().map(S::span)),
            ("balance", u.balance.as_ref().map(S::span)),
            ("health", u.health.as_ref().map(S::span)),
            ("outlier", u.outlier.as_ref().map(S::span)),
            ("session_key", u.session_key.as_ref().map(S::span)),
            ("tls", u.tls.as_ref().map(S::span)),
            ("connect_timeout", u.connect_timeout.as_ref().map(S::span)),
            ("headers", (!u.headers.is_empty()).then(|| whole.span())),
        ] {
            if let Some(span) = given {
                return fail(
                    span,
                    format!("{key} does not apply to a stdio upstream (command)"),
                );
            }
        }
        let identity = self.stdio_identity(u, name)?;
        let mut words = command.get_ref().iter();
        let Some(program) = words.next() else {
            return fail(command.span(), "command names no program");
        };
        if program.get_ref().is_empty() {
            return fail(program.span(), "command names no program");
        }
        let args = words.map(|w| w.get_ref().clone()).collect();
        let env = self.stdio_env(u, identity.is_some())?;
        let cwd = match &u.cwd {
            Some(c) => self.path(c.get_ref()),
            None => self.path("."),
        };
        let sessions = sharing(u)?;
        // A child runs in the generation of each request (`auto`), or speaks only 2026-07-28
        // (`modern`: legacy clients are bridged to it), or only the legacy protocol
        // (`legacy`: 2026-07-28 clients are bridged to it), docs/protocol.md.
        let protocol = match u.protocol.as_ref() {
            None => Protocol::Auto,
            Some(v) => match v.get_ref().as_str() {
                "auto" => Protocol::Auto,
                "modern" => Protocol::Modern,
                "legacy" => Protocol::Legacy,
                _ => {
                    return fail(
                        v.span(),
                        "protocol is \"auto\", \"modern\" or \"legacy\" on a stdio upstream",
                    );
                }
            },
        };
        let max_processes = match &u.max_processes {
            Some(n) if *n.get_ref() == 0 => return fail(n.span(), "max_processes is at least 1"),
            Some(n) => *n.get_ref() as usize,
            None => 16,
        };
        let idle_timeout = duration_or(&u.idle_timeout, Duration::from_secs(600))?;
        let timeout = duration_or(&u.timeout, DEFAULT_TIMEOUT)?;
        let stream_idle_timeout = duration_or(&u.stream_idle_timeout, DEFAULT_STREAM_IDLE_TIMEOUT)?;
        Ok(Upstream {
            name: name.into(),
            // mcpgate initializes each legacy child itself (docs/stdio.md).
            protocol,
            endpoints: Box::default(),
            balance: Balance::RoundRobin,
            health: None,
            outlier: None,
            session_keys: Box::default(),
            stdio: Some(Arc::new(StdioCommand {
                program: program.get_ref().clone(),
                args,
                env,
                cwd,
                sessions,
                max_processes,
                idle_timeout,
                identity: identity.is_some(),
            })),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            timeout,
            stream_idle_timeout,
            headers: HeaderMap::new(),
            pin: pin_mode(u)?,
            identity,
            exchange: None,
            index: 0,
        })
    }

    /// A stdio upstream's identity: told by tokens at its processes' start (`jwt`), never
    /// exchanged per call.
    fn stdio_identity(
        &self,
        u: &raw::RawUpstream,
        name: &str,
    ) -> Result<Option<Arc<crate::config::identity::Identity>>, Fail> {
        // A process gets its environment once, at its start, and serves every call after
        // it: it can be told who it serves (`jwt`), not who makes each call (`exchange`).
        Ok(match &u.identity {
            Some(i)
                if i.get_ref()
                    .mode
                    .as_ref()
                    .is_some_and(|m| m.get_ref() == "exchange") =>
            {
                return fail(
                    i.span(),
                    format!(
                        "identity mode = \"exchange\" does not apply to a stdio upstream: its process gets its environment once, at start, and serves every call after it, so no token can be exchanged per call; mode = \"jwt\" tells the process who it serves ({IDENTITY_TOKEN_VAR})"
                    ),
                );
            }
            Some(i) => self.identity(i, name)?.0,
            None => None,
        })
    }

    /// A stdio server's `env`: names that are variable names and not mcpgate's identity
    /// variables (when it sets them, `identity`), values with their secrets resolved.
    fn stdio_env(
        &self,
        u: &raw::RawUpstream,
        identity: bool,
    ) -> Result<Vec<(String, String)>, Fail> {
        let mut env = Vec::new();
        for (k, v) in &u.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return fail(v.span(), format!("env: {k:?} is not a variable name"));
            }
            if identity && [IDENTITY_TOKEN_VAR, IDENTITY_FILE_VAR].contains(&k.as_str()) {
                return fail(
                    v.span(),
                    format!("env {k} is set by mcpgate for identity: name it otherwise"),
                );
            }
            let value = at(
                v,
                resolve_secrets_noting(v.get_ref(), &mut self.files.borrow_mut()),
            )?;
            if value.contains('\0') {
                return fail(v.span(), format!("env {k}: a value cannot hold a NUL byte"));
            }
            env.push((k.clone(), value));
        }
        Ok(env)
    }
}

/// Whether a stdio upstream's processes serve one client each or are shared.
fn sharing(u: &raw::RawUpstream) -> Result<Sharing, Fail> {
    Ok(match &u.sessions {
        None => Sharing::PerClient,
        Some(v) => match v.get_ref().as_str() {
            // One name for each generation's unit: a legacy session, a modern caller.
            "per_client" | "per_caller" => Sharing::PerClient,
            "shared" => Sharing::Shared,
            _ => {
                return fail(
                    v.span(),
                    "sessions is \"per_client\" (or \"per_caller\") or \"shared\"",
                );
            }
        },
    })
}
