//! `sliding_log`: the exact sliding log (script: `sliding_log.lua`).
//!
//! * A bucket stores one entry per admitted unit: an admitted request of cost
//!   `c` records `c` entries at `now`.
//! * An entry at `t` counts in a window of period `P` at `now` while
//!   `now - P < t` (entries from the future, after a clock step back, count).
//! * **check**: fits when `count + cost <= limit`; otherwise `retry_ms` is when
//!   the `(count + cost - limit)`-th oldest counted entry leaves (at least 1).
//! * **commit**: `cost` entries at `now`.
//! * **stats**: `remaining = limit - count`; `reset_ms` = when the oldest
//!   counted entry leaves (0 if none).
//! * Housekeeping: entries at or before `now - longest period` are dropped.
//! * Shaping ([`super::shape`]): the last turn is the newest entry; a
//!   window fits at `t >= t0` once enough entries counted at `t0` left;
//!   stats as above (entries at future turns count). An extra charge
//!   ([`super::Model::adjust`]) records its entries at the later of `now`
//!   and the newest entry.

use super::{sat, Bucket};
use crate::limiter::Window;

/// Entry timestamps (ms), sorted.
#[derive(Debug, Default, Clone)]
pub struct Log {
    entries: Vec<u64>,
}

impl Log {
    /// Number of stored entries (what `ZCARD` would say).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The stored entries' times, oldest first.
    pub fn times(&self) -> Vec<u64> {
        let mut times = self.entries.clone();
        times.sort_unstable();
        times
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries (sorted) that count in a window of `period` at `now`.
    fn counted(&self, now: u64, period: u64) -> &[u64] {
        let from = i128::from(now) - i128::from(period);
        let start = self.entries.partition_point(|&t| i128::from(t) <= from);
        self.entries.get(start..).unwrap_or(&[])
    }
}

impl Bucket for Log {
    fn prepare(&mut self, windows: &[Window], now: u64) {
        let max_period = windows.iter().map(|w| w.period_ms.get()).max().unwrap_or(0);
        let cutoff = i128::from(now) - i128::from(max_period);
        self.entries.retain(|&t| i128::from(t) > cutoff);
    }

    fn retry(&self, w: &Window, cost: u64, now: u64) -> u64 {
        let counted = self.counted(now, w.period_ms.get());
        let excess = (counted.len() as u64 + cost).saturating_sub(w.limit.get());
        if excess == 0 {
            return 0;
        }
        let period = i128::from(w.period_ms.get());
        let leaves = usize::try_from(excess - 1)
            .ok()
            .and_then(|i| counted.get(i))
            .map_or(period, |&t| i128::from(t) + period - i128::from(now));
        sat(leaves.max(1))
    }

    fn commit(&mut self, _windows: &[Window], cost: u64, now: u64) {
        let at = self.entries.partition_point(|&t| t <= now);
        let added = std::iter::repeat_n(now, usize::try_from(cost).unwrap_or(usize::MAX));
        self.entries.splice(at..at, added);
    }

    /// The entries at `at` (entries of one instant are interchangeable), if
    /// they are still stored.
    fn refund(&mut self, _windows: &[Window], at: u64, units: u64, _now: u64) {
        let start = self.entries.partition_point(|&t| t < at);
        let end = self.entries.partition_point(|&t| t <= at);
        let taken = usize::try_from(units).unwrap_or(usize::MAX).min(end - start);
        self.entries.drain(start..start + taken);
    }

    fn last_turn(&self, _windows: &[Window]) -> u64 {
        self.entries.last().copied().unwrap_or(0)
    }

    /// No entry lies after `t0`: when the `(count + cost - limit)`-th oldest
    /// entry counted at `t0` leaves (`t0 + P` if `cost` exceeds the limit).
    fn earliest(&self, w: &Window, cost: u64, t0: u64) -> u64 {
        let counted = self.counted(t0, w.period_ms.get());
        let excess = (counted.len() as u64 + cost).saturating_sub(w.limit.get());
        if excess == 0 {
            return t0;
        }
        let entry = usize::try_from(excess - 1).ok().and_then(|i| counted.get(i));
        entry.map_or(t0, |&t| t).saturating_add(w.period_ms.get())
    }

    fn stats(&self, w: &Window, now: u64) -> (u64, u64) {
        let counted = self.counted(now, w.period_ms.get());
        let reset =
            counted.first().map_or(0, |&t| sat(i128::from(t) + i128::from(w.period_ms.get()) - i128::from(now)));
        (w.limit.get().saturating_sub(counted.len() as u64), reset)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Model;
    use crate::limiter::Algorithm::SlidingLog;
    use crate::testing::check;

    /// The seed article's table: 20/60s and 5/3s, calls 1..8 in one instant.
    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn seed_table() {
        let mut m = Model::new();
        let c = [check(SlidingLog, 0, "u", &[(20, 60_000), (5, 3_000)], 1)];
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
        let mut m = Model::new();
        let tight = check(SlidingLog, 0, "a", &[(1, 1_000)], 1);
        let loose = check(SlidingLog, 0, "b", &[(100, 1_000)], 1);
        assert!(m.decide(&[tight.clone(), loose.clone()], 10).allowed);
        let d = m.decide(&[tight, loose], 11);
        assert!(!d.allowed);
        assert_eq!(m.entries("b"), 1);
        assert_eq!(d.windows[1].remaining, 99);
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn window_boundary_is_exclusive_of_the_old_edge() {
        let mut m = Model::new();
        let c = [check(SlidingLog, 0, "k", &[(1, 1_000)], 1)];
        assert!(m.decide(&c, 5_000).allowed);
        let d = m.decide(&c, 5_999);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ms(), 1);
        assert!(m.decide(&c, 6_000).allowed, "the entry at 5000 left at 6000");
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn retry_waits_for_enough_entries_to_leave_every_window() {
        let mut m = Model::new();
        let c = [check(SlidingLog, 0, "k", &[(3, 10_000), (2, 1_000)], 1)];
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
        let mut m = Model::new();
        let c = [check(SlidingLog, 0, "k", &[(5, 1_000)], 3)];
        assert!(m.decide(&c, 0).allowed);
        let d = m.decide(&c, 1);
        assert!(!d.allowed);
        assert_eq!(d.windows[0].remaining, 2);
        assert_eq!(d.retry_after_ms(), 999);
        assert_eq!(m.entries("k"), 3);
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn long_gaps_trim_everything() {
        let mut m = Model::new();
        let c = [check(SlidingLog, 0, "k", &[(2, 86_400_000), (1, 1)], 1)];
        assert!(m.decide(&c, 0).allowed);
        assert!(!m.decide(&c, 0).allowed);
        assert!(m.decide(&c, 1).allowed);
        let d = m.decide(&c, 10 * 86_400_000);
        assert!(d.allowed);
        assert_eq!(m.entries("k"), 1);
        assert_eq!(d.windows[0].reset_ms, 86_400_000);
    }
}
