//! Whether a URI is one a resource template (RFC 6570) can make: how a federated profile
//! finds the member that serves a `resources/read` of a URI no member listed (docs/federation.md).
//!
//! The literal text of the template must appear as written; each expression stands for
//! one or more characters: `{var}` (simple expansion) for characters other than `/`, `?`
//! and `#`, which it would have percent-encoded; `{+var}` and `{#var}` for any; `{/var}`,
//! `{.var}`, `{;var}`, `{?var}` and `{&var}` for their operator and what follows it up to
//! the next literal. A template is a hint where the URI goes, not a parser of its
//! variables: a URI that two members' templates both make goes to the first member.

/// One piece of a template.
#[derive(Debug, PartialEq)]
enum Piece<'t> {
    Literal(&'t str),
    /// An expression, by its operator (`None` for simple expansion).
    Expression(Option<char>),
}

/// The template's pieces; `None` when a brace does not close.
fn pieces(template: &str) -> Option<Vec<Piece<'_>>> {
    let mut out = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        match rest.find('{') {
            Some(0) => {
                let end = rest.find('}')?;
                let operator = rest[1..end]
                    .chars()
                    .next()
                    .filter(|c| matches!(c, '+' | '#' | '/' | '.' | ';' | '?' | '&'));
                out.push(Piece::Expression(operator));
                rest = &rest[end + 1..];
            }
            Some(at) => {
                out.push(Piece::Literal(&rest[..at]));
                rest = &rest[at..];
            }
            None => {
                out.push(Piece::Literal(rest));
                rest = "";
            }
        }
    }
    Some(out)
}

/// Whether `uri` is one `template` makes.
pub fn matches(template: &str, uri: &str) -> bool {
    pieces(template).is_some_and(|p| fits(&p, uri))
}

fn fits(pieces: &[Piece<'_>], uri: &str) -> bool {
    let Some((first, rest)) = pieces.split_first() else {
        return uri.is_empty();
    };
    match first {
        Piece::Literal(l) => uri.strip_prefix(l).is_some_and(|u| fits(rest, u)),
        Piece::Expression(operator) => {
            if let Some(op) = operator.filter(|o| !matches!(o, '+' | '#')) {
                // The operator's character starts what the expression makes.
                if !uri.starts_with(op) {
                    return false;
                }
            }
            let allowed = |c: char| match operator {
                None => !matches!(c, '/' | '?' | '#'),
                Some('+' | '#' | '/' | '?' | '&' | ';' | '.') => true,
                Some(_) => false,
            };
            // Each length the expression could take, shortest first.
            let mut taken = 0;
            for c in uri.chars() {
                if !allowed(c) {
                    break;
                }
                taken += c.len_utf8();
                if fits(rest, &uri[taken..]) {
                    return true;
                }
            }
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn uris_a_template_makes() {
        assert!(matches("kb://docs/{id}", "kb://docs/42"));
        assert!(!matches("kb://docs/{id}", "kb://docs/"));
        assert!(!matches("kb://docs/{id}", "kb://docs/a/b"));
        assert!(matches("kb://docs/{+path}", "kb://docs/a/b"));
        assert!(matches("kb://{kind}/{id}.md", "kb://notes/x.y.md"));
        assert!(!matches("kb://{kind}/{id}.md", "kb://notes/x.txt"));
        assert!(matches(
            "api://search{?q,limit}",
            "api://search?q=a&limit=2"
        ));
        assert!(!matches("api://search{?q}", "api://searchq=a"));
        assert!(matches("file:///{+path}", "file:///etc/hosts"));
        assert!(!matches("tickets://{id}", "kb://docs/1"));
        assert!(matches("plain://fixed", "plain://fixed"));
        assert!(!matches("plain://fixed", "plain://fixed/more"));
        // A brace that does not close makes nothing.
        assert!(!matches("bad://{id", "bad://{id"));
    }
}
