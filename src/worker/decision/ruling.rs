//! The pure "respond" step: from a request's checks and the store's
//! [`Decision`] (or a denial remembered in the cache) to what each rule
//! counts, which buckets to remember as denied, and what happens to the
//! request: admitted with headers, or denied with a local reply.
//!
//! The store decides as if every rule were enforced, so a shadow rule
//! consumes quota exactly as it would when enforced. A denial is carried out
//! only if at least one window that denied belongs to an enforced rule;
//! otherwise the request passes and the would-be denial is reported to the
//! upstream in [`SHADOW_HEADER`](crate::answer::response::SHADOW_HEADER).

use crate::answer::response::{allowed_headers_of, denied, policy_name, policy_names, Header, LocalReply};
use crate::cache::DenialCache;
use crate::config::{Config, Reserve};
use crate::limiter::Algorithm;
use crate::limiter::{Check, Decision, WindowOutcome};
use crate::worker::decision::record::{Answer, Decider, DecisionRecord};

/// How one matching rule saw the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuleOutcome {
    /// Every window of the rule had room.
    Allowed,
    /// A window of the (enforced) rule denied.
    Denied,
    /// A window of the rule denied, but the rule (or the whole filter) is in
    /// shadow mode.
    ShadowDenied,
}

/// What happens to the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Forward it. `shadow_denied` names the policies (`rule/period`, comma
    /// separated) that would have denied it, when shadow mode saved it;
    /// `headers` go on the upstream's response.
    Admit { shadow_denied: Option<String>, headers: Vec<Header> },
    /// Answer it with this reply.
    Deny(LocalReply),
}

/// A bucket the store found denying: remembered in the denial cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub key: String,
    /// When the bucket could fit the request again (request clock, ms).
    pub until_ms: u64,
    /// The bucket's windows as the store reported them (`check` 0: the
    /// cache serves them as the only check of a request).
    pub windows: Vec<WindowOutcome>,
}

/// Everything that follows from one decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruling {
    /// `(rule index, outcome)` per check, in check order.
    pub rules: Vec<(usize, RuleOutcome)>,
    /// Enforced buckets that denied (but lease sets and the checks of a
    /// rule with overrides).
    pub denials: Vec<Denial>,
    pub action: Action,
}

/// Whether a check's rule is in shadow mode (globally or on its own).
pub fn is_shadow(config: &Config, check: &Check) -> bool {
    config.shadow || config.rules.get(check.rule).is_some_and(|r| r.shadow)
}

/// The ruling for a request that arrived at `arrival_ms` (request clock) and
/// that the store decided. The decision's [`policy_names`] are made only
/// for a denial or a shadow denial: an admission's headers come from items
/// made at configuration time.
pub fn respond(config: &Config, checks: &[Check], decision: &Decision, arrival_ms: u64) -> Ruling {
    let mut rules = Vec::with_capacity(checks.len());
    let mut denials = Vec::new();
    let mut enforced_denial = false;
    for (i, check) in checks.iter().enumerate() {
        let windows = decision.windows.iter().filter(|w| w.check == i);
        let retry = windows.clone().map(|w| w.retry_ms).max().unwrap_or(0);
        let shadow = is_shadow(config, check);
        let outcome = match (retry > 0, shadow) {
            (false, _) => RuleOutcome::Allowed,
            (true, false) => RuleOutcome::Denied,
            (true, true) => RuleOutcome::ShadowDenied,
        };
        if outcome == RuleOutcome::Denied {
            enforced_denial = true;
        }
        // A lease set's denial is never remembered: any request that ends
        // frees a lease. Nor one of a rule with overrides: an override (or
        // a reset) set now applies to the next request.
        if outcome == RuleOutcome::Denied && check.algorithm != Algorithm::Lease && check.override_key.is_none() {
            denials.push(Denial {
                key: check.key.clone(),
                // Counted from the request's arrival, never later than the
                // store's view.
                until_ms: arrival_ms.saturating_add(retry),
                windows: windows.map(|w| WindowOutcome { check: 0, ..*w }).collect(),
            });
        }
        rules.push((check.rule, outcome));
    }
    let action = if enforced_denial {
        Action::Deny(denied(config, &policy_names(config, checks, decision), decision))
    } else {
        let shadow: Vec<&str> =
            decision.windows.iter().filter(|w| w.denied()).map(|w| policy_name(config, checks, w)).collect();
        Action::Admit {
            shadow_denied: (!shadow.is_empty()).then(|| shadow.join(", ")),
            headers: allowed_headers_of(config, checks, decision),
        }
    };
    Ruling { rules, denials, action }
}

/// How long a denial is remembered at most in cluster mode with several
/// rules (whose buckets can span slots): it may be another request's record
/// that an undo across slots is about to take back (docs/performance.md).
pub const CROSS_CACHE_MS: u64 = 100;

/// Caps how long `denials` are remembered to [`CROSS_CACHE_MS`] from
/// `arrival_ms`.
pub fn cap_denials(denials: &mut [Denial], arrival_ms: u64) {
    for d in denials {
        d.until_ms = d.until_ms.min(arrival_ms.saturating_add(CROSS_CACHE_MS));
    }
}

/// Whether the store's denial of `key` may be remembered: not when the
/// request's reservation varies (another request's smaller one may fit).
pub fn cacheable(config: &Config, checks: &[Check], key: &str) -> bool {
    let check = checks.iter().find(|c| c.key == key);
    let reserve = check.and_then(|c| config.rules.get(c.rule)).and_then(|r| r.count.as_ref()?.reserve.as_ref());
    !matches!(reserve, Some(Reserve::Header { .. } | Reserve::Body { .. }))
}

/// Records the ruling's denials in the cache (`arrival_ms`: when the request
/// arrived, the time the windows were read).
pub fn remember(cache: &mut DenialCache, denials: Vec<Denial>, arrival_ms: u64) {
    for d in denials {
        cache.insert(&d.key, d.until_ms, arrival_ms, d.windows);
    }
}

/// The ruling for a request one of whose enforced buckets the cache knows
/// to deny at `now_ms`, if any: denied with that bucket's windows, as the
/// store would have answered, without a store call; and its record.
pub fn deny_from_cache(
    config: &Config,
    checks: &[Check],
    cache: &mut DenialCache,
    now_ms: u64,
) -> Option<(Ruling, DecisionRecord)> {
    // A check with an override key is never remembered: not looked up.
    let remembered = |c: &&Check| !is_shadow(config, c) && c.override_key.is_none();
    let (check, windows) = checks.iter().filter(remembered).find_map(|check| {
        let windows = cache.lookup(&check.key, now_ms)?;
        Some((check, windows))
    })?;
    let single = std::slice::from_ref(check);
    let decision = Decision { allowed: false, now_ms, windows, delay_ms: 0 };
    let names = policy_names(config, single, &decision);
    let record = DecisionRecord::decided(config, single, &decision, Decider::Cache, Answer::Denied);
    let ruling = Ruling {
        rules: vec![(check.rule, RuleOutcome::Denied)],
        denials: Vec::new(),
        action: Action::Deny(denied(config, &names, &decision)),
    };
    Some((ruling, record))
}

#[cfg(test)]
mod tests;
