//! `sliding_window`: the sliding-window counter (script: `sliding_window.lua`).
//!
//! Time is cut into fixed windows `[kP, (k+1)P)`. A window's estimate at `now`
//! (elapsed `e = now - kP` into window `k`) is
//! `cur + prev × (P - e) / P`: the current window's count plus the previous
//! window's, weighted by how much of it the sliding window still overlaps.
//!
//! * A bucket stores, per distinct period `P`, the index `k` of the window it
//!   last counted in and the counts `cur` (window `k`) and `prev` (`k - 1`).
//!   Read at window `k'`: `k' = k` gives `(cur, prev)`, `k' = k + 1` gives
//!   `(0, cur)`, anything else `(0, 0)`. `prev` is capped at `limit` (it can
//!   only exceed it after the limit was lowered), which keeps every product
//!   at most `limit × P <= 2^53`.
//! * **check**: with `room = limit - cur - cost`, fits when `room >= 0` and
//!   `prev × (P - e) <= room × P` (exact integer form of
//!   `estimate + cost <= limit`). Otherwise `retry_ms` is the exact first ms
//!   it fits: in window `k` at `e = P - floor(room × P / prev)` if that is
//!   `< P`; else in window `k + 1`, where `prev' = min(cur, limit)` and
//!   `room' = limit - cost`, by the same formula; else at `(k + 2)P`, where
//!   both counts are 0.
//! * **commit**: `cur += cost` (once per distinct period).
//! * **stats**: `remaining = limit - cur - ceil(prev × (P - e) / P)` (at
//!   least 0); `reset_ms` = until the estimate is 0: the end of window
//!   `k + 1` if `cur > 0`, else the end of window `k` if `prev > 0`, else 0.
//! * Shaping ([`super::shape`]): the bucket also stores the last turn given
//!   later than its call's `now`; a window fits at `t0 + retry(t0)`; the
//!   commit counts in the turn's window. Recorded at the turn, the
//!   estimate only falls from there (within the window it is `cur` plus a
//!   shrinking share of `prev`; in the next, a shrinking share of `cur`),
//!   so fitting at the turn is fitting from then on. Stats at the later of
//!   `now` and the last turn. An extra charge ([`super::Model::adjust`])
//!   commits at the later of `now` and the last turn, as a shaped commit
//!   there.

use super::{ceil_div, sat, Bucket};
use crate::limiter::{Window, STATE_MAX};
use std::collections::{BTreeMap, BTreeSet};

/// Per period: `(k, cur, prev)`; and the last turn of a shaped call later
/// than its `now` (shaping), 0 if none.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    periods: BTreeMap<u64, (u64, u64, u64)>,
    last: u64,
}

impl Counters {
    /// `(k, cur, prev)` at `now` for a window of `period` ms.
    fn read(&self, period: u64, now: u64) -> (u64, u64, u64) {
        let k = now / period;
        match self.periods.get(&period) {
            Some(&(stored, cur, prev)) if stored == k => (k, cur, prev),
            Some(&(stored, cur, _)) if stored.checked_add(1) == Some(k) => (k, 0, cur),
            _ => (k, 0, 0),
        }
    }
}

/// The smallest `e` in `[0, P)` with `prev × (P - e) <= room × P`, if any.
fn fit_offset(prev: i128, room: i128, period: i128) -> Option<i128> {
    if room < 0 {
        return None;
    }
    if prev == 0 {
        return Some(0);
    }
    let e = (period - (room * period).div_euclid(prev)).max(0);
    (e < period).then_some(e)
}

impl Bucket for Counters {
    fn retry(&self, w: &Window, cost: u64, now: u64) -> u64 {
        let (limit, period) = (i128::from(w.limit.get()), i128::from(w.period_ms.get()));
        let (k, cur, prev) = self.read(w.period_ms.get(), now);
        let (k, cur, prev) = (i128::from(k), i128::from(cur), i128::from(prev).min(limit));
        let (now, cost) = (i128::from(now), i128::from(cost));
        let e = now - k * period;
        let room = limit - cur - cost;
        if room >= 0 && prev * (period - e) <= room * period {
            return 0;
        }
        let at = match fit_offset(prev, room, period) {
            Some(e0) => k * period + e0,
            None => match fit_offset(cur.min(limit), limit - cost, period) {
                Some(e1) => (k + 1) * period + e1,
                None => (k + 2) * period,
            },
        };
        sat((at - now).max(1))
    }

    fn commit(&mut self, windows: &[Window], cost: u64, now: u64) {
        let mut updated = BTreeMap::new();
        for w in windows {
            let (k, cur, prev) = self.read(w.period_ms.get(), now);
            updated.insert(w.period_ms.get(), (k, cur.saturating_add(cost).min(STATE_MAX), prev));
        }
        self.periods.extend(updated);
    }

    /// From the count of `at`'s window: the stored current count if it is
    /// still that window, the stored previous one if that window is the
    /// previous (once per distinct period).
    fn refund(&mut self, windows: &[Window], at: u64, units: u64, _now: u64) {
        let periods: BTreeSet<u64> = windows.iter().map(|w| w.period_ms.get()).collect();
        for period in periods {
            if let Some((k, cur, prev)) = self.periods.get_mut(&period) {
                let ka = at / period;
                if *k == ka {
                    *cur -= units.min(*cur);
                } else if ka.checked_add(1) == Some(*k) {
                    *prev -= units.min(*prev);
                }
            }
        }
    }

    super::counters_shaping!();

    fn stats(&self, w: &Window, now: u64) -> (u64, u64) {
        let (limit, period) = (i128::from(w.limit.get()), i128::from(w.period_ms.get()));
        let (k, cur, prev) = self.read(w.period_ms.get(), now);
        let (k, cur, prev) = (i128::from(k), i128::from(cur), i128::from(prev).min(limit));
        let now = i128::from(now);
        let e = now - k * period;
        let remaining = limit - cur - ceil_div(prev * (period - e), period);
        let reset = if cur > 0 {
            (k + 2) * period - now
        } else if prev > 0 {
            (k + 1) * period - now
        } else {
            0
        };
        (sat(remaining), sat(reset))
    }
}

#[cfg(test)]
mod tests {
    use super::super::Model;
    use super::fit_offset;
    use crate::limiter::Algorithm::SlidingWindow;
    use crate::testing::check;

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn the_previous_window_is_weighted_by_its_overlap() {
        let mut m = Model::new();
        let c = [check(SlidingWindow, 0, "k", &[(10, 1_000)], 1)];
        for _ in 0..10 {
            assert!(m.decide(&c, 5_500).allowed);
        }
        assert!(!m.decide(&c, 5_999).allowed);
        // At 6_000 the 10 count fully; at 6_100 they weigh 9, so 1 fits.
        let d = m.decide(&c, 6_000);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ms(), 100);
        assert_eq!(d.windows[0].reset_ms, 1_000);
        let d = m.decide(&c, 6_100);
        assert!(d.allowed);
        assert_eq!(d.windows[0].remaining, 0);
        // cur 1 + 10 × 0.85 = 9.5 at 6_150: rounded up, nothing remains.
        let d = m.decide(&c, 6_150);
        assert!(!d.allowed);
        // cur 1 + 10 × (1000 - e)/1000 <= 9  <=>  e >= 200.
        assert_eq!(d.retry_after_ms(), 50);
        assert_eq!(d.windows[0].reset_ms, 7_000 + 1_000 - 6_150);
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn retry_can_reach_into_the_next_windows() {
        let mut m = Model::new();
        // cost == limit: needs an empty estimate.
        let c = [check(SlidingWindow, 0, "k", &[(4, 1_000)], 4)];
        assert!(m.decide(&c, 10_000).allowed);
        let d = m.decide(&c, 10_400);
        assert!(!d.allowed);
        // Window 10 holds 4: window 11 still weighs it until its end, so 12_000.
        assert_eq!(d.retry_after_ms(), 12_000 - 10_400);
        assert!(!m.decide(&c, 11_999).allowed);
        assert!(m.decide(&c, 12_000).allowed);
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn fit_offset_is_exact() {
        assert_eq!(fit_offset(0, 0, 1_000), Some(0));
        assert_eq!(fit_offset(5, -1, 1_000), None);
        assert_eq!(fit_offset(10, 9, 1_000), Some(100));
        assert_eq!(fit_offset(3, 1, 1_000), Some(667), "3 × 333 = 999 <= 1000, 3 × 334 > 1000");
        assert_eq!(fit_offset(3, 0, 1_000), None);
        assert_eq!(fit_offset(2, 5, 1_000), Some(0));
    }
}
