//! `rules[i].sync`: decide the rule's requests on the worker from its view
//! of each window, and sync that view with the store every `interval`
//! (docs/sync.md); not with `count` or `shape` (exact errors here).

use super::error::ConfigError;
use super::primitives::{bounded_count, duration, fail};
use super::raw::RawSync;
use super::{Bounds, Limit};

/// The shortest `sync.interval`, in milliseconds.
pub const MIN_SYNC_INTERVAL_MS: u64 = 10;
/// The longest `sync.interval`, in milliseconds.
pub const MAX_SYNC_INTERVAL_MS: u64 = 60_000;
/// Spelling of [`MAX_SYNC_INTERVAL_MS`] in messages.
const MAX_SYNC_INTERVAL_LABEL: &str = "1m";
/// `sync.max_keys` when omitted: buckets of the rule one worker keeps.
pub const DEFAULT_SYNC_MAX_KEYS: usize = 10_000;
pub const SYNC_MAX_KEYS_BOUNDS: Bounds = (1, 1_000_000);

/// A rule decided locally and synced every interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncPolicy {
    /// How often a worker sends what it admitted and reads the windows back.
    pub interval_ms: u64,
    /// Buckets of the rule one worker keeps, at most.
    pub max_keys: usize,
}

/// `rules[i].sync`; `count` and `shape`: whether the rule has them.
pub(crate) fn sync_policy(
    i: usize,
    raw: Option<RawSync>,
    limits: &[Limit],
    count: bool,
    shape: bool,
) -> Result<Option<SyncPolicy>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let path = format!("rules[{i}].sync");
    if count {
        return fail(path, format!("does not apply with rules[{i}].count: a synced rule is counted on the request"));
    }
    if shape {
        return fail(
            path,
            format!("does not apply with rules[{i}].shape: a held request needs the store to give it its turn"),
        );
    }
    let interval_path = format!("{path}.interval");
    let (interval, label) = duration(&raw.interval, &interval_path, MAX_SYNC_INTERVAL_MS, MAX_SYNC_INTERVAL_LABEL)?;
    if interval.get() < MIN_SYNC_INTERVAL_MS {
        return fail(interval_path, format!("must be >= {MIN_SYNC_INTERVAL_MS}ms"));
    }
    if let Some(shortest) = limits.iter().min_by_key(|l| l.period.ms()) {
        if interval >= shortest.period.ms() {
            return fail(
                interval_path,
                format!(
                    "{label} must be shorter than the rule's shortest period ({}): a view that old says nothing of the window",
                    shortest.period.label()
                ),
            );
        }
    }
    let max_keys =
        bounded_count(&format!("{path}.max_keys"), raw.max_keys, DEFAULT_SYNC_MAX_KEYS, SYNC_MAX_KEYS_BOUNDS)?;
    Ok(Some(SyncPolicy { interval_ms: interval.get(), max_keys }))
}
