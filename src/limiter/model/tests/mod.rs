//! [`Model::decide`] on every algorithm, and the helpers; `adjust` in
//! [`adjust`], `flush` in [`flush`], the lease sets in [`lease`].

mod adjust;
mod flush;
mod lease;

use super::*;
use crate::testing::check;

/// The seed article's table (20/60s and 5/3s, calls 1..8 in one instant)
/// holds for every algorithm: the first five pass, the 3s window denies.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn seed_table_for_every_algorithm() {
    for algorithm in Algorithm::ALL {
        let mut m = Model::new();
        let c = [check(algorithm, 0, "u", &[(20, 60_000), (5, 3_000)], 1)];
        for call in 1..=8u64 {
            let d = m.decide(&c, 1_800_000_000_000 + call);
            assert_eq!(d.allowed, call <= 5, "{algorithm:?} call {call}");
            assert_eq!(d.windows[1].remaining, 5 - call.min(5), "{algorithm:?} call {call}");
            if call > 5 {
                assert_eq!(d.denied_by().map(|w| w.window).collect::<Vec<_>>(), vec![1], "{algorithm:?}");
            }
        }
    }
}

/// Rules of different algorithms in one decision: all or nothing.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn mixed_algorithms_are_all_or_nothing() {
    for tight in Algorithm::ALL {
        for loose in Algorithm::ALL {
            let mut m = Model::new();
            let checks = [check(loose, 0, "loose", &[(100, 1_000)], 2), check(tight, 0, "tight", &[(1, 1_000)], 1)];
            assert!(m.decide(&checks, 10_000).allowed);
            let d = m.decide(&checks, 10_001);
            assert!(!d.allowed, "{tight:?} {loose:?}");
            assert_eq!(d.denied_by().map(|w| w.check).collect::<Vec<_>>(), vec![1]);
            assert_eq!(d.windows[0].remaining, 98, "{loose:?} consumed nothing on denial");
        }
    }
}

/// A check that only checks denies when its windows lack room for its
/// cost and records nothing when admitted; the other checks of the
/// same decision record as usual.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn checks_that_only_check_record_nothing() {
    for algorithm in Algorithm::ALL {
        let mut m = Model::new();
        let mut login = check(algorithm, 0, "login", &[(20, 60_000), (2, 3_000)], 1);
        login.check_only = true;
        let plain = check(algorithm, 0, "plain", &[(10, 60_000)], 1);
        for i in 0..5 {
            let d = m.decide(&[login.clone(), plain.clone()], 10_000 + i);
            assert!(d.allowed, "{algorithm:?}");
            assert_eq!((d.windows[1].remaining, d.windows[2].remaining), (2, 9 - i), "{algorithm:?}");
        }
        let charge = Adjustment { check: login.clone(), from: 0, to: 2 };
        m.adjust(&[charge], 10_004, 10_005);
        let d = m.decide(&[login.clone(), plain.clone()], 10_006);
        assert!(!d.allowed, "{algorithm:?}: the charged window is full");
        assert_eq!(d.denied_by().map(|w| (w.check, w.window)).collect::<Vec<_>>(), vec![(0, 1)]);
        assert_eq!(d.windows[2].remaining, 5, "{algorithm:?}: a denial records nothing");
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn helpers() {
    assert_eq!(ceil_div(0, 3), 0);
    assert_eq!(ceil_div(7, 3), 3);
    assert_eq!(ceil_div(9, 3), 3);
    assert_eq!(sat(-5), 0);
    assert_eq!(sat(i128::MAX), u64::MAX);
}
