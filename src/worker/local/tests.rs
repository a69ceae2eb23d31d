use super::*;
use crate::limiter::{Algorithm, Check};

fn limiter(share: f64) -> LocalLimiter {
    LocalLimiter::new(&LocalLimiterConfig { share_ppm: (share * 1e6) as u32, max_keys: 3 })
}

fn seed(key: &str) -> Check {
    Check::for_test(0, key, &[(20, 60_000), (5, 3_000)], 1)
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_unknown_bucket_gets_its_share_of_each_window_all_or_nothing() {
    let mut l = limiter(0.5);
    let c = [seed("a")];
    // Shares: ceil(20 * 0.5) = 10 per 60 s, ceil(5 * 0.5) = 3 per 3 s.
    let admitted: Vec<bool> = (0..5).map(|i| l.decide(&c, 1_000 + i).allowed).collect();
    assert_eq!(admitted, [true, true, true, false, false], "the 3 s window's share binds");
    let d = l.decide(&c, 1_010);
    assert_eq!((d.windows[0].remaining, d.windows[1].remaining), (7, 0), "a denial consumed nothing");
    assert_eq!(d.windows[1].retry_ms, 2_990);
    // The 3 s window refills; the 60 s window keeps counting.
    let more: Vec<bool> = (0..4).map(|i| l.decide(&c, 4_000 + i).allowed).collect();
    assert_eq!(more, [true, true, true, false]);
    assert_eq!(l.decide(&c, 4_010).windows[0].remaining, 4);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_bucket_the_store_found_full_stays_denied_until_it_resets() {
    let mut l = limiter(0.5);
    // Fixed windows: empty at their reset.
    let c = [crate::testing::check(Algorithm::FixedWindow, 0, "b", &[(20, 60_000), (5, 3_000)], 1)];
    let full = full_seed();
    l.learn(&c, &full, 10_000);
    assert!(!l.decide(&c, 11_999).allowed);
    let d = l.decide(&c, 12_000);
    assert!(d.allowed, "the 3 s window reset: its share applies");
    assert_eq!(d.windows[0].remaining, 9, "min(15 remaining, share 10) - 1");
}

/// The log's `reset_ms` is when its oldest entry leaves; the window is
/// empty only a period after the store counted it.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_full_log_stays_denied_until_every_entry_counted_has_left() {
    let mut l = limiter(0.5);
    let c = [seed("b")];
    l.learn(&c, &full_seed(), 10_000);
    assert!(!l.decide(&c, 12_000).allowed, "only the oldest of the 3 s window's 5 entries left at 12,000");
    assert!(!l.decide(&c, 12_999).allowed);
    let d = l.decide(&c, 13_000);
    assert!(d.allowed, "every entry counted at 10,000 left the 3 s window by 13,000");
    assert_eq!(d.windows[0].remaining, 9, "min(15 remaining, share 10) - 1");
}

/// The seed's two windows as the store answers a full bucket: 15 of 20
/// left in the 60 s window, 0 of 5 in the 3 s one (reset in 2 s).
fn full_seed() -> Decision {
    Decision {
        allowed: false,
        now_ms: 0,
        delay_ms: 0,
        windows: vec![
            WindowOutcome {
                overridden: false,
                check: 0,
                window: 0,
                limit: 20,
                period_ms: 60_000,
                remaining: 15,
                reset_ms: 50_000,
                retry_ms: 0,
            },
            WindowOutcome {
                overridden: false,
                check: 0,
                window: 1,
                limit: 5,
                period_ms: 3_000,
                remaining: 0,
                reset_ms: 2_000,
                retry_ms: 2_000,
            },
        ],
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn several_rules_are_all_or_nothing_and_state_is_bounded() {
    let mut l = limiter(0.1);
    let two = [Check::for_test(0, "x", &[(10, 1_000)], 1), Check::for_test(1, "y", &[(100, 1_000)], 1)];
    assert!(l.decide(&two, 0).allowed, "x's share is 1, y's 10");
    assert!(!l.decide(&two, 1).allowed, "x is full: y is not charged either");
    assert_eq!(l.decide(&[two[1].clone()], 2).windows[0].remaining, 8, "y counted once, for the admitted request");
    for k in ["p", "q", "r", "s"] {
        l.decide(&[seed(k)], 3);
    }
    assert_eq!(l.len(), 3, "at most max_keys buckets");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn what_a_worker_admitted_alone_counts_for_the_period_through_any_number_of_outages() {
    let mut l = limiter(0.1);
    let c = [Check::for_test(0, "k", &[(100, 3_600_000)], 1)];
    let store = |remaining| Decision {
        allowed: true,
        now_ms: 0,
        delay_ms: 0,
        windows: vec![WindowOutcome {
            overridden: false,
            check: 0,
            window: 0,
            limit: 100,
            period_ms: 3_600_000,
            remaining,
            reset_ms: 3_000_000,
            retry_ms: 0,
        }],
    };
    l.learn(&c, &store(90), 0);
    let first: usize = (0..20).filter(|i| l.decide(&c, 10 + i).allowed).count();
    assert_eq!(first, 10, "the first outage: the share");
    // The store answers again, then goes away again, within the period.
    l.learn(&c, &store(80), 1_000);
    let second: usize = (0..20).filter(|i| l.decide(&c, 2_000 + i).allowed).count();
    assert_eq!(second, 0, "the share was spent in this period");
}
