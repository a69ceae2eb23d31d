//! Proptest strategies shared by the differential property tests: rules of
//! any algorithm with small limits (so traces hit them), and gaps between
//! steps; and their runner.

use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, TestRunner};
use tollgate::config::MAX_LOG_COST;
use tollgate::limiter::Algorithm;

pub const PERIODS: [u64; 9] = [1, 7, 50, 250, 1_000, 3_000, 20_000, 60_000, 86_400_000];
pub const GAPS: [u64; 12] = [0, 0, 1, 3, 49, 50, 499, 1_000, 2_999, 20_000, 60_000, 86_400_000];

/// One rule: algorithm, windows `(limit, period)`, cost.
#[derive(Debug, Clone)]
pub struct Rule {
    pub algorithm: Algorithm,
    pub windows: Vec<(u64, u64)>,
    pub cost: u64,
}

pub fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop::sample::select(Algorithm::ALL.to_vec())
}

/// Small limits (so traces hit them), sometimes a large one (exactness of
/// big products: 104249991 × 1 day is just below 2^53).
pub fn limit() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 1..=8u64, 1 => Just(1_000u64), 1 => Just(104_249_991u64)]
}

pub fn rule() -> impl Strategy<Value = Rule> {
    (algorithm(), prop::collection::vec((limit(), prop::sample::select(PERIODS.to_vec())), 1..=3), any::<bool>())
        .prop_flat_map(|(algorithm, windows, cost_is_limit)| {
            let smallest = windows.iter().map(|w| w.0).min().unwrap_or(1);
            // The log stores one entry per unit: the configuration caps its cost.
            let most = if algorithm == Algorithm::SlidingLog { smallest.min(MAX_LOG_COST) } else { smallest };
            let cost = if cost_is_limit { Just(most).boxed() } else { (1..=most.min(3)).boxed() };
            (Just(algorithm), Just(windows), cost)
        })
        .prop_map(|(algorithm, windows, cost)| Rule { algorithm, windows, cost })
}

/// The runner of a property test in `source_file` (its `file!()`): `cases`
/// cases, or `PROPTEST_CASES`; failing cases are shrunk and their seeds
/// saved next to that file as `<its name>.proptest-regressions` (commit it:
/// saved cases run first on every later run).
pub fn runner(cases: u32, source_file: &'static str) -> TestRunner {
    TestRunner::new(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(cases),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        source_file: Some(source_file),
        ..ProptestConfig::default()
    })
}
