//! `flush` (src/limiter/flush.lua) against its model (`Model::flush`) in a
//! real Valkey, through both invocation paths, with injected time: named
//! cases per algorithm (resent tokens, several syncers, a token outliving
//! nothing but its longest period, charges far past the limits), syncers
//! of different horizons (each stays for its own; a short owed flush never
//! shortens a long entry), malformed arguments and token keys, then random
//! traces mixing decisions with flushes (some owed, with a short horizon)
//! and resends by syncers of different horizons. Model and Lua must agree
//! on every reply, on the log's stored entries and on every TTL written;
//! decisions in between read the flushed state.

use crate::support;

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use support::differential::{check, encoded_via, Differential, Path};
use support::props::{rule, runner, Rule, GAPS};
use support::Valkey;
use tollgate::key::flush_token_key;
use tollgate::limiter::script::{encode_flush, limiter};
use tollgate::limiter::{Algorithm, Check, Flush, FlushEntry};
use tollgate::model::store::ModelStore;
use tollgate::resp::Value;

/// The horizon of a worker's owed flushes (`failure_mode: local`).
const OWED_HORIZON_MS: u64 = 300;

/// A flush of `units[i]` in `checks[i]` by `syncer`, with a token key
/// derived from the first key.
fn flush(checks: &[&Check], units: &[u64], token: &str, syncer: &str, horizon_ms: u64) -> Flush {
    let entries = checks.iter().zip(units).map(|(c, &units)| FlushEntry { check: (*c).clone(), units }).collect();
    let token_key = flush_token_key(&checks[0].key, syncer);
    Flush { entries, token: token.into(), syncer: syncer.into(), horizon_ms, token_key }
}

/// For each algorithm and path: a flush, its resend (nothing recorded), a
/// decision reading it, three syncers with one going stale, a resend after
/// the token expired (counted again), a charge far past every limit, then
/// decisions go on, in agreement.
#[test]
fn named_cases_agree() {
    let valkey = Valkey::start();
    for path in Path::ALL {
        for algorithm in Algorithm::ALL {
            let key = |name: &str| format!("f:{{{path:?}:{algorithm:?}}}:{name}:{}", algorithm.id());
            let a = check(algorithm, 0, &key("a"), &[(6, 1_000), (20, 5_000)], 1);
            let b = check(algorithm, 1, &key("b"), &[(3, 2_000)], 2);
            let mut d = Differential::via(&valkey, path);
            let t = 1_800_000_000_000u64;
            let first = d.flush(&flush(&[&a, &b], &[2, 1], "w1-1", "w1", 3_000), t);
            assert!(first.applied);
            assert!(!d.flush(&flush(&[&a, &b], &[2, 1], "w1-1", "w1", 3_000), t + 10).applied);
            d.step(&[a.clone(), b.clone()], t + 20);
            assert!(d.flush(&flush(&[&a, &b], &[1, 0], "w1-2", "w1", 3_000), t + 30).applied);
            let two = d.flush(&flush(&[&b, &a], &[0, 3], "w2-1", "w2", 3_000), t + 500);
            assert_eq!(two.syncers, vec![(2, 1), (2, 1)]);
            let zero = d.flush(&flush(&[&a], &[1], "w0-1", "w0", 3_000), t + 2_000);
            assert_eq!(zero.syncers, vec![(3, 0)]);
            // w1 flushed last at t + 30: gone from both sets at t + 3_030.
            assert_eq!(
                d.flush(&flush(&[&b, &a], &[0, 0], "w2-2", "w2", 3_000), t + 3_030).syncers,
                vec![(1, 0), (2, 1)]
            );
            // The token of w1's last flush expired after 5 s: a resend counts again.
            assert!(!d.flush(&flush(&[&a, &b], &[1, 0], "w1-2", "w1", 3_000), t + 5_029).applied);
            assert!(d.flush(&flush(&[&a, &b], &[1, 0], "w1-2", "w1", 3_000), t + 5_030).applied);
            // Far past every limit (the log keeps at most its largest limit).
            d.flush(&flush(&[&a, &b], &[1 << 32, 1_000_000], "w2-3", "w2", 3_000), t + 6_000);
            for i in 1..=12 {
                d.step(&[a.clone(), b.clone()], t + 6_000 + 613 * i);
            }
            d.flush(&flush(&[&a, &b], &[0, 0], "w2-4", "w2", 3_000), t + 30_000);
        }
    }
}

/// Syncers of different horizons, per algorithm and path: "l" (3 s) and
/// "s" (300 ms) each stay in the set for their own horizon, whoever
/// flushes; "x"'s owed flush (series `x.owed`, 300 ms) after its synced one
/// (3 s) leaves its entry at 3 s; a longer horizon extends it, and the set
/// lives until its latest member's expiry (the harness checks its PTTL).
#[test]
fn syncers_stay_for_their_own_horizons() {
    let valkey = Valkey::start();
    for path in Path::ALL {
        for algorithm in Algorithm::ALL {
            let key = |name: &str| format!("h:{{{path:?}:{algorithm:?}}}:{name}:{}", algorithm.id());
            let a = check(algorithm, 0, &key("a"), &[(6, 1_000), (20, 5_000)], 1);
            let mut d = Differential::via(&valkey, path);
            let t = 1_800_000_000_000u64;
            assert_eq!(d.flush(&flush(&[&a], &[1], "l1", "l", 3_000), t).syncers, vec![(1, 0)]);
            let short = d.flush(&flush(&[&a], &[1], "s1", "s", 300), t + 1_000);
            assert_eq!(short.syncers, vec![(2, 1)], "{path:?} {algorithm:?}: l counts until t + 3 s");
            assert_eq!(d.flush(&flush(&[&a], &[0], "l2", "l", 3_000), t + 1_299).syncers, vec![(2, 0)]);
            assert_eq!(d.flush(&flush(&[&a], &[0], "l3", "l", 3_000), t + 1_300).syncers, vec![(1, 0)]);

            let b = check(algorithm, 1, &key("b"), &[(4, 2_000)], 1);
            let t = t + 10_000;
            assert_eq!(d.flush(&flush(&[&b, &a], &[1, 1], "x1", "x", 3_000), t).syncers, vec![(1, 0), (1, 0)]);
            let owed = owed_flush(&[&b, &a], &[2, 0], "x2", "x");
            assert_eq!(d.flush(&owed, t + 100).syncers, vec![(1, 0), (1, 0)]);
            let y = d.flush(&flush(&[&b], &[0], "y1", "y", OWED_HORIZON_MS), t + 2_999);
            assert_eq!(y.syncers, vec![(2, 1)], "{path:?} {algorithm:?}: x until t + 3 s, not t + 400");
            assert_eq!(d.flush(&flush(&[&b], &[0], "y2", "y", 300), t + 3_000).syncers, vec![(1, 0)]);
            assert_eq!(d.flush(&flush(&[&b], &[0], "x3", "x", 60_000), t + 3_001).syncers, vec![(2, 0)]);
            assert_eq!(d.flush(&owed_flush(&[&b], &[1], "x4", "x"), t + 3_002).syncers, vec![(2, 0)]);
            assert_eq!(d.flush(&flush(&[&b], &[0], "y3", "y", 300), t + 40_000).syncers, vec![(2, 1)]);
        }
    }
}

/// A syncer set written by a version before `~`-members (bare names scored
/// by their last flush), as during a rollout: such a member counts for the
/// reader's horizon after its score, in both; the harness checks the set's
/// PTTL.
#[test]
fn a_set_of_an_older_version_reads_as_it_did() {
    let valkey = Valkey::start();
    for path in Path::ALL {
        let a = check(Algorithm::FixedWindow, 0, &format!("o:{{{path:?}}}:a:fw"), &[(6, 1_000)], 1);
        let set = tollgate::key::syncers_key(&a.key);
        let mut d = Differential::via(&valkey, path);
        let t = 1_800_000_000_000u64;
        d.put_old_syncer(&set, "old", t);
        assert_eq!(d.flush(&flush(&[&a], &[1], "n1", "new", 3_000), t + 2_999).syncers, vec![(2, 1)], "{path:?}");
        assert_eq!(d.flush(&flush(&[&a], &[0], "n2", "new", 300), t + 3_000).syncers, vec![(1, 0)], "{path:?}");
        d.put_old_syncer(&set, "zz", t + 4_000);
        assert_eq!(d.flush(&flush(&[&a], &[0], "n3", "new", 300), t + 4_299).syncers, vec![(2, 1)], "{path:?}");
        assert_eq!(d.flush(&flush(&[&a], &[0], "n4", "new", 300), t + 4_300).syncers, vec![(1, 0)], "{path:?}");
    }
}

/// A flush of what `syncer` owes (`failure_mode: local`): series
/// `<syncer>.owed`, the short horizon.
fn owed_flush(checks: &[&Check], units: &[u64], token: &str, syncer: &str) -> Flush {
    let f = flush(checks, units, token, syncer, OWED_HORIZON_MS);
    Flush { token_key: flush_token_key(&checks[0].key, &format!("{syncer}.owed")), ..f }
}

/// A token key that is not the first bucket's key, `:flush:`, then a name
/// of 1 to 64 bytes is refused with `ERR tollgate: bad token key` before
/// any write, through both paths, as the model store (`ModelStore`) refuses
/// it: the key it names and the bucket are untouched.
#[test]
fn a_bad_token_key_is_refused_before_any_write() {
    let valkey = Valkey::start();
    let c = check(Algorithm::SlidingLog, 0, "b:{x}:r:log", &[(5, 1_000)], 1);
    let good = flush(&[&c], &[3], "t", "w", 1_000);
    let other = check(Algorithm::FixedWindow, 1, "b:{x}:other:fw", &[(5, 1_000)], 1);
    let bad = [
        "b:{x}:other:fw".to_string(),
        "b:{x}:r:log".to_string(),
        "b:{x}:r:log:syncers".to_string(),
        "b:{x}:r:log:flush:".to_string(),
        flush_token_key(&c.key, &"n".repeat(65)),
        flush_token_key(&other.key, "w"),
        "b:{x}:r:log:flushed:w".to_string(),
    ];
    for path in Path::ALL {
        for token_key in &bad {
            valkey.cmd(&["FLUSHALL"]);
            valkey.cmd(&["SET", token_key, "precious"]);
            let f = Flush { token_key: token_key.clone(), ..good.clone() };
            let encode = |body: &mut Vec<u8>, how| encode_flush(body, limiter(), how, &f, Some(1_000));
            let reply = encoded_via(&valkey, path, encode);
            let expected = Value::Error(b"ERR tollgate: bad token key".to_vec());
            assert_eq!(reply, expected, "{path:?}: {token_key}");
            let mut body = Vec::new();
            encode(&mut body, path.invocations()[1]);
            let (Value::Array(args), _) = tollgate::resp::decode(&body, &Default::default()).unwrap() else { panic!() };
            let mut store = ModelStore::default();
            assert_eq!(store.run(&args, 1_000), expected, "{path:?}: the model store, {token_key}");
            assert_eq!(store.executed, 0);
            assert_eq!(valkey.cmd(&["GET", token_key]), Value::Bulk(b"precious".to_vec()), "{path:?}: {token_key}");
            assert_eq!(valkey.int(&["DBSIZE"]), 1, "{path:?}: {token_key}: nothing else written");
        }
        // The longest name, 64 bytes, is a token key.
        valkey.cmd(&["FLUSHALL"]);
        let longest = Flush { token_key: flush_token_key(&c.key, &"n".repeat(64)), ..good.clone() };
        Differential::via(&valkey, path).flush(&longest, 1_000);
    }
}

/// Malformed arguments are refused with `ERR tollgate: ...` through both
/// paths, and write nothing.
#[test]
fn malformed_flushes_are_refused() {
    let valkey = Valkey::start();
    let c = check(Algorithm::FixedWindow, 0, "m:{x}:r:fw", &[(5, 1_000)], 1);
    let good = flush(&[&c], &[1], "t", "w", 1_000);
    let long = "x".repeat(65);
    let cases: Vec<(Flush, &str)> = vec![
        (Flush { token: String::new(), ..good.clone() }, "ERR tollgate: bad token"),
        (Flush { token: long.clone(), ..good.clone() }, "ERR tollgate: bad token"),
        (Flush { syncer: String::new(), ..good.clone() }, "ERR tollgate: bad syncer"),
        (Flush { syncer: long, ..good.clone() }, "ERR tollgate: bad syncer"),
        (Flush { horizon_ms: 0, ..good.clone() }, "ERR tollgate: bad horizon"),
        (Flush { entries: vec![], ..good.clone() }, "ERR tollgate: KEYS must be"),
    ];
    for path in Path::ALL {
        for (f, message) in &cases {
            let reply = encoded_via(&valkey, path, |body, how| encode_flush(body, limiter(), how, f, Some(1_000)));
            let Value::Error(text) = &reply else { panic!("{path:?}: {f:?} gave {reply:?}") };
            assert!(text.starts_with(message.as_bytes()), "{path:?}: {}", String::from_utf8_lossy(text));
        }
        // An override marker, a count mismatch, units past 2^32, a syncer
        // set not the bucket's.
        let mut body = Vec::new();
        encode_flush(&mut body, limiter(), path.invocations()[1], &good, Some(1_000));
        let (Value::Array(items), _) = tollgate::resp::decode(&body, &Default::default()).unwrap() else { panic!() };
        let args: Vec<Vec<u8>> = items.iter().map(|v| v.as_bytes().unwrap().to_vec()).collect();
        let edits: [(usize, &[u8], &str); 4] = [
            (10, b"@fw", "ERR tollgate: flush reads no overrides"),
            (11, b"4294967297", "ERR tollgate: bad units"),
            (12, b"2", "ERR tollgate: bad window 2"),
            (4, b"m:{x}:other:syncers", "ERR tollgate: bad syncer set for key 1"),
        ];
        for (at, value, message) in edits {
            let mut sent = args.clone();
            sent[at] = value.to_vec();
            let sent: Vec<&[u8]> = sent.iter().map(Vec::as_slice).collect();
            let Value::Error(text) = support::try_command(valkey.port, &sent).unwrap() else { panic!("{path:?}") };
            assert!(text.starts_with(message.as_bytes()), "{path:?}: {}", String::from_utf8_lossy(&text));
        }
    }
    assert_eq!(valkey.int(&["DBSIZE"]), 0, "a refused flush wrote nothing");
}

/// A step: a decision of the rules in `mask`; a flush by syncer `syncer` of
/// the rules in `mask` with units `units` (a fresh token), or of what it
/// owes (`owed`: its `.owed` series, the short horizon); the syncer's last
/// flush sent again.
#[derive(Debug, Clone)]
enum Op {
    Decide(u8),
    Flush { syncer: u8, mask: u8, units: [u8; 4], owed: bool },
    Resend { syncer: u8 },
}

fn ops() -> impl Strategy<Value = Vec<(u64, Op)>> {
    let flush = (0..3u8, 1..16u8, any::<[u8; 4]>(), prop::bool::weighted(0.3));
    let op = prop_oneof![
        2 => (1..16u8).prop_map(Op::Decide),
        3 => flush.prop_map(|(syncer, mask, units, owed)| Op::Flush { syncer, mask, units, owed }),
        1 => (0..3u8).prop_map(|syncer| Op::Resend { syncer }),
    ];
    prop::collection::vec((prop::sample::select(GAPS.to_vec()), op), 1..50)
}

/// Units of a flush: mostly small, sometimes none, sometimes a lot.
fn units_of(choice: u8) -> u64 {
    match choice % 8 {
        0 => 0,
        1..=5 => u64::from(choice % 5),
        6 => 40,
        _ => 100_000,
    }
}

/// `horizons[s]`: syncer `s`'s horizon (its owed flushes: 300 ms).
fn run_trace(valkey: &Valkey, path: Path, rules: &[Rule], horizons: &[u64], start: u64, ops: &[(u64, Op)]) {
    static CASE: AtomicU64 = AtomicU64::new(0);
    let case = CASE.fetch_add(1, Ordering::Relaxed);
    // One hash tag per trace: every flush's keys share the token key's slot.
    let checks: Vec<Check> = rules
        .iter()
        .enumerate()
        .map(|(i, r)| check(r.algorithm, i, &format!("s:{{c{case}}}:r{i}:{}", r.algorithm.id()), &r.windows, r.cost))
        .collect();
    let chosen = |mask: u8| -> Vec<&Check> {
        checks.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, c)| c).collect()
    };
    let mut diff = Differential::via(valkey, path);
    let mut last: BTreeMap<u8, Flush> = BTreeMap::new();
    let mut now = start;
    for (n, (gap, op)) in ops.iter().enumerate() {
        now += gap;
        match op {
            Op::Decide(mask) => {
                let decided: Vec<Check> = chosen(*mask).into_iter().cloned().collect();
                if !decided.is_empty() {
                    diff.step(&decided, now);
                }
            }
            Op::Flush { syncer, mask, units, owed } => {
                let keys = chosen(*mask);
                if keys.is_empty() {
                    continue;
                }
                let units: Vec<u64> = units.iter().map(|&u| units_of(u)).collect();
                let (token, name) = (format!("{syncer}-{n}"), format!("w{syncer}"));
                let f = if *owed {
                    owed_flush(&keys, &units, &token, &name)
                } else {
                    flush(&keys, &units, &token, &name, horizons[usize::from(*syncer)])
                };
                diff.flush(&f, now);
                last.insert(*syncer, f);
            }
            Op::Resend { syncer } => {
                if let Some(f) = last.get(syncer) {
                    diff.flush(f, now);
                }
            }
        }
    }
}

#[test]
fn random_traces_with_flushes_agree() {
    let valkey = Valkey::start();
    let mut runner = runner(100, file!());
    let strategy = (
        prop::collection::vec(rule(), 1..=4),
        prop::collection::vec(prop::sample::select(vec![1u64, 300, 500, 3_000, 60_000]), 3),
        1_600_000_000_000u64..1_900_000_000_000,
        ops(),
    );
    let result = runner.run(&strategy, |(rules, horizons, start, ops)| {
        for path in Path::ALL {
            run_trace(&valkey, path, &rules, &horizons, start, &ops);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
