//! `rules[i].shape`: hold a request that does not fit until it does, up to
//! `max_delay` (docs/shaping.md), with every algorithm and with `count`;
//! not in shadow mode (an exact error, checked here or by
//! [`super::validate`] across sections).

use super::error::ConfigError;
use super::primitives::{bounded_count, duration, fail};
use super::raw::RawShape;
use super::Bounds;

/// The longest `shape.max_delay`, in milliseconds: a held request keeps its
/// connection and one of its rule's `max_waiting` places this long at most.
pub const MAX_SHAPE_DELAY_MS: u64 = 30_000;
/// Spelling of [`MAX_SHAPE_DELAY_MS`] in messages.
pub(crate) const MAX_SHAPE_DELAY_LABEL: &str = "30s";
/// `shape.max_waiting` when omitted: requests of the rule held (or being
/// decided) per worker.
pub const DEFAULT_MAX_WAITING: usize = 1024;
pub const MAX_WAITING_BOUNDS: Bounds = (1, 65_536);

/// A rule that shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shaping {
    /// The longest a request of the rule may wait for its turn, in ms.
    pub max_delay_ms: u64,
    /// At most this many requests of the rule per worker are held or being
    /// decided; beyond, a request is refused (429) without a store call.
    pub max_waiting: usize,
}

/// `rules[i].shape`; `shadow`: whether the rule is a shadow rule.
pub(crate) fn shaping(i: usize, raw: Option<RawShape>, shadow: bool) -> Result<Option<Shaping>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let path = format!("rules[{i}].shape");
    if shadow {
        return fail(path, "does not apply to a shadow rule: it would hold requests it never denies");
    }
    let (max_delay, _) =
        duration(&raw.max_delay, &format!("{path}.max_delay"), MAX_SHAPE_DELAY_MS, MAX_SHAPE_DELAY_LABEL)?;
    let max_waiting =
        bounded_count(&format!("{path}.max_waiting"), raw.max_waiting, DEFAULT_MAX_WAITING, MAX_WAITING_BOUNDS)?;
    Ok(Some(Shaping { max_delay_ms: max_delay.get(), max_waiting }))
}
