//! `[tools]`: tools hidden from every profile, the error code of a refused call, argument
//! rules and deprecations (the last two compiled in `arguments`).

use super::arguments::{self, ArgumentRule, Deprecation};
use super::{DEFAULT_DENY_CODE, Fail, check_patterns};
use crate::config::glob::Matcher;
use crate::config::raw;
use std::collections::BTreeMap;

/// What `[tools]` says, for every profile.
#[derive(Default)]
pub(super) struct ToolRules {
    pub hidden: Matcher,
    pub deny_code: i64,
    pub argument_rules: Vec<ArgumentRule>,
    pub deprecated: BTreeMap<Box<str>, Deprecation>,
}

pub(super) fn tools(raw: Option<&raw::RawTools>) -> Result<ToolRules, Fail> {
    let Some(t) = raw else {
        return Ok(ToolRules {
            deny_code: DEFAULT_DENY_CODE,
            ..ToolRules::default()
        });
    };
    check_patterns(&t.hidden)?;
    Ok(ToolRules {
        hidden: Matcher::new(t.hidden.iter().map(|s| s.get_ref().as_str())),
        deny_code: t
            .deny_code
            .as_ref()
            .map_or(DEFAULT_DENY_CODE, |c| *c.get_ref()),
        argument_rules: arguments::argument_rules(&t.arguments)?,
        deprecated: arguments::deprecations(&t.deprecated)?,
    })
}
