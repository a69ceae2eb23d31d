use super::super::Model;
use crate::limiter::Algorithm::{self, FixedWindow, Gcra, SlidingLog, SlidingWindow};
use crate::limiter::Check;
use crate::testing::{check, Rng};

const T: u64 = 1_800_000_000_000;

/// Turns (ms after `T`) and delays of a burst of `n` at `T`.
fn burst(c: &Check, n: usize, max_delay: u64) -> Vec<Option<u64>> {
    let mut m = Model::new();
    (0..n)
        .map(|_| {
            let d = m.decide_shaped(std::slice::from_ref(c), max_delay, T);
            d.allowed.then_some(d.delay_ms)
        })
        .collect()
}

/// The seed's burst: 10 requests against 5 per second, max_delay 2 s.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn the_burst_is_spaced_as_each_algorithm_allows() {
    let log = burst(&check(SlidingLog, 0, "k", &[(5, 1_000)], 1), 10, 2_000);
    let five = |x| vec![Some(x); 5];
    assert_eq!(log, [five(0), five(1_000)].concat(), "the log: a second window later");
    let gcra = burst(&check(Gcra, 0, "k", &[(5, 1_000)], 1), 10, 2_000);
    let spaced: Vec<_> = [0, 0, 0, 0, 0, 200, 400, 600, 800, 1_000].map(Some).to_vec();
    assert_eq!(gcra, spaced, "gcra: one emission interval apart");
    let fixed = burst(&check(FixedWindow, 0, "k", &[(5, 1_000)], 1), 10, 2_000);
    assert_eq!(fixed, [five(0), five(1_000)].concat(), "fixed_window: the next window");
    // sliding_window: once the previous window's share has fallen enough.
    let sliding = burst(&check(SlidingWindow, 0, "k", &[(5, 1_000)], 1), 10, 2_000);
    let weighted: Vec<_> = [0, 0, 0, 0, 0, 1_200, 1_400, 1_600, 1_800, 2_000].map(Some).to_vec();
    assert_eq!(sliding, weighted);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn beyond_max_delay_is_denied_and_records_nothing() {
    let c = check(SlidingLog, 0, "k", &[(2, 1_000)], 1);
    assert_eq!(burst(&c, 7, 1_000), [Some(0), Some(0), Some(1_000), Some(1_000), None, None, None]);
    let mut m = Model::new();
    for _ in 0..4 {
        assert!(m.decide_shaped(std::slice::from_ref(&c), 1_000, T).allowed);
    }
    let d = m.decide_shaped(std::slice::from_ref(&c), 1_000, T + 10);
    assert!(!d.allowed);
    assert_eq!(d.delay_ms, 0);
    assert_eq!(m.entries("k"), 4);
    // Its turn would be T + 2000: given within 1 s from T + 1000 on.
    assert_eq!(d.retry_after_ms(), 990);
    assert!(m.decide_shaped(std::slice::from_ref(&c), 1_000, T + 1_000).allowed);
}

/// All or nothing across keys and algorithms: the turn is the latest window's.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn every_check_waits_for_the_latest_turn() {
    let mut m = Model::new();
    let a = check(Gcra, 0, "a", &[(5, 1_000)], 1);
    let b = check(SlidingLog, 1, "b", &[(1, 3_000)], 1);
    assert_eq!(m.decide_shaped(&[a.clone(), b.clone()], 5_000, T).delay_ms, 0);
    let d = m.decide_shaped(&[a.clone(), b.clone()], 5_000, T);
    assert_eq!(d.delay_ms, 3_000);
    // Both recorded at the turn: `a`'s next request comes after it.
    assert_eq!(m.decide_shaped(std::slice::from_ref(&a), 5_000, T).delay_ms, 3_000);
    let d = m.decide_shaped(&[a, b], 2_000, T);
    assert!(!d.allowed);
    assert_eq!(d.windows[1].retry_ms, 6_000 - 2_000);
}

/// With nothing placed in the future and no delay allowed, shaping decides
/// exactly as an unshaped call.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn without_delay_it_is_the_unshaped_decision() {
    for algorithm in Algorithm::ALL {
        let mut rng = Rng(0x5eed_0000 + algorithm as u64);
        let (mut plain, mut shaped) = (Model::new(), Model::new());
        let mut now = T;
        for step in 0..400 {
            now += rng.next(400);
            let c = [check(algorithm, 0, "k", &[(7, 3_000), (3, 500)], 1 + rng.next(2))];
            let expected = plain.decide(&c, now);
            let got = shaped.decide_shaped(&c, 0, now);
            assert_eq!(got, expected, "{algorithm:?} step {step}");
        }
    }
}

/// Random traces of bursts: turns of a key never go back, and no window is
/// exceeded as its algorithm counts: the log in any span; gcra within its
/// burst bound; fixed_window in any aligned window; sliding_window's
/// estimate at any turn.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn no_window_is_ever_exceeded_and_turns_keep_their_order() {
    let windows = [(4, 1_000), (10, 5_000)];
    for algorithm in Algorithm::ALL {
        let mut rng = Rng(0xfeed_0000 + algorithm as u64);
        let mut m = Model::new();
        let mut turns: Vec<u64> = Vec::new();
        let mut now = T;
        for _ in 0..600 {
            now += rng.next(300);
            let cost = 1 + rng.next(2);
            let d = m.decide_shaped(&[check(algorithm, 0, "k", &windows, cost)], 4_000, now);
            if d.allowed {
                let turn = now + d.delay_ms;
                assert!(turns.last().is_none_or(|&last| last <= turn), "{algorithm:?}: out of order");
                turns.extend(std::iter::repeat_n(turn, usize::try_from(cost).unwrap()));
            }
        }
        assert!(turns.len() > 150, "{algorithm:?}: {} admitted", turns.len());
        assert_within(algorithm, &turns, &windows);
    }
}

/// Every span `(t - P, t]` ending at a turn holds at most the limit (the
/// log), or the limit plus `span × L / P` refilled (gcra's burst bound);
/// the counters' own count at every turn.
fn assert_within(algorithm: Algorithm, turns: &[u64], windows: &[(u64, u64)]) {
    for &(limit, period) in windows {
        for (i, &end) in turns.iter().enumerate() {
            // What counts at `end`: the turns up to it (later ones were checked when placed).
            let window = |k: u64| turns.iter().filter(|&&s| s <= end && s / period == k).count() as u64;
            let k = end / period;
            match algorithm {
                FixedWindow => {
                    assert!(window(k) <= limit, "{limit}/{period}: {} in window {k}", window(k));
                    continue;
                }
                SlidingWindow => {
                    let (cur, prev, e) = (window(k), window(k.saturating_sub(1)).min(limit), end - k * period);
                    assert!(cur * period + prev * (period - e) <= limit * period, "{limit}/{period} at {end}");
                    continue;
                }
                _ => {}
            }
            let start = turns.partition_point(|&s| s + period <= end);
            let count = (i + 1 - start) as u64;
            // Also the last index of `end`.
            let count = count + turns[i + 1..].iter().take_while(|&&s| s == end).count() as u64;
            let bound = match algorithm {
                SlidingLog => limit,
                _ => limit + (end - turns[start]) * limit / period,
            };
            assert!(count <= bound, "{algorithm:?} {limit}/{period}: {count} in the span ending {end}");
        }
    }
}

/// A floor places the turn at `now + floor` or later: at the floor when
/// every window fits there, later when one does not; a floor past
/// `max_delay` denies and records nothing; a floor of 0 is the plain call.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_floor_places_the_turn_no_earlier() {
    for algorithm in Algorithm::ALL {
        let c = check(algorithm, 0, "k", &[(2, 1_000)], 1);
        let one = std::slice::from_ref(&c);
        let mut m = Model::new();
        let d = m.decide_floored(one, 5_000, 300, T);
        assert_eq!((d.allowed, d.delay_ms), (true, 300), "{algorithm:?}: fits at the floor");
        assert!(!m.decide_floored(one, 5_000, 6_000, T).allowed, "{algorithm:?}: past max_delay");
        let d = m.decide_floored(one, 5_000, 100, T);
        assert!(d.allowed && d.delay_ms >= 300, "{algorithm:?}: behind the last turn: {d:?}");
        let d = m.decide_floored(one, 5_000, 0, T);
        assert!(d.allowed && d.delay_ms > 300, "{algorithm:?}: full at the floor: {d:?}");
        let (mut a, mut b) = (Model::new(), Model::new());
        assert_eq!(a.decide_floored(one, 700, 0, T), b.decide_shaped(one, 700, T), "{algorithm:?}");
    }
}
