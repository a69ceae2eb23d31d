//! `Model::flush`: a token records once until it expires, units 0 only
//! read, syncers count as active each for its own horizon and rank by
//! name; a token key that is not the first key's is refused.

use crate::key::flush_token_key;
use crate::limiter::model::Model;
use crate::limiter::{Algorithm, Flush, FlushEntry};
use crate::testing::check;

const T: u64 = 1_800_000_000_000;

/// A flush of `units` in one bucket (10 per s, 30 per 5 s) by `syncer`.
fn flush(algorithm: Algorithm, token: &str, syncer: &str, units: u64) -> Flush {
    flush_for(algorithm, token, syncer, units, 3_000)
}

/// [`flush`] with the syncer's horizon.
fn flush_for(algorithm: Algorithm, token: &str, syncer: &str, units: u64, horizon_ms: u64) -> Flush {
    let check = check(algorithm, 0, "p:{k}:b", &[(10, 1_000), (30, 5_000)], 1);
    let token_key = flush_token_key(&check.key, syncer);
    Flush {
        entries: vec![FlushEntry { check, units }],
        token: token.into(),
        syncer: syncer.into(),
        horizon_ms,
        token_key,
    }
}

fn remaining(m: &mut Model, algorithm: Algorithm, now: u64) -> Vec<u64> {
    m.flush(&flush(algorithm, "look", "reader", 0), now).state.windows.iter().map(|w| w.remaining).collect()
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn the_same_flush_twice_records_once_and_a_new_token_again() {
    for algorithm in Algorithm::ALL {
        let mut m = Model::new();
        let first = m.flush(&flush(algorithm, "t1", "w", 4), T);
        assert!(first.applied, "{algorithm:?}");
        assert_eq!(first.state.windows.iter().map(|w| w.remaining).collect::<Vec<_>>(), vec![6, 26], "{algorithm:?}");
        assert!(first.state.allowed && first.state.windows.iter().all(|w| w.retry_ms == 0));
        let again = m.flush(&flush(algorithm, "t1", "w", 4), T);
        assert!(!again.applied, "{algorithm:?}");
        assert_eq!(again.state, first.state, "{algorithm:?}: the resend recorded nothing");
        let next = m.flush(&flush(algorithm, "t2", "w", 4), T);
        assert!(next.applied, "{algorithm:?}");
        assert_eq!(next.state.windows[1].remaining, 22, "{algorithm:?}");
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn units_zero_record_nothing() {
    for algorithm in Algorithm::ALL {
        let mut m = Model::new();
        let r = m.flush(&flush(algorithm, "t1", "w", 0), T);
        assert!(r.applied, "{algorithm:?}: the token is applied, with nothing to record");
        assert_eq!(r.state.windows.iter().map(|w| w.remaining).collect::<Vec<_>>(), vec![10, 30], "{algorithm:?}");
        assert_eq!(remaining(&mut m, algorithm, T + 1), vec![10, 30], "{algorithm:?}");
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_token_expires_after_the_longest_period() {
    for algorithm in Algorithm::ALL {
        let mut m = Model::new();
        assert!(m.flush(&flush(algorithm, "t1", "w", 2), T).applied);
        assert!(!m.flush(&flush(algorithm, "t1", "w", 2), T + 4_999).applied, "{algorithm:?}");
        let late = m.flush(&flush(algorithm, "t1", "w", 2), T + 5_000);
        assert!(late.applied, "{algorithm:?}: a resend after the longest period is counted again");
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn syncers_are_active_for_the_horizon_and_ranked_by_name() {
    let a = Algorithm::Gcra;
    let mut m = Model::new();
    // Horizon 3 s: "b" at 0, "c" at 1 s, "a" at 2 s.
    assert_eq!(m.flush(&flush(a, "1", "b", 1), T).syncers, vec![(1, 0)]);
    assert_eq!(m.flush(&flush(a, "2", "c", 1), T + 1_000).syncers, vec![(2, 1)]);
    assert_eq!(m.flush(&flush(a, "3", "a", 1), T + 2_000).syncers, vec![(3, 0)]);
    assert_eq!(m.flush(&flush(a, "4", "c", 1), T + 2_999).syncers, vec![(3, 2)]);
    // "b" flushed 3 s ago: no longer active.
    assert_eq!(m.flush(&flush(a, "5", "c", 1), T + 3_000).syncers, vec![(2, 1)]);
    assert_eq!(m.flush(&flush(a, "6", "b", 1), T + 3_001).syncers, vec![(3, 1)]);
    // A resent flush is still noted.
    assert_eq!(m.flush(&flush(a, "6", "b", 1), T + 4_500).syncers, vec![(3, 1)]);
    // "a" and "c" went quiet; then "b" too, and the set expired.
    assert_eq!(m.flush(&flush(a, "7", "b", 0), T + 5_999).syncers, vec![(2, 0)]);
    assert_eq!(m.flush(&flush(a, "8", "b", 0), T + 6_000).syncers, vec![(1, 0)]);
    assert_eq!(m.flush(&flush(a, "9", "z", 0), T + 9_000).syncers, vec![(1, 0)]);
}

/// Two syncers, horizons 3 s ("l") and 300 ms ("s"): each stays in the set
/// for its own horizon, whoever flushes; the short one's flush does not
/// drop the long one.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn each_syncer_stays_for_its_own_horizon() {
    let a = Algorithm::SlidingLog;
    let mut m = Model::new();
    assert_eq!(m.flush(&flush_for(a, "1", "l", 1, 3_000), T).syncers, vec![(1, 0)]);
    assert_eq!(m.flush(&flush_for(a, "2", "s", 1, 300), T + 1_000).syncers, vec![(2, 1)], "l is active till T + 3 s");
    assert_eq!(m.flush(&flush_for(a, "3", "l", 1, 3_000), T + 1_299).syncers, vec![(2, 0)]);
    assert_eq!(m.flush(&flush_for(a, "4", "l", 1, 3_000), T + 1_300).syncers, vec![(1, 0)], "s left at T + 1.3 s");
    assert_eq!(m.flush(&flush_for(a, "5", "s", 1, 300), T + 4_299).syncers, vec![(2, 1)]);
    assert_eq!(m.flush(&flush_for(a, "6", "s", 1, 300), T + 4_300).syncers, vec![(1, 0)], "l left at T + 4.3 s");
}

/// A syncer's short flush (an owed flush: 300 ms) never shortens its long
/// entry (3 s): another syncer still counts it until then.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_short_flush_never_shortens_a_long_entry() {
    let a = Algorithm::FixedWindow;
    let mut m = Model::new();
    assert_eq!(m.flush(&flush_for(a, "1", "x", 1, 3_000), T).syncers, vec![(1, 0)]);
    assert_eq!(m.flush(&flush_for(a, "2", "x", 2, 300), T + 100).syncers, vec![(1, 0)]);
    assert_eq!(m.flush(&flush_for(a, "3", "y", 0, 300), T + 2_999).syncers, vec![(2, 1)], "x until T + 3 s");
    assert_eq!(m.flush(&flush_for(a, "4", "y", 0, 300), T + 3_000).syncers, vec![(1, 0)]);
    // A longer horizon extends it; the set lives as long as its latest member.
    assert_eq!(m.flush(&flush_for(a, "5", "x", 0, 10_000), T + 3_001).syncers, vec![(2, 0)], "y until T + 3.3 s");
    assert_eq!(m.flush_key_expiry(&crate::key::syncers_key("p:{k}:b")), Some(T + 13_001));
    assert_eq!(m.flush(&flush_for(a, "6", "y", 0, 300), T + 13_000).syncers, vec![(2, 1)]);
    assert_eq!(m.flush(&flush_for(a, "7", "y", 0, 300), T + 13_001).syncers, vec![(1, 0)]);
}

/// The token key must be the first bucket's key, `:flush:`, then a name of
/// 1 to 64 bytes ([`flush_token_key`]): any other is refused.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn only_the_first_keys_token_key_is_accepted() {
    let good = flush(Algorithm::Gcra, "t", "w", 1);
    assert_eq!(Model::flush_error(&good), None);
    let long = flush_token_key("p:{k}:b", &"n".repeat(64));
    assert_eq!(Model::flush_error(&Flush { token_key: long, ..good.clone() }), None);
    for bad in ["p:{k}:b:flush:", "p:{k}:b", "p:{k}:other:flush:w", "p:{k}:flush:w", "p:{k}:b:flushw", "x"] {
        let refused = Flush { token_key: bad.into(), ..good.clone() };
        assert_eq!(Model::flush_error(&refused), Some("ERR tollgate: bad token key"), "{bad}");
    }
    let too_long = flush_token_key("p:{k}:b", &"n".repeat(65));
    assert_eq!(Model::flush_error(&Flush { token_key: too_long, ..good }), Some("ERR tollgate: bad token key"));
}

/// A set an older version wrote during a rollout, whose members are the
/// bare syncer names scored by their last flush: such a member counts for
/// the reader's horizon after it, as that version read it; the reader's
/// own entry is `~` + its name.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_set_written_by_an_older_version_reads_as_it_did() {
    let a = Algorithm::SlidingLog;
    let mut m = Model::new();
    let set = crate::key::syncers_key("p:{k}:b");
    m.put_syncer(&set, "old", T, T + 3_000);
    assert_eq!(m.flush(&flush_for(a, "1", "new", 0, 3_000), T + 2_999).syncers, vec![(2, 1)], "old < ~new");
    assert_eq!(m.flush(&flush_for(a, "2", "new", 0, 300), T + 3_000).syncers, vec![(1, 0)], "old's last flush 3 s ago");
    m.put_syncer(&set, "zz", T + 4_000, T + 4_300);
    assert_eq!(m.flush(&flush_for(a, "3", "new", 0, 300), T + 4_299).syncers, vec![(2, 1)], "a 300 ms reader");
    assert_eq!(m.flush(&flush_for(a, "4", "new", 0, 300), T + 4_300).syncers, vec![(1, 0)]);
}
