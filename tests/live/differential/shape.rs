//! Shaping (docs/shaping.md) against its model (`Model::decide_shaped`) in a
//! real Valkey, through both invocation paths, with injected time: the seed's
//! burst per algorithm, several keys of two algorithms in one call, slots
//! given back (`adjust` at the slot), calls that may not wait (`max_delay`
//! 0: a request also matching a rule without `shape`), calls with a floor
//! (`~max_delay:floor`: a request held across slots), unshaped calls of
//! other keys between them, extra charges (`adjust`, `flush`) of keys with
//! slots in the future, and random traces. Model and Lua must agree on
//! every reply (delay included), on the log's stored entries and on every
//! TTL written. A key of a shaping rule only ever gets shaped calls
//! (docs/shaping.md), so no trace sends it an unshaped one.

use crate::support;

use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, TestRunner};
use support::differential::{check, Differential, Path};
use support::Valkey;
use tollgate::key::flush_token_key;
use tollgate::limiter::{Adjustment, Algorithm, Check, Flush, FlushEntry};

const SHAPING: [Algorithm; 4] = Algorithm::ALL;
const T: u64 = 1_800_000_000_000;

fn give_back(c: &Check) -> Adjustment {
    Adjustment { check: c.clone(), from: c.cost.get(), to: 0 }
}

fn change(c: &Check, from: u64, to: u64) -> Adjustment {
    Adjustment { check: c.clone(), from, to }
}

/// A flush of `units` in `c` alone by syncer `w` (a fresh token each time).
fn flush(c: &Check, units: u64, token: &str) -> Flush {
    let entries = vec![FlushEntry { check: c.clone(), units }];
    Flush {
        entries,
        token: token.into(),
        syncer: "w".into(),
        horizon_ms: 3_000,
        token_key: flush_token_key(&c.key, "w"),
    }
}

/// Extra charges of keys given slots in the future land at the bucket's
/// last slot, not at now (src/limiter/model/tests/adjust.rs): after the
/// seed's burst, a charge at now keeps the future window's count, gcra's
/// `at` and the TTL of the slot; the next burst is placed after it. Then a
/// settlement at the slot, a charge of two keys (one with future slots,
/// one without) in one call, a flush of a shaped key, a give-back after a
/// charge, and a charge once every slot has passed (at now again).
#[test]
fn extra_charges_land_at_the_last_turn() {
    let valkey = Valkey::start();
    for path in Path::ALL {
        valkey.cmd(&["FLUSHALL"]);
        for algorithm in SHAPING {
            let key = |name: &str| format!("x:{{{path:?}:{name}}}:{}", algorithm.id());
            let c = check(algorithm, 0, &key("burst"), &[(5, 1_000)], 1);
            let mut d = Differential::via(&valkey, path);
            for _ in 0..10 {
                d.step_shaped(std::slice::from_ref(&c), 2_000, T);
            }
            let charged = d.adjust(&[change(&c, 0, 2)], T + 10, T + 10);
            assert_eq!(charged.windows[0].remaining, 0, "{path:?} {algorithm:?}");
            let second: Vec<u64> =
                (0..5).map(|_| d.step_shaped(std::slice::from_ref(&c), 9_000, T + 20).delay_ms).collect();
            let expected = match algorithm {
                Algorithm::SlidingLog | Algorithm::FixedWindow => vec![1_980; 5],
                Algorithm::Gcra => vec![1_180, 1_380, 1_580, 1_780, 1_980],
                Algorithm::SlidingWindow => vec![2_730, 2_980, 3_230, 3_480, 3_730],
                Algorithm::Lease => panic!("not a shaping algorithm"),
            };
            assert_eq!(second, expected, "{path:?} {algorithm:?}");
            // A settlement of the last request, at its slot, higher.
            d.adjust(&[change(&c, 1, 4)], T + 20 + second[4], T + 30);
            // Two keys in one call: one with slots ahead, one without.
            let a = check(algorithm, 0, &key("a"), &[(3, 500), (8, 4_000)], 2);
            let plain = check(algorithm, 1, &key("plain"), &[(4, 700)], 1);
            for i in 0..6 {
                d.step_shaped(std::slice::from_ref(&a), 3_000, T + 100 + i);
            }
            d.step_shaped(std::slice::from_ref(&plain), 3_000, T + 100);
            assert!(d.model.last_turn(&a) > T + 120, "{path:?} {algorithm:?}: turns ahead");
            d.adjust(&[change(&a, 0, 3), change(&plain, 1, 3)], T + 100, T + 110);
            d.flush(&flush(&a, 2, "f1"), T + 120);
            d.flush(&flush(&a, 0, "f2"), T + 130);
            let mut last = T;
            for i in 0..4 {
                let now = T + 140 + 11 * i;
                let got = d.step_shaped(std::slice::from_ref(&a), 6_000, now);
                if got.allowed {
                    last = now + got.delay_ms;
                }
            }
            // The last slot given back after a charge landed there too.
            d.adjust(&[change(&a, 0, 1)], T + 200, T + 200);
            d.adjust(&[give_back(&a)], last, T + 210);
            d.step_shaped(std::slice::from_ref(&a), 6_000, T + 220);
            // Every slot passed: charges at now again.
            d.adjust(&[change(&a, 0, 2), change(&c, 0, 1)], T + 60_000, T + 60_000);
            d.flush(&flush(&c, 1, "f3"), T + 60_010);
            d.step_shaped(std::slice::from_ref(&c), 2_000, T + 60_020);
        }
    }
}

/// The seed's burst (10 against 5/s, max_delay 2 s), a slot given back, the
/// next request's shorter wait, rejections beyond the delay, then unshaped
/// and shaped calls of two keys and both algorithms together.
#[test]
fn named_cases_agree() {
    let valkey = Valkey::start();
    for path in Path::ALL {
        valkey.cmd(&["FLUSHALL"]);
        for algorithm in SHAPING {
            let key = |name: &str| format!("s:{{{path:?}:{name}}}:{}", algorithm.id());
            let c = check(algorithm, 0, &key("burst"), &[(5, 1_000)], 1);
            let mut d = Differential::via(&valkey, path);
            let delays: Vec<u64> =
                (0..10).map(|_| d.step_shaped(std::slice::from_ref(&c), 2_000, T).delay_ms).collect();
            let expected = match algorithm {
                Algorithm::SlidingLog | Algorithm::FixedWindow => {
                    vec![0, 0, 0, 0, 0, 1_000, 1_000, 1_000, 1_000, 1_000]
                }
                Algorithm::Gcra => vec![0, 0, 0, 0, 0, 200, 400, 600, 800, 1_000],
                Algorithm::SlidingWindow => vec![0, 0, 0, 0, 0, 1_200, 1_400, 1_600, 1_800, 2_000],
                Algorithm::Lease => panic!("not a shaping algorithm"),
            };
            assert_eq!(delays, expected, "{path:?} {algorithm:?}");
            // The last one's client goes away: its slot comes back.
            let last = T + delays[9];
            d.adjust(&[give_back(&c)], last, T + 10);
            let next = d.step_shaped(std::slice::from_ref(&c), 2_000, T + 20);
            assert!(next.allowed && next.delay_ms + 20 <= delays[9], "{path:?} {algorithm:?}: {next:?}");
            for i in 0..12 {
                d.step_shaped(std::slice::from_ref(&c), 2_000, T + 30 + 7 * i);
            }
            // Two keys, the other algorithm too, some unshaped calls between.
            let other = Algorithm::ALL[(algorithm as usize + 1) % 4];
            let a = check(algorithm, 0, &key("a"), &[(3, 500), (8, 4_000)], 2);
            let b = check(other, 1, &format!("s:{{{path:?}:b}}:{}", other.id()), &[(2, 700)], 1);
            let plain = check(other, 2, &format!("s:{{{path:?}:plain}}:{}", other.id()), &[(2, 700)], 1);
            for i in 0..30 {
                let now = T + 5_000 + 97 * i;
                if i % 7 == 3 {
                    d.step_shaped(std::slice::from_ref(&b), 0, now);
                    d.step(std::slice::from_ref(&plain), now);
                } else {
                    d.step_shaped(&[a.clone(), b.clone()], 1_500, now);
                }
            }
            let mut only = check(algorithm, 0, &key("only"), &[(2, 1_000)], 1);
            only.check_only = true;
            for i in 0..5 {
                d.step_shaped(&[only.clone(), a.clone()], 3_000, T + 20_000 + i);
            }
        }
    }
}

/// Floors: the slot at the floor when it fits there, behind the last slot
/// or later when full, denied past `max_delay`; on one key and on two.
#[test]
fn floored_calls_agree() {
    let valkey = Valkey::start();
    for path in Path::ALL {
        valkey.cmd(&["FLUSHALL"]);
        for algorithm in SHAPING {
            let key = |name: &str| format!("f:{{{path:?}:{name}}}:{}", algorithm.id());
            let c = check(algorithm, 0, &key("k"), &[(3, 1_000)], 1);
            let other = Algorithm::ALL[(algorithm as usize + 1) % 4];
            let o = check(other, 1, &format!("f:{{{path:?}:k}}:o{}", other.id()), &[(2, 600), (5, 3_000)], 1);
            let mut d = Differential::via(&valkey, path);
            for (i, floor) in [250u64, 0, 100, 7_000, 900, 900, 900, 900, 40, 2_500].into_iter().enumerate() {
                let now = T + 13 * i as u64;
                let got = d.step_floored(std::slice::from_ref(&c), 4_000, floor, now);
                assert!(!got.allowed || got.delay_ms >= floor, "{path:?} {algorithm:?}: {got:?}");
                d.step_floored(&[c.clone(), o.clone()], 3_000, floor / 2, now + 1);
            }
        }
    }
}

/// Random traces: bursts of one or two keys at random gaps, shaped with a
/// random max_delay (0: may not wait), sometimes a slot given back, and
/// extra charges: at now (a rule counted on the response), a settlement of
/// the last slot above its cost, a flush.
#[test]
fn random_traces_agree() {
    let valkey = Valkey::start();
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 96,
        // Seeds of failing cases: next to this file, `<its name>.proptest-regressions`.
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        source_file: Some(file!()),
        ..ProptestConfig::default()
    });
    let windows = prop::collection::vec((1..=6u64, prop::sample::select(vec![50u64, 300, 1_000, 4_000])), 1..=2);
    let step = (
        0..8u8,
        prop::sample::select(vec![0u64, 0, 1, 20, 150, 900]),
        prop::sample::select(vec![0u64, 100, 800, 3_000]),
        prop::sample::select(vec![0u64, 1, 60, 400, 1_200, 5_000]),
    );
    let case = (prop::sample::select(SHAPING.to_vec()), windows, 1..=2u64, prop::collection::vec(step, 1..60));
    let run = std::sync::atomic::AtomicU64::new(0);
    let delayed = std::sync::atomic::AtomicU64::new(0);
    let floored = std::sync::atomic::AtomicU64::new(0);
    let charged_later = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&case, |(algorithm, windows, cost, steps)| {
            let n = run.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = Path::ALL[usize::try_from(n % 2).unwrap()];
            let smallest = windows.iter().map(|w| w.0).min().unwrap_or(1);
            let c = check(algorithm, 0, &format!("p:{{{n}}}:{}", algorithm.id()), &windows, cost.min(smallest));
            let other = Algorithm::ALL[usize::try_from(n % 4).unwrap()];
            let o = check(other, 1, &format!("p:{{{n}o}}:{}", other.id()), &[(3, 1_000)], 1);
            let mut d = Differential::via(&valkey, path);
            let mut now = T;
            let mut last_turn = None;
            for (i, (kind, gap, max_delay, floor)) in steps.into_iter().enumerate() {
                now += gap;
                if kind >= 5 && d.model.last_turn(&c) > now {
                    charged_later.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                match kind {
                    5 => {
                        d.adjust(&[change(&c, 0, 1 + max_delay % 3), change(&o, 0, 1)], now, now);
                    }
                    6 => {
                        if let Some(turn) = last_turn {
                            d.adjust(&[change(&c, c.cost.get(), c.cost.get() + 2)], turn, now);
                        }
                    }
                    7 => {
                        d.flush(&flush(&c, 1 + floor % 4, &format!("t{i}")), now);
                    }
                    0 => {
                        d.step_shaped(&[c.clone(), o.clone()], 0, now);
                    }
                    1 => {
                        if let Some(turn) = last_turn.take() {
                            d.adjust(&[give_back(&c)], turn, now);
                        }
                    }
                    2 => {
                        d.step_shaped(&[c.clone(), o.clone()], max_delay, now);
                    }
                    3 => {
                        // A floor (a request held across slots): one key or both.
                        let got =
                            d.step_floored(&[c.clone(), o.clone()][..1 + (n % 2) as usize], max_delay, floor, now);
                        if got.allowed && n.is_multiple_of(2) {
                            last_turn = Some(now + got.delay_ms);
                        }
                        if got.delay_ms > 0 {
                            floored.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    _ => {
                        let got = d.step_shaped(std::slice::from_ref(&c), max_delay, now);
                        if got.allowed {
                            last_turn = Some(now + got.delay_ms);
                        }
                        if got.delay_ms > 0 {
                            delayed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    assert!(delayed.into_inner() > 50, "the traces delay requests");
    assert!(floored.into_inner() > 50, "the traces place requests at floors");
    assert!(charged_later.into_inner() > 50, "the traces charge keys with slots ahead");
}
