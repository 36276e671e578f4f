//! The request target of an HTTP/1.1 head, read as the `http` crate reads it.

use http::Uri;

/// A request's target (RFC 9112 §3.2). The origin form, `/path?query`, is the one MCP
/// clients send: it is read here by the rules the `http` crate parses it with (the same
/// bytes refused, the same fragment dropped, the same path and query), without building
/// a `Uri`, whose parse cost more than the rest of the head. Any other form (absolute,
/// authority, `*`) and every HTTP/2 target is kept as the `Uri` it parses to.
#[derive(Debug, Clone)]
pub enum Target {
    /// The path and query, the fragment left out; `query`: where its `?` is.
    Origin {
        text: Box<str>,
        query: Option<u32>,
    },
    Uri(Uri),
}

/// Longest target `http` takes.
const MAX_TARGET: usize = u16::MAX as usize - 1;

/// What a byte is in a path (`in_query` false) or a query, as `http` reads them: part of
/// it (0), the start of the query (1), the start of the fragment (2), refused (3). Bytes
/// from 0x80 up are part of it: the text given has already been read as UTF-8.
const fn target_bytes(in_query: bool) -> [u8; 256] {
    let mut classes = [3u8; 256];
    let mut b = 0;
    while b < 256 {
        classes[b] = match b as u8 {
            b'#' => 2,
            b'?' if !in_query => 1,
            // Neither may be in a query; a path takes them as they come.
            b'"' | b'{' | b'}' if !in_query => 0,
            b'"' => 3,
            // Below a space and DEL are refused everywhere, and `<`, `>`, and in a path
            // the backtick.
            0..=0x20 | 0x7f | b'<' | b'>' => 3,
            b'`' if !in_query => 3,
            _ => 0,
        };
        b += 1;
    }
    classes
}

const PATH_BYTES: [u8; 256] = target_bytes(false);
const QUERY_BYTES: [u8; 256] = target_bytes(true);

impl Target {
    /// Reads a target; `None` where `Uri` would refuse it.
    pub fn parse(text: &str) -> Option<Target> {
        let bytes = text.as_bytes();
        if bytes.first() != Some(&b'/') || bytes.len() > MAX_TARGET {
            return text.parse::<Uri>().ok().map(Target::Uri);
        }
        let mut query = None;
        let mut end = bytes.len();
        let mut classes = &PATH_BYTES;
        for (i, &b) in bytes.iter().enumerate() {
            match classes[usize::from(b)] {
                0 => {}
                1 => {
                    query = Some(i as u32);
                    classes = &QUERY_BYTES;
                }
                2 => {
                    end = i;
                    break;
                }
                _ => return None,
            }
        }
        Some(Target::Origin {
            text: Box::from(&text[..end]),
            query,
        })
    }

    pub fn path(&self) -> &str {
        match self {
            Target::Origin { text, query } => &text[..query.map_or(text.len(), |q| q as usize)],
            Target::Uri(uri) => uri.path(),
        }
    }

    pub fn query(&self) -> Option<&str> {
        match self {
            Target::Origin { text, query } => query.map(|q| &text[q as usize + 1..]),
            Target::Uri(uri) => uri.query(),
        }
    }

    /// The authority of an absolute target (`http://host:port/...`).
    pub fn authority(&self) -> Option<&str> {
        match self {
            Target::Origin { .. } => None,
            Target::Uri(uri) => uri.authority().map(|a| a.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target reads as `Uri` parses it: refused where it is refused, else the same path,
    /// query and authority; every ASCII byte (and some longer characters) at every place of
    /// texts with and without a query and a fragment, and the length limit.
    #[test]
    fn targets_read_as_uri_parses_them() {
        let same = |text: &str| {
            let ours = Target::parse(text);
            match text.parse::<Uri>() {
                Ok(uri) => {
                    let t = ours.unwrap_or_else(|| panic!("refused {text:?}"));
                    assert_eq!(t.path(), uri.path(), "{text:?}");
                    assert_eq!(t.query(), uri.query(), "{text:?}");
                    assert_eq!(
                        t.authority(),
                        uri.authority().map(|a| a.as_str()),
                        "{text:?}"
                    );
                }
                Err(_) => assert!(ours.is_none(), "took {text:?}"),
            }
        };
        let seeds = ["/", "/a/b", "/a?q=1", "/a?q#f", "/a#f?g", "/?", "/#", "//x"];
        let chars = (0u8..0x80).map(char::from).chain(['é', '日', '\u{10348}']);
        for c in chars {
            for seed in seeds {
                for at in 0..=seed.len() {
                    let mut text = seed.to_string();
                    text.insert(at, c);
                    same(&text);
                }
            }
        }
        for text in ["*", "http://h:8/p?q", "h:8", "/a/../b", ""] {
            same(text);
        }
        for len in [MAX_TARGET - 1, MAX_TARGET, MAX_TARGET + 1] {
            same(&format!("/{}", "a".repeat(len - 1)));
            same(&format!("/?{}", "a".repeat(len - 2)));
        }
        // The origin form is the one read without a `Uri`.
        assert!(matches!(Target::parse("/m?q"), Some(Target::Origin { .. })));
    }
}
