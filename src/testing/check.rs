//! One builder of limiter checks for every test: the unit tests
//! (`crate::testing`, `Check::for_test`) and the integration tests
//! (`tests/support/differential.rs`, which includes this file by path). The including module
//! imports `Algorithm`, `Check` and `Window` (the crate's path differs).
#![allow(dead_code)]

use super::{Algorithm, Check, Window};
use std::num::NonZeroU64;

/// A check of rule index `rule` on bucket `key`: `windows` as
/// `(limit, period_ms)`, each request consuming `cost`. Zero is a test bug.
pub fn check(algorithm: Algorithm, rule: usize, key: &str, windows: &[(u64, u64)], cost: u64) -> Check {
    let nz = |n: u64| NonZeroU64::new(n).unwrap_or_else(|| panic!("a test check with 0 in {key}"));
    Check {
        rule,
        key: key.to_string(),
        windows: windows.iter().map(|&(limit, period)| Window { limit: nz(limit), period_ms: nz(period) }).collect(),
        cost: nz(cost),
        algorithm,
        check_only: false,
        lease: None,
        override_key: None,
    }
}

/// A lease check (a rule's concurrency limit) of rule index `rule` on lease
/// set `key`: at most `limit` live leases, each `ttl_ms` long; the
/// request's lease is `id`.
pub fn lease(rule: usize, key: &str, limit: u64, ttl_ms: u64, id: &str) -> Check {
    let mut c = check(Algorithm::Lease, rule, key, &[(limit, ttl_ms)], 1);
    c.lease = Some(id.into());
    c
}
