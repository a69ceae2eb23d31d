//! Differential tests: one behaviour suite run against the pure reference
//! model (`limiter::model`) and against `sliding_log.lua` in a real Valkey,
//! with injected time. Every decision, remaining, reset and retry must agree.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod support;

use std::num::NonZeroU64;
use support::{try_command, Valkey};
use tollgate::limiter::model::SlidingLog;
use tollgate::limiter::script::{sliding_log, Invocation};
use tollgate::limiter::{Check, Decision, Window};
use tollgate::resp::Value;
use tollgate::store::{self, Outcome};

/// The script under test, called directly (EVALSHA, EVAL on NOSCRIPT).
fn store_decide(valkey: &Valkey, checks: &[Check], now_ms: u64) -> Decision {
    for how in [Invocation::EvalSha, Invocation::Eval] {
        let body = store::pipeline(sliding_log(), how, checks, Some(now_ms));
        let reply = raw_call(valkey.port, &body);
        match store::interpret_reply(&reply, checks) {
            Outcome::Decided(d) => return d,
            Outcome::NoScript => continue,
            Outcome::Failed(f) => panic!("store failed: {f}"),
        }
    }
    panic!("NOSCRIPT after EVAL")
}

fn raw_call(port: u16, body: &[u8]) -> Value {
    // Re-split the encoded command into arguments for the test client.
    let (Value::Array(items), _) = tollgate::resp::decode(body, &Default::default()).unwrap() else {
        panic!("pipeline is not one command")
    };
    let args: Vec<&[u8]> = items.iter().map(|v| v.as_bytes().unwrap()).collect();
    try_command(port, &args).unwrap()
}

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap()
}

fn check(rule: usize, key: &str, windows: &[(u64, u64)], cost: u64) -> Check {
    Check {
        rule,
        key: key.to_string(),
        windows: windows.iter().map(|&(l, p)| Window { limit: nz(l), period_ms: nz(p) }).collect(),
        cost: nz(cost),
    }
}

/// Runs `steps` (time, checks) through both and asserts identical decisions.
fn assert_same(valkey: &Valkey, steps: &[(u64, Vec<Check>)]) {
    let mut model = SlidingLog::new();
    for (i, (now, checks)) in steps.iter().enumerate() {
        let expected = model.decide(checks, *now);
        let got = store_decide(valkey, checks, *now);
        assert_eq!(got, expected, "step {i} at {now} ms: store and model disagree");
        for c in checks {
            let zcard = valkey.int(&["ZCARD", &c.key]);
            assert_eq!(zcard as usize, model.entries(&c.key), "step {i}: entries of {}", c.key);
        }
    }
}

/// A small deterministic PRNG (xorshift), so failures reproduce from the seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn seed_scenario_agrees() {
    let valkey = Valkey::start();
    let rule = check(0, "t:{seed:u}:log", &[(20, 60_000), (5, 3_000)], 1);
    let t0 = 1_700_000_000_000;
    let mut steps = Vec::new();
    for burst in 0..22u64 {
        for call in 0..8 {
            steps.push((t0 + burst * 3_005 + call, vec![rule.clone()]));
        }
    }
    assert_same(&valkey, &steps);
}

#[test]
fn named_edge_cases_agree() {
    let valkey = Valkey::start();
    let t0 = 1_000_000;
    // A request exactly at a window boundary; cost equal to the limit.
    let edge = check(0, "t:{edge}:log", &[(3, 1_000)], 3);
    // 1 ms periods and 1 day periods in one rule.
    let extremes = check(1, "t:{extremes}:log", &[(1_000, 86_400_000), (1, 1)], 1);
    let steps = vec![
        (t0, vec![edge.clone()]),
        (t0 + 999, vec![edge.clone()]),
        (t0 + 1_000, vec![edge.clone()]),
        (t0, vec![extremes.clone()]),
        (t0, vec![extremes.clone()]),
        (t0 + 1, vec![extremes.clone()]),
        // A very long gap: everything has expired.
        (t0 + 30 * 86_400_000, vec![edge.clone(), extremes.clone()]),
    ];
    assert_same(&valkey, &steps);
}

#[test]
fn random_traces_agree() {
    let valkey = Valkey::start();
    for seed in 1..=12u64 {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ seed);
        let keys = ["a", "b", "c"];
        let mut rules: Vec<Check> = Vec::new();
        for (r, key) in keys.iter().enumerate() {
            let n = 1 + rng.below(3);
            let mut windows = Vec::new();
            for w in 0..n {
                let period = [1, 50, 250, 1_000, 3_000, 60_000][rng.below(6) as usize] * (w + 1);
                windows.push((1 + rng.below(6), period));
            }
            windows.sort_by_key(|w| w.1);
            windows.dedup_by_key(|w| w.1);
            let key = format!("t:{{s{seed}:{key}}}:log");
            rules.push(check(r, &key, &windows, 1 + rng.below(2)));
        }
        let mut now = 1_600_000_000_000 + rng.below(1_000_000);
        let mut steps = Vec::new();
        for _ in 0..150 {
            now += [0, 1, 7, 120, 900, 2_500, 70_000][rng.below(7) as usize];
            let chosen: Vec<Check> = rules.iter().filter(|_| rng.below(2) == 0).cloned().collect();
            if !chosen.is_empty() {
                steps.push((now, chosen));
            }
        }
        assert_same(&valkey, &steps);
    }
}

#[test]
fn rejected_requests_change_nothing_in_any_key() {
    let valkey = Valkey::start();
    let open = check(0, "t:{open}:log", &[(100, 60_000)], 1);
    let full = check(1, "t:{full}:log", &[(1, 60_000)], 1);
    let t = 5_000_000;
    assert!(store_decide(&valkey, &[open.clone(), full.clone()], t).allowed);
    let before = valkey.cmd(&["ZRANGE", "t:{open}:log", "0", "-1", "WITHSCORES"]);
    for i in 1..=10 {
        let d = store_decide(&valkey, &[open.clone(), full.clone()], t + i);
        assert!(!d.allowed);
        assert_eq!(d.denied_by().map(|w| w.check).collect::<Vec<_>>(), vec![1]);
    }
    assert_eq!(valkey.cmd(&["ZRANGE", "t:{open}:log", "0", "-1", "WITHSCORES"]), before);
    assert_eq!(valkey.int(&["ZCARD", "t:{full}:log"]), 1);
}

#[test]
fn keys_expire_after_their_longest_period() {
    let valkey = Valkey::start();
    let c = check(0, "t:{ttl}:log", &[(5, 3_000), (20, 60_000)], 1);
    // With the server's clock (no injected now) the TTL is the longest period.
    let body = store::pipeline(sliding_log(), Invocation::Eval, std::slice::from_ref(&c), None);
    let reply = raw_call(valkey.port, &body);
    assert!(matches!(store::interpret_reply(&reply, &[c]), Outcome::Decided(d) if d.allowed));
    let ttl = valkey.int(&["PTTL", "t:{ttl}:log"]);
    assert!((59_000..=60_000).contains(&ttl), "PTTL {ttl}");
}
