//! The whole-system simulator (docs/testing.md, "The simulator"): several
//! proxies of several workers, each the real [`crate::worker::Worker`]
//! with its tables and state machines, against the store of the pure
//! models ([`crate::model::store::ModelStore`], which the differential
//! tests keep equal to the Lua), on a virtual clock and a virtual network
//! (delays, silent streams, a paused or restarted store, workers that die).
//!
//! A seed makes a random trace over many periods ([`random`]): rates that
//! change, bursts, workers that go quiet and come back, clients that leave
//! at any moment, exact and synced proxies on the same keys, proxies with
//! different sync intervals. The run ([`world`]) is deterministic; its
//! checks ([`checks`]) hold every bucket to what its algorithm allows in
//! every span, exactly for rules the store decides and within the stated
//! bound for synced ones ([`synced`]), and hold shaping to its turns and
//! `max_waiting`. A failing seed is cut down to a minimal trace
//! ([`shrink`]) and printed.

pub mod bounds;
mod checks;
mod concurrent;
pub mod leases;
mod ledger;
pub mod node;
mod outcome;
pub mod random;
#[cfg(test)]
mod scenarios;
pub mod shrink;
mod synced;
pub mod trace;
mod views;
pub mod world;

use crate::worker::{Decider, LeaseStat, ShapeStat, Stat};
pub use trace::Trace;

/// What a run did, for knowing what the seeds covered.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub runs: u64,
    pub requests: u64,
    pub admitted: u64,
    pub decided_on_worker: u64,
    pub held: u64,
    pub given_back: u64,
    pub flushes: u64,
    pub left: u64,
    /// Runs of a rule with a concurrency limit, requests released with a
    /// lease, and leases as the workers counted them.
    pub lease_runs: u64,
    pub leased: u64,
    pub leases_taken: u64,
    pub leases_released: u64,
    pub leases_renewed: u64,
    pub leases_expired: u64,
    pub leases_failed: u64,
    /// Runs with an override (`"overrides": true`, user u0's limits
    /// raised), and the store's decisions made by an override's limits.
    pub override_runs: u64,
    pub overridden: u64,
    pub violations: u64,
}

impl Tally {
    pub fn add(&mut self, other: &Tally) {
        self.runs += other.runs;
        self.requests += other.requests;
        self.admitted += other.admitted;
        self.decided_on_worker += other.decided_on_worker;
        self.held += other.held;
        self.given_back += other.given_back;
        self.flushes += other.flushes;
        self.left += other.left;
        self.lease_runs += other.lease_runs;
        self.leased += other.leased;
        self.leases_taken += other.leases_taken;
        self.leases_released += other.leases_released;
        self.leases_renewed += other.leases_renewed;
        self.leases_expired += other.leases_expired;
        self.leases_failed += other.leases_failed;
        self.override_runs += other.override_runs;
        self.overridden += other.overridden;
        self.violations += other.violations;
    }
}

/// Runs `trace` and checks it: what went wrong (empty: nothing), and what
/// the run did.
pub fn check(trace: &Trace) -> (Vec<String>, Tally) {
    let run = match world::run(trace) {
        Ok(run) => run,
        Err(e) => return (vec![format!("configuration: {e}")], Tally::default()),
    };
    let violations = checks::check(trace, &run);
    let count = |stat: Stat| run.nodes.iter().map(|n| n.host.count(stat)).sum::<u64>();
    let tally = Tally {
        runs: 1,
        requests: run.requests.len() as u64,
        admitted: run.requests.values().filter(|r| r.released_ms.is_some()).count() as u64,
        decided_on_worker: run.nodes.iter().flat_map(|n| &n.host.judged).filter(|j| j.decider == Decider::Sync).count()
            as u64,
        held: count(Stat::Shape(ShapeStat::Delayed)),
        given_back: count(Stat::Shape(ShapeStat::GivenBack)),
        flushes: count(Stat::SyncFlush),
        left: run.requests.values().filter(|r| r.gone && r.released_ms.is_none() && r.refused.is_none()).count() as u64,
        lease_runs: u64::from(trace.rule.concurrency.is_some()),
        leased: concurrent::leased(&run),
        leases_taken: count(Stat::Lease(LeaseStat::Taken)),
        leases_released: count(Stat::Lease(LeaseStat::Released)),
        leases_renewed: count(Stat::Lease(LeaseStat::Renewed)),
        leases_expired: count(Stat::Lease(LeaseStat::Expired)),
        leases_failed: count(Stat::Lease(LeaseStat::Failed)),
        override_runs: u64::from(trace.rule.overrides.is_some()),
        overridden: overridden(trace, &run),
        violations: violations.len() as u64,
    };
    (violations, tally)
}

/// The store's decisions of `run` (its journal) made by limits other than
/// the configured ones: an override's.
fn overridden(trace: &Trace, run: &outcome::Run) -> u64 {
    let configured: Vec<u64> = trace.rule.windows.iter().map(|w| w.0).collect();
    let by_override = |c: &crate::limiter::Check| {
        c.algorithm != crate::limiter::Algorithm::Lease
            && !c.windows.iter().map(|w| w.limit.get()).eq(configured.iter().copied())
    };
    let decided = |r: &&crate::model::store::Ran| matches!(r, crate::model::store::Ran::Decide { checks, .. } if checks.iter().any(by_override));
    run.store.ran.iter().filter(decided).count() as u64
}

/// Runs the random trace of `seed`: `Err` with its violations and the
/// smallest trace that still fails, described.
pub fn check_seed(seed: u64) -> Result<Tally, String> {
    let trace = random::trace(seed);
    let (violations, tally) = check(&trace);
    if violations.is_empty() {
        return Ok(tally);
    }
    let kind = violations.first().map(|v| shrink::kind(v)).unwrap_or_default();
    let small = shrink::shrink(&trace, &|t| check(t).0.iter().any(|v| shrink::kind(v) == kind));
    let (small_violations, _) = check(&small);
    Err(format!(
        "seed {seed}: {}\nminimal trace ({} of {} inputs):\n{}{}",
        violations.first().cloned().unwrap_or_default(),
        small.inputs.len(),
        trace.inputs.len(),
        shrink::describe(&small),
        small_violations.join("\n")
    ))
}

#[cfg(test)]
mod tests;
