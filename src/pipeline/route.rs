//! The route stage: which of the listener's routes the request path names, and the
//! `{token}` segment when the route's template has one.

use crate::config::Route;
use crate::error::GateError;
use crate::gateway::Live;
use crate::http::request::Target;
use std::sync::Arc;

pub(super) fn find<'s, 'p>(
    live: &'s Live,
    listener: usize,
    target: &'p Target,
) -> Result<(&'s Arc<Route>, Option<&'p str>), GateError> {
    let m = live
        .match_route(listener, target.path())
        .ok_or(GateError::NoRoute)?;
    Ok((m.route, m.path_token))
}
