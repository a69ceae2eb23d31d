//! The pure reference model of the transactional multi-window sliding log.
//!
//! This is the specification: `sliding_log.lua` must give the same decision,
//! remaining, reset and retry for every trace (the differential tests in
//! `tests/differential.rs` check that against a real Valkey).
//!
//! * An admitted request of cost `c` records `c` entries at `now` in every
//!   matching bucket; a denied request records nothing anywhere.
//! * An entry at `t` counts in a window of period `P` at `now` while
//!   `now - P < t` (entries from the future, after a clock step back, count).
//! * A request fits a window when `count + cost <= limit`; it is admitted only
//!   if it fits every window of every check.
//! * `retry_ms`: when the `count + cost - limit`-th oldest counted entry has
//!   left the window; `reset_ms`: when the oldest counted entry has left.

use super::{Check, Decision, WindowOutcome};
use std::collections::BTreeMap;

/// Buckets of entry timestamps (ms), each kept sorted.
#[derive(Debug, Default, Clone)]
pub struct SlidingLog {
    buckets: BTreeMap<String, Vec<u64>>,
}

impl SlidingLog {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of entries stored for `key` (what `ZCARD` would say).
    pub fn entries(&self, key: &str) -> usize {
        self.buckets.get(key).map_or(0, Vec::len)
    }

    /// Decides for all `checks` at once at time `now_ms`.
    pub fn decide(&mut self, checks: &[Check], now_ms: u64) -> Decision {
        let now = i128::from(now_ms);
        for check in checks {
            let max_period = check.windows.iter().map(|w| w.period_ms.get()).max().unwrap_or(0);
            let cutoff = now - i128::from(max_period);
            if let Some(entries) = self.buckets.get_mut(&check.key) {
                entries.retain(|&t| i128::from(t) > cutoff);
            }
        }

        let mut retries: Vec<u64> = Vec::new();
        for check in checks {
            let entries = self.bucket(&check.key);
            for w in &check.windows {
                let counted = counted(entries, now, w.period_ms.get());
                let count = counted.len() as u64;
                let excess = (count + check.cost.get()).saturating_sub(w.limit.get());
                let retry = if excess == 0 {
                    0
                } else {
                    let leaves = usize::try_from(excess - 1)
                        .ok()
                        .and_then(|i| counted.get(i))
                        .map_or(i128::from(w.period_ms.get()), |&t| {
                            i128::from(t) + i128::from(w.period_ms.get()) - now
                        });
                    u64::try_from(leaves.max(1)).unwrap_or(u64::MAX)
                };
                retries.push(retry);
            }
        }
        let allowed = retries.iter().all(|&r| r == 0);

        if allowed {
            for check in checks {
                let entries = self.buckets.entry(check.key.clone()).or_default();
                let at = entries.partition_point(|&t| t <= now_ms);
                let added = std::iter::repeat_n(now_ms, check.cost.get() as usize);
                entries.splice(at..at, added);
            }
        }

        let mut windows = Vec::with_capacity(retries.len());
        let mut retry = retries.into_iter();
        for (ci, check) in checks.iter().enumerate() {
            let entries = self.bucket(&check.key);
            for (wi, w) in check.windows.iter().enumerate() {
                let counted = counted(entries, now, w.period_ms.get());
                let reset_ms = counted
                    .first()
                    .map_or(0, |&t| u64::try_from(i128::from(t) + i128::from(w.period_ms.get()) - now).unwrap_or(0));
                windows.push(WindowOutcome {
                    check: ci,
                    window: wi,
                    limit: w.limit.get(),
                    period_ms: w.period_ms.get(),
                    remaining: w.limit.get().saturating_sub(counted.len() as u64),
                    reset_ms,
                    retry_ms: retry.next().unwrap_or(0),
                });
            }
        }
        Decision { allowed, now_ms, windows }
    }

    fn bucket(&self, key: &str) -> &[u64] {
        self.buckets.get(key).map_or(&[], Vec::as_slice)
    }
}

/// The entries (sorted) that count in a window of `period` at `now`.
fn counted(entries: &[u64], now: i128, period: u64) -> &[u64] {
    let from = now - i128::from(period);
    let start = entries.partition_point(|&t| i128::from(t) <= from);
    entries.get(start..).unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::Window;
    use std::num::NonZeroU64;

    fn nz(n: u64) -> NonZeroU64 {
        NonZeroU64::new(n).unwrap()
    }

    fn check(key: &str, windows: &[(u64, u64)], cost: u64) -> Check {
        Check {
            rule: 0,
            key: key.into(),
            windows: windows
                .iter()
                .map(|&(limit, period)| Window { limit: nz(limit), period_ms: nz(period) })
                .collect(),
            cost: nz(cost),
        }
    }

    /// The seed article's table: 20/60s and 5/3s, calls 1..8 in one instant.
    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn seed_table() {
        let mut m = SlidingLog::new();
        let c = [check("u", &[(20, 60_000), (5, 3_000)], 1)];
        for call in 1..=8u64 {
            let d = m.decide(&c, 1_000_000 + call);
            assert_eq!(d.allowed, call <= 5, "call {call}");
            assert_eq!(d.windows[0].remaining, 20 - call.min(5));
            assert_eq!(d.windows[1].remaining, 5 - call.min(5));
            if call > 5 {
                let denied: Vec<_> = d.denied_by().map(|w| w.window).collect();
                assert_eq!(denied, vec![1]);
                // The first entry (at 1_000_001) leaves the 3s window at 1_003_001.
                assert_eq!(d.retry_after_ms(), 1_003_001 - (1_000_000 + call));
            }
        }
        assert_eq!(m.entries("u"), 5, "denied calls consumed nothing");
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn a_denial_in_one_rule_consumes_nothing_in_another() {
        let mut m = SlidingLog::new();
        let tight = check("a", &[(1, 1_000)], 1);
        let loose = check("b", &[(100, 1_000)], 1);
        assert!(m.decide(&[tight.clone(), loose.clone()], 10).allowed);
        let d = m.decide(&[tight, loose], 11);
        assert!(!d.allowed);
        assert_eq!(m.entries("b"), 1);
        assert_eq!(d.windows[1].remaining, 99);
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn window_boundary_is_exclusive_of_the_old_edge() {
        let mut m = SlidingLog::new();
        let c = [check("k", &[(1, 1_000)], 1)];
        assert!(m.decide(&c, 5_000).allowed);
        let d = m.decide(&c, 5_999);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ms(), 1);
        assert!(m.decide(&c, 6_000).allowed, "the entry at 5000 left at 6000");
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn retry_waits_for_enough_entries_to_leave_every_window() {
        let mut m = SlidingLog::new();
        let c = [check("k", &[(3, 10_000), (2, 1_000)], 1)];
        assert!(m.decide(&c, 0).allowed);
        assert!(m.decide(&c, 100).allowed);
        let d = m.decide(&c, 200);
        assert_eq!(d.denied_by().map(|w| w.window).collect::<Vec<_>>(), vec![1]);
        assert_eq!(d.retry_after_ms(), 800);
        assert!(m.decide(&c, 1_000).allowed);
        let d = m.decide(&c, 1_050);
        // Now both windows are full: 10s needs the entry at 0 to leave (10_000).
        assert_eq!(d.windows[0].retry_ms, 10_000 - 1_050);
        assert_eq!(d.windows[1].retry_ms, 1_100 - 1_050);
        assert_eq!(d.retry_after_ms(), 8_950);
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn cost_consumes_units_in_every_window() {
        let mut m = SlidingLog::new();
        let c = [check("k", &[(5, 1_000)], 3)];
        assert!(m.decide(&c, 0).allowed);
        let d = m.decide(&c, 1);
        assert!(!d.allowed);
        assert_eq!(d.windows[0].remaining, 2);
        assert_eq!(d.retry_after_ms(), 999);
        assert_eq!(m.entries("k"), 3);
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn long_gaps_trim_everything() {
        let mut m = SlidingLog::new();
        let c = [check("k", &[(2, 86_400_000), (1, 1)], 1)];
        assert!(m.decide(&c, 0).allowed);
        assert!(!m.decide(&c, 0).allowed);
        assert!(m.decide(&c, 1).allowed);
        let d = m.decide(&c, 10 * 86_400_000);
        assert!(d.allowed);
        assert_eq!(m.entries("k"), 1);
        assert_eq!(d.windows[0].reset_ms, 86_400_000);
    }
}
