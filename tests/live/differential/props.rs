//! Differential property tests: random traces (times, keys, costs, several
//! windows, several rules of any mix of algorithms) must give identical
//! decisions, remaining, reset and retry in the pure model and in the script
//! in a real Valkey, with injected time. Every trace runs through both
//! invocation paths (the script and the function library), on its own keys.
//!
//! Failing cases are shrunk and their seeds saved next to this file in
//! `props.proptest-regressions` (commit it): saved cases run
//! first on every later run. `PROPTEST_CASES` overrides the case count.

use crate::support;

use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use support::differential::{check, Differential, Path};
use support::props::{algorithm, rule, runner, Rule, GAPS};
use support::Valkey;
use tollgate::config::MAX_LOG_COST;
use tollgate::limiter::{Algorithm, Check};

/// A step: the gap since the previous step and which rules match (bitmask).
fn steps() -> impl Strategy<Value = Vec<(u64, u8)>> {
    prop::collection::vec((prop::sample::select(GAPS.to_vec()), 1..16u8), 1..60)
}

fn run_trace(valkey: &Valkey, rules: &[Rule], start: u64, steps: &[(u64, u8)]) {
    for path in Path::ALL {
        run_trace_via(valkey, path, rules, start, steps);
    }
}

fn run_trace_via(valkey: &Valkey, path: Path, rules: &[Rule], start: u64, steps: &[(u64, u8)]) {
    static CASE: AtomicU64 = AtomicU64::new(0);
    let case = CASE.fetch_add(1, Ordering::Relaxed);
    let checks: Vec<Check> = rules
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let key = format!("p:{{c{case}:r{i}}}:{}", r.algorithm.id());
            check(r.algorithm, i, &key, &r.windows, r.cost)
        })
        .collect();
    let mut diff = Differential::via(valkey, path);
    let mut now = start;
    for &(gap, mask) in steps {
        now += gap;
        let chosen: Vec<Check> =
            checks.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, c)| c.clone()).collect();
        if !chosen.is_empty() {
            diff.step(&chosen, now);
        }
    }
}

fn check_result(result: Result<(), proptest::test_runner::TestError<impl std::fmt::Debug>>) {
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn random_traces_agree() {
    let valkey = Valkey::start();
    let strategy = (prop::collection::vec(rule(), 1..=4), 1_600_000_000_000u64..1_900_000_000_000, steps());
    check_result(runner(160, file!()).run(&strategy, |(rules, start, steps)| {
        run_trace(&valkey, &rules, start, &steps);
        Ok(())
    }));
}

/// Every rule of one algorithm: deeper coverage per algorithm.
#[test]
fn single_algorithm_traces_agree() {
    let valkey = Valkey::start();
    let strategy = (algorithm(), prop::collection::vec(rule(), 1..=3), steps());
    check_result(runner(160, file!()).run(&strategy, |(algorithm, rules, steps)| {
        let rules: Vec<Rule> = rules
            .into_iter()
            .map(|r| Rule {
                algorithm,
                cost: if algorithm == Algorithm::SlidingLog { r.cost.min(MAX_LOG_COST) } else { r.cost },
                ..r
            })
            .collect();
        run_trace(&valkey, &rules, 1_700_000_000_000, &steps);
        Ok(())
    }));
}
