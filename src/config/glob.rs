//! Name patterns of allow/deny/hidden/methods lists: exact names, or globs where `*`
//! matches any run of characters (including none). Compiled once: exact names go in a
//! hash set, globs in a short list, and a lone `*` short-circuits to "everything".

use std::collections::HashSet;

#[derive(Debug, Default, Clone)]
pub struct Matcher {
    any: bool,
    exact: HashSet<Box<str>>,
    globs: Vec<Glob>,
}

#[derive(Debug, Clone)]
struct Glob {
    source: Box<str>,
    parts: Vec<Box<str>>,
}

impl Matcher {
    pub fn new<'a>(patterns: impl IntoIterator<Item = &'a str>) -> Self {
        let mut m = Matcher::default();
        for p in patterns {
            if p == "*" {
                m.any = true;
            } else if p.contains('*') {
                m.globs.push(Glob {
                    source: p.into(),
                    parts: p.split('*').map(Into::into).collect(),
                });
            } else {
                m.exact.insert(p.into());
            }
        }
        m
    }

    pub fn is_empty(&self) -> bool {
        !self.any && self.exact.is_empty() && self.globs.is_empty()
    }

    pub fn matches_everything(&self) -> bool {
        self.any
    }

    pub fn matches(&self, name: &str) -> bool {
        self.any || self.has_exact(name) || self.globs.iter().any(|g| g.matches(name))
    }

    /// A few names are compared directly, which is cheaper than hashing the name (a
    /// tools/list answer asks this for every tool it lists).
    fn has_exact(&self, name: &str) -> bool {
        if self.exact.len() <= 8 {
            self.exact.iter().any(|e| **e == *name)
        } else {
            self.exact.contains(name)
        }
    }

    /// The patterns, sorted, for `mcpgate check`.
    pub fn patterns(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.exact.iter().map(|s| &**s).collect();
        v.extend(self.globs.iter().map(|g| &*g.source));
        if self.any {
            v.push("*");
        }
        v.sort_unstable();
        v
    }
}

impl Glob {
    /// `parts` are the literal pieces between stars: the first must be a prefix, the last a
    /// suffix, and the middle ones must appear in order, each leftmost (greedy-free, linear).
    fn matches(&self, name: &str) -> bool {
        let (first, rest) = self
            .parts
            .split_first()
            .expect("split yields at least one part");
        let Some(mut tail) = name.strip_prefix(&**first) else {
            return false;
        };
        let (last, middle) = rest.split_last().expect("a glob has at least one star");
        for part in middle {
            match tail.find(&**part) {
                Some(i) => tail = &tail[i + part.len()..],
                None => return false,
            }
        }
        tail.len() >= last.len() && tail.ends_with(&**last)
    }
}

#[cfg(test)]
mod tests {
    use super::Matcher;

    #[test]
    fn exact_and_globs() {
        let m = Matcher::new(["get_document", "delete_*", "*_draft", "a*b*c"]);
        assert!(m.matches("get_document"));
        assert!(!m.matches("get_documents"));
        assert!(m.matches("delete_document"));
        assert!(m.matches("delete_"));
        assert!(m.matches("save_draft"));
        assert!(m.matches("abc"));
        assert!(m.matches("aXbYc"));
        assert!(!m.matches("acb"));
        assert!(!m.matches("ab"));
        assert!(!m.matches("xdelete_a"));
    }

    #[test]
    fn overlapping_prefix_and_suffix() {
        // "ab*ba" must not accept "aba": prefix and suffix may not share characters.
        let m = Matcher::new(["ab*ba"]);
        assert!(!m.matches("aba"));
        assert!(m.matches("abba"));
    }

    #[test]
    fn star_is_everything() {
        let m = Matcher::new(["*"]);
        assert!(m.matches(""));
        assert!(m.matches("anything"));
        assert!(Matcher::new([]).is_empty());
    }
}
