//! The OpenID provider of the OAuth tests: `oidc-provider` (`peers/idp.mjs`) on a loopback
//! port, with the test hooks it has (tokens signed as a test asks, counts, a JWKS that can
//! fail, token exchange answering as a test asks).

use super::{node22, peers, send};
use http::{Method, StatusCode};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// The OpenID provider: `idp.mjs` on a loopback port.
pub struct Idp {
    child: Child,
    pub issuer: String,
}

impl Idp {
    pub fn start() -> Idp {
        let mut child = Command::new(node22())
            .arg(peers().join("idp.mjs"))
            .current_dir(peers())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        // The provider prints notices later; a closed pipe would end it.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("idp: {e}: {line}"));
        Idp {
            child,
            issuer: v["issuer"].as_str().unwrap().to_string(),
        }
    }

    pub async fn json(&self, method: Method, path: &str, body: Value) -> Value {
        let r = send(
            method,
            &format!("{}{path}", self.issuer),
            &[("content-type", "application/json")],
            body.to_string(),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
        r.json()
    }

    /// A token from the client-credentials grant for `resource`.
    pub async fn token(&self, client: &str, scope: &str, resource: &str) -> String {
        use base64::Engine as _;
        let basic =
            base64::engine::general_purpose::STANDARD.encode(format!("{client}:{client}-secret"));
        let form = format!(
            "grant_type=client_credentials&scope={}&resource={}",
            scope.replace(' ', "+"),
            resource.replace(':', "%3A").replace('/', "%2F")
        );
        let r = send(
            Method::POST,
            &format!("{}/token", self.issuer),
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("authorization", &format!("Basic {basic}")),
            ],
            form,
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "token: {}", r.body);
        r.json()["access_token"].as_str().unwrap().to_string()
    }

    /// A JWT the test chooses: `spec` is `{alg, claims, kid?, fresh?, publish?}`.
    pub async fn sign(&self, spec: Value) -> String {
        self.json(Method::POST, "/test/sign", spec).await["token"]
            .as_str()
            .unwrap()
            .to_string()
    }

    pub async fn count(&self, what: &str) -> u64 {
        self.json(Method::GET, "/test/counts", Value::Null).await[what]
            .as_u64()
            .unwrap()
    }

    pub async fn jwks_down(&self, down: bool) {
        self.json(Method::POST, "/test/jwks", json!({ "down": down }))
            .await;
    }
}

impl Drop for Idp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
