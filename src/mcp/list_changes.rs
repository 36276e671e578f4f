//! The list notifications mcpgate owes clients itself (docs/policy.md): what a reload changed
//! of what each profile may list, and the sunsets of deprecated tools as they pass. Sent
//! to the profiles' GET streams; the filters that apply the same rules to each list are
//! in `tools_list`.

use crate::config::{self, Snapshot};
use crate::runtime::streams::StreamRegistry;
use std::sync::Arc;
use std::time::SystemTime;

pub const TOOLS_CHANGED: &str = "notifications/tools/list_changed";
const RESOURCES_CHANGED: &str = "notifications/resources/list_changed";
pub const PROMPTS_CHANGED: &str = "notifications/prompts/list_changed";

/// The list notifications a change from `old` to `new` owes each profile's clients: for
/// each profile in both, whether what it may see of tools, resources and prompts differs
/// (its upstream, rules, the hidden list, deprecations and whether they are past).
pub fn list_changes(old: &Snapshot, new: &Snapshot) -> Vec<(Arc<str>, &'static str)> {
    let now = SystemTime::now();
    let tools = |s: &Snapshot, p: &config::Profile| {
        let deprecated: Vec<String> = s
            .deprecated
            .iter()
            .map(|(n, d)| format!("{n}>{}@{}:{}", d.replacement, d.sunset_text, d.gone(now)))
            .collect();
        (
            p.upstream.name.clone(),
            p.allow.patterns().join("\n"),
            p.deny.patterns().join("\n"),
            s.hidden.patterns().join("\n"),
            deprecated,
        )
    };
    let rules = |r: &Option<config::compile::NameRules>| {
        r.as_ref()
            .map(|r| (r.allow.patterns().join("\n"), r.deny.patterns().join("\n")))
    };
    let mut out = Vec::new();
    for (name, p) in &new.profiles {
        let Some(o) = old.profiles.get(name) else {
            continue;
        };
        if tools(old, o) != tools(new, p) {
            out.push((p.name.clone(), TOOLS_CHANGED));
        }
        if o.upstream.name != p.upstream.name || rules(&o.resources) != rules(&p.resources) {
            out.push((p.name.clone(), RESOURCES_CHANGED));
        }
        if o.upstream.name != p.upstream.name || rules(&o.prompts) != rules(&p.prompts) {
            out.push((p.name.clone(), PROMPTS_CHANGED));
        }
    }
    out
}

/// A task that, as each future sunset of `config`'s deprecated tools passes, tells the
/// GET streams of the profiles that could call the tool that their tool list changed.
/// Replaced on every reload; none without future sunsets or outside a runtime.
pub fn watch_sunsets(
    config: &Arc<Snapshot>,
    streams: &Arc<StreamRegistry>,
) -> Option<tokio::task::AbortHandle> {
    let now = SystemTime::now();
    let mut due: Vec<(SystemTime, Box<str>)> = config
        .deprecated
        .iter()
        .filter(|(_, d)| !d.gone(now))
        .map(|(n, d)| (d.sunset, n.clone()))
        .collect();
    if due.is_empty() {
        return None;
    }
    due.sort();
    let rt = tokio::runtime::Handle::try_current().ok()?;
    let (config, streams) = (config.clone(), streams.clone());
    let task = rt.spawn(async move {
        for (at, tool) in due {
            let wait = at.duration_since(SystemTime::now()).unwrap_or_default();
            tokio::time::sleep(wait).await;
            // A profile that may call it, by name or (its hints unknown here) perhaps
            // by annotations.
            let could_see = |p: &&Arc<config::Profile>| p.allows_tool_with(&tool, None).unwrap_or(true);
            for p in config.profiles.values().filter(could_see) {
                let told = streams.notify(&p.name, TOOLS_CHANGED);
                tracing::info!(%tool, profile = %p.name, streams = told, "sunset passed: tool list change sent");
            }
        }
    });
    Some(task.abort_handle())
}
