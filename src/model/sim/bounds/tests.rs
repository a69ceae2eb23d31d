use super::*;

fn none(_: u64, _: u64) -> u64 {
    0
}

#[test]
fn the_log_counts_every_span_of_a_period() {
    let ok = [(0, 2), (500, 1), (1_000, 2)];
    assert_eq!(first_over(Algorithm::SlidingLog, (3, 1_000), &ok, &none), None, "(0, 1000] holds 3");
    let over = [(0, 2), (500, 1), (999, 1)];
    let o = first_over(Algorithm::SlidingLog, (3, 1_000), &over, &none).expect("4 in (0, 999]");
    assert_eq!((o.from_ms, o.to_ms, o.admitted, o.allowed), (0, 999, 4, 3));
    assert_eq!(first_over(Algorithm::SlidingLog, (3, 1_000), &over, &|_, _| 1), None, "one more allowed");
}

#[test]
fn fixed_windows_count_their_aligned_windows() {
    let ok = [(999, 3), (1_000, 3)];
    assert_eq!(first_over(Algorithm::FixedWindow, (3, 1_000), &ok, &none), None);
    let over = [(1_000, 3), (1_999, 1)];
    let o = first_over(Algorithm::FixedWindow, (3, 1_000), &over, &none).expect("4 in [1000, 2000)");
    assert_eq!((o.from_ms, o.to_ms, o.admitted), (1_000, 1_999, 4));
}

#[test]
fn the_counter_is_held_to_its_estimate() {
    // 10 at 5,500 (window 5); at 6,100 they weigh 9: 1 more fits, 2 do not.
    let ok = [(5_500, 10), (6_100, 1)];
    assert_eq!(first_over(Algorithm::SlidingWindow, (10, 1_000), &ok, &none), None);
    let over = [(5_500, 10), (6_100, 2)];
    assert!(first_over(Algorithm::SlidingWindow, (10, 1_000), &over, &none).is_some());
    // The previous window counts at most the limit.
    let capped = [(5_500, 30), (6_900, 9)];
    assert!(first_over(Algorithm::SlidingWindow, (10, 1_000), &capped, &|_, _| 20).is_none());
}

#[test]
fn gcra_drains_its_limit_per_period() {
    // 5 per 1000 ms: a burst of 5, then one every 200 ms.
    let ok: Vec<(u64, u64)> = [(0, 5)].into_iter().chain((1..=5).map(|i| (i * 200, 1))).collect();
    assert_eq!(first_over(Algorithm::Gcra, (5, 1_000), &ok, &none), None);
    let over = [(0, 5), (199, 1)];
    let o = first_over(Algorithm::Gcra, (5, 1_000), &over, &none).expect("6 in 199 ms");
    assert_eq!((o.from_ms, o.to_ms, o.admitted), (0, 199, 6));
}
