//! The "window can never bind" check (seed `000`): a rule is rejected when one
//! of its windows can never be the one that denies a request, because another
//! window of the same rule always denies first.
//!
//! Window `A` *can bind* when some admissible history leads to a request that
//! `A` denies while the other window `B` admits it. Let `c` be the rule's cost
//! (units arrive in multiples of `c`, so a window of limit `L` holds at most
//! `m(L) = floor(L / c) × c` units), `S = (Ls, Ps)` the shorter and
//! `L = (Ll, Pl)` the longer of two windows (periods are distinct).
//!
//! * **`sliding_log`** (exact). Any `Pl` interval is covered by
//!   `k = ceil(Pl / Ps)` consecutive `Ps` intervals, each holding at most
//!   `m(Ls)` units, and bursts of `m(Ls)` every `Ps` reach that bound. So the
//!   longer window can bind iff `Ll < k × m(Ls)`. The shorter window's units
//!   are also counted by the longer one, so it can bind iff `m(Ll) > Ls`.
//! * **`fixed_window`** (exact). An aligned `Pl` window meets at most
//!   `k = ceil((Pl + Ps - g) / Ps)` aligned `Ps` windows (`g = gcd(Ps, Pl)`;
//!   `k = Pl / Ps` when `Ps` divides `Pl`): the longer can bind iff
//!   `Ll < k × m(Ls)`. When `Ps` divides `Pl` every short window lies in one
//!   long window and the shorter can bind iff `m(Ll) > Ls`; otherwise a short
//!   window can straddle two long ones and it can bind iff `2 × m(Ll) > Ls`.
//! * **`gcra`**. Each window is a token bucket (capacity `L`, refill `L / P`
//!   per ms). A bucket with an equal or slower refill never runs dry first:
//!   the longer window can bind iff its rate is lower, `Ll × Ps < Ls × Pl`
//!   (exact for any cost). The shorter window can bind iff its capacity is
//!   smaller, `Ls < Ll` (exact for cost 1; for larger costs the check keeps
//!   only windows that can bind for cost 1).
//! * **`sliding_window`** approximates the exact log, so the log's conditions
//!   apply: a window that never binds under the exact count is a
//!   configuration mistake even if estimation error could make it deny.
//!
//! The seed's rule of thumb, "limit / period must grow as the period
//! shrinks", is the `gcra` condition; the log's is weaker (`600/600s` with
//! `10/10s` never binds: `60 × 10 = 600`; with `11/10s` the longer one does).

use super::Limit;
use crate::limiter::Algorithm;

/// The first window (in configuration order) that can never bind, with the
/// window that makes it useless and why: `(useless, other, reason)`.
pub(crate) fn useless_window(algorithm: Algorithm, cost: u64, limits: &[Limit]) -> Option<(usize, usize, String)> {
    for (j, this) in limits.iter().enumerate() {
        for (k, other) in limits.iter().enumerate() {
            if j == k {
                continue;
            }
            let a = (this.limit.get(), this.period.ms().get());
            let b = (other.limit.get(), other.period.ms().get());
            if let Some(reason) = never_binds(algorithm, cost, a, b) {
                return Some((j, k, reason));
            }
        }
    }
    None
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Why window `a = (limit, period_ms)` can never bind next to window `b`
/// (distinct periods), or `None` if it can.
pub(crate) fn never_binds(algorithm: Algorithm, cost: u64, a: (u64, u64), b: (u64, u64)) -> Option<String> {
    let (la, pa) = (u128::from(a.0), u128::from(a.1));
    let (lb, pb) = (u128::from(b.0), u128::from(b.1));
    let c = u128::from(cost.max(1));
    let m = |l: u128| l / c * c;
    let longer = pa > pb;
    match (algorithm, longer) {
        (Algorithm::Gcra, true) if la * pb >= lb * pa => {
            Some("its rate limit/period is not lower; under gcra a longer window binds only with a lower rate".into())
        }
        (Algorithm::Gcra, false) if la >= lb => {
            Some("its limit is not smaller; under gcra a shorter window binds only with a smaller burst".into())
        }
        (Algorithm::Gcra, _) => None,
        (Algorithm::FixedWindow, true) => {
            let k = (pa + pb - u128::from(gcd(a.1, b.1))).div_ceil(pb);
            (la >= k * m(lb)).then(|| {
                format!("an aligned window of this period meets at most {k} of the other's, so at most {k} × {} = {} units are ever admitted in it", m(lb), k * m(lb))
            })
        }
        (Algorithm::FixedWindow, false) => {
            let straddles = pb % pa != 0;
            let most = if straddles { 2 * m(lb) } else { m(lb) };
            (most <= la).then(|| {
                if straddles {
                    format!("one of its windows spans at most two of the other's, which admit at most 2 × {} = {most} units", m(lb))
                } else {
                    format!("each of its windows lies in one of the other's, which admits at most {most} units")
                }
            })
        }
        (Algorithm::SlidingLog | Algorithm::SlidingWindow, true) => {
            let k = pa.div_ceil(pb);
            (la >= k * m(lb)).then(|| {
                format!("any interval of this period spans at most {k} of the other's, so at most {k} × {} = {} units are ever admitted in it", m(lb), k * m(lb))
            })
        }
        (Algorithm::SlidingLog | Algorithm::SlidingWindow, false) => (m(lb) <= la)
            .then(|| format!("the other window counts every unit this one counts and admits at most {} units", m(lb))),
        // A lease set has one window, never two to compare.
        (Algorithm::Lease, _) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::never_binds;
    use crate::limiter::Algorithm::*;

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn seed_examples() {
        for alg in [SlidingLog, SlidingWindow, FixedWindow, Gcra] {
            assert!(never_binds(alg, 1, (600, 600_000), (10, 10_000)).is_some(), "{alg:?}");
            assert!(never_binds(alg, 1, (20, 60_000), (5, 3_000)).is_none(), "{alg:?}");
            assert!(never_binds(alg, 1, (5, 3_000), (20, 60_000)).is_none(), "{alg:?}");
            assert!(never_binds(alg, 1, (600, 600_000), (30, 20_000)).is_none(), "{alg:?}");
            assert!(never_binds(alg, 1, (30, 20_000), (600, 600_000)).is_none(), "{alg:?}");
        }
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn sliding_log_boundaries() {
        // k = ceil(25/10) = 3: 3 × 4 = 12 units fit in 25 ms.
        assert!(never_binds(SlidingLog, 1, (12, 25), (4, 10)).is_some());
        assert!(never_binds(SlidingLog, 1, (11, 25), (4, 10)).is_none());
        // A shorter window with a limit >= the longer one's never binds.
        assert!(never_binds(SlidingLog, 1, (5, 10), (5, 25)).is_some());
        assert!(never_binds(SlidingLog, 1, (4, 10), (5, 25)).is_none());
        // Cost 2: 5/10 holds 4 units, so 3 × 4 = 12.
        assert!(never_binds(SlidingLog, 2, (12, 25), (5, 10)).is_some());
        assert!(never_binds(SlidingLog, 2, (11, 25), (5, 10)).is_none());
        // Cost 2: 5/25 holds 4 units, so a 4/10 window never binds.
        assert!(never_binds(SlidingLog, 2, (4, 10), (5, 25)).is_some());
        assert!(never_binds(SlidingLog, 2, (3, 10), (5, 25)).is_none());
        // The gcra rate rule would accept 601/600s next to 10/10s: not the log.
        assert!(never_binds(SlidingLog, 1, (601, 600_000), (10, 10_000)).is_some());
        assert!(never_binds(Gcra, 1, (599, 600_000), (10, 10_000)).is_none());
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn fixed_window_alignment() {
        // 10 ms meets up to 4 aligned 3 ms windows ([0,3) .. [9,12)).
        assert!(never_binds(FixedWindow, 1, (8, 10), (2, 3)).is_some());
        assert!(never_binds(FixedWindow, 1, (7, 10), (2, 3)).is_none());
        // Divisible: 9 ms meets exactly 3 windows of 3 ms.
        assert!(never_binds(FixedWindow, 1, (6, 9), (2, 3)).is_some());
        assert!(never_binds(FixedWindow, 1, (5, 9), (2, 3)).is_none());
        // A 3 ms window straddling two 10 ms windows sees up to 2 × 4 units.
        assert!(never_binds(FixedWindow, 1, (5, 3), (4, 10)).is_none());
        assert!(never_binds(FixedWindow, 1, (8, 3), (4, 10)).is_some());
        assert!(never_binds(FixedWindow, 1, (4, 3), (4, 9)).is_some());
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn gcra_rates_and_bursts() {
        assert!(never_binds(Gcra, 1, (200, 60_000), (10, 3_000)).is_some(), "equal rate");
        assert!(never_binds(Gcra, 1, (199, 60_000), (10, 3_000)).is_none());
        assert!(never_binds(Gcra, 1, (10, 3_000), (10, 60_000)).is_some(), "equal burst");
        assert!(never_binds(Gcra, 1, (9, 3_000), (10, 60_000)).is_none());
    }
}
