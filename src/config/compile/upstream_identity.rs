//! `[upstreams.X.identity]` compiled (docs/oauth.md): whom an upstream is told a request is
//! for, as a JWT mcpgate signs or a token exchanged at the issuer; the keys read from PEM.

use super::{Compiler, Fail, at, fail};
use crate::config::raw::{self, S};
use crate::config::units::resolve_secrets_noting;
use std::sync::Arc;

impl Compiler<'_> {
    /// `[upstreams.NAME.identity]`: `mode = "jwt"` with its issuer and keys, `exchange`
    /// with its client at the `[oauth]` issuer, or `none`. `audience` defaults to
    /// `default_audience`: the url, or a stdio upstream's name.
    #[allow(clippy::type_complexity)]
    pub(super) fn identity(
        &self,
        raw: &S<raw::RawIdentity>,
        default_audience: &str,
    ) -> Result<
        (
            Option<Arc<crate::config::identity::Identity>>,
            Option<Arc<crate::config::identity::Exchange>>,
        ),
        Fail,
    > {
        let i = raw.get_ref();
        match i.mode.as_ref().map(|m| (m, m.get_ref().as_str())) {
            None | Some((_, "none")) => return Ok((None, None)),
            Some((_, "jwt")) => {}
            Some((_, "exchange")) => {
                return Ok((None, Some(self.exchange_identity(raw, default_audience)?)));
            }
            Some((m, other)) => {
                return fail(
                    m.span(),
                    format!("identity mode is \"jwt\", \"exchange\" or \"none\", not {other:?}"),
                );
            }
        }
        Ok((Some(self.jwt_identity(raw, default_audience)?), None))
    }

    /// `mode = "exchange"`: mcpgate's client at the `[oauth]` issuer, and how the caller's
    /// token is exchanged for the upstream (RFC 8693, or Entra ID's on-behalf-of).
    fn exchange_identity(
        &self,
        raw: &S<raw::RawIdentity>,
        default_audience: &str,
    ) -> Result<Arc<crate::config::identity::Exchange>, Fail> {
        use crate::config::identity::{Exchange, SigningKey};
        let i = raw.get_ref();
        let Some(client_id) = &i.client_id else {
            return fail(
                raw.span(),
                "identity mode = \"exchange\" needs client_id and client_secret (or client_key): mcpgate's client at the [oauth] issuer",
            );
        };
        let auth = match (&i.client_secret, &i.client_key) {
            (Some(secret), None) => crate::config::identity::ClientAuth::Secret(at(
                secret,
                resolve_secrets_noting(secret.get_ref(), &mut self.files.borrow_mut()),
            )?),
            (None, Some(key)) => {
                let text = self.key_pem(key, key.get_ref(), "client_key")?;
                crate::config::identity::ClientAuth::Key(
                    SigningKey::from_pem(&text)
                        .map_err(|e| (key.span(), format!("client_key: {e}")))?,
                )
            }
            (Some(s), Some(_)) => {
                return fail(s.span(), "client_secret or client_key, not both");
            }
            (None, None) => {
                return fail(
                    raw.span(),
                    "identity mode = \"exchange\" needs client_id and client_secret (or client_key): mcpgate's client at the [oauth] issuer",
                );
            }
        };
        for (key, given) in [
            ("key", i.key.as_ref().map(S::span)),
            ("issuer", i.issuer.as_ref().map(S::span)),
            ("jwks_path", i.jwks_path.as_ref().map(S::span)),
        ] {
            if let Some(span) = given {
                return fail(
                    span,
                    format!("{key} is for mode = \"jwt\", not \"exchange\""),
                );
            }
        }
        let grant = match i.grant.as_ref().map(|g| (g, g.get_ref().as_str())) {
            None | Some((_, "token_exchange")) => crate::config::identity::Grant::TokenExchange,
            Some((g, "on_behalf_of")) => {
                if i.scope.is_none() {
                    return fail(
                        g.span(),
                        "grant = \"on_behalf_of\" names the upstream by scope (Entra ID: scope = \"api://<its app id>/.default\")",
                    );
                }
                crate::config::identity::Grant::OnBehalfOf
            }
            Some((g, other)) => {
                return fail(
                    g.span(),
                    format!("grant is \"token_exchange\" or \"on_behalf_of\", not {other:?}"),
                );
            }
        };
        Ok(Arc::new(Exchange {
            grant,
            audience: i
                .audience
                .as_ref()
                .map_or_else(|| default_audience.to_string(), |a| a.get_ref().clone()),
            resource: i.resource.as_ref().map(|r| r.get_ref().clone()),
            scope: i.scope.as_ref().map(|s| s.get_ref().clone()),
            client_id: client_id.get_ref().clone(),
            auth,
        }))
    }

    /// `mode = "jwt"`: the issuer, audience and signing keys of the tokens mcpgate makes,
    /// and where their public keys are served.
    fn jwt_identity(
        &self,
        raw: &S<raw::RawIdentity>,
        default_audience: &str,
    ) -> Result<Arc<crate::config::identity::Identity>, Fail> {
        use crate::config::identity::{Identity, SigningKey};
        let i = raw.get_ref();
        for (key, given) in [
            ("client_id", i.client_id.as_ref().map(S::span)),
            ("client_secret", i.client_secret.as_ref().map(S::span)),
            ("client_key", i.client_key.as_ref().map(S::span)),
            ("grant", i.grant.as_ref().map(S::span)),
            ("resource", i.resource.as_ref().map(S::span)),
            ("scope", i.scope.as_ref().map(S::span)),
        ] {
            if let Some(span) = given {
                return fail(
                    span,
                    format!("{key} is for mode = \"exchange\", not \"jwt\""),
                );
            }
        }
        let Some(issuer) = &i.issuer else {
            return fail(
                raw.span(),
                "identity mode = \"jwt\" needs issuer (the tokens' iss)",
            );
        };
        let Some(key) = &i.key else {
            return fail(
                raw.span(),
                "identity mode = \"jwt\" needs key: a PKCS#8 PEM private key, P-256 or Ed25519 (key = \"/etc/mcpgate/identity.pem\")",
            );
        };
        let texts: Vec<&str> = match key.get_ref() {
            toml::Value::String(s) => vec![s.as_str()],
            toml::Value::Array(list) => list.iter().filter_map(toml::Value::as_str).collect(),
            _ => return fail(key.span(), "key is a string or a list of strings"),
        };
        if texts.is_empty() {
            return fail(key.span(), "key lists no key");
        }
        let mut keys = Vec::new();
        for (n, text) in texts.iter().enumerate() {
            let text = self.key_pem(key, text, &format!("key {}", n + 1))?;
            let k = SigningKey::from_pem(&text)
                .map_err(|e| (key.span(), format!("key {}: {e}", n + 1)))?;
            keys.push(k);
        }
        if let Some(p) = &i.jwks_path
            && !p.get_ref().starts_with('/')
        {
            return fail(p.span(), "jwks_path is a path: it starts with /");
        }
        Ok(Arc::new(Identity {
            issuer: issuer.get_ref().clone(),
            audience: i
                .audience
                .as_ref()
                .map_or_else(|| default_audience.to_string(), |a| a.get_ref().clone()),
            keys: keys.into(),
            jwks_path: i.jwks_path.as_ref().map(|p| p.get_ref().clone()),
        }))
    }

    /// `session_key`: one key or a list, newest first; each 32 bytes in base64.
    /// A key's PEM text from what `written` says: a PEM file's path (relative to the
    /// configuration's folder), as the upstream `tls` keys take it, or the PEM itself
    /// through `${file:…}` or `${env:…}`. What a reference gives is never taken for a
    /// path: an error would then print it.
    pub(super) fn key_pem<T>(&self, at_: &S<T>, written: &str, what: &str) -> Result<String, Fail> {
        if written.contains("${") || written.trim_start().starts_with("-----BEGIN") {
            return at(
                at_,
                resolve_secrets_noting(written, &mut self.files.borrow_mut()),
            );
        }
        let text = written;
        let path = self.path(text.trim());
        std::fs::read_to_string(&path).map_err(|e| {
            (
                at_.span(),
                format!(
                    "{what}: cannot read {}: {e} (write the PEM file's path, or its text as \"${{file:/etc/mcpgate/key.pem}}\" or \"${{env:NAME}}\")",
                    path.display()
                ),
            )
        })
    }
}
