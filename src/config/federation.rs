//! What a federated profile (docs/federation.md, `[profiles.X] upstreams = [...]`) says of the names
//! its clients see: when a member's names get the member's prefix (`prefix`), and what
//! joins the two (`separator`).

use super::Profile;
use std::sync::Arc;

/// When a member's names are shown as `<member><separator><name>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Prefix {
    /// Every name of every member.
    Always,
    /// Only the names two members would otherwise both show (the default).
    #[default]
    OnConflict,
    /// None: of two members with one name, the first in member order keeps it.
    Never,
}

impl Prefix {
    /// The setting `value` names; `Err` says which values there are.
    pub fn parse(value: &str) -> Result<Prefix, String> {
        match value {
            "always" => Ok(Prefix::Always),
            "on_conflict" => Ok(Prefix::OnConflict),
            "never" => Ok(Prefix::Never),
            other => Err(format!(
                "prefix is \"always\", \"on_conflict\" or \"never\", not {other:?}"
            )),
        }
    }
}

/// A federated profile's members and how their names are shown.
#[derive(Debug)]
pub struct Federation {
    /// In the order of `upstreams`: the order their items are listed in.
    pub members: Box<[Member]>,
    pub prefix: Prefix,
    pub separator: Box<str>,
}

/// One member of a federated profile.
#[derive(Debug)]
pub struct Member {
    /// Its name in `upstreams` (the upstream's name): the prefix of its names.
    pub name: Arc<str>,
    /// What a request routed to it is sent with: the member's upstream and no rules of
    /// its own (the federated profile's rules judged the names the client sees), named
    /// `<profile>/<member>` so that what mcpgate seals for one member (a `requestState`,
    /// a task id) opens for no other.
    pub profile: Arc<Profile>,
}

impl Federation {
    /// The place of the member named `name`.
    pub fn member(&self, name: &str) -> Option<usize> {
        self.members.iter().position(|m| &*m.name == name)
    }
}

/// The separator when none is configured.
pub const SEPARATOR: &str = "__";

/// Checks a separator: 1 to 8 characters a tool name may hold (MCP's tool names are
/// `A-Z a-z 0-9 _ - .`), so that every prefixed name is still a legal one.
pub fn check_separator(separator: &str) -> Result<(), String> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if separator.is_empty() || separator.len() > 8 || !separator.chars().all(legal) {
        return Err(format!(
            "separator must be 1 to 8 of the characters a tool name may hold (A-Z a-z 0-9 _ - .), not {separator:?}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_modes_and_separators() {
        assert_eq!(Prefix::parse("always"), Ok(Prefix::Always));
        assert_eq!(Prefix::default(), Prefix::OnConflict);
        assert!(
            Prefix::parse("sometimes")
                .unwrap_err()
                .contains("on_conflict")
        );
        for good in ["__", "-", ".", "_x_"] {
            assert!(check_separator(good).is_ok(), "{good}");
        }
        for bad in ["", "/", "a b", "::", "ü", "123456789"] {
            assert!(check_separator(bad).is_err(), "{bad:?}");
        }
    }
}
