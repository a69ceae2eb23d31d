use super::*;
use crate::limiter::Algorithm;
use crate::testing::check;

fn table(max_keys: usize) -> Table {
    Table::new(SyncPolicy { interval_ms: 100, max_keys })
}

/// A table that syncs every 400 ms: a view lives 1.2 s without a flush.
fn slow_table(max_keys: usize) -> Table {
    Table::new(SyncPolicy { interval_ms: 400, max_keys })
}

/// What the view says of `c` at `now`, nothing taken: each window, with
/// whether the cost fits it (a window that fits has no retry).
fn seen(t: &mut Table, c: &Check, now: u64) -> Option<Vec<(WindowOutcome, bool)>> {
    let mut out = Vec::new();
    let all_fit = t.see(c, now, false, &mut out)?;
    assert_eq!(all_fit, out.iter().all(|w| w.retry_ms == 0));
    Some(out.into_iter().map(|w| (w, w.retry_ms == 0)).collect())
}

/// Admits `c` `n` times at `now` the way a request is admitted (seen and
/// taken at once); each must fit.
fn admit(t: &mut Table, c: &Check, now: u64, n: usize) {
    for i in 0..n {
        let mut out = Vec::new();
        assert_eq!(t.see(c, now, true, &mut out), Some(true), "admission {i} of {n}: {out:?}");
    }
}

fn fits(seen: Option<Vec<(WindowOutcome, bool)>>) -> Option<Vec<bool>> {
    seen.map(|w| w.iter().map(|(_, f)| *f).collect())
}

#[test]
fn shares_add_up_to_what_remains() {
    for (remaining, n) in [(10, 3), (0, 4), (7, 7), (5, 6), (1_000_001, 6)] {
        let total: u64 = (0..n).map(|r| share(remaining, n, r)).sum();
        assert_eq!(total, remaining, "{remaining} among {n}");
    }
    assert_eq!((0..3).map(|r| share(10, 3, r)).collect::<Vec<_>>(), [4, 3, 3]);
    assert_eq!(share(9, 0, 0), 9, "no syncer known: all of it");
}

#[test]
fn a_new_bucket_is_read_first_then_decided_within_its_share() {
    let mut t = table(10);
    let c = check(Algorithm::SlidingLog, 0, "k", &[(20, 1_000)], 1);
    assert_eq!(seen(&mut t, &c, 1_000), None, "no view yet: the store decides");
    assert_eq!(t.joins(), vec![c.clone()], "joined at once");
    assert_eq!(t.joins(), vec![], "once");
    assert_eq!(t.cut(1_000), vec![], "read half an interval later, not now");
    assert!(!t.due(1_049));
    assert!(t.due(1_050));
    assert_eq!(t.cut(1_050), vec![(c.clone(), 0)], "read, nothing to send");
    t.synced("k", &[(10, 800)], 2, 0, 1_060);
    for _ in 0..5 {
        assert_eq!(fits(seen(&mut t, &c, 1_070)), Some(vec![true]));
        admit(&mut t, &c, 1_070, 1);
    }
    let Some(w) = seen(&mut t, &c, 1_070) else { panic!("a view") };
    assert!(!w[0].1, "beyond its share of 10 among 2");
    assert_eq!((w[0].0.remaining, w[0].0.retry_ms), (5, 80), "5 left elsewhere: wait for the next sync at 1,150");
    assert_eq!(t.cut(1_150), vec![(c, 5)], "the 5 admitted go in the next flush");
}

#[test]
fn units_admitted_while_a_flush_is_on_the_way_count_against_the_next_share() {
    let mut t = table(10);
    let c = check(Algorithm::FixedWindow, 0, "k", &[(100, 10_000)], 1);
    seen(&mut t, &c, 0);
    t.cut(0);
    t.synced("k", &[(100, 0)], 1, 0, 1);
    admit(&mut t, &c, 1, 3);
    assert_eq!(t.cut(100), vec![(c.clone(), 3)]);
    admit(&mut t, &c, 101, 2);
    assert_eq!(t.cut(200), vec![], "its flush is still on the way");
    t.synced("k", &[(97, 9_000)], 1, 0, 210);
    let Some(w) = seen(&mut t, &c, 210) else { panic!("a view") };
    assert_eq!(w[0].0.remaining, 97 - 2 - 1, "the 2 admitted since the cut are not in the store's 97 yet");
    assert_eq!(t.cut(300), vec![(c, 2)]);
}

#[test]
fn a_window_the_store_said_empties_gives_the_whole_limit_shared() {
    let mut t = slow_table(10);
    let c = check(Algorithm::FixedWindow, 0, "k", &[(9, 1_000)], 1);
    seen(&mut t, &c, 0);
    t.cut(0);
    t.synced("k", &[(0, 500)], 3, 2, 0);
    assert_eq!(fits(seen(&mut t, &c, 499)), Some(vec![false]), "full until 500");
    let Some(w) = seen(&mut t, &c, 500) else { panic!("a view") };
    assert!(w[0].1, "the window emptied: a third of 9");
    admit(&mut t, &c, 500, 3);
    assert_eq!(fits(seen(&mut t, &c, 501)), Some(vec![false]), "3 of 9 among 3 syncers");
}

#[test]
fn idle_buckets_leave_and_the_table_stays_bounded() {
    let mut t = slow_table(2);
    let a = check(Algorithm::SlidingLog, 0, "a", &[(5, 1_000)], 1);
    let b = check(Algorithm::SlidingLog, 0, "b", &[(5, 1_000)], 1);
    let c = check(Algorithm::SlidingLog, 0, "c", &[(5, 1_000)], 1);
    seen(&mut t, &a, 0);
    seen(&mut t, &b, 0);
    seen(&mut t, &c, 0);
    assert_eq!(t.len(), 2, "no room for a third: the store decides it");
    t.cut(0);
    t.synced("a", &[(5, 0)], 1, 0, 0);
    admit(&mut t, &a, 500, 1);
    t.cut(1_100);
    assert_eq!(t.len(), 1, "b idle for its longest period left; a has a flush on the way");
    t.synced("a", &[(4, 900)], 1, 0, 1_110);
    t.cut(1_600);
    assert_eq!(t.len(), 0, "a idle since 500 with nothing to send");
}

/// The log's `reset_ms` is when its *oldest* entry leaves, not when the
/// window is empty: the view must not take it for an empty window.
#[test]
fn a_log_window_is_not_empty_when_its_oldest_entry_leaves() {
    let mut t = slow_table(10);
    let c = check(Algorithm::SlidingLog, 0, "k", &[(10, 1_000)], 1);
    seen(&mut t, &c, 0);
    t.cut(0);
    // Full: 10 entries, the oldest leaving at 200, the newest at 999.
    t.synced("k", &[(0, 200)], 1, 0, 0);
    assert_eq!(fits(seen(&mut t, &c, 250)), Some(vec![false]), "one entry left, nine still counted");
    let Some(w) = seen(&mut t, &c, 250) else { panic!("a view") };
    assert_eq!(w[0].0.remaining, 0, "nothing remains by the last sync");
    assert_eq!(fits(seen(&mut t, &c, 999)), Some(vec![false]), "the entries known at the sync may still count");
    assert_eq!(fits(seen(&mut t, &c, 1_000)), Some(vec![true]), "every entry known at the sync has left");
}

/// The store drops a syncer that has not flushed a bucket for its horizon
/// and shares the bucket among the rest: this worker's view of it is then
/// stale, and the store decides until the next sync.
#[test]
fn a_view_not_flushed_for_the_horizon_is_dropped() {
    let mut t = table(10);
    let c = check(Algorithm::FixedWindow, 0, "k", &[(60, 60_000)], 1);
    seen(&mut t, &c, 0);
    t.cut(0);
    t.synced("k", &[(60, 0)], 6, 0, 5);
    admit(&mut t, &c, 10, 1);
    assert_eq!(t.cut(100), vec![(c.clone(), 1)]);
    t.synced("k", &[(59, 59_900)], 6, 0, 105);
    // Quiet from here: the bucket is in no cut, and the store forgets
    // this syncer 3 intervals after its last flush.
    assert_eq!(t.cut(200), vec![]);
    assert_eq!(t.cut(300), vec![]);
    assert!(seen(&mut t, &c, 399).is_some(), "within the horizon of its last flush");
    assert_eq!(seen(&mut t, &c, 400), None, "stale: the store decides");
    assert_eq!(t.joins(), vec![c.clone()], "joined again at once");
    assert!(t.due(450), "read again half an interval later");
    assert_eq!(t.cut(450), vec![(c.clone(), 0)], "read, nothing to send");
    t.synced("k", &[(30, 59_500)], 2, 1, 455);
    assert_eq!(fits(seen(&mut t, &c, 456)), Some(vec![true]), "a fresh share");
}

/// While a flush of the bucket is on the way (sent again after a lost
/// reply, the store down), the view stays: the store keeps this syncer
/// when the flush lands, and deciding from the last view is what a synced
/// rule does while the store cannot answer.
#[test]
fn a_view_with_a_flush_on_the_way_is_kept() {
    let mut t = table(10);
    let c = check(Algorithm::FixedWindow, 0, "k", &[(60, 60_000)], 1);
    seen(&mut t, &c, 0);
    t.cut(0);
    t.synced("k", &[(60, 0)], 2, 0, 5);
    admit(&mut t, &c, 10, 1);
    assert_eq!(t.cut(100), vec![(c.clone(), 1)]);
    assert!(seen(&mut t, &c, 1_000).is_some(), "the flush of 100 is still on the way");
}

/// A flush whose reply was lost and that was sent again (the store down
/// for a while): the store noted this worker when the flush got through,
/// so the view it gives lives the horizon from then, not from the cut.
#[test]
fn a_flush_answered_after_an_outage_gives_a_live_view() {
    let mut t = table(10);
    let c = check(Algorithm::FixedWindow, 0, "k", &[(60, 60_000)], 1);
    seen(&mut t, &c, 0);
    t.cut(50);
    t.synced("k", &[(60, 0)], 1, 0, 55);
    admit(&mut t, &c, 60, 1);
    assert_eq!(t.cut(100), vec![(c.clone(), 1)]);
    // Sent again until it got through at 5,000 (queued at 4,990).
    t.synced_since("k", (&[(59, 55_000)], 1, 0), 4_990, 5_000);
    assert_eq!(fits(seen(&mut t, &c, 5_010)), Some(vec![true]), "decided on the worker");
}
