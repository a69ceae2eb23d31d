//! Concurrency leases (`src/limiter/lease.lua`, `lease_ops.lua`) against
//! their model (`Model::decide` with lease checks, `Model::lease`) in a real
//! Valkey, through both invocation paths, with injected time: the issue's
//! case (3 of 5 admitted, one ended, one more admitted, all free after the
//! TTL), leases next to windows shaped and not (a full set denies a shaped
//! call at once; a lease taken at a turn), renewals and undos, malformed
//! arguments, then random traces. Model and Lua must agree on every reply,
//! on the live leases stored and on every TTL written (the harness:
//! `tests/support/differential/leases.rs`).

use crate::support;

use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use support::differential::{check, encoded_via, lease, Differential, Path};
use support::props::{rule, runner, Rule};
use support::Valkey;
use tollgate::limiter::script::{encode_adjust, encode_call, encode_flush, encode_lease, limiter};
use tollgate::limiter::{Adjustment, Algorithm, Check, Flush, FlushEntry, LeaseChange, LeaseOp};

const T: u64 = 1_800_000_000_000;

fn end(c: &Check) -> LeaseOp {
    LeaseOp { key: c.key.clone(), id: c.lease.clone().unwrap(), change: LeaseChange::End }
}

fn renew(c: &Check, ttl_ms: u64) -> LeaseOp {
    LeaseOp { change: LeaseChange::Renew { ttl_ms }, ..end(c) }
}

/// The case: at most 3 in flight; of 5 requests 3 are admitted,
/// one ends, one more is admitted; past the TTL every lease is free.
#[test]
fn three_of_five_admitted_then_one_ends_then_all_expire() {
    let valkey = Valkey::start();
    for path in Path::ALL {
        let key = format!("l:{{{path:?}:issue}}:lease");
        let request = |i: u64| lease(0, &key, 3, 1_000, &format!("r{i}"));
        let mut d = Differential::via(&valkey, path);
        let admitted: Vec<bool> = (0..5).map(|i| d.step(&[request(i)], T + i).allowed).collect();
        assert_eq!(admitted, [true, true, true, false, false], "{path:?}");
        assert_eq!(d.step(&[request(4)], T + 5).windows[0].retry_ms, 995, "{path:?}: until r0 expires");
        assert_eq!(d.lease(&[end(&request(1))], T + 10).live, [true], "{path:?}");
        assert_eq!(d.lease(&[end(&request(1))], T + 11).live, [false], "{path:?}: ended already");
        let fourth = d.step(&[request(5)], T + 12);
        assert_eq!((fourth.allowed, fourth.windows[0].remaining), (true, 0), "{path:?}");
        assert!(!d.step(&[request(6)], T + 13).allowed, "{path:?}");
        // r0 and r2 expired at T + 1000 and T + 1002: two places free.
        let later = d.step(&[request(7)], T + 1_011);
        assert_eq!((later.allowed, later.windows[0].remaining), (true, 1), "{path:?}");
        // r5 expired at T + 1012: r7, r8, r9 in flight, r10 denied.
        let admitted: Vec<bool> = (8..11).map(|i| d.step(&[request(i)], T + 2_010).allowed).collect();
        assert_eq!(admitted, [true, true, false], "{path:?}");
        // r8 and r9, the last, expire at T + 3010: then every place is free.
        let free = d.step(&[request(10)], T + 3_010);
        assert_eq!((free.allowed, free.windows[0].remaining, free.windows[0].reset_ms), (true, 2, 1_000));
        assert_eq!(d.lease(&[renew(&request(0), 5_000)], T + 3_011).live, [false], "{path:?}: expired");
        assert_eq!(valkey.int(&["ZCARD", &key]), 1, "{path:?}: only r10 is stored");
    }
}

/// Leases next to windows of every algorithm: all or nothing both ways; a
/// full set denies a shaped call at once (whatever its max_delay) with the
/// unshaped retry; a lease taken at a turn lasts a TTL after it and an
/// unshaped one after it expires sooner (the key keeps the later TTL); a
/// renewal for longer; undos; a charge past the limit; ends of leases
/// renewed in the same call.
#[test]
fn leases_next_to_windows_agree() {
    let valkey = Valkey::start();
    for path in Path::ALL {
        for algorithm in Algorithm::ALL {
            let key = |name: &str| format!("n:{{{path:?}:{algorithm:?}}}:{name}");
            let w = check(algorithm, 1, &key(algorithm.id()), &[(2, 1_000)], 1);
            let shaped_w = check(algorithm, 1, &key(&format!("s:{}", algorithm.id())), &[(1, 1_000)], 1);
            let l = |id: &str| lease(0, &key("lease"), 2, 500, id);
            let mut d = Differential::via(&valkey, path);
            assert!(d.step(&[l("a"), w.clone()], T).allowed);
            assert!(d.step(&[l("b"), w.clone()], T + 10).allowed);
            // The lease set is full and the window too: the lease denies, the window records nothing.
            let denied = d.step(&[l("c"), w.clone()], T + 20);
            assert!(!denied.allowed && denied.windows[0].retry_ms == 480);
            let shaped = d.step_shaped(&[l("c"), shaped_w.clone()], 60_000, T + 30);
            assert_eq!((shaped.allowed, shaped.windows[0].retry_ms, shaped.delay_ms), (false, 470, 0));
            d.adjust(
                &[Adjustment { check: l("a"), from: 1, to: 0 }, Adjustment { check: w.clone(), from: 1, to: 0 }],
                T,
                T + 40,
            );
            // A place is free: the shaped call waits for its window, its lease from its turn.
            assert!(d.step_shaped(&[l("s1"), shaped_w.clone()], 3_000, T + 50).allowed);
            let turn = d.step_shaped(&[l("s2"), shaped_w.clone()], 3_000, T + 60);
            assert!(!turn.allowed, "{path:?} {algorithm:?}: the set is full again ({turn:?})");
            d.lease(&[end(&l("b"))], T + 70);
            let turn = d.step_shaped(&[l("s2"), shaped_w.clone()], 3_000, T + 80);
            assert!(turn.allowed && turn.delay_ms > 0, "{path:?} {algorithm:?}: {turn:?}");
            // An unshaped lease after it expires sooner: the key keeps s2's TTL.
            d.lease(&[end(&l("s1"))], T + 90);
            assert!(d.step(&[l("u")], T + 100).allowed);
            // Renewed for longer than its TTL, then ended in the same call as another's renewal.
            d.lease(&[renew(&l("u"), 4_000), renew(&l("s2"), 100)], T + 200);
            d.step(&[l("v"), w.clone()], T + 300);
            d.lease(&[renew(&l("s2"), 9_000), end(&l("s2")), renew(&l("zz"), 10)], T + 400);
            // A charge takes a lease unchecked: past the limit, remaining 0.
            d.adjust(
                &[Adjustment { check: l("x"), from: 0, to: 1 }, Adjustment { check: l("y"), from: 0, to: 1 }],
                T + 500,
                T + 500,
            );
            for i in 0..12 {
                d.step(&[l(&format!("t{i}")), w.clone()], T + 600 + 400 * i);
            }
            d.step(&[l("late")], T + 60_000);
        }
    }
}

/// Malformed lease arguments are refused before any write: a lease key
/// without an id or with a bad one, of cost 2 or two windows, in a flush;
/// a lease call with a bad op, id or argument count.
#[test]
fn malformed_leases_are_refused() {
    let valkey = Valkey::start();
    let mut id_less = lease(0, "m:{x}:lease", 2, 1_000, "a");
    id_less.lease = None;
    let mut costly = lease(0, "m:{x}:lease", 2, 1_000, "a");
    costly.cost = std::num::NonZeroU64::new(2).unwrap();
    let two_windows = Check {
        windows: check(Algorithm::Lease, 0, "k", &[(2, 1_000), (3, 1_000)], 1).windows,
        ..lease(0, "m:{x}:lease", 2, 1_000, "a")
    };
    let cases = [
        (lease(0, "m:{x}:lease", 2, 1_000, "a b"), "bad lease id for key 1"),
        (lease(0, "m:{x}:lease", 2, 1_000, &"x".repeat(65)), "bad lease id for key 1"),
        (id_less, "bad lease id for key 1"),
        (costly, "a lease key takes cost 1 and one window (key 1)"),
        (two_windows.clone(), "a lease key takes cost 1 and one window (key 1)"),
    ];
    for path in Path::ALL {
        for (c, error) in &cases {
            let reply = encoded_via(&valkey, path, |out, how| {
                encode_call(out, limiter(), how, std::slice::from_ref(c), Some(T))
            });
            assert_eq!(reply.as_error(), Some(format!("ERR tollgate: {error}").as_bytes()), "{path:?} {c:?}");
        }
        let undo = [Adjustment { check: two_windows.clone(), from: 1, to: 0 }];
        let reply = encoded_via(&valkey, path, |out, how| encode_adjust(out, limiter(), how, &undo, T, Some(T)));
        assert_eq!(reply.as_error(), Some(&b"ERR tollgate: a lease key takes one window (key 1)"[..]), "{path:?}");
        let entries = vec![FlushEntry { check: lease(0, "m:{x}:lease", 2, 1_000, "a"), units: 1 }];
        let flush = Flush {
            entries,
            token: "t".into(),
            syncer: "w".into(),
            horizon_ms: 1_000,
            token_key: "m:{x}:lease:flush:w".into(),
        };
        let reply = encoded_via(&valkey, path, |out, how| encode_flush(out, limiter(), how, &flush, Some(T)));
        assert_eq!(reply.as_error(), Some(&b"ERR tollgate: unknown algorithm for key 1"[..]), "{path:?}");
        let good = renew(&lease(0, "m:{x}:lease", 2, 1_000, "a"), 5);
        let bad_id = LeaseOp { id: "a/b".into(), ..good.clone() };
        let reply = encoded_via(&valkey, path, |out, how| {
            encode_lease(out, limiter(), how, &[good.clone(), bad_id.clone()], Some(T))
        });
        assert_eq!(reply.as_error(), Some(&b"ERR tollgate: bad lease id for key 2"[..]), "{path:?}");
        let bad_op = |out: &mut Vec<u8>, how| {
            encode_lease(out, limiter(), how, std::slice::from_ref(&good), Some(T));
            let text = String::from_utf8(std::mem::take(out)).unwrap().replace("$2\r\n+5\r\n", "$2\r\n*5\r\n");
            out.extend_from_slice(text.as_bytes());
        };
        assert_eq!(encoded_via(&valkey, path, bad_op).as_error(), Some(&b"ERR tollgate: bad lease op for key 1"[..]));
        assert_eq!(valkey.int(&["EXISTS", "m:{x}:lease"]), 0, "{path:?}: nothing written");
    }
}

/// A step of a random trace.
#[derive(Debug, Clone)]
enum Op {
    /// A request: the window rules in `mask` and every lease set.
    Decide { mask: u8 },
    /// The same, shaped (on the windows' keys for shaped calls, and a pace
    /// of 1 per 2 s).
    Shaped { mask: u8, max_delay: u64 },
    /// The `back`-th latest admitted request undone (adjust to 0).
    Undo { back: usize },
    /// One call: per op, the `back`-th latest admitted request's lease in
    /// set `set`, ended (`None`) or renewed for 10 ms, its TTL or three.
    Lease(Vec<(usize, usize, Option<u64>)>),
    /// A lease taken by an extra charge (adjust from 0 to 1): unchecked.
    Charge { set: usize },
}

fn ops() -> impl Strategy<Value = Vec<(u64, Op)>> {
    let lease_op = (0..5usize, 0..2usize, prop::option::of(0..3u64));
    let op = prop_oneof![
        4 => (0..16u8).prop_map(|mask| Op::Decide { mask }),
        3 => (1..16u8, prop::sample::select(vec![0u64, 300, 3_000, 60_000])).prop_map(|(mask, max_delay)| Op::Shaped { mask, max_delay }),
        1 => (0..4usize).prop_map(|back| Op::Undo { back }),
        3 => prop::collection::vec(lease_op, 1..=3).prop_map(Op::Lease),
        1 => (0..2usize).prop_map(|set| Op::Charge { set }),
    ];
    let gaps = prop::sample::select(vec![0u64, 0, 1, 20, 49, 300, 999, 1_000, 5_000, 60_000]);
    prop::collection::vec((gaps, op), 1..60)
}

/// An admitted request: when it was recorded (its turn), and what each of
/// its checks recorded.
type Admitted = (u64, Vec<(Check, u64)>);

/// What the traces did, over all cases: requests a full lease set denied
/// (unshaped, shaped), shaped admissions that waited, lease ops on live
/// leases (ends, renewals), undos, keys expired in injected time.
static SEEN: [AtomicU64; 7] = [const { AtomicU64::new(0) }; 7];
const FULL: usize = 0;
const FULL_SHAPED: usize = 1;
const WAITED: usize = 2;
const ENDED: usize = 3;
const RENEWED: usize = 4;
const UNDONE: usize = 5;
const EXPIRED: usize = 6;

fn saw(what: usize, n: u64) {
    SEEN[what].fetch_add(n, Ordering::Relaxed);
}

fn run_trace(valkey: &Valkey, path: Path, sets: &[(u64, u64)], rules: &[Rule], ops: &[(u64, Op)]) {
    static CASE: AtomicU64 = AtomicU64::new(0);
    let case = CASE.fetch_add(1, Ordering::Relaxed);
    let window = |i: usize, r: &Rule, shaped: &str| {
        check(r.algorithm, 1 + i, &format!("t:{{c{case}:r{i}{shaped}}}:{}", r.algorithm.id()), &r.windows, r.cost)
    };
    let (plain, mut shaped): (Vec<Check>, Vec<Check>) =
        rules.iter().enumerate().map(|(i, r)| (window(i, r, ""), window(i, r, "s"))).unzip();
    // Shaped calls also pace through 1 per 2 s, so that they wait.
    let pace = Algorithm::ALL[(case % 4) as usize];
    shaped.insert(0, check(pace, 0, &format!("t:{{c{case}:pace}}:{}", pace.id()), &[(1, 2_000)], 1));
    let lease_of = |set: usize, id: &str| {
        let (limit, ttl) = sets[set % sets.len()];
        lease(0, &format!("t:{{c{case}:l{}}}:lease", set % sets.len()), limit, ttl, id)
    };
    let mut d = Differential::via(valkey, path);
    let mut admitted: Vec<Admitted> = Vec::new();
    let mut now = T;
    for (step, (gap, op)) in ops.iter().enumerate() {
        now += gap;
        let id = format!("c{case}.{step}");
        let request = |windows: &[Check], mask: u8| -> Vec<Check> {
            let chosen = windows.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, c)| c.clone());
            (0..sets.len()).map(|s| lease_of(s, &id)).chain(chosen).collect()
        };
        match op {
            Op::Decide { mask } | Op::Shaped { mask, .. } => {
                let (checks, got) = match op {
                    Op::Shaped { max_delay, .. } => {
                        let checks = request(&shaped, *mask);
                        let got = d.step_shaped(&checks, *max_delay, now);
                        (checks, got)
                    }
                    _ => {
                        let checks = request(&plain, *mask);
                        let got = d.step(&checks, now);
                        (checks, got)
                    }
                };
                let full = got.windows.iter().take(sets.len()).any(|w| w.retry_ms > 0);
                saw(if matches!(op, Op::Shaped { .. }) { FULL_SHAPED } else { FULL }, u64::from(full));
                saw(WAITED, u64::from(got.delay_ms > 0));
                if got.allowed {
                    let recorded = checks.into_iter().map(|c| {
                        let cost = c.cost.get();
                        (c, cost)
                    });
                    admitted.push((now + got.delay_ms, recorded.collect()));
                }
            }
            Op::Undo { back } => {
                let Some(i) = admitted.len().checked_sub(1 + back) else { continue };
                let (at, recorded) = admitted.remove(i);
                let undo: Vec<Adjustment> =
                    recorded.into_iter().map(|(check, from)| Adjustment { check, from, to: 0 }).collect();
                d.adjust(&undo, at, now);
                saw(UNDONE, 1);
            }
            Op::Lease(picks) => {
                let ops: Vec<LeaseOp> = picks
                    .iter()
                    .filter_map(|&(back, set, ttl)| {
                        let (_, recorded) = admitted.get(admitted.len().checked_sub(1 + back)?)?;
                        let leased = recorded.iter().filter(|(c, _)| c.algorithm == Algorithm::Lease);
                        let (c, _) = leased.clone().nth(set % leased.count())?;
                        let ttl_ms = ttl
                            .map(|t| [10, c.windows[0].period_ms.get(), 3 * c.windows[0].period_ms.get()][t as usize]);
                        Some(ttl_ms.map_or_else(|| end(c), |ttl_ms| renew(c, ttl_ms)))
                    })
                    .collect();
                if !ops.is_empty() {
                    let got = d.lease(&ops, now);
                    for (op, live) in ops.iter().zip(got.live) {
                        saw(if op.change == LeaseChange::End { ENDED } else { RENEWED }, u64::from(live));
                    }
                }
            }
            Op::Charge { set } => {
                d.adjust(&[Adjustment { check: lease_of(*set, &id), from: 0, to: 1 }], now, now);
            }
        }
    }
    saw(EXPIRED, d.expired as u64);
}

/// Random traces: one or two lease sets (limit 1 to 4, TTL 50 ms to 5 s)
/// in every request, with windows of any algorithms, shaped or not; undos,
/// ends and renewals (several in one call, a set repeated), charges, and
/// gaps past every expiry.
#[test]
fn random_traces_agree() {
    let valkey = Valkey::start();
    let sets = prop::collection::vec((1..=4u64, prop::sample::select(vec![50u64, 300, 1_000, 5_000])), 1..=2);
    let strategy = (sets, prop::collection::vec(rule(), 1..=3), ops());
    let result = runner(200, file!()).run(&strategy, |(sets, rules, ops)| {
        for path in Path::ALL {
            run_trace(&valkey, path, &sets, &rules, &ops);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let seen: Vec<u64> = SEEN.iter().map(|n| n.load(Ordering::Relaxed)).collect();
    println!(
        "full {}, full shaped {}, waited {}, ended {}, renewed {}, undone {}, expired {}",
        seen[FULL], seen[FULL_SHAPED], seen[WAITED], seen[ENDED], seen[RENEWED], seen[UNDONE], seen[EXPIRED]
    );
    assert!(seen.iter().all(|&n| n >= 50), "the traces cover every case: {seen:?}");
}
