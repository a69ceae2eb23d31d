//! The lease sets of concurrency limits (`lease.rs`): never more than the
//! limit live, a denial takes no lease and records nothing anywhere, expiry
//! and ends free leases, a renewal never brings one back, a full set denies
//! a shaped call at once, an undo ends the lease, and a lease taken at a
//! turn lasts a TTL after it.

use crate::limiter::model::Model;
use crate::limiter::{Adjustment, Algorithm, Check, LeaseChange, LeaseOp};
use crate::testing::{check, lease, Rng};

const T: u64 = 1_800_000_000_000;

fn op(c: &Check, change: LeaseChange) -> LeaseOp {
    LeaseOp { key: c.key.clone(), id: c.lease.clone().unwrap_or_default(), change }
}

/// The live leases of `key` at `now`: their ids, by id.
fn live(m: &Model, key: &str, now: u64) -> Vec<String> {
    m.leases(key).into_iter().filter(|&(_, e)| e > now).map(|(id, _)| id).collect()
}

/// Random traces of admissions (alone or with a window of another
/// algorithm), ends, renewals and time: a request is admitted exactly when
/// fewer than the limit are live (and the window has room), never more
/// are live, and `remaining` says how many are free.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn never_more_than_the_limit_are_live() {
    let mut rng = Rng(0x51_7CC1_B727_220A);
    for case in 0..200 {
        let (limit, ttl) = (1 + rng.next(4), [50, 300, 1_000][rng.next(3) as usize]);
        let algorithm = Algorithm::ALL[case % 4];
        let window = check(algorithm, 1, "w", &[(1 + rng.next(6), 400)], 1);
        let mut m = Model::new();
        let mut now = T;
        let mut held: Vec<Check> = Vec::new();
        for step in 0..60 {
            now += [0, 1, 20, 120, 400][rng.next(5) as usize];
            let before = live(&m, "k", now);
            match rng.next(4) {
                0 | 1 => {
                    let c = lease(0, "k", limit, ttl, &format!("r{step}"));
                    let with_window = rng.next(2) == 0;
                    let checks = if with_window { vec![c.clone(), window.clone()] } else { vec![c.clone()] };
                    let d = m.decide(&checks, now);
                    let fits = (before.len() as u64) < limit;
                    assert_eq!(d.windows[0].retry_ms == 0, fits, "case {case} step {step}");
                    if d.allowed {
                        held.push(c);
                    }
                    let after = live(&m, "k", now);
                    assert_eq!(after.len(), before.len() + usize::from(d.allowed), "case {case} step {step}");
                    assert_eq!(d.windows[0].remaining, limit - after.len() as u64, "case {case} step {step}");
                }
                2 if !held.is_empty() => {
                    let c = held.swap_remove(rng.next(held.len() as u64) as usize);
                    let id = c.lease.as_deref().unwrap_or_default().to_string();
                    let r = m.lease(&[op(&c, LeaseChange::End)], now);
                    assert_eq!(r.live, vec![before.contains(&id)], "case {case} step {step}");
                }
                3 if !held.is_empty() => {
                    let c = &held[rng.next(held.len() as u64) as usize];
                    let renew = LeaseChange::Renew { ttl_ms: [10, ttl, 2 * ttl][rng.next(3) as usize] };
                    m.lease(&[op(c, renew)], now);
                }
                _ => {}
            }
            assert!(live(&m, "k", now).len() as u64 <= limit, "case {case} step {step}");
        }
    }
}

/// A full lease set denies and the window of the same request records
/// nothing; a full window denies and no lease is taken.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_denial_takes_no_lease_and_records_nothing() {
    for algorithm in Algorithm::ALL {
        let mut m = Model::new();
        let w = check(algorithm, 1, "w", &[(5, 60_000)], 1);
        assert!(m.decide(&[lease(0, "k", 1, 1_000, "a"), w.clone()], T).allowed);
        let d = m.decide(&[lease(0, "k", 1, 1_000, "b"), w.clone()], T + 10);
        assert!(!d.allowed, "{algorithm:?}");
        assert_eq!((d.windows[0].retry_ms, d.windows[1].retry_ms), (990, 0), "{algorithm:?}");
        assert_eq!(d.windows[1].remaining, 4, "{algorithm:?}: the window recorded nothing");
        assert_eq!(live(&m, "k", T + 10), ["a"], "{algorithm:?}");

        let full = check(algorithm, 1, "full", &[(1, 60_000)], 1);
        assert!(m.decide(std::slice::from_ref(&full), T).allowed);
        let d = m.decide(&[lease(0, "k2", 3, 1_000, "c"), full.clone()], T + 20);
        assert!(!d.allowed && d.windows[0].retry_ms == 0 && d.windows[1].retry_ms > 0, "{algorithm:?}");
        assert_eq!(d.windows[0].remaining, 3, "{algorithm:?}");
        assert!(m.leases("k2").is_empty(), "{algorithm:?}: no lease taken");
    }
}

/// A lease frees its place when it expires: the retry of a full set is
/// until the earliest expiry, and the reset until the latest.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn expiry_frees_a_lease() {
    let mut m = Model::new();
    let d = m.decide(&[lease(0, "k", 2, 1_000, "a")], T);
    assert_eq!((d.windows[0].remaining, d.windows[0].reset_ms), (1, 1_000));
    let d = m.decide(&[lease(0, "k", 2, 1_000, "b")], T + 300);
    assert_eq!((d.windows[0].remaining, d.windows[0].reset_ms), (0, 1_000));
    let d = m.decide(&[lease(0, "k", 2, 1_000, "c")], T + 999);
    assert!(!d.allowed);
    assert_eq!((d.windows[0].retry_ms, d.windows[0].reset_ms), (1, 301));
    let d = m.decide(&[lease(0, "k", 2, 1_000, "c")], T + 1_000);
    assert!(d.allowed, "a expired at T + 1000");
    assert_eq!(live(&m, "k", T + 1_000), ["b", "c"]);
    assert_eq!(m.leases("k").len(), 2, "the expired lease is dropped");
    let d = m.decide(&[lease(0, "k", 2, 1_000, "d")], T + 5_000);
    assert_eq!((d.allowed, d.windows[0].remaining, d.windows[0].reset_ms), (true, 1, 1_000));
}

/// A renewal of a live lease moves its expiry (the reset follows); of an
/// expired one it answers false and the lease stays gone.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_renewal_never_brings_an_expired_lease_back() {
    let mut m = Model::new();
    let a = lease(0, "k", 1, 1_000, "a");
    assert!(m.decide(std::slice::from_ref(&a), T).allowed);
    let r = m.lease(&[op(&a, LeaseChange::Renew { ttl_ms: 5_000 })], T + 500);
    assert_eq!((r.now_ms, r.live), (T + 500, vec![true]));
    assert_eq!(m.leases("k"), [("a".to_string(), T + 5_500)]);
    let d = m.decide(&[lease(0, "k", 1, 1_000, "b")], T + 2_000);
    assert_eq!((d.allowed, d.windows[0].retry_ms), (false, 3_500), "renewed past its TTL");
    assert_eq!(m.lease(&[op(&a, LeaseChange::Renew { ttl_ms: 5_000 })], T + 5_500).live, vec![false]);
    assert!(m.leases("k").is_empty(), "an expired lease still stored is removed");
    assert_eq!(m.lease(&[op(&a, LeaseChange::Renew { ttl_ms: 5_000 })], T + 5_501).live, vec![false]);
    assert!(m.leases("k").is_empty());
    assert!(m.decide(&[lease(0, "k", 1, 1_000, "b")], T + 5_502).allowed);
}

/// Ending a lease twice, or one never taken, answers false and changes
/// nothing; an ended lease is not renewed.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn ending_is_idempotent() {
    let mut m = Model::new();
    let (a, b) = (lease(0, "k", 2, 1_000, "a"), lease(0, "k", 2, 1_000, "b"));
    assert!(m.decide(std::slice::from_ref(&a), T).allowed);
    assert!(m.decide(std::slice::from_ref(&b), T).allowed);
    let end = [op(&a, LeaseChange::End), op(&a, LeaseChange::End), op(&a, LeaseChange::Renew { ttl_ms: 9 })];
    assert_eq!(m.lease(&end, T + 1).live, vec![true, false, false]);
    assert_eq!(m.lease(&end[..1], T + 2).live, vec![false]);
    let elsewhere = LeaseOp { key: "other".into(), id: "a".into(), change: LeaseChange::End };
    assert_eq!(m.lease(&[elsewhere], T + 3).live, vec![false]);
    assert_eq!(m.leases("k"), [("b".to_string(), T + 1_000)]);
    // One place is free again.
    let d = m.decide(&[lease(0, "k", 2, 1_000, "c")], T + 4);
    assert_eq!((d.allowed, d.windows[0].remaining), (true, 0));
}

/// A full set denies a shaped call at once, whatever its max_delay, with
/// the unshaped retry; the other windows' retries are the shaped ones,
/// and nothing is recorded.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_full_set_denies_a_shaped_call_at_once() {
    for algorithm in Algorithm::ALL {
        let mut m = Model::new();
        let w = check(algorithm, 1, "w", &[(2, 1_000)], 1);
        assert!(m.decide_shaped(&[lease(0, "k", 2, 1_000, "a"), w.clone()], 5_000, T).allowed);
        assert!(m.decide_shaped(&[lease(0, "k", 2, 1_000, "b"), w.clone()], 5_000, T + 100).allowed);
        let d = m.decide_shaped(&[lease(0, "k", 2, 1_000, "c"), w.clone()], 60_000, T + 200);
        assert!(!d.allowed, "{algorithm:?}");
        assert_eq!(d.delay_ms, 0);
        assert_eq!(d.windows[0].retry_ms, 800, "{algorithm:?}: until a expires");
        assert_eq!(d.windows[1].retry_ms, 0, "{algorithm:?}: the window would wait within 60 s");
        assert_eq!(m.leases("k").len(), 2, "{algorithm:?}");
        // The window is full too: had the lease set room, the call would wait.
        let mut free = Model::new();
        free.decide_shaped(&[w.clone()], 5_000, T);
        free.decide_shaped(&[w.clone()], 5_000, T + 100);
        let d = free.decide_shaped(&[lease(0, "k", 2, 1_000, "c"), w.clone()], 60_000, T + 200);
        assert!(d.allowed && d.delay_ms > 0, "{algorithm:?}: {d:?}");
    }
}

/// An undo (adjust to 0) ends the request's lease; a charge from 0 (a
/// lease check that only checked) takes it at now.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_undo_ends_the_lease_and_a_charge_takes_it() {
    let mut m = Model::new();
    let a = lease(0, "k", 2, 1_000, "a");
    assert!(m.decide(std::slice::from_ref(&a), T).allowed);
    let d = m.adjust(&[Adjustment { check: a.clone(), from: 1, to: 0 }], T, T + 10);
    assert_eq!((d.allowed, d.windows[0].remaining, d.windows[0].reset_ms), (true, 2, 0));
    assert!(m.leases("k").is_empty());
    let mut b = lease(0, "k", 2, 1_000, "b");
    b.check_only = true;
    let d = m.decide(std::slice::from_ref(&b), T + 20);
    assert_eq!((d.allowed, d.windows[0].remaining), (true, 2));
    assert!(m.leases("k").is_empty(), "a check that only checks takes no lease");
    let d = m.adjust(&[Adjustment { check: b, from: 0, to: 1 }], T + 20, T + 30);
    assert_eq!((d.windows[0].remaining, d.windows[0].reset_ms), (1, 1_000));
    assert_eq!(m.leases("k"), [("b".to_string(), T + 1_030)]);
}

/// Admitted at a turn after now, the lease expires a TTL after the turn
/// (its reset counts from now); a lease already held counts once.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_lease_taken_at_a_turn_lasts_a_ttl_after_it() {
    let mut m = Model::new();
    let w = check(Algorithm::FixedWindow, 1, "w", &[(1, 1_000)], 1);
    assert!(m.decide_shaped(std::slice::from_ref(&w), 2_000, T).allowed);
    let d = m.decide_shaped(&[lease(0, "k", 2, 500, "a"), w.clone()], 2_000, T + 10);
    assert_eq!((d.allowed, d.delay_ms), (true, 990));
    assert_eq!(m.leases("k"), [("a".to_string(), T + 1_500)]);
    assert_eq!((d.windows[0].remaining, d.windows[0].reset_ms, d.windows[0].retry_ms), (1, 1_490, 0));
    // The same lease decided again (a resent call): its expiry moves, it counts once.
    let d = m.decide(&[lease(0, "k", 2, 500, "a")], T + 20);
    assert_eq!((d.allowed, d.windows[0].remaining, d.windows[0].reset_ms), (true, 1, 500));
    assert_eq!(m.leases("k"), [("a".to_string(), T + 520)]);
}
