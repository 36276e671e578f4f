//! `Mcp-Param-*` headers (MCP 2026-07-28, "Custom Headers from Tool Parameters") when
//! mcpgate is the HTTP server of a stdio upstream, or of a legacy server bridged to
//! 2026-07-28 clients (which never sees those headers either). A tool's `inputSchema` may mark
//! parameters with `x-mcp-header: NAME`; a client then mirrors each given value into
//! `Mcp-Param-NAME`, and the server must refuse a request whose headers and body disagree.
//! The child never sees headers, so mcpgate checks them for it.
//!
//! - The marks are learnt from the child's `tools/list` answers as they pass (a later
//!   answer wins for a tool). Only marks reached from the schema's root through
//!   `properties` alone count: the specification makes any other mark invalid, and
//!   clients drop such tools.
//! - For a `tools/call` of a tool with marks: a value in the arguments (not null) needs its
//!   header, equal after `=?base64?…?=` decoding (integers compared as numbers); a header
//!   without a value, a doubled one, or one that cannot be decoded is a mismatch too.
//!   Headers no mark names are ignored, as an intermediary must.
//! - A tool whose list mcpgate has not seen yet is not checked: nothing says which headers
//!   it expects.

use crate::config::generation::decode_header;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use wire::fields::{FieldKind, Fields};

const PREFIX: &[u8] = b"mcp-param-";
/// The most marks kept for one tool (a schema with more is read up to this many).
const MAX_MARKS: usize = 64;
/// The most tools whose marks are kept.
const MAX_TOOLS: usize = 10_000;

/// One marked parameter: the header's name part (lowercase) and where the value lies.
#[derive(Debug, Clone, PartialEq)]
struct Mark {
    header: String,
    path: Vec<String>,
}

/// The marks of one upstream's tools, by tool name.
#[derive(Default, Debug)]
pub struct ParamHeaders {
    tools: Mutex<HashMap<String, Arc<[Mark]>>>,
}

impl ParamHeaders {
    /// Learns the marks of the tools in a `tools/list` result.
    pub fn learn(&self, result: &Value) {
        let Some(tools) = result.get("tools").and_then(Value::as_array) else {
            return;
        };
        let mut known = self.tools.lock().unwrap_or_else(|p| p.into_inner());
        for tool in tools {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            let mut marks = Vec::new();
            if let Some(schema) = tool.get("inputSchema") {
                collect(schema, &mut Vec::new(), &mut marks);
            }
            if marks.is_empty() {
                known.remove(name);
            } else if known.len() < MAX_TOOLS || known.contains_key(name) {
                known.insert(name.to_string(), marks.into());
            }
        }
    }

    /// Whether any tool has marks (until one does, no call needs reading).
    pub fn any(&self) -> bool {
        !self
            .tools
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Checks a `tools/call`'s `Mcp-Param-*` headers against its arguments.
    pub fn check(
        &self,
        fields: &Fields,
        tool: &str,
        arguments: Option<&Value>,
    ) -> Result<(), String> {
        let marks = self
            .tools
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(tool)
            .cloned();
        let Some(marks) = marks else { return Ok(()) };
        for mark in marks.iter() {
            let mut headers = fields.iter().filter(|(kind, name, _)| {
                *kind == FieldKind::Other
                    && name.len() == PREFIX.len() + mark.header.len()
                    && name[..PREFIX.len()].eq_ignore_ascii_case(PREFIX)
                    && name[PREFIX.len()..].eq_ignore_ascii_case(mark.header.as_bytes())
            });
            let header = headers.next().map(|(_, _, v)| v);
            if headers.next().is_some() {
                return Err(format!("Mcp-Param-{} is sent twice", mark.header));
            }
            let value = arguments
                .and_then(|a| mark.path.iter().try_fold(a, |v, key| v.get(key)))
                .filter(|v| !v.is_null());
            match (header, value) {
                (None, None) => {}
                (None, Some(_)) => {
                    return Err(format!(
                        "Mcp-Param-{} is missing; the arguments hold its value",
                        mark.header
                    ));
                }
                (Some(_), None) => {
                    return Err(format!(
                        "Mcp-Param-{} is sent, but the arguments hold no value for it",
                        mark.header
                    ));
                }
                (Some(h), Some(v)) => {
                    let decoded = decode_header(h).ok_or_else(|| {
                        format!(
                            "Mcp-Param-{} is neither printable ASCII nor =?base64?…?=",
                            mark.header
                        )
                    })?;
                    if !same(&decoded, v) {
                        return Err(format!(
                            "Mcp-Param-{} does not match the arguments",
                            mark.header
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Whether a header's text stands for a body value: strings as they are, booleans as
/// `true`/`false`, integers by number (`42.0` is `42`).
fn same(header: &str, value: &Value) -> bool {
    match value {
        Value::String(s) => header == s,
        Value::Bool(b) => header == if *b { "true" } else { "false" },
        Value::Number(n) => match (header.parse::<f64>(), n.as_f64()) {
            (Ok(h), Some(b)) => h.is_finite() && h == b,
            _ => false,
        },
        _ => false,
    }
}

/// The marks under `schema`, reached through `properties` only.
fn collect(schema: &Value, path: &mut Vec<String>, marks: &mut Vec<Mark>) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (key, property) in properties {
        if marks.len() >= MAX_MARKS || path.len() >= 32 {
            return;
        }
        path.push(key.clone());
        if let Some(header) = property.get("x-mcp-header").and_then(Value::as_str)
            && is_token(header)
            && !marks.iter().any(|m| m.header.eq_ignore_ascii_case(header))
        {
            marks.push(Mark {
                header: header.to_ascii_lowercase(),
                path: path.clone(),
            });
        }
        collect(property, path, marks);
        path.pop();
    }
}

/// RFC 9110's `token`: one or more `tchar`.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(headers: &[(&str, &str)]) -> Fields {
        let mut map = http::HeaderMap::new();
        for (n, v) in headers {
            map.append(
                http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        Fields::from_map(&map)
    }

    fn store() -> ParamHeaders {
        let p = ParamHeaders::default();
        p.learn(&json!({"tools": [{
            "name": "query",
            "inputSchema": {"type": "object", "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "limit": {"type": "integer", "x-mcp-header": "Limit"},
                "opts": {"type": "object", "properties": {
                    "dry": {"type": "boolean", "x-mcp-header": "Dry"}
                }},
                "list": {"type": "array", "items": {"x-mcp-header": "Item"}},
                "bad": {"type": "string", "x-mcp-header": "no spaces"}
            }}
        }]}));
        p
    }

    #[test]
    fn marks_are_read_through_properties_only() {
        let p = store();
        let marks = p.tools.lock().unwrap()["query"].clone();
        let mut paths: Vec<(&str, String)> = marks
            .iter()
            .map(|m| (m.header.as_str(), m.path.join("/")))
            .collect();
        paths.sort();
        assert_eq!(
            paths,
            [
                ("dry", "opts/dry".to_string()),
                ("limit", "limit".to_string()),
                ("region", "region".to_string())
            ]
        );
    }

    #[test]
    fn headers_must_match_the_arguments() {
        let p = store();
        let args = json!({"region": "Grüß", "limit": 42, "opts": {"dry": true}});
        let good = fields(&[
            ("Mcp-Param-Region", "=?base64?R3LDvMOf?="),
            ("mcp-param-limit", "42.0"),
            ("MCP-PARAM-DRY", "true"),
            ("Mcp-Param-Unknown", "ignored"),
        ]);
        assert_eq!(p.check(&good, "query", Some(&args)), Ok(()));
        // Without the nested value, its header is not expected.
        let args2 = json!({"region": "eu", "limit": 1, "opts": {"dry": null}});
        let f = fields(&[("Mcp-Param-Region", "eu"), ("Mcp-Param-Limit", "1")]);
        assert_eq!(p.check(&f, "query", Some(&args2)), Ok(()));
        for bad in [
            vec![("Mcp-Param-Region", "Gruss")],
            vec![
                ("Mcp-Param-Region", "=?base64?R3LDvMOf?="),
                ("Mcp-Param-Limit", "43"),
            ],
            vec![("Mcp-Param-Limit", "42"), ("Mcp-Param-Dry", "true")],
        ] {
            let f = fields(&bad);
            assert!(p.check(&f, "query", Some(&args)).is_err(), "{bad:?}");
        }
        let doubled = fields(&[
            ("Mcp-Param-Region", "eu"),
            ("Mcp-Param-Region", "eu"),
            ("Mcp-Param-Limit", "1"),
        ]);
        assert!(p.check(&doubled, "query", Some(&args2)).is_err());
        // A header for a value the body does not hold.
        let extra = fields(&[
            ("Mcp-Param-Region", "eu"),
            ("Mcp-Param-Limit", "1"),
            ("Mcp-Param-Dry", "false"),
        ]);
        assert!(p.check(&extra, "query", Some(&args2)).is_err());
        // A tool never listed is not checked.
        assert_eq!(p.check(&fields(&[]), "other", Some(&args)), Ok(()));
    }

    #[test]
    fn a_new_list_replaces_a_tool_s_marks() {
        let p = store();
        p.learn(&json!({"tools": [{"name": "query", "inputSchema": {"type": "object"}}]}));
        let args = json!({"region": "eu"});
        assert_eq!(p.check(&fields(&[]), "query", Some(&args)), Ok(()));
    }
}
