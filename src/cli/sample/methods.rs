//! What the sample server answers to each method: its tools (and their generated pages),
//! their calls, and JSON-RPC results and errors.

use super::*;

pub(super) fn answer(state: &State, id: Value, method: &str, params: &Value) -> Value {
    match method {
        "initialize" => {
            let version = params["protocolVersion"].as_str().unwrap_or("2025-06-18");
            ok(
                id,
                json!({
                    "protocolVersion": version,
                    "capabilities": {"tools": {"listChanged": false}},
                    "serverInfo": {"name": "mcpgate-sample", "version": env!("CARGO_PKG_VERSION")}
                }),
            )
        }
        "ping" => ok(id, json!({})),
        "tools/list" if state.opts.generated_tools.is_some() => {
            let tools: Vec<Value> = (0..state.opts.generated_tools.unwrap_or(0))
                .map(|i| json!({"name": format!("tool_{i:03}"), "description": "A generated tool for benchmarks.", "inputSchema": {"type": "object"}}))
                .collect();
            ok(id, json!({"tools": tools}))
        }
        "tools/list" => ok(id, tools_page(&state.opts, params["cursor"].as_str())),
        "tools/call" if state.opts.result_bytes.is_some() => {
            let text = "x".repeat(state.opts.result_bytes.unwrap_or(0));
            ok(
                id,
                json!({"content": [{"type": "text", "text": text}], "isError": false}),
            )
        }
        "tools/call" if state.opts.generated_tools.is_some() => {
            let name = params["name"].as_str().unwrap_or("");
            // Exactly a name the list gives (`tool_007`, not `tool_7`).
            let listed = name
                .strip_prefix("tool_")
                .and_then(|n| n.parse::<usize>().ok())
                .is_some_and(|i| {
                    i < state.opts.generated_tools.unwrap_or(0) && format!("tool_{i:03}") == name
                });
            if listed {
                let text = format!("{name} called with {}", params["arguments"]);
                ok(
                    id,
                    json!({"content": [{"type": "text", "text": text}], "isError": false}),
                )
            } else {
                error(id, -32602, &format!("Unknown tool: {name}"))
            }
        }
        "tools/call" => {
            let name = params["name"].as_str().unwrap_or("");
            match call(state, name, &params["arguments"]) {
                Some(Ok(text)) => ok(
                    id,
                    json!({"content": [{"type": "text", "text": text}], "isError": false}),
                ),
                Some(Err(text)) => ok(
                    id,
                    json!({"content": [{"type": "text", "text": text}], "isError": true}),
                ),
                None => error(id, -32602, &format!("Unknown tool: {name}")),
            }
        }
        _ => error(id, -32601, &format!("Method not found: {method}")),
    }
}

pub(super) fn tools_page(opts: &Options, cursor: Option<&str>) -> Value {
    let start: usize = cursor
        .and_then(|c| c.strip_prefix("page-"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let size = opts.page_size.unwrap_or(TOOLS.len());
    let tools: Vec<Value> = TOOLS
        .iter()
        .skip(start)
        .take(size)
        .map(|(name, description)| {
            json!({
                "name": name,
                "description": description,
                "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}},
                "annotations": {"readOnlyHint": name.starts_with("get") || name.starts_with("list") || name.starts_with("search") || *name == "batch_read"}
            })
        })
        .collect();
    let mut result = json!({"tools": tools, "_meta": {"sample/page": start / size.max(1)}});
    if start + size < TOOLS.len() {
        result["nextCursor"] = json!(format!("page-{}", start + size));
    }
    if opts.cache_scope {
        result["cacheScope"] = json!("public");
    }
    result
}

/// `None`: no such tool. `Some(Err)`: a tool error (`isError: true`).
pub(super) fn call(state: &State, name: &str, args: &Value) -> Option<Result<String, String>> {
    let mut docs = state.docs.lock().expect("lock");
    let id = args["id"].as_str().unwrap_or("").to_string();
    let missing = || Err(format!("no document {id:?}"));
    Some(match name {
        "search_knowledge" => {
            let q = args["query"].as_str().unwrap_or("").to_lowercase();
            let hits: Vec<&String> = docs
                .iter()
                .filter(|(_, (t, c))| {
                    t.to_lowercase().contains(&q) || c.to_lowercase().contains(&q)
                })
                .map(|(id, _)| id)
                .collect();
            Ok(format!("matches: {hits:?}"))
        }
        "list_documents" => Ok(docs
            .iter()
            .map(|(id, (t, _))| format!("{id}: {t}"))
            .collect::<Vec<_>>()
            .join("\n")),
        "get_document" | "get_document_for_rewrite" => match docs.get(&id) {
            Some((t, c)) => Ok(format!("# {t}\n{c}")),
            None => missing(),
        },
        "batch_read" => {
            let ids: Vec<&str> = args["ids"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            Ok(ids
                .iter()
                .map(|i| {
                    docs.get(*i)
                        .map_or(format!("{i}: (none)"), |(t, c)| format!("{i}: {t}: {c}"))
                })
                .collect::<Vec<_>>()
                .join("\n"))
        }
        "upload_document" => {
            let id = if id.is_empty() {
                format!("doc-{}", docs.len() + 1)
            } else {
                id
            };
            let title = args["title"].as_str().unwrap_or(&id).to_string();
            docs.insert(
                id.clone(),
                (title, args["content"].as_str().unwrap_or("").to_string()),
            );
            Ok(format!("created {id}"))
        }
        "update_document" => match docs.get_mut(&id) {
            Some(d) => {
                d.1 = args["content"].as_str().unwrap_or("").to_string();
                Ok(format!("updated {id}"))
            }
            None => missing(),
        },
        "patch_document" => match docs.get_mut(&id) {
            Some(d) => {
                let (find, replace) = (
                    args["find"].as_str().unwrap_or(""),
                    args["replace"].as_str().unwrap_or(""),
                );
                d.1 = d.1.replacen(find, replace, 1);
                Ok(format!("patched {id}"))
            }
            None => missing(),
        },
        "delete_document" => match docs.remove(&id) {
            Some(_) => Ok(format!("deleted {id}")),
            None => missing(),
        },
        "move_document" => match docs.remove(&id) {
            Some(d) => {
                let to = args["new_id"].as_str().unwrap_or("moved").to_string();
                docs.insert(to.clone(), d);
                Ok(format!("moved {id} to {to}"))
            }
            None => missing(),
        },
        _ => return None,
    })
}

pub(super) fn ok(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

pub(super) fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}
