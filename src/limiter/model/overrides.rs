//! Per-key overrides (script: `overrides.lua`) and the dry run, `peek`.
//!
//! A check with an override key ([`Check::override_key`]) reads that key's
//! hash, as stored ([`Model::set_override`]), before phase 1. The hash
//! applies while `now < until` (a field `until` of decimal digits, at most
//! 16; absent: always; anything else: never). Its field `w<period_ms>` sets
//! the limit in force of the check's windows of that period, `c` a lease
//! check's; a value that is not decimal digits without a leading zero in
//! `1..=10^12`, or for `gcra`/`sliding_window` above `2^53 / period_ms`, is
//! ignored. The decision then runs with the limits in force (gcra keys its
//! state by limit and period, so an override starts it afresh), and every
//! window of a check whose override set at least one limit is
//! [`WindowOutcome::overridden`](crate::limiter::WindowOutcome).
//!
//! [`Model::peek`] is a decision with nothing committed: the same checks
//! (overrides too), the model left as it was.

use super::Model;
use crate::limiter::{Adjustment, Algorithm, Check, Decision, Window, EXACT_PRODUCT_MAX};
use std::collections::BTreeMap;
use std::num::NonZeroU64;

/// The override hashes stored, by key: field -> value.
pub(super) type Hashes = BTreeMap<String, BTreeMap<String, String>>;

/// The largest limit an override sets (10^12).
pub const OVERRIDE_MAX: u64 = 1_000_000_000_000;

/// An override as `tollgate override set` writes it, for tests: limits by
/// period, a lease check's concurrency, the end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Override {
    /// `(period_ms, limit)`: field `w<period_ms>`.
    pub limits: Vec<(u64, u64)>,
    /// Field `c`.
    pub concurrency: Option<u64>,
    /// Field `until` (ms since the Unix epoch).
    pub until: Option<u64>,
}

impl Override {
    /// The hash fields.
    pub fn fields(&self) -> Vec<(String, String)> {
        let mut fields: Vec<(String, String)> =
            self.limits.iter().map(|(period, limit)| (format!("w{period}"), limit.to_string())).collect();
        fields.extend(self.concurrency.map(|c| ("c".to_string(), c.to_string())));
        fields.extend(self.until.map(|u| ("until".to_string(), u.to_string())));
        fields
    }
}

/// A field's value as a limit: decimal digits without a leading zero, in
/// `1..=OVERRIDE_MAX`.
fn limit_of(value: Option<&String>) -> Option<u64> {
    let v = value?;
    let digits = !v.is_empty() && v.len() <= 13 && v.bytes().all(|b| b.is_ascii_digit()) && !v.starts_with('0');
    v.parse::<u64>().ok().filter(|&x| digits && x <= OVERRIDE_MAX)
}

/// Whether hash `fields` is live at `now`.
fn live(fields: &BTreeMap<String, String>, now: u64) -> bool {
    match fields.get("until") {
        None => true,
        Some(u) => {
            let digits = !u.is_empty() && u.len() <= 16 && u.bytes().all(|b| b.is_ascii_digit());
            digits && u.parse::<u64>().is_ok_and(|until| now < until)
        }
    }
}

/// `check` with the limits in force at `now` under the hash `fields` (if
/// its override key holds one), and whether the override set any.
fn in_force(check: &Check, fields: Option<&BTreeMap<String, String>>, now: u64) -> (Check, bool) {
    let Some(fields) = fields.filter(|f| live(f, now)) else {
        return (check.clone(), false);
    };
    let mut applied = false;
    let windows: Vec<Window> = check
        .windows
        .iter()
        .map(|w| {
            let field = if check.algorithm == Algorithm::Lease { "c".to_string() } else { format!("w{}", w.period_ms) };
            let fits = |x: &u64| !check.algorithm.needs_exact_product() || *x <= EXACT_PRODUCT_MAX / w.period_ms.get();
            match limit_of(fields.get(&field)).filter(fits).and_then(NonZeroU64::new) {
                Some(limit) => {
                    applied = true;
                    Window { limit, ..*w }
                }
                None => *w,
            }
        })
        .collect();
    (Check { windows: windows.into(), ..check.clone() }, applied)
}

impl Model {
    /// Stores the override hash of `key` (what `HSET` after a `DEL` would
    /// leave; no fields: none).
    pub fn set_override(&mut self, key: &str, fields: &[(String, String)]) {
        if fields.is_empty() {
            self.overrides.remove(key);
        } else {
            self.overrides.insert(key.to_string(), fields.iter().cloned().collect());
        }
    }

    /// The override hash stored under `key`.
    pub fn override_fields(&self, key: &str) -> Option<&BTreeMap<String, String>> {
        self.overrides.get(key)
    }

    /// `checks` with their limits in force at `now`, and per check whether
    /// an override applied; `None` when no check has an override key.
    fn in_force(&self, checks: &[&Check], now: u64) -> Option<(Vec<Check>, Vec<bool>)> {
        if checks.iter().all(|c| c.override_key.is_none()) {
            return None;
        }
        let hash = |c: &Check| c.override_key.as_deref().and_then(|k| self.overrides.get(k));
        Some(checks.iter().map(|c| in_force(c, hash(c), now)).unzip())
    }

    /// Runs `run` on `checks` with their limits in force, and marks the
    /// outcomes of the overridden ones.
    fn overridden(
        &mut self,
        checks: &[Check],
        now: u64,
        run: impl FnOnce(&mut Self, &[Check]) -> Decision,
    ) -> Decision {
        let Some((effective, applied)) = self.in_force(&checks.iter().collect::<Vec<_>>(), now) else {
            return run(self, checks);
        };
        mark(run(self, &effective), checks.iter(), &applied)
    }

    /// Decides for all `checks` at once at time `now_ms`.
    pub fn decide(&mut self, checks: &[Check], now_ms: u64) -> Decision {
        self.overridden(checks, now_ms, |m, c| m.decide_as(c, now_ms, true))
    }

    /// [`super::shape`]: [`Model::decide`] placing the turn at
    /// `now_ms + floor_ms` or later, admitted if at most `max_delay_ms` away.
    pub fn decide_floored(&mut self, checks: &[Check], max_delay_ms: u64, floor_ms: u64, now_ms: u64) -> Decision {
        self.overridden(checks, now_ms, |m, c| m.floored_as(c, (max_delay_ms, floor_ms), now_ms, true))
    }

    /// The dry run of [`Model::decide`] (`peek`): its decision with nothing
    /// committed; the model is left as it was.
    pub fn peek(&self, checks: &[Check], now_ms: u64) -> Decision {
        self.dry_copy(checks).overridden(checks, now_ms, |m, c| m.decide_as(c, now_ms, false))
    }

    /// The dry run of [`Model::decide_floored`]: `delay_ms` is the turn the
    /// request would get, not recorded.
    pub fn peek_floored(&self, checks: &[Check], max_delay_ms: u64, floor_ms: u64, now_ms: u64) -> Decision {
        let shape = (max_delay_ms, floor_ms);
        self.dry_copy(checks).overridden(checks, now_ms, |m, c| m.floored_as(c, shape, now_ms, false))
    }

    /// A model of only what `checks` read.
    fn dry_copy(&self, checks: &[Check]) -> Model {
        let mut copy = Model::new();
        for c in checks {
            if let Some(state) = self.buckets.get(&c.key) {
                copy.buckets.insert(c.key.clone(), state.clone());
            }
            if let Some((k, fields)) = c.override_key.as_deref().and_then(|k| self.overrides.get_key_value(k)) {
                copy.overrides.insert(k.clone(), fields.clone());
            }
        }
        copy
    }

    /// Changes what requests decided at `at_ms` recorded, at `now_ms`
    /// ([`Model::adjust_as`]), with the limits in force.
    pub fn adjust(&mut self, adjustments: &[Adjustment], at_ms: u64, now_ms: u64) -> Decision {
        let checks: Vec<&Check> = adjustments.iter().map(|a| &a.check).collect();
        let Some((effective, applied)) = self.in_force(&checks, now_ms) else {
            return self.adjust_as(adjustments, at_ms, now_ms);
        };
        let adjustments: Vec<Adjustment> =
            adjustments.iter().zip(effective).map(|(a, check)| Adjustment { check, ..a.clone() }).collect();
        let decision = self.adjust_as(&adjustments, at_ms, now_ms);
        mark(decision, checks.into_iter(), &applied)
    }
}

/// `decision` with each window of a check whose override `applied` marked
/// `overridden` where its limit in force is not the configured one (of
/// `checks`), as `reply::parse` reads the store's per-check flag.
fn mark<'a>(mut decision: Decision, checks: impl Iterator<Item = &'a Check>, applied: &[bool]) -> Decision {
    let checks: Vec<&Check> = checks.collect();
    for w in &mut decision.windows {
        let configured = checks.get(w.check).and_then(|c| c.windows.get(w.window)).map(|x| x.limit.get());
        w.overridden = applied.get(w.check).copied().unwrap_or(false) && configured != Some(w.limit);
    }
    decision
}
