//! MCP's two generations as the configuration and the upstream side name them (SPEC §15):
//! which an upstream speaks, which revision is the first without sessions. What a request
//! says of itself is read in `mcp::era`.

/// The first revision without sessions.
pub const MODERN: &str = "2026-07-28";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Era {
    #[default]
    Legacy,
    Modern,
}

impl Era {
    pub fn name(self) -> &'static str {
        match self {
            Era::Legacy => "legacy",
            Era::Modern => "modern",
        }
    }
}

/// Whether `version` (a revision date, `YYYY-MM-DD`) is 2026-07-28 or later. Revision
/// names are dates, so their order is the text's; anything not shaped like a date is not
/// a modern revision.
pub fn is_modern(version: &str) -> bool {
    let b = version.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        })
        && version >= MODERN
}
