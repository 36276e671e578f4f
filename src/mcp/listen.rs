//! `subscriptions/listen` (MCP 2026-07-28) under a profile (docs/protocol.md). Before it is
//! forwarded, the request's filter loses what the profile may not see: resource URIs its
//! `resources` rules refuse, and the list notifications of capabilities it cannot use.
//! The upstream's acknowledgement then names only what it was asked for. The list changes
//! mcpgate itself makes (a reload, a sunset) go on the stream when the client opted in,
//! tagged with its subscription id like every message on it. Task ids (the tasks
//! extension) are asked for by the server's ids, only those sealed for the caller.

use crate::config::Profile;
use crate::mcp::task_ids::Shown;
use serde_json::Value;

/// What a listen stream opted into, for the notices mcpgate adds to it.
#[derive(Debug, Clone)]
pub struct Listening {
    /// The listen request's id as JSON text: the stream's subscription id.
    pub id: Box<str>,
    tools: bool,
    resources: bool,
    prompts: bool,
}

impl Listening {
    /// The JSON text of `method` (a list_changed notification) as this stream carries it,
    /// or `None` when the client did not opt in to it.
    pub fn notice(&self, method: &str) -> Option<String> {
        let wanted = match method {
            "notifications/tools/list_changed" => self.tools,
            "notifications/resources/list_changed" => self.resources,
            "notifications/prompts/list_changed" => self.prompts,
            _ => false,
        };
        wanted.then(|| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"{method}","params":{{"_meta":{{"io.modelcontextprotocol/subscriptionId":{}}}}}}}"#,
                self.id
            )
        })
    }
}

/// The filter keys and the capability each belongs to.
const LIST_KEYS: [(&str, &str); 3] = [
    ("toolsListChanged", "tools"),
    ("resourcesListChanged", "resources"),
    ("promptsListChanged", "prompts"),
];

/// What [`prepare`] makes of a listen request: the body to forward (`None`: unchanged),
/// what the stream opted into, and how the task ids on it are shown (when it names any).
pub type Prepared = (Option<Vec<u8>>, Listening, Option<Shown>);

/// Reads a listen request (`body`, one JSON-RPC request) for `profile`. `tasks` opens a
/// task id the client holds to the server's (`None`: not the caller's, or not one). `Err`
/// for a request whose `params.notifications` is not an object.
pub fn prepare(
    body: &[u8],
    profile: &Profile,
    tasks: &dyn Fn(&str) -> Option<String>,
) -> Result<Prepared, String> {
    let mut message: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let id = message
        .get("id")
        .map(Value::to_string)
        .unwrap_or_else(|| "null".into());
    let mut changed = false;
    let filter = match message.pointer_mut("/params/notifications") {
        None => None,
        Some(Value::Object(f)) => Some(f),
        Some(_) => return Err("params.notifications must be an object".into()),
    };
    let mut opted = [false; 3];
    let mut pairs = Vec::new();
    if let Some(filter) = filter {
        for (i, (key, capability)) in LIST_KEYS.iter().enumerate() {
            if filter.get(*key) == Some(&Value::Bool(true)) {
                if profile.may_use(capability) {
                    opted[i] = true;
                } else {
                    filter.remove(*key);
                    changed = true;
                }
            }
        }
        if let Some(uris) = filter.get_mut("resourceSubscriptions") {
            let Value::Array(list) = uris else {
                return Err("params.notifications.resourceSubscriptions must be an array".into());
            };
            // With no resource rules every URI passes, as the client wrote it.
            if profile.resources.is_some() || !profile.may_use("resources") {
                let before = list.len();
                list.retain(|u| {
                    profile.may_use("resources")
                        && u.as_str().is_some_and(|u| profile.allows_resource(u))
                });
                changed |= list.len() != before;
            }
        }
        if let Some(ids) = filter.get_mut("taskIds") {
            let Value::Array(list) = ids else {
                return Err("params.notifications.taskIds must be an array".into());
            };
            // Only the caller's own tasks are asked for, by the server's ids.
            let mut kept = Vec::with_capacity(list.len());
            for id in list.iter() {
                if let Some(original) = id.as_str().and_then(tasks) {
                    pairs.push((original.clone(), id.as_str().unwrap_or("").to_owned()));
                    kept.push(Value::String(original));
                }
            }
            *list = kept;
            changed = true;
        }
    }
    let listening = Listening {
        id: id.into(),
        tools: opted[0],
        resources: opted[1],
        prompts: opted[2],
    };
    let body = changed.then(|| serde_json::to_vec(&message).expect("a JSON value serialises"));
    let shown = (!pairs.is_empty()).then_some(Shown::Listen(pairs));
    Ok((body, listening, shown))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;

    fn profile(rules: &str) -> std::sync::Arc<Profile> {
        let text = format!(
            "[upstreams.u]\nurl = \"http://127.0.0.1:9/mcp\"\n[profiles.p]\nupstream = \"u\"\nallow = [\"*\"]\n{rules}\n"
        );
        load_str(&text, "t.toml").unwrap().profiles["p"].clone()
    }

    const LISTEN: &str = r#"{"jsonrpc":"2.0","id":"listen:1","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true,"promptsListChanged":true,"resourceSubscriptions":["file:///public/a","file:///secret/b","file:///public/../secret/c",7]}}}"#;

    #[test]
    fn uris_and_lists_the_profile_may_not_see_are_not_asked_for() {
        let p = profile("resources = { allow = [\"file:///public/*\"] }\nprompts = { allow = [] }");
        let (body, l, _) = prepare(LISTEN.as_bytes(), &p, &|_| None).unwrap();
        let v: Value = serde_json::from_slice(&body.unwrap()).unwrap();
        assert_eq!(
            v["params"]["notifications"],
            serde_json::json!({"toolsListChanged": true, "resourceSubscriptions": ["file:///public/a"]})
        );
        assert_eq!(
            l.notice("notifications/tools/list_changed").unwrap(),
            r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"listen:1"}}}"#
        );
        assert_eq!(l.notice("notifications/prompts/list_changed"), None);
        assert_eq!(l.notice("notifications/resources/list_changed"), None);
    }

    #[test]
    fn an_open_profile_forwards_the_request_as_it_came() {
        let p = profile("");
        let (body, l, _) = prepare(LISTEN.as_bytes(), &p, &|_| None).unwrap();
        assert!(body.is_none());
        assert!(l.notice("notifications/prompts/list_changed").is_some());
    }

    #[test]
    fn a_malformed_filter_is_refused() {
        let p = profile("");
        for bad in [
            r#"{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":"x"}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"taskIds":"x"}}}"#,
        ] {
            assert!(prepare(bad.as_bytes(), &p, &|_| None).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_the_callers_tasks_are_asked_for_by_the_servers_ids() {
        let p = profile("");
        let listen = r#"{"jsonrpc":"2.0","id":2,"method":"subscriptions/listen","params":{"notifications":{"taskIds":["mine","forged",7]}}}"#;
        let open = |id: &str| (id == "mine").then(|| "srv-1".to_string());
        let (body, _, shown) = prepare(listen.as_bytes(), &p, &open).unwrap();
        let v: Value = serde_json::from_slice(&body.unwrap()).unwrap();
        assert_eq!(
            v["params"]["notifications"]["taskIds"],
            serde_json::json!(["srv-1"])
        );
        let note =
            r#"{"jsonrpc":"2.0","method":"notifications/tasks","params":{"taskId":"srv-1"}}"#;
        let out = shown.unwrap().apply(note).unwrap().unwrap();
        assert!(out.contains(r#""taskId":"mine""#), "{out}");
        // Without task ids nothing is rewritten on the stream.
        let (_, _, shown) = prepare(LISTEN.as_bytes(), &p, &open).unwrap();
        assert!(shown.is_none());
    }
}
