//! The pure reference model of the four algorithms: the specification.
//!
//! The script (`prelude.lua`, one Lua file per algorithm, `decide.lua`) must
//! give the same decision, remaining, reset and retry for every trace; the
//! differential tests (`tests/live/differential/`) check that against a real
//! Valkey. [`Model::decide`] is the driver both share:
//!
//! 1. **check**: for every window of every check, `retry_ms` = how long until
//!    the request's cost fits that window (0 = fits now). Nothing changes.
//! 2. **commit**: only if every window of every check fits, record the cost in
//!    every bucket, except those of checks that only check
//!    ([`Check::check_only`]: a rule that counts on the response, charged
//!    later by [`Model::adjust`]). A denied request changes nothing anywhere.
//! 3. **stats**: per window, `remaining` and `reset_ms` after the decision.
//!
//! Each algorithm module states what a bucket stores and its three phases.
//! All arithmetic is on integers (milliseconds, units, and for `gcra` and
//! `sliding_window` products bounded by `limit × period_ms <= 2^53`), so the
//! Lua doubles compute exactly the same numbers.

pub mod fixed_window;
mod flush;
pub mod gcra;
pub mod lease;
pub mod overrides;
pub mod shape;
pub mod sliding_log;
pub mod sliding_window;

#[cfg(test)]
mod tests;

use super::{Adjustment, Algorithm, Check, Decision, LeaseOp, LeaseReply, Window, WindowOutcome, ADJUST_MAX};
use std::collections::BTreeMap;

/// One algorithm's bucket: its three phases (plus an optional housekeeping
/// step before phase 1 that never changes a decision).
pub trait Bucket {
    /// Drops state that no window can count any more (the log's trimming).
    fn prepare(&mut self, _windows: &[Window], _now: u64) {}
    /// Phase 1: ms until `cost` fits window `w` (0 = fits now).
    fn retry(&self, w: &Window, cost: u64, now: u64) -> u64;
    /// Phase 2: records `cost` in every window of the bucket.
    fn commit(&mut self, windows: &[Window], cost: u64, now: u64);
    /// Phase 3: `(remaining, reset_ms)` of window `w`.
    fn stats(&self, w: &Window, now: u64) -> (u64, u64);
    /// `adjust`: takes back up to `units` of what a request decided at `at`
    /// recorded, where that record can still be told apart (see each
    /// algorithm), at `now`.
    fn refund(&mut self, windows: &[Window], at: u64, units: u64, now: u64);
    /// Shaping ([`shape`]): the latest turn recorded in the bucket's
    /// `windows` (0 if none).
    fn last_turn(&self, windows: &[Window]) -> u64;
    /// Shaping: the earliest time `>= t0` at which `cost` fits window `w`,
    /// for `t0` at or after [`Bucket::last_turn`].
    fn earliest(&self, _w: &Window, _cost: u64, t0: u64) -> u64 {
        t0
    }
    /// Shaping's phase 3: `(remaining, reset_ms)` of window `w` at `now`,
    /// whose state may lie in the future.
    fn shaped_stats(&self, w: &Window, now: u64) -> (u64, u64) {
        self.stats(w, now)
    }
    /// Shaping: a commit at `turn`, later than the call's `now`, was made
    /// (for the buckets whose records do not say when they were made).
    fn note_turn(&mut self, _turn: u64) {}
}

/// The counters' shaping stats: `stats` at `from` = the later of `now` and
/// the last turn, `reset_ms` counted from `now`.
pub(crate) fn stats_from(stats: (u64, u64), from: u64, now: u64) -> (u64, u64) {
    let (remaining, reset) = stats;
    (remaining, if reset > 0 { reset + (from - now) } else { 0 })
}

/// Shaping of the counters (fixed and sliding window), whose records do
/// not say when they were made: the bucket keeps its last turn in `last`;
/// a request fits at the earliest time its window allows from `t0`; stats
/// are read at the later of `now` and the last turn. Expands to the four
/// shaping methods of a [`Bucket`] impl.
macro_rules! counters_shaping {
    () => {
        fn last_turn(&self, _windows: &[Window]) -> u64 {
            self.last
        }

        fn earliest(&self, w: &Window, cost: u64, t0: u64) -> u64 {
            t0.saturating_add(self.retry(w, cost, t0))
        }

        fn shaped_stats(&self, w: &Window, now: u64) -> (u64, u64) {
            let from = now.max(self.last);
            super::stats_from(self.stats(w, from), from, now)
        }

        fn note_turn(&mut self, turn: u64) {
            self.last = turn;
        }
    };
}
pub(crate) use counters_shaping;

/// The state of one bucket, whichever algorithm counts it.
#[derive(Debug, Clone)]
enum State {
    Log(sliding_log::Log),
    Gcra(gcra::Gcra),
    SlidingWindow(sliding_window::Counters),
    FixedWindow(fixed_window::Counters),
    Lease(lease::Leases),
}

impl State {
    fn new(algorithm: Algorithm) -> State {
        match algorithm {
            Algorithm::SlidingLog => State::Log(Default::default()),
            Algorithm::Gcra => State::Gcra(Default::default()),
            Algorithm::SlidingWindow => State::SlidingWindow(Default::default()),
            Algorithm::FixedWindow => State::FixedWindow(Default::default()),
            Algorithm::Lease => State::Lease(Default::default()),
        }
    }

    fn algorithm(&self) -> Algorithm {
        match self {
            State::Log(_) => Algorithm::SlidingLog,
            State::Gcra(_) => Algorithm::Gcra,
            State::SlidingWindow(_) => Algorithm::SlidingWindow,
            State::FixedWindow(_) => Algorithm::FixedWindow,
            State::Lease(_) => Algorithm::Lease,
        }
    }

    fn bucket(&self) -> &dyn Bucket {
        match self {
            State::Log(b) => b,
            State::Gcra(b) => b,
            State::SlidingWindow(b) => b,
            State::FixedWindow(b) => b,
            State::Lease(b) => b,
        }
    }

    fn bucket_mut(&mut self) -> &mut dyn Bucket {
        match self {
            State::Log(b) => b,
            State::Gcra(b) => b,
            State::SlidingWindow(b) => b,
            State::FixedWindow(b) => b,
            State::Lease(b) => b,
        }
    }
}

/// Every bucket, by key. Pass checks with distinct keys to one decision (the
/// planner does: keys embed the rule name).
#[derive(Debug, Default, Clone)]
pub struct Model {
    buckets: BTreeMap<String, State>,
    /// Token keys and syncer sets ([`Model::flush`]).
    flushes: flush::Flushes,
    /// Override hashes ([`Model::set_override`]).
    overrides: overrides::Hashes,
}

impl Model {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of log entries stored for `key` (what `ZCARD` would say); 0 for
    /// other algorithms.
    pub fn entries(&self, key: &str) -> usize {
        match self.buckets.get(key) {
            Some(State::Log(log)) => log.len(),
            _ => 0,
        }
    }

    /// The times of the log entries stored for `key`, oldest first (what
    /// `ZRANGE` would list); none for other algorithms.
    pub fn entry_times(&self, key: &str) -> Vec<u64> {
        match self.buckets.get(key) {
            Some(State::Log(log)) => log.times(),
            _ => Vec::new(),
        }
    }

    /// The latest turn recorded in `check`'s bucket (0 if none): an extra
    /// charge ([`Model::adjust`]) at an earlier `now` lands there.
    pub fn last_turn(&self, check: &Check) -> u64 {
        self.bucket(check).map_or(0, |b| b.last_turn(&check.windows))
    }

    /// Forgets `key` (a bucket, a flush's token key or a syncer set), as
    /// Valkey does when the key expires.
    pub fn expire(&mut self, key: &str) {
        self.buckets.remove(key);
        self.flushes.forget(key);
        self.overrides.remove(key);
    }

    fn state_mut(&mut self, check: &Check) -> &mut State {
        let state = self.buckets.entry(check.key.clone()).or_insert_with(|| State::new(check.algorithm));
        if state.algorithm() != check.algorithm {
            *state = State::new(check.algorithm);
        }
        if let State::Lease(leases) = state {
            leases.holder.clone_from(&check.lease);
        }
        state
    }

    /// The leases stored in `key` (live or not yet dropped): `(id, expiry)`.
    pub fn leases(&self, key: &str) -> Vec<(String, u64)> {
        match self.buckets.get(key) {
            Some(State::Lease(leases)) => leases.stored(),
            _ => Vec::new(),
        }
    }

    /// Ends or renews leases at `now_ms`, one op after the other
    /// (`lease.lua`): per op, whether its lease was live.
    pub fn lease(&mut self, ops: &[LeaseOp], now_ms: u64) -> LeaseReply {
        let live = ops
            .iter()
            .map(|op| match self.buckets.get_mut(&op.key) {
                Some(State::Lease(leases)) => leases.change(&op.id, op.change, now_ms),
                _ => false,
            })
            .collect();
        LeaseReply { now_ms, live }
    }

    fn bucket(&self, check: &Check) -> Option<&dyn Bucket> {
        self.buckets.get(&check.key).filter(|s| s.algorithm() == check.algorithm).map(State::bucket)
    }

    /// Changes what requests decided at `at_ms` recorded, at `now_ms`, all
    /// at once (`adjust.lua`), with the limits of `adjustments` (those in
    /// force: [`Model::adjust`]). Per bucket, after the usual housekeeping:
    ///
    /// * an extra charge (`to > from`) is recorded as a commit of `to - from`
    ///   units that checks nothing (the log records at most its largest
    ///   limit), at **c** = the later of `now_ms` and the bucket's last turn
    ///   ([`Bucket::last_turn`]): never before a turn a shaped call already
    ///   gave, so a future window keeps its count and the order of turns is
    ///   kept; when `c > now_ms` the counters note it as their last turn, as
    ///   a shaped commit does. The key's TTL runs from `c` (the script's
    ///   `PEXPIRE`): its longest period after it, never shorter than any
    ///   record still stored needs;
    /// * a refund (`to < from`) takes `from - to` units back from the
    ///   request's own record ([`Bucket::refund`]).
    ///
    /// The reply is the buckets' state afterwards, as a decision that
    /// admits; a bucket charged at `c > now_ms` reports as a shaped call
    /// does ([`Bucket::shaped_stats`]: at now, counting its future turns).
    fn adjust_as(&mut self, adjustments: &[Adjustment], at_ms: u64, now_ms: u64) -> Decision {
        let mut later = Vec::with_capacity(adjustments.len());
        for a in adjustments {
            let windows = &a.check.windows;
            let bucket = self.state_mut(&a.check).bucket_mut();
            bucket.prepare(windows, now_ms);
            let mut at_c = false;
            if a.to > a.from {
                let mut units = (a.to - a.from).min(ADJUST_MAX);
                if a.check.algorithm == Algorithm::SlidingLog {
                    units = units.min(windows.iter().map(|w| w.limit.get()).max().unwrap_or(0));
                }
                let c = now_ms.max(bucket.last_turn(windows));
                bucket.commit(windows, units, c);
                if c > now_ms {
                    bucket.note_turn(c);
                    at_c = true;
                }
            } else if a.from > a.to {
                bucket.refund(windows, at_ms, (a.from - a.to).min(ADJUST_MAX), now_ms);
            }
            later.push(at_c);
        }
        let checks: Vec<&Check> = adjustments.iter().map(|a| &a.check).collect();
        let retries = vec![0; checks.iter().map(|c| c.windows.len()).sum()];
        self.outcome_with(&checks, true, retries, now_ms, &later)
    }

    /// The decision's per-window outcome after phase 2.
    fn outcome(&self, checks: &[&Check], allowed: bool, retries: Vec<u64>, now_ms: u64) -> Decision {
        self.outcome_with(checks, allowed, retries, now_ms, &[])
    }

    /// [`Model::outcome`], with shaping's stats for the checks whose
    /// `shaped` is true (none when it is empty).
    fn outcome_with(
        &self,
        checks: &[&Check],
        allowed: bool,
        retries: Vec<u64>,
        now_ms: u64,
        shaped: &[bool],
    ) -> Decision {
        let mut windows = Vec::with_capacity(retries.len());
        let mut retry = retries.into_iter();
        for (ci, check) in checks.iter().enumerate() {
            let shaped = shaped.get(ci).copied().unwrap_or(false);
            for (wi, w) in check.windows.iter().enumerate() {
                let stats = |b: &dyn Bucket| if shaped { b.shaped_stats(w, now_ms) } else { b.stats(w, now_ms) };
                let (remaining, reset_ms) = self.bucket(check).map_or((w.limit.get(), 0), stats);
                windows.push(WindowOutcome {
                    overridden: false,
                    check: ci,
                    window: wi,
                    limit: w.limit.get(),
                    period_ms: w.period_ms.get(),
                    remaining,
                    reset_ms,
                    retry_ms: retry.next().unwrap_or(0),
                });
            }
        }
        Decision { allowed, now_ms, windows, delay_ms: 0 }
    }

    /// Decides for all `checks` (their limits those in force:
    /// [`Model::decide`]) at once at time `now_ms`; recording nothing when
    /// not `commit` (a dry run, on a copy: housekeeping still happens).
    fn decide_as(&mut self, checks: &[Check], now_ms: u64, commit: bool) -> Decision {
        for check in checks {
            self.state_mut(check).bucket_mut().prepare(&check.windows, now_ms);
        }

        let mut retries: Vec<u64> = Vec::new();
        for check in checks {
            for w in check.windows.iter() {
                retries.push(self.bucket(check).map_or(0, |b| b.retry(w, check.cost.get(), now_ms)));
            }
        }
        let allowed = retries.iter().all(|&r| r == 0);

        if allowed && commit {
            for check in checks.iter().filter(|c| !c.check_only) {
                self.state_mut(check).bucket_mut().commit(&check.windows, check.cost.get(), now_ms);
            }
        }

        let checks: Vec<&Check> = checks.iter().collect();
        self.outcome(&checks, allowed, retries, now_ms)
    }
}

/// `x` as a `u64`, saturating (all model results fit; this only avoids `as`).
pub(crate) fn sat(x: i128) -> u64 {
    u64::try_from(x.max(0)).unwrap_or(u64::MAX)
}

/// `ceil(a / b)` for `a >= 0`, `b > 0`.
pub(crate) fn ceil_div(a: i128, b: i128) -> i128 {
    if b <= 0 {
        return 0;
    }
    (a + b - 1).div_euclid(b)
}
