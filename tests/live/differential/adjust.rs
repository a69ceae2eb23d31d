//! `adjust` (src/limiter/adjust.lua) against its model (`Model::adjust`) in a
//! real Valkey, through both invocation paths, with injected time: named
//! cases per algorithm (counting on the response: decisions that only check,
//! charged afterwards; reservations settled after other admissions), then
//! random traces that mix decisions (some of rules that only check) with
//! undos, refunds and extra charges of earlier decisions. Model and Lua must
//! agree on every reply and on the log's stored entries.

use crate::support;

use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use support::differential::{check, Differential, Path};
use support::props::{rule, runner, Rule, GAPS};
use support::Valkey;
use tollgate::limiter::{Adjustment, Algorithm, Check};

fn change(c: &Check, from: u64, to: u64) -> Adjustment {
    Adjustment { check: c.clone(), from, to }
}

/// For each algorithm and path: a decision undone at once; a reservation
/// settled higher, then lower; a refund after another admission; an undo
/// in the next window; an extra charge far past the limit; several keys in
/// one call; then decisions go on, in agreement.
#[test]
fn named_cases_agree() {
    let valkey = Valkey::start();
    for path in Path::ALL {
        for algorithm in Algorithm::ALL {
            let key = |name: &str| format!("a:{{{path:?}:{name}}}:{}", algorithm.id());
            let c = check(algorithm, 0, &key("k"), &[(6, 1_000), (9, 1_000), (20, 5_000)], 2);
            let other = check(algorithm, 1, &key("o"), &[(3, 2_000)], 1);
            let mut d = Differential::via(&valkey, path);
            let t = 1_800_000_000_000u64;
            d.step(std::slice::from_ref(&c), t);
            d.adjust(&[change(&c, 2, 0)], t, t + 1);
            d.step(&[c.clone(), other.clone()], t + 5);
            d.adjust(&[change(&c, 2, 5), change(&other, 1, 1)], t + 5, t + 9);
            d.adjust(&[change(&c, 2, 1)], t + 5, t + 12);
            d.step(std::slice::from_ref(&c), t + 400);
            d.adjust(&[change(&c, 2, 0)], t + 5, t + 450);
            d.step(std::slice::from_ref(&c), t + 990);
            d.adjust(&[change(&c, 2, 0)], t + 990, t + 1_010);
            d.adjust(&[change(&other, 0, 1_000_000)], t + 1_010, t + 1_020);
            d.step(&[c.clone(), other.clone()], t + 1_030);
            for i in 1..=12 {
                d.step(std::slice::from_ref(&c), t + 1_030 + 137 * i);
            }
            // The log's entries of one instant stay distinct after a refund.
            d.step(std::slice::from_ref(&c), t + 9_000);
            d.adjust(&[change(&c, 2, 1)], t + 9_000, t + 9_000);
            d.step(std::slice::from_ref(&c), t + 9_000);
            d.step(std::slice::from_ref(&c), t + 9_000);
        }
    }
}

/// Counting on the response, per algorithm and path: logins that only
/// check on the request (`?cost`) and are charged afterwards when they
/// fail (from 0 to 1), successes never charged; a token budget that
/// reserves on the request and settles each reservation with its actual
/// cost (less and more) after other requests were admitted in between.
#[test]
fn response_counting_cases_agree() {
    let valkey = Valkey::start();
    for path in Path::ALL {
        for algorithm in Algorithm::ALL {
            let key = |name: &str| format!("r:{{{path:?}:{name}}}:{}", algorithm.id());
            let mut login = check(algorithm, 0, &key("login"), &[(20, 60_000), (5, 3_000)], 1);
            login.check_only = true;
            let mut d = Differential::via(&valkey, path);
            let t = 1_800_000_000_000u64;
            // Successes (even) and failures (odd), 100 ms apart: the check
            // denies once five failures count in 3 s.
            let mut failures = 0;
            for i in 0..14u64 {
                let at = t + 100 * i;
                let decision = d.step(std::slice::from_ref(&login), at);
                if decision.allowed && i % 2 == 1 {
                    d.adjust(&[change(&login, 0, 1)], at, at + 20);
                    failures += 1;
                }
                // The exact log denies every attempt after the fifth failure.
                if algorithm == Algorithm::SlidingLog {
                    assert_eq!(decision.allowed, i < 10, "{path:?}: attempt {i}");
                }
            }
            assert!(failures >= 5, "{path:?} {algorithm:?}: {failures} failures charged");
            // A request checking two rules: the one counting on the
            // response records nothing, the other its cost.
            let mut other = check(algorithm, 1, &key("plain"), &[(3, 1_000)], 1);
            d.step(&[login.clone(), other.clone()], t + 5_000);
            other.check_only = true;
            d.step(&[login.clone(), other.clone()], t + 5_001);

            // Reserve 30 of 100 per 3 s and 1000 per minute; settle later.
            let tokens = |cost| check(algorithm, 2, &key("tokens"), &[(1_000, 60_000), (100, 3_000)], cost);
            let t = t + 10_000;
            let first = d.step(&[tokens(30)], t);
            d.step(&[tokens(30)], t + 10);
            d.step(&[tokens(30)], t + 20);
            d.step(&[tokens(30)], t + 30); // the fourth does not fit 100
            d.adjust(&[change(&tokens(30), 30, 12)], first.now_ms, t + 40);
            d.step(&[tokens(30)], t + 50);
            d.adjust(&[change(&tokens(30), 30, 55)], t + 10, t + 60);
            d.adjust(&[change(&tokens(30), 30, 0)], t + 20, t + 70);
            d.step(&[tokens(30)], t + 3_100);
            d.adjust(&[change(&tokens(30), 30, 7)], t + 3_100, t + 3_200);
            d.step(&[tokens(90)], t + 3_300);
        }
    }
}

/// A step: a decision of the rules in `mask`, or an adjustment of the
/// `back`-th latest decision to `to_of(from)`.
#[derive(Debug, Clone)]
enum Op {
    Decide(u8),
    Adjust { back: usize, to: u8 },
}

fn ops() -> impl Strategy<Value = Vec<(u64, Op)>> {
    let op = prop_oneof![
        3 => (1..16u8).prop_map(Op::Decide),
        2 => (0..4usize, 0..5u8).prop_map(|(back, to)| Op::Adjust { back, to }),
    ];
    prop::collection::vec((prop::sample::select(GAPS.to_vec()), op), 1..50)
}

/// The `to` of an adjustment from `from`: an undo, a refund of one, the
/// same, an extra unit, three extra.
fn to_of(choice: u8, from: u64) -> u64 {
    match choice {
        0 => 0,
        1 => from.saturating_sub(1),
        2 => from,
        3 => from + 1,
        _ => from + 3,
    }
}

/// `check_only[i]`: rule `i` counts on the response (its decisions only
/// check, and record nothing until adjusted).
fn run_trace(valkey: &Valkey, path: Path, rules: &[Rule], check_only: &[bool], start: u64, ops: &[(u64, Op)]) {
    static CASE: AtomicU64 = AtomicU64::new(0);
    let case = CASE.fetch_add(1, Ordering::Relaxed);
    let checks: Vec<Check> = rules
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut c = check(r.algorithm, i, &format!("q:{{c{case}:r{i}}}:{}", r.algorithm.id()), &r.windows, r.cost);
            c.check_only = check_only.get(i).copied().unwrap_or(false);
            c
        })
        .collect();
    let mut diff = Differential::via(valkey, path);
    // Earlier decisions: when, which checks, what each recorded.
    let mut decided: Vec<(u64, Vec<(Check, u64)>)> = Vec::new();
    let mut now = start;
    for (gap, op) in ops {
        now += gap;
        match op {
            Op::Decide(mask) => {
                let chosen: Vec<Check> =
                    checks.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, c)| c.clone()).collect();
                if chosen.is_empty() {
                    continue;
                }
                let d = diff.step(&chosen, now);
                let recorded =
                    chosen.into_iter().map(|c| (c.clone(), if d.allowed && !c.check_only { c.cost.get() } else { 0 }));
                decided.push((now, recorded.collect()));
            }
            Op::Adjust { back, to } => {
                let Some(i) = decided.len().checked_sub(1 + back) else { continue };
                let (at, recorded) = decided[i].clone();
                let changes: Vec<Adjustment> =
                    recorded.iter().map(|(c, from)| change(c, *from, to_of(*to, *from))).collect();
                diff.adjust(&changes, at, now);
                // Adjusted once: what it recorded is now `to`.
                decided[i].1 = changes.iter().map(|a| (a.check.clone(), a.to)).collect();
            }
        }
    }
}

#[test]
fn random_traces_with_adjustments_agree() {
    let valkey = Valkey::start();
    let mut runner = runner(120, file!());
    let strategy = (
        prop::collection::vec(rule(), 1..=4),
        prop::collection::vec(any::<bool>(), 4),
        1_600_000_000_000u64..1_900_000_000_000,
        ops(),
    );
    let result = runner.run(&strategy, |(rules, check_only, start, ops)| {
        for path in Path::ALL {
            run_trace(&valkey, path, &rules, &check_only, start, &ops);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
