//! `gcra`: the generic cell rate algorithm, one theoretical arrival time
//! (TAT) per window (script: `gcra.lua`).
//!
//! A window of `limit` units per `P` ms is a token bucket of `limit` tokens
//! refilled continuously at `limit / P` per ms: each unit advances the TAT by
//! the emission interval `P / limit` ms, and a request fits while the TAT stays
//! within `P` of `now`. To stay exact without fractions, time inside a window
//! is counted in units of `1 / limit` ms, and the bucket stores the **debt**
//! `d = (TAT - now) × limit` (0 when the TAT is in the past):
//!
//! * A bucket stores, per distinct `(limit, period)`, the time `at` of the
//!   last admission and the debt `d` then. At `now`, the debt is
//!   `max(0, d - (now - at) × limit)`, or 0 once `now - at >= P` (a step back
//!   of the clock counts as no time passing). A unit costs `P`; the window
//!   holds `P × limit`. Every product is at most `P × limit <= 2^53`.
//! * **check**: fits when `debt + cost × P <= P × limit`; otherwise
//!   `retry_ms = ceil((debt + cost × P - P × limit) / limit)`, exactly when
//!   enough debt has drained.
//! * **commit**: `at = now`, `d = debt + cost × P` (once per distinct window).
//! * **stats**: `remaining = floor((P × limit - debt) / P)` whole units;
//!   `reset_ms = ceil(debt / limit)`, when the bucket is full again.
//! * Shaping ([`super::shape`]): the last turn is the latest `at` of the
//!   check's windows; a window fits at `t0 + retry(t0)`; stats are taken at
//!   the later of `now` and `at` (`reset_ms` adds the wait until `at`).
//!   An extra charge ([`super::Model::adjust`]) commits at the later of
//!   `now` and the latest `at`: the last admission never moves back.

use super::{ceil_div, sat, Bucket};
use crate::limiter::Window;
use std::collections::{BTreeMap, BTreeSet};

/// Per `(limit, period_ms)`: `(at, debt)` at the last admission.
#[derive(Debug, Default, Clone)]
pub struct Gcra {
    windows: BTreeMap<(u64, u64), (u64, i128)>,
}

impl Gcra {
    /// The debt of window `w` at `now`, in `1 / limit` ms.
    fn debt(&self, w: &Window, now: u64) -> i128 {
        let (limit, period) = (w.limit.get(), w.period_ms.get());
        let Some(&(at, d)) = self.windows.get(&(limit, period)) else {
            return 0;
        };
        let elapsed = now.saturating_sub(at);
        if elapsed >= period {
            return 0;
        }
        (d - i128::from(elapsed) * i128::from(limit)).max(0)
    }
}

impl Bucket for Gcra {
    fn retry(&self, w: &Window, cost: u64, now: u64) -> u64 {
        let (limit, period) = (i128::from(w.limit.get()), i128::from(w.period_ms.get()));
        let over = self.debt(w, now) + i128::from(cost) * period - period * limit;
        if over <= 0 {
            return 0;
        }
        sat(ceil_div(over, limit))
    }

    fn commit(&mut self, windows: &[Window], cost: u64, now: u64) {
        let mut updated = BTreeMap::new();
        for w in windows {
            // At most a full window (only an extra charge, `adjust`, goes
            // beyond it): the debt drains within one period, as the state's
            // expiry and `debt` assume.
            let (limit, period) = (i128::from(w.limit.get()), i128::from(w.period_ms.get()));
            let d = (self.debt(w, now) + i128::from(cost) * period).min(period * limit);
            updated.insert((w.limit.get(), w.period_ms.get()), (now, d));
        }
        self.windows.extend(updated);
    }

    /// From the debt, only if the request decided at `at` is still the last
    /// admission (the state was written at `at`): then taking `units × P`
    /// off is exactly the state without them. After a later admission the
    /// debt may have drained to 0 and started again in between, so a refund
    /// could free more than the request took: nothing is refunded (once per
    /// distinct window).
    fn refund(&mut self, windows: &[Window], at: u64, units: u64, _now: u64) {
        let distinct: BTreeSet<(u64, u64)> = windows.iter().map(|w| (w.limit.get(), w.period_ms.get())).collect();
        for (limit, period) in distinct {
            if let Some((last, d)) = self.windows.get_mut(&(limit, period)) {
                if *last == at {
                    *d = (*d - i128::from(units) * i128::from(period)).max(0);
                }
            }
        }
    }

    fn last_turn(&self, windows: &[Window]) -> u64 {
        let at = |w: &Window| self.windows.get(&(w.limit.get(), w.period_ms.get())).map_or(0, |&(at, _)| at);
        windows.iter().map(at).max().unwrap_or(0)
    }

    /// `t0` is at or after `at`: the debt drains from there.
    fn earliest(&self, w: &Window, cost: u64, t0: u64) -> u64 {
        t0.saturating_add(self.retry(w, cost, t0))
    }

    /// At `now` or, when the last admission is a future turn, at that turn:
    /// `reset_ms` counts the time until it too.
    fn shaped_stats(&self, w: &Window, now: u64) -> (u64, u64) {
        let (limit, period) = (i128::from(w.limit.get()), i128::from(w.period_ms.get()));
        let at = self.windows.get(&(w.limit.get(), w.period_ms.get())).map_or(0, |&(at, _)| at);
        let from = now.max(at);
        let debt = self.debt(w, from);
        let reset = i128::from(from - now) + ceil_div(debt, limit);
        (sat((period * limit - debt).div_euclid(period)), sat(reset))
    }

    fn stats(&self, w: &Window, now: u64) -> (u64, u64) {
        let (limit, period) = (i128::from(w.limit.get()), i128::from(w.period_ms.get()));
        let debt = self.debt(w, now);
        (sat((period * limit - debt).div_euclid(period)), sat(ceil_div(debt, limit)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::Model;
    use crate::limiter::Algorithm::Gcra;
    use crate::testing::check;

    /// 5/3s: a burst of 5, then one unit every 600 ms.
    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn burst_then_steady_rate() {
        let mut m = Model::new();
        let c = [check(Gcra, 0, "k", &[(5, 3_000)], 1)];
        for i in 0..5 {
            let d = m.decide(&c, 1_000);
            assert!(d.allowed);
            assert_eq!(d.windows[0].remaining, 4 - i);
            assert_eq!(d.windows[0].reset_ms, 600 * (i + 1), "full again after (i+1) × 600 ms");
        }
        let d = m.decide(&c, 1_000);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ms(), 600);
        assert!(!m.decide(&c, 1_599).allowed);
        let d = m.decide(&c, 1_600);
        assert!(d.allowed, "one emission interval later");
        assert_eq!(d.windows[0].remaining, 0);
    }

    /// A fractional emission interval (3s / 7 = 428.57 ms) stays exact.
    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn fractional_emission_interval_is_exact() {
        let mut m = Model::new();
        let c = [check(Gcra, 0, "k", &[(7, 3_000)], 1)];
        for _ in 0..7 {
            assert!(m.decide(&c, 0).allowed);
        }
        let d = m.decide(&c, 0);
        // Debt 21000 (in 1/7 ms) must drain to 18000: 3000/7 = 428.57 -> 429 ms.
        assert_eq!(d.retry_after_ms(), 429);
        assert!(!m.decide(&c, 428).allowed);
        assert!(m.decide(&c, 429).allowed);
        // Two units: 857.14 ms after 429 the bucket has room for two more? no:
        // debt at 429 was 18000 - 3 + 3000 = 20997; two units need 20997 - 15000.
        let d = m.decide(&[check(Gcra, 0, "k", &[(7, 3_000)], 2)], 429);
        assert_eq!(d.retry_after_ms(), (20_997 - 15_000_u64).div_ceil(7));
    }

    /// Each window has its own TAT; all advance only when all fit.
    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn every_window_must_fit() {
        let mut m = Model::new();
        let c = [check(Gcra, 0, "k", &[(20, 60_000), (5, 3_000)], 1)];
        for _ in 0..5 {
            assert!(m.decide(&c, 0).allowed);
        }
        let d = m.decide(&c, 0);
        assert_eq!(d.denied_by().map(|w| w.window).collect::<Vec<_>>(), vec![1]);
        assert_eq!(d.windows[0].remaining, 15);
        // Steady at the 3s rate (600 ms) until the minute's bucket is empty.
        let mut t = 0;
        let mut admitted = 5;
        while admitted < 30 {
            t += 600;
            if m.decide(&c, t).allowed {
                admitted += 1;
            } else {
                break;
            }
        }
        // 20 + 600 ms × 20/60000 ms refill ≈ 15 more during 9 s: the minute binds.
        let d = m.decide(&c, t);
        assert_eq!(d.denied_by().map(|w| w.window).collect::<Vec<_>>(), vec![0]);
        assert_eq!(d.windows[0].retry_ms, d.retry_after_ms());
    }
}
