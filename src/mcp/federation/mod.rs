//! The names a federated profile's clients see (docs/federation.md): each member's names, prefixed
//! with `<member><separator>` as the profile's `prefix` says, merged in member order, and
//! the way back from a name the client sent to the member and the name that member knows.
//!
//! A visible name stands for exactly one member's name, whatever the members call their
//! tools: the way back is a table, never a split at the separator (a member's own names
//! may hold the separator, and a member's name may end with it). Where two members would
//! show one name (`never`, or names crafted to meet after prefixing: `a__b` on member
//! `a` and `b` on member `a__`), the first in member order keeps it and the meeting is
//! reported: the others' names are not shown, and no call reaches them by it.

pub mod directory;
pub mod lists;
pub mod sessions;
pub mod template;

use crate::config::federation::Prefix;
use hashbrown::HashMap as FastMap;
use std::collections::HashMap;

/// One member's name as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Visible {
    /// The name the client sees and sends.
    pub name: String,
    /// The member's place in the profile's `upstreams`.
    pub member: usize,
    /// The name the member knows.
    pub original: String,
}

/// Members whose names would be shown as one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collision {
    /// The name they would share.
    pub name: String,
    /// Each member (its place) and its own name, in member order; the first keeps it.
    pub claims: Vec<(usize, String)>,
}

/// The merged names of a federated profile's members.
#[derive(Debug, Default)]
pub struct Merged {
    /// In member order, and in each member's own order.
    pub visible: Vec<Visible>,
    /// The names two or more members would have shown; the first claim kept each.
    pub collisions: Vec<Collision>,
    by_name: FastMap<String, usize>,
    /// Per member, each of its names that is shown, by its own name.
    by_origin: Vec<FastMap<String, usize>>,
}

impl Merged {
    /// The member (its place) and its own name for the name a client sent; `None`: no
    /// member shows that name.
    pub fn route(&self, visible: &str) -> Option<(usize, &str)> {
        let v = &self.visible[*self.by_name.get(visible)?];
        Some((v.member, &v.original))
    }

    /// The name a client sees for `member`'s own `original`; `None` when another member
    /// kept that name (a collision) or the member never listed it.
    pub fn shown(&self, member: usize, original: &str) -> Option<&str> {
        let i = self.by_origin.get(member)?.get(original)?;
        Some(&self.visible[*i].name)
    }
}

/// Merges the names of `members` (each: its name in the profile's `upstreams`, and its
/// own names in the order it lists them) as `prefix` and `separator` say. A member that
/// lists one name twice shows it once.
pub fn merge(members: &[(&str, Vec<&str>)], prefix: Prefix, separator: &str) -> Merged {
    let shown = |m: usize, name: &str, prefixed: bool| match prefixed {
        true => format!("{}{separator}{name}", members[m].0),
        false => name.to_string(),
    };
    // Each member's names, once each.
    let mut names: Vec<(usize, &str)> = Vec::new();
    for (m, (_, own)) in members.iter().enumerate() {
        let mut seen = std::collections::HashSet::new();
        names.extend(own.iter().filter(|n| seen.insert(**n)).map(|n| (m, *n)));
    }
    let mut prefixed = vec![prefix == Prefix::Always; names.len()];
    if prefix == Prefix::OnConflict {
        // Names that two entries would show are prefixed; prefixing may make a name meet
        // another's own, which is then prefixed too, until nothing changes (each round
        // prefixes one more name at least, so it ends).
        loop {
            let mut groups: HashMap<String, Vec<usize>> = HashMap::new();
            for (i, (m, n)) in names.iter().enumerate() {
                groups.entry(shown(*m, n, prefixed[i])).or_default().push(i);
            }
            let mut changed = false;
            for group in groups.values().filter(|g| g.len() > 1) {
                for &i in group {
                    changed |= !prefixed[i];
                    prefixed[i] = true;
                }
            }
            if !changed {
                break;
            }
        }
    }
    let mut merged = Merged::default();
    let mut claims: HashMap<String, Vec<(usize, String)>> = HashMap::new();
    for (i, (m, n)) in names.iter().enumerate() {
        let name = shown(*m, n, prefixed[i]);
        claims
            .entry(name.clone())
            .or_default()
            .push((*m, n.to_string()));
        if merged.by_name.contains_key(&name) {
            continue;
        }
        merged.by_name.insert(name.clone(), merged.visible.len());
        if merged.by_origin.len() <= *m {
            merged.by_origin.resize_with(*m + 1, FastMap::new);
        }
        merged.by_origin[*m].insert(n.to_string(), merged.visible.len());
        merged.visible.push(Visible {
            name,
            member: *m,
            original: n.to_string(),
        });
    }
    // Reported in the order the kept names are shown.
    for v in &merged.visible {
        if let Some(c) = claims.remove(&v.name).filter(|c| c.len() > 1) {
            merged.collisions.push(Collision {
                name: v.name.clone(),
                claims: c,
            });
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(m: &Merged) -> Vec<&str> {
        m.visible.iter().map(|v| v.name.as_str()).collect()
    }

    #[test]
    fn each_mode_shows_and_routes_as_it_says() {
        let members = [
            ("kb", vec!["search", "get_document"]),
            ("tickets", vec!["search", "open_ticket"]),
        ];
        let always = merge(&members, Prefix::Always, "__");
        assert_eq!(
            names(&always),
            [
                "kb__search",
                "kb__get_document",
                "tickets__search",
                "tickets__open_ticket"
            ]
        );
        assert!(always.collisions.is_empty());
        assert_eq!(always.route("tickets__search"), Some((1, "search")));
        assert_eq!(always.route("search"), None);

        let conflict = merge(&members, Prefix::OnConflict, "__");
        assert_eq!(
            names(&conflict),
            [
                "kb__search",
                "get_document",
                "tickets__search",
                "open_ticket"
            ]
        );
        assert_eq!(conflict.route("open_ticket"), Some((1, "open_ticket")));
        assert!(conflict.collisions.is_empty());

        let never = merge(&members, Prefix::Never, "__");
        assert_eq!(names(&never), ["search", "get_document", "open_ticket"]);
        assert_eq!(never.route("search"), Some((0, "search")));
        assert_eq!(
            never.collisions,
            [Collision {
                name: "search".into(),
                claims: vec![(0, "search".into()), (1, "search".into())],
            }]
        );
    }

    #[test]
    fn names_crafted_to_meet_after_prefixing_go_to_the_first_member_only() {
        // `__b` on member `a` and `b` on member `a__` both become `a____b`.
        let members = [("a", vec!["__b", "x"]), ("a__", vec!["b"])];
        let always = merge(&members, Prefix::Always, "__");
        assert_eq!(names(&always), ["a____b", "a__x"]);
        assert_eq!(always.route("a____b"), Some((0, "__b")));
        assert_eq!(
            always.collisions,
            [Collision {
                name: "a____b".into(),
                claims: vec![(0, "__b".into()), (1, "b".into())],
            }]
        );
        // Member order decides, not which name looks more like the prefix.
        let members = [("a__", vec!["b"]), ("a", vec!["__b"])];
        let always = merge(&members, Prefix::Always, "__");
        assert_eq!(always.route("a____b"), Some((0, "b")));
        // On conflict, the pair shares no name as they list them: neither is prefixed.
        let members = [("a", vec!["__b"]), ("a__", vec!["b"])];
        let conflict = merge(&members, Prefix::OnConflict, "__");
        assert_eq!(
            names(&conflict),
            ["__b", "b"],
            "no shared name: none prefixed"
        );
        // `b` on member `a` (prefixed, as `t` has `b` too) meets member `x`'s own `a__b`,
        // which is then prefixed as well: three names, three members, no collision.
        let members = [("a", vec!["b"]), ("t", vec!["b"]), ("x", vec!["a__b"])];
        let m = merge(&members, Prefix::OnConflict, "__");
        assert_eq!(names(&m), ["a__b", "t__b", "x__a__b"]);
        assert_eq!(m.route("a__b"), Some((0, "b")));
        assert!(m.collisions.is_empty());
    }

    #[test]
    fn on_conflict_prefixes_a_name_that_prefixing_made_meet() {
        // `x` on both: `kb__x`, `tickets__x`. A third member's own `kb__x` then meets
        // the first: it is prefixed too, and all three stay reachable.
        let members = [
            ("kb", vec!["x"]),
            ("tickets", vec!["x"]),
            ("cal", vec!["kb__x", "when"]),
        ];
        let m = merge(&members, Prefix::OnConflict, "__");
        assert_eq!(names(&m), ["kb__x", "tickets__x", "cal__kb__x", "when"]);
        assert!(m.collisions.is_empty(), "{:?}", m.collisions);
        assert_eq!(m.route("cal__kb__x"), Some((2, "kb__x")));
        assert_eq!(m.route("kb__x"), Some((0, "x")));
    }

    #[test]
    fn a_separator_inside_a_members_own_names_is_never_split() {
        let members = [("kb", vec!["doc__get"]), ("doc", vec!["get"])];
        let m = merge(&members, Prefix::Always, "__");
        assert_eq!(names(&m), ["kb__doc__get", "doc__get"]);
        assert_eq!(m.route("kb__doc__get"), Some((0, "doc__get")));
        assert_eq!(m.route("doc__get"), Some((1, "get")));
        // On conflict: no name is shared, so none is prefixed, though one holds "__".
        let m = merge(&members, Prefix::OnConflict, "__");
        assert_eq!(names(&m), ["doc__get", "get"]);
        assert_eq!(m.route("doc__get"), Some((0, "doc__get")));
    }

    #[test]
    fn a_member_whose_own_name_meets_its_prefixed_one_keeps_both() {
        // `x` on `kb` is prefixed (`t` has `x`), meeting `kb`'s own `kb__x`: that one is
        // prefixed too.
        let members = [("kb", vec!["x", "kb__x"]), ("t", vec!["x"])];
        let m = merge(&members, Prefix::OnConflict, "__");
        assert_eq!(names(&m), ["kb__x", "kb__kb__x", "t__x"]);
        assert!(m.collisions.is_empty());
    }

    #[test]
    fn a_name_listed_twice_by_one_member_is_no_collision() {
        let members = [("kb", vec!["a", "a"]), ("t", vec!["b"])];
        let m = merge(&members, Prefix::Never, "__");
        assert_eq!(names(&m), ["a", "b"]);
        assert!(m.collisions.is_empty());
    }

    /// Names drawn from a small alphabet that holds the separator, so that they meet
    /// often: whatever the mode, a visible name is shown once, routes back to the member
    /// and name it shows, and every member's name is shown or reported.
    #[test]
    fn any_names_route_back_to_what_they_show() {
        struct Rng(u64);
        impl Rng {
            fn below(&mut self, n: u64) -> u64 {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                self.0 % n
            }
            fn word(&mut self, max: u64) -> String {
                const PARTS: [&str; 5] = ["a", "b", "_", "__", "a__"];
                let len = 1 + self.below(max);
                (0..len).map(|_| PARTS[self.below(5) as usize]).collect()
            }
        }
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for _ in 0..2_000 {
            let mut owned: Vec<(String, Vec<String>)> = Vec::new();
            for _ in 0..1 + rng.below(3) {
                let member = rng.word(2);
                let tools = (0..1 + rng.below(4)).map(|_| rng.word(3)).collect();
                owned.push((member, tools));
            }
            let members: Vec<(&str, Vec<&str>)> = owned
                .iter()
                .map(|(m, t)| (m.as_str(), t.iter().map(String::as_str).collect()))
                .collect();
            for prefix in [Prefix::Always, Prefix::OnConflict, Prefix::Never] {
                let m = merge(&members, prefix, "__");
                let mut seen = std::collections::HashSet::new();
                for v in &m.visible {
                    assert!(seen.insert(&v.name), "{v:?} shown twice: {members:?}");
                    assert_eq!(m.route(&v.name), Some((v.member, v.original.as_str())));
                    let expect = [
                        v.original.clone(),
                        format!("{}__{}", members[v.member].0, v.original),
                    ];
                    assert!(expect.contains(&v.name), "{v:?}");
                }
                for (i, (_, own)) in members.iter().enumerate() {
                    for n in own {
                        let shown = m.visible.iter().any(|v| v.member == i && v.original == *n);
                        let reported = m
                            .collisions
                            .iter()
                            .any(|c| c.claims.iter().any(|(j, o)| *j == i && o == n));
                        assert!(shown || reported, "{i} {n} lost: {members:?} {prefix:?}");
                    }
                }
            }
        }
    }
}
