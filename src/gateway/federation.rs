//! Federation's room in the gateway (docs/federation.md): what its profiles keep between
//! requests. The directories of their members' names (one per federated profile, read
//! again when a member's list changes; their series registered here) and the sessions a
//! legacy client's session holds at each member.

use crate::mcp::federation::directory::Directories;
use crate::mcp::federation::sessions::MemberSessions;

/// The federated profiles' state that outlives a request.
pub struct Federating {
    /// The members' names, by profile.
    pub directories: Directories,
    /// A legacy client's sessions at the members, by its session over them.
    pub sessions: MemberSessions,
}

impl Federating {
    /// Its series registered; no directory until a profile's first request.
    pub(super) fn registered(registry: &mut prometheus_client::registry::Registry) -> Federating {
        Federating {
            directories: Directories::registered(registry),
            sessions: MemberSessions::default(),
        }
    }
}
