//! Evaluating a rule's `match` against a request.

use super::extract::path_only;
use super::RequestView;
use crate::config::{HeaderCondition, HeaderMatch, Match};

/// Whether every condition of `m` holds for `request`.
pub fn matches(m: &Match, request: &dyn RequestView) -> bool {
    // The path is read only by a rule that has a path condition.
    let path =
        if m.path.is_some() || m.path_prefix.is_some() || m.path_regex.is_some() { request.path() } else { None };
    let bare = path.as_deref().map(path_only);
    if let Some(exact) = &m.path {
        if bare != Some(exact.as_bytes()) {
            return false;
        }
    }
    if let Some(prefix) = &m.path_prefix {
        if !bare.is_some_and(|p| p.starts_with(prefix.as_bytes())) {
            return false;
        }
    }
    if let Some(regex) = &m.path_regex {
        if !bare.is_some_and(|p| regex.is_match(p)) {
            return false;
        }
    }
    if !m.methods.is_empty() {
        let method = request.method();
        if !m.methods.iter().any(|allowed| method.as_deref() == Some(allowed.as_bytes())) {
            return false;
        }
    }
    if let Some(authority) = &m.authority {
        let actual = request.header(":authority").map(|a| a.to_ascii_lowercase());
        if actual.as_deref() != Some(authority.as_bytes()) {
            return false;
        }
    }
    m.headers.iter().all(|h| header_holds(h, request))
}

fn header_holds(h: &HeaderMatch, request: &dyn RequestView) -> bool {
    let value = request.header(&h.name);
    let holds = match (&h.condition, value.as_deref()) {
        (HeaderCondition::Present(expected), v) => v.is_some() == *expected,
        (_, None) => false,
        (HeaderCondition::Exact(e), Some(v)) => v == e.as_bytes(),
        (HeaderCondition::Prefix(p), Some(v)) => v.starts_with(p.as_bytes()),
        (HeaderCondition::Regex(r), Some(v)) => r.is_match(v),
    };
    holds != h.invert
}
