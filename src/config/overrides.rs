//! `rules[i].overrides`: the rule's decisions read the bucket's per-key
//! override (a hash `tollgate override set` writes, in the bucket's slot) in
//! the same store call (docs/configuration.md, "Overrides"). Not with `sync`
//! (exact error here).

use super::error::ConfigError;
use super::primitives::fail;

/// `rules[i].overrides` (default false); `sync`: whether the rule has `sync`.
pub(crate) fn overrides(i: usize, raw: Option<bool>, sync: bool) -> Result<bool, ConfigError> {
    let overrides = raw.unwrap_or(false);
    if overrides && sync {
        return fail(
            format!("rules[{i}].overrides"),
            format!(
                "does not apply with rules[{i}].sync: a synced rule's proxies count locally with shares of the \
                 configured limit, so an override, read by the store, would not reach them"
            ),
        );
    }
    Ok(overrides)
}
