//! `fixed_window`: counters aligned to the window, as envoyproxy/ratelimit
//! counts (script: `fixed_window.lua`).
//!
//! * A bucket stores, per distinct period `P`, the index `k = floor(now / P)`
//!   of the window it last counted in and its count. Read at window `k'`:
//!   the count if `k' = k`, else 0.
//! * **check**: fits when `count + cost <= limit`; otherwise `retry_ms` is
//!   the end of the window, `(k + 1)P - now`, when the count starts again at 0.
//! * **commit**: `count += cost` (once per distinct period).
//! * **stats**: `remaining = limit - count`; `reset_ms` = the end of the
//!   window if `count > 0`, else 0.
//! * Shaping ([`super::shape`]): the bucket also stores the last turn given
//!   later than its call's `now`; a window fits at `t0 + retry(t0)` (the
//!   next window's start when full); the commit counts in the turn's
//!   window; stats at the later of `now` and the last turn. An extra
//!   charge ([`super::Model::adjust`]) commits at the later of `now` and
//!   the last turn, as a shaped commit there.

use super::{sat, Bucket};
use crate::limiter::{Window, STATE_MAX};
use std::collections::{BTreeMap, BTreeSet};

/// Per period: `(k, count)`; and the last turn of a shaped call later than
/// its `now` (shaping), 0 if none.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    periods: BTreeMap<u64, (u64, u64)>,
    last: u64,
}

impl Counters {
    /// `(k, count)` at `now` for a window of `period` ms.
    fn read(&self, period: u64, now: u64) -> (u64, u64) {
        let k = now / period;
        match self.periods.get(&period) {
            Some(&(stored, count)) if stored == k => (k, count),
            _ => (k, 0),
        }
    }
}

/// Milliseconds from `now` to the end of window `k` of `period`.
fn until_end(k: u64, period: u64, now: u64) -> u64 {
    sat((i128::from(k) + 1) * i128::from(period) - i128::from(now))
}

impl Bucket for Counters {
    fn retry(&self, w: &Window, cost: u64, now: u64) -> u64 {
        let (k, count) = self.read(w.period_ms.get(), now);
        if count.saturating_add(cost) <= w.limit.get() {
            return 0;
        }
        until_end(k, w.period_ms.get(), now)
    }

    fn commit(&mut self, windows: &[Window], cost: u64, now: u64) {
        let mut updated = BTreeMap::new();
        for w in windows {
            let (k, count) = self.read(w.period_ms.get(), now);
            updated.insert(w.period_ms.get(), (k, count.saturating_add(cost).min(STATE_MAX)));
        }
        self.periods.extend(updated);
    }

    /// From the count of `at`'s window, if that is still the window counted
    /// (once per distinct period).
    fn refund(&mut self, windows: &[Window], at: u64, units: u64, _now: u64) {
        let periods: BTreeSet<u64> = windows.iter().map(|w| w.period_ms.get()).collect();
        for period in periods {
            if let Some((k, count)) = self.periods.get_mut(&period) {
                if *k == at / period {
                    *count -= units.min(*count);
                }
            }
        }
    }

    super::counters_shaping!();

    fn stats(&self, w: &Window, now: u64) -> (u64, u64) {
        let (k, count) = self.read(w.period_ms.get(), now);
        let reset = if count > 0 { until_end(k, w.period_ms.get(), now) } else { 0 };
        (w.limit.get().saturating_sub(count), reset)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Model;
    use crate::limiter::Algorithm::FixedWindow;
    use crate::testing::check;

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn counts_restart_at_the_window_boundary() {
        let mut m = Model::new();
        let c = [check(FixedWindow, 0, "k", &[(2, 1_000)], 1)];
        assert!(m.decide(&c, 4_999).allowed, "window 4");
        let d = m.decide(&c, 5_000);
        assert!(d.allowed, "window 5 starts empty");
        assert_eq!((d.windows[0].remaining, d.windows[0].reset_ms), (1, 1_000));
        assert!(m.decide(&c, 5_500).allowed);
        let d = m.decide(&c, 5_900);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ms(), 100, "retry at the window end");
        assert!(m.decide(&c, 6_000).allowed);
    }

    /// The well-known boundary burst: 2 × limit within one period.
    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn admits_a_double_burst_across_the_boundary() {
        let mut m = Model::new();
        let c = [check(FixedWindow, 0, "k", &[(3, 1_000)], 1)];
        let admitted =
            [999, 999, 999, 1_000, 1_000, 1_000, 1_000].into_iter().filter(|&t| m.decide(&c, t).allowed).count();
        assert_eq!(admitted, 6);
    }
}
