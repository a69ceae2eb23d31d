use super::*;
use wasm_bindgen_test::wasm_bindgen_test;

const LOG: Algorithm = Algorithm::SlidingLog;

fn outcome(limit: u64, period_ms: u64, remaining: u64, reset_ms: u64, retry_ms: u64) -> WindowOutcome {
    WindowOutcome { check: 0, window: 0, limit, period_ms, remaining, reset_ms, retry_ms, overridden: false }
}

/// The seed scenario: 20 per 60 s and 5 per 3 s, the 3 s window denying.
fn seed() -> [WindowOutcome; 2] {
    [outcome(20, 60_000, 15, 56_001, 0), outcome(5, 3_000, 0, 1_234, 1_234)]
}

fn stats(outcomes: &[WindowOutcome; 2]) -> [PolicyStat<'_>; 2] {
    [
        PolicyStat { name: "auth.createToken/60s", outcome: &outcomes[0], algorithm: LOG },
        PolicyStat { name: "auth.createToken/3s", outcome: &outcomes[1], algorithm: LOG },
    ]
}

fn single(name: &str, o: &WindowOutcome) -> (String, String) {
    let item = [PolicyStat { name, outcome: o, algorithm: LOG }];
    (ratelimit_policy(&item), ratelimit(&item))
}

#[wasm_bindgen_test(unsupported = test)]
fn seed_scenario_headers() {
    let outcomes = seed();
    let stats = stats(&outcomes);
    assert_eq!(ratelimit_policy(&stats), r#""auth.createToken/60s";q=20;w=60, "auth.createToken/3s";q=5;w=3"#);
    assert_eq!(ratelimit(&stats), r#""auth.createToken/60s";r=15;t=57, "auth.createToken/3s";r=0;t=2"#);
    assert_eq!(ratelimit_policy(&[]), "");
    assert_eq!(ratelimit(&[]), "");
}

#[wasm_bindgen_test(unsupported = test)]
fn window_rounds_up_to_at_least_one_second() {
    for (period_ms, w) in
        [(250, 1), (1, 1), (0, 1), (999, 1), (1_000, 1), (1_001, 2), (1_500, 2), (60_000, 60), (86_400_000, 86_400)]
    {
        let o = outcome(7, period_ms, 0, 0, 0);
        assert_eq!(single("p", &o).0, format!("\"p\";q=7;w={w}"), "period {period_ms}");
    }
}

#[wasm_bindgen_test(unsupported = test)]
fn reset_rounds_up_and_zero_stays_zero() {
    for (reset_ms, t) in [(0, 0), (1, 1), (999, 1), (1_000, 1), (1_001, 2), (2_000, 2), (56_001, 57)] {
        let o = outcome(7, 60_000, 3, reset_ms, 0);
        assert_eq!(single("p", &o).1, format!("\"p\";r=3;t={t}"), "reset {reset_ms}");
    }
}

#[wasm_bindgen_test(unsupported = test)]
fn retry_after_rounding() {
    assert_eq!(retry_after_secs(0), 0);
    assert_eq!(retry_after_secs(1), 1);
    assert_eq!(retry_after_secs(999), 1);
    assert_eq!(retry_after_secs(1_000), 1);
    assert_eq!(retry_after_secs(1_001), 2);
    assert_eq!(retry_after_secs(u64::MAX), 18_446_744_073_709_552);
}

#[wasm_bindgen_test(unsupported = test)]
fn sf_strings_are_escaped_and_printable() {
    let o = outcome(1, 1_000, 1, 0, 0);
    assert_eq!(single(r#"a"b\c"#, &o).0, r#""a\"b\\c";q=1;w=1"#);
    assert_eq!(single("a\r\nb\t\0\u{7f}é", &o).0, r#""a??b????";q=1;w=1"#);
    assert_eq!(single("", &o).1, r#""";r=1;t=0"#);
    assert_eq!(single(" ~", &o).1, r#"" ~";r=1;t=0"#);
}

#[wasm_bindgen_test(unsupported = test)]
fn integers_are_clamped_to_sf_integer_range() {
    let o = outcome(u64::MAX, u64::MAX, u64::MAX, u64::MAX, 0);
    let (policy, state) = single("p", &o);
    assert_eq!(policy, r#""p";q=999999999999999;w=999999999999999"#);
    assert_eq!(state, r#""p";r=999999999999999;t=999999999999999"#);
}

/// A concurrency limit: `qu` instead of `w`, `r` the free leases, and a
/// `t` only when the full set denied the request (until its earliest
/// lease expires).
#[wasm_bindgen_test(unsupported = test)]
fn a_concurrency_limit_has_its_own_items() {
    let lease = |remaining, reset_ms, retry_ms| outcome(3, 30_000, remaining, reset_ms, retry_ms);
    let item = |o: &WindowOutcome| {
        let stat = [PolicyStat { name: "api/concurrency", outcome: o, algorithm: Algorithm::Lease }];
        (ratelimit_policy(&stat), ratelimit(&stat))
    };
    let policy = r#""api/concurrency";q=3;qu="concurrent-requests""#;
    assert_eq!(item(&lease(2, 29_000, 0)), (policy.to_owned(), r#""api/concurrency";r=2"#.to_owned()));
    // The last lease taken: nothing says when one frees.
    assert_eq!(item(&lease(0, 29_000, 0)).1, r#""api/concurrency";r=0"#);
    // Full, and denied: until the earliest lease expires.
    assert_eq!(item(&lease(0, 29_000, 20_001)).1, r#""api/concurrency";r=0;t=21"#);
    assert_eq!(concurrency_item("api/concurrency", 3), policy);
    assert_eq!(policy_item("api/10s", 3, 10_000), r#""api/10s";q=3;w=10"#);
}

/// What `t` stands for, per algorithm (the table of docs/configuration.md).
#[wasm_bindgen_test(unsupported = test)]
fn t_per_algorithm() {
    // 5 per 3 s: 2 left, empty (or full again) in 2.5 s.
    let room = outcome(5, 3_000, 2, 2_500, 0);
    let denied = outcome(5, 3_000, 0, 2_500, 700);
    for algorithm in Algorithm::ALL {
        assert_eq!(t_ms(&denied, algorithm), Some(700), "{algorithm:?}: a denying window's t is its retry");
    }
    assert_eq!(t_ms(&denied, Algorithm::Lease), Some(700));
    assert_eq!(t_ms(&room, Algorithm::SlidingLog), Some(2_500));
    assert_eq!(t_ms(&room, Algorithm::FixedWindow), Some(2_500));
    assert_eq!(t_ms(&room, Algorithm::SlidingWindow), Some(2_500));
    // gcra: full in 2.5 s, a unit every 600 ms: the third unit in 2.5 s - 2 × 600 ms.
    assert_eq!(t_ms(&room, Algorithm::Gcra), Some(1_300));
    assert_eq!(t_ms(&room, Algorithm::Lease), None);
    // Full buckets and empty windows: nothing to wait for.
    assert_eq!(gcra_next_unit_ms(&outcome(5, 3_000, 5, 0, 0)), 0);
    assert_eq!(gcra_next_unit_ms(&outcome(5, 3_000, 7, 0, 0)), 0);
    assert_eq!(gcra_next_unit_ms(&outcome(u64::MAX, u64::MAX, 0, u64::MAX, 0)), 1);
    let stat = PolicyStat { name: "g/3s", outcome: &room, algorithm: Algorithm::Gcra };
    assert_eq!(ratelimit(&[stat]), r#""g/3s";r=2;t=2"#);
    assert_eq!(x_ratelimit(&stat)[2].1, "2");
}

/// [`gcra_next_unit_ms`] against the model, on random traces: the unit is
/// not there 3 ms before (at most 2 ms late), and is there then.
#[wasm_bindgen_test(unsupported = test)]
fn gcra_next_unit_is_when_the_model_has_one_more() {
    use crate::limiter::model::Model;
    use crate::testing::{check, Rng};
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..50 {
        let windows = [(1 + rng.next(40), 1 + rng.next(5_000)), (1 + rng.next(400), 5_001 + rng.next(60_000))];
        let cost = 1 + rng.next(windows[0].0.min(windows[1].0));
        let take = [check(Algorithm::Gcra, 0, "k", &windows, cost)];
        let mut read = take.clone();
        read[0].check_only = true;
        read[0].cost = std::num::NonZeroU64::MIN;
        let (mut model, mut now) = (Model::new(), 1_000_000);
        for _ in 0..40 {
            now += rng.next(300);
            let decision = model.decide(&take, now);
            for o in &decision.windows {
                let next = gcra_next_unit_ms(o);
                let remaining_at = |model: &mut Model, t: u64| model.decide(&read, t).windows[o.window].remaining;
                if o.remaining >= o.limit {
                    assert_eq!(next, 0, "{o:?}");
                    continue;
                }
                if next >= 3 {
                    assert_eq!(remaining_at(&mut model, now + next - 3), o.remaining, "{o:?}: early");
                }
                assert!(remaining_at(&mut model, now + next) > o.remaining, "{o:?}: not there at {next}");
            }
        }
    }
}
