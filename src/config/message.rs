//! The message of an approval rule (docs/approvals.md): text with `{name}` (a top-level argument)
//! or `{/json/pointer}` (RFC 6901, any depth) filled from the call's arguments; `{{` and
//! `}}` are braces. The message is shown to a person (in a client's form, on the status
//! page) and the arguments are the caller's, so a value is never shown as markup:
//!
//! - a string is shown as a JSON string (quoted, its control characters escaped), any
//!   other value as compact JSON;
//! - `<`, `>`, `&`, `` ` ``, `[` and `]` and the invisible characters that reorder or hide
//!   text (bidirectional controls, zero-width characters) are written `\uXXXX`, so no
//!   HTML, Markdown link or code span and no reversed text reaches the person from a value;
//! - a value is cut at [`MOST_PER_VALUE`] characters, the message at [`MOST_CHARS`];
//! - a name the arguments lack is shown as `(no NAME)`.

use serde_json::Value;

/// The most characters of one value shown.
pub const MOST_PER_VALUE: usize = 200;
/// The most characters of a whole message.
pub const MOST_CHARS: usize = 2_000;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(Box<str>),
    /// A top-level argument's name.
    Name(Box<str>),
    /// A JSON pointer into the arguments.
    Pointer(Box<str>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Box<[Part]>,
}

impl Template {
    /// Reads `text`; the error says what is wrong and at which character.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|&(_, c)| c) == Some('{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek().map(|&(_, c)| c) == Some('}') => {
                    chars.next();
                    literal.push('}');
                }
                '}' => {
                    return Err(format!(
                        "a `}}` at character {} closes nothing (write `}}}}` for a brace)",
                        at + 1
                    ));
                }
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some((_, '}')) => break,
                            Some((_, '{')) | None => {
                                return Err(format!(
                                    "the `{{` at character {} is not closed (write `{{{{` for a brace)",
                                    at + 1
                                ));
                            }
                            Some((_, c)) => name.push(c),
                        }
                    }
                    if name.trim().is_empty() {
                        return Err(format!("an empty `{{}}` at character {}", at + 1));
                    }
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal).into()));
                    }
                    parts.push(if name.starts_with('/') {
                        Part::Pointer(name.into())
                    } else {
                        Part::Name(name.into())
                    });
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal.into()));
        }
        Ok(Template {
            parts: parts.into(),
        })
    }

    /// The message for a call with `arguments` (absent arguments are an empty object).
    pub fn render(&self, arguments: Option<&Value>) -> String {
        let mut out = String::new();
        for part in &*self.parts {
            let (label, found) = match part {
                Part::Text(t) => {
                    out.push_str(t);
                    continue;
                }
                Part::Name(n) => (n, arguments.and_then(|a| a.get(&**n))),
                Part::Pointer(p) => (p, arguments.and_then(|a| a.pointer(p))),
            };
            match found {
                Some(v) => out.push_str(&shown(v)),
                None => {
                    out.push_str("(no ");
                    out.push_str(&escape(label));
                    out.push(')');
                }
            }
        }
        cut(&out, MOST_CHARS)
    }
}

/// A value as a person is shown it: JSON, inert, at most [`MOST_PER_VALUE`] characters.
pub fn shown(v: &Value) -> String {
    let json = match v {
        Value::String(s) => serde_json::to_string(&Value::String(cut(s, MOST_PER_VALUE)))
            .expect("a string serialises"),
        other => cut(&other.to_string(), MOST_PER_VALUE),
    };
    escape(&json)
}

/// `text` with what could act as markup or hide text written `\uXXXX`.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if inert(c) {
            out.push(c);
        } else {
            for unit in c.encode_utf16(&mut [0; 2]) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// Whether `c` is shown as itself.
fn inert(c: char) -> bool {
    !(c.is_control()
        || matches!(c, '<' | '>' | '&' | '`' | '[' | ']')
        // Bidirectional controls, zero-width characters, the byte-order mark.
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}'))
}

/// `text` cut to `most` characters, `…` marking a cut.
pub fn cut(text: &str, most: usize) -> String {
    match text.char_indices().nth(most) {
        None => text.to_string(),
        Some((at, _)) => format!("{}…", &text[..at]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_and_pointers_are_filled_and_braces_escape() {
        let t = Template::parse("Delete {path} of {/owner/name} ({{not}} a {{name}})?").unwrap();
        let args = json!({"path": "notes/a.md", "owner": {"name": "ann"}});
        assert_eq!(
            t.render(Some(&args)),
            r#"Delete "notes/a.md" of "ann" ({not} a {name})?"#
        );
        let t = Template::parse("Remove {count} rows: {ids}").unwrap();
        assert_eq!(
            t.render(Some(&json!({"count": 3, "ids": [1, 2, 3]}))),
            "Remove 3 rows: \\u005b1,2,3\\u005d"
        );
    }

    #[test]
    fn a_missing_value_is_named_not_guessed() {
        let t = Template::parse("Delete {path} ({/a/b})?").unwrap();
        assert_eq!(t.render(None), "Delete (no path) ((no /a/b))?");
        assert_eq!(
            t.render(Some(&json!({"path": null}))),
            "Delete null ((no /a/b))?"
        );
    }

    #[test]
    fn markup_and_hidden_text_in_a_value_are_inert() {
        let t = Template::parse("Delete {path}?").unwrap();
        let hostile =
            "<img src=x onerror=alert(1)>[click](http://x) `rm` \u{1b}[8m\u{202e}gpj.exe\u{200b}";
        let out = t.render(Some(&json!({ "path": hostile })));
        for bad in ['<', '>', '`', '[', ']', '\u{1b}', '\u{202e}', '\u{200b}'] {
            assert!(!out.contains(bad), "{bad:?} in {out}");
        }
        assert!(out.contains("\\u003cimg"), "{out}");
        assert!(out.contains("\\u202e"), "{out}");
        // The rule's own text is the operator's and stays as written.
        let t = Template::parse("Really <b>delete</b> {x}?").unwrap();
        assert_eq!(
            t.render(Some(&json!({"x": "&"}))),
            r#"Really <b>delete</b> "\u0026"?"#
        );
    }

    #[test]
    fn long_values_and_messages_are_cut() {
        let t = Template::parse("{a}").unwrap();
        let out = t.render(Some(&json!({ "a": "x".repeat(5000) })));
        assert_eq!(out.chars().count(), MOST_PER_VALUE + 3);
        assert!(out.ends_with("…\""));
        let many: String = (0..50).map(|_| "{a}").collect();
        let out = Template::parse(&many)
            .unwrap()
            .render(Some(&json!({ "a": "y".repeat(500) })));
        assert_eq!(out.chars().count(), MOST_CHARS + 1);
    }

    #[test]
    fn bad_templates_say_where() {
        for (text, says) in [
            ("Delete {path?", "not closed"),
            ("Delete {a{b}}", "not closed"),
            ("Delete } now", "closes nothing"),
            ("Delete {} now", "empty"),
            ("Delete { } now", "empty"),
        ] {
            let e = Template::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
            assert!(e.contains("character"), "{text}: {e}");
        }
        assert!(Template::parse("plain, no values").is_ok());
    }
}
