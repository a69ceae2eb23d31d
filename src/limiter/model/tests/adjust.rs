//! `Model::adjust`: an undo right after a decision gives back exactly the
//! state without it; a refund never frees more than the request took; an
//! extra charge is recorded now, or at the bucket's last turn when a shaped
//! call gave one later. Random traces with a small deterministic generator
//! (these tests also run in the wasm VM).

use crate::limiter::model::Model;
use crate::limiter::{Adjustment, Algorithm, Check};
use crate::testing::check;
use crate::testing::Rng;

/// Two windows sharing a period, and one of their own (state shared by
/// windows must change once), with a request of `cost`.
fn bucket(algorithm: Algorithm, cost: u64) -> Check {
    check(algorithm, 0, "k", &[(6, 1_000), (9, 1_000), (20, 5_000)], cost)
}

fn adjustment(algorithm: Algorithm, from: u64, to: u64) -> Adjustment {
    Adjustment { check: bucket(algorithm, 1), from, to }
}

/// The state of both models every few hundred ms from `now` (read by an
/// adjustment that changes nothing): equal (`exact`), or the adjusted one
/// never with more room in any window; then decisions of cost 1 from both.
fn probe(adjusted: &mut Model, ideal: &mut Model, algorithm: Algorithm, mut now: u64, rng: &mut Rng, exact: bool) {
    let look = [adjustment(algorithm, 0, 0)];
    for i in 0..6 {
        let (a, b) = (adjusted.adjust(&look, 0, now), ideal.adjust(&look, 0, now));
        if exact {
            assert_eq!(a, b, "{algorithm:?} look {i} at {now}");
        } else {
            for (wa, wb) in a.windows.iter().zip(&b.windows) {
                assert!(wa.remaining <= wb.remaining, "{algorithm:?} at {now}: the refund freed more than taken");
            }
        }
        now += rng.next(400);
    }
    if exact {
        let c = [bucket(algorithm, 1)];
        for _ in 0..4 {
            assert_eq!(adjusted.decide(&c, now), ideal.decide(&c, now), "{algorithm:?} at {now}");
            now += rng.next(900);
        }
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_undo_before_any_other_admission_leaves_exactly_the_state_without_it() {
    for algorithm in Algorithm::ALL {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..300 {
            let (mut adjusted, mut ideal) = (Model::new(), Model::new());
            let mut now = 1_000_000 + rng.next(10_000);
            for _ in 0..rng.next(8) {
                now += rng.next(700);
                let c = [bucket(algorithm, 1 + rng.next(2))];
                assert_eq!(adjusted.decide(&c, now), ideal.decide(&c, now));
            }
            now += rng.next(50);
            let at = now;
            let undone = adjusted.decide(&[bucket(algorithm, 2)], at);
            now += rng.next(300);
            let from = if undone.allowed { 2 } else { 0 };
            let after = adjusted.adjust(&[adjustment(algorithm, from, 0)], at, now);
            assert!(after.allowed && after.windows.iter().all(|w| w.retry_ms == 0));
            probe(&mut adjusted, &mut ideal, algorithm, now, &mut rng, true);
        }
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_refund_after_other_admissions_never_frees_more_than_was_taken() {
    for algorithm in Algorithm::ALL {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        for _ in 0..300 {
            let (mut adjusted, mut ideal) = (Model::new(), Model::new());
            let mut now = 1_000_000 + rng.next(10_000);
            let at = now;
            let undone = adjusted.decide(&[bucket(algorithm, 2)], at);
            for _ in 0..rng.next(6) {
                now += rng.next(600);
                let c = [bucket(algorithm, 1)];
                // The ideal model never saw the request: it may admit more.
                let (a, b) = (adjusted.decide(&c, now), ideal.decide(&c, now));
                assert!(!a.allowed || b.allowed);
                if b.allowed && !a.allowed {
                    // Keep the two comparable: record it in the adjusted one.
                    adjusted.adjust(&[adjustment(algorithm, 0, 1)], now, now);
                }
            }
            now += rng.next(300);
            let from = if undone.allowed { 2 } else { 0 };
            adjusted.adjust(&[adjustment(algorithm, from, 0)], at, now);
            probe(&mut adjusted, &mut ideal, algorithm, now, &mut rng, false);
        }
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_extra_charge_is_recorded_now_and_a_partial_refund_keeps_the_rest() {
    for algorithm in Algorithm::ALL {
        let mut m = Model::new();
        let c = check(algorithm, 0, "k", &[(10, 60_000)], 3);
        assert_eq!(m.decide(std::slice::from_ref(&c), 1_000_000).windows[0].remaining, 7);
        // Settled at 5 units: 2 more, now.
        let d = m.adjust(&[Adjustment { check: c.clone(), from: 3, to: 5 }], 1_000_000, 1_000_010);
        assert_eq!(d.windows[0].remaining, 5, "{algorithm:?}");
        // Refunded to 1 unit of the 3 the decision recorded (the extra 2 were
        // recorded at 1_000_010, not at the decision's time).
        let d = m.adjust(&[Adjustment { check: c.clone(), from: 3, to: 1 }], 1_000_000, 1_000_020);
        let expected = if algorithm == Algorithm::Gcra { 5 } else { 7 };
        assert_eq!(d.windows[0].remaining, expected, "{algorithm:?}: gcra refunds only while the decision is the last");
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_extra_charge_past_the_limit_denies_for_about_a_period_at_most() {
    for algorithm in Algorithm::ALL {
        let mut m = Model::new();
        let c = check(algorithm, 0, "k", &[(10, 1_000)], 1);
        assert!(m.decide(std::slice::from_ref(&c), 1_000_000).allowed);
        let d = m.adjust(&[Adjustment { check: c.clone(), from: 1, to: 1_000_000 }], 1_000_000, 1_000_000);
        assert_eq!(d.windows[0].remaining, 0, "{algorithm:?}");
        assert!(!m.decide(std::slice::from_ref(&c), 1_000_050).allowed, "{algorithm:?}");
        // Every algorithm forgets it within two periods (the sliding window's
        // previous count weighs into the next one).
        assert!(m.decide(std::slice::from_ref(&c), 1_002_001).allowed, "{algorithm:?}");
    }
}

/// A shaped burst leaves turns up to a second ahead (10 against 5 per s,
/// `max_delay` 2 s); an extra charge of 2 at `now` lands at the bucket's
/// last turn, not at `now`: the log's entries are there, the counters'
/// future window keeps its count (and counts the charge), gcra's `at`
/// stays at the turn; a second burst is placed after all of it.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_extra_charge_lands_at_the_buckets_last_turn() {
    const T: u64 = 1_800_000_000_000;
    for algorithm in Algorithm::ALL {
        let mut m = Model::new();
        let c = check(algorithm, 0, "k", &[(5, 1_000)], 1);
        let first: Vec<u64> = (0..10).map(|_| m.decide_shaped(std::slice::from_ref(&c), 2_000, T).delay_ms).collect();
        assert_eq!(first.iter().max(), Some(&if algorithm == Algorithm::SlidingWindow { 2_000 } else { 1_000 }));
        let charged = m.adjust(&[Adjustment { check: c.clone(), from: 0, to: 2 }], T + 10, T + 10);
        assert_eq!(charged.windows[0].remaining, 0, "{algorithm:?}: the turns' windows are full");
        if algorithm == Algorithm::SlidingLog {
            let times = [vec![T; 5], vec![T + 1_000; 7]].concat();
            assert_eq!(m.entry_times("k"), times, "the charge's entries are at the last turn");
        }
        let second: Vec<u64> =
            (0..5).map(|_| m.decide_shaped(std::slice::from_ref(&c), 9_000, T + 20).delay_ms).collect();
        let expected = match algorithm {
            // The first window with room after the turn at T + 1000.
            Algorithm::SlidingLog | Algorithm::FixedWindow => vec![1_980; 5],
            // One emission interval after the last turn, T + 1000.
            Algorithm::Gcra => vec![1_180, 1_380, 1_580, 1_780, 1_980],
            // Window T + 2000 holds 1 + 2, the one before 4: 3 + 1 + 4 × (1000 - e) / 1000 <= 5 at e = 750.
            Algorithm::SlidingWindow => vec![2_730, 2_980, 3_230, 3_480, 3_730],
            Algorithm::Lease => panic!("not a rule algorithm"),
        };
        assert_eq!(second, expected, "{algorithm:?}: placed after the charge, not into a full window");
    }
}
