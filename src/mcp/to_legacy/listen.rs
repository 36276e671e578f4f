//! A 2026-07-28 client's `subscriptions/listen` served by a legacy server's GET stream:
//! what it asks for, the acknowledgement and notifications it is sent, and the
//! `resources/subscribe` of each URI it names.

use super::*;

/// A `subscriptions/listen` request as a legacy session serves it.
#[derive(Debug, Clone)]
pub struct Listen {
    /// The request's id, as JSON text: the subscription id of what it carries.
    pub id: String,
    tools: bool,
    resources: bool,
    prompts: bool,
    /// The resources to subscribe to.
    pub uris: Vec<String>,
}

impl Listen {
    /// Reads the (profile-narrowed) listen request `body`.
    pub fn of(body: &[u8]) -> Result<Listen, String> {
        let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        let n = &v["params"]["notifications"];
        let on = |key: &str| n[key] == Value::Bool(true);
        let uris = match &n["resourceSubscriptions"] {
            Value::Null => Vec::new(),
            Value::Array(items) => items
                .iter()
                .map(|u| u.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or("resourceSubscriptions must be an array of strings")?,
            _ => return Err("resourceSubscriptions must be an array of strings".into()),
        };
        Ok(Listen {
            id: v.get("id").map_or_else(|| "null".into(), Value::to_string),
            tools: on("toolsListChanged"),
            resources: on("resourcesListChanged"),
            prompts: on("promptsListChanged"),
            uris,
        })
    }

    /// The acknowledgement that opens the client's stream, naming what it carries.
    pub fn acknowledged(&self) -> String {
        let mut n = serde_json::Map::new();
        for (key, on) in [
            ("toolsListChanged", self.tools),
            ("resourcesListChanged", self.resources),
            ("promptsListChanged", self.prompts),
        ] {
            if on {
                n.insert(key.into(), Value::Bool(true));
            }
        }
        if !self.uris.is_empty() {
            n.insert(
                "resourceSubscriptions".into(),
                Value::from(self.uris.clone()),
            );
        }
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{{"_meta":{{"io.modelcontextprotocol/subscriptionId":{}}},"notifications":{}}}}}"#,
            self.id,
            Value::Object(n)
        )
    }

    /// A message of the session's GET stream as this listen stream carries it: a
    /// notification the client opted in to, tagged with its subscription id; `None` for
    /// anything else.
    pub fn carry(&self, data: &str) -> Option<String> {
        let mut v: Value = serde_json::from_str(data).ok()?;
        if v.get("id").is_some() {
            return None;
        }
        let wanted = match v["method"].as_str()? {
            "notifications/tools/list_changed" => self.tools,
            "notifications/resources/list_changed" => self.resources,
            "notifications/prompts/list_changed" => self.prompts,
            "notifications/resources/updated" => v["params"]["uri"]
                .as_str()
                .is_some_and(|u| self.uris.iter().any(|s| s == u)),
            _ => false,
        };
        if !wanted {
            return None;
        }
        let id: Value = serde_json::from_str(&self.id).ok()?;
        let params = v
            .as_object_mut()?
            .entry("params")
            .or_insert_with(|| Value::Object(Default::default()))
            .as_object_mut()?;
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Default::default()))
            .as_object_mut()?;
        meta.insert("io.modelcontextprotocol/subscriptionId".into(), id);
        Some(v.to_string())
    }
}

/// The `resources/subscribe` (request number `n`) a listen stream's URI is.
pub fn subscribe_request(uri: &str, n: usize) -> String {
    let uri = serde_json::to_string(uri).expect("a string serializes");
    format!(
        r#"{{"jsonrpc":"2.0","id":"mcpgate-subscribe-{n}","method":"resources/subscribe","params":{{"uri":{uri}}}}}"#
    )
}
