//! The local limiter of `failure_mode: local`: while the store cannot
//! answer, each worker decides by itself, all or nothing across every window
//! of every matching rule, as the store would.
//!
//! Per bucket and window, a worker admits at most its *allowance* per
//! period: a share of the window's limit (`local_limiter.share`, rounded up,
//! at least 1). For a bucket the store answered recently, the allowance is
//! also at most what the store said remained: a bucket the store found full
//! stays denied. What a worker admitted by itself counts for the whole
//! period, through any number of outages. So every window admits at most
//! `workers × proxies × allowance` per period beyond what the store admitted
//! (docs/reliability.md).
//!
//! A concurrency limit's lease set (a check of [`Algorithm::Lease`]) is a
//! count of the requests this worker admitted by itself and that are not
//! gone yet, at most its share of the limit: it never resets with a
//! period, and [`LocalLimiter::release`] gives each back. So at most
//! `workers × proxies × share` are in flight beyond the store's leases.
//!
//! Bounded: at most `local_limiter.max_keys` buckets per worker, the least
//! recently used evicted first. Pure, time passed in.

use crate::config::LocalLimiterConfig;
use crate::limiter::{Algorithm, Check, Decision, WindowOutcome};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;

/// One window of a bucket, as this worker counts it.
#[derive(Debug, Clone, Copy)]
struct Window {
    /// Units this worker may admit until `until_ms`.
    allowance: u64,
    used: u64,
    until_ms: u64,
}

#[derive(Debug)]
struct Bucket {
    windows: Vec<Window>,
    seq: u64,
}

/// The local limiter of one worker.
#[derive(Debug, Default)]
pub struct LocalLimiter {
    share_ppm: u64,
    capacity: usize,
    buckets: HashMap<String, Bucket>,
    order: BTreeMap<u64, String>,
    seq: u64,
    /// The leases this worker admitted by itself and holds: `(key, id)`.
    leases: HashSet<(String, Rc<str>)>,
}

impl LocalLimiter {
    pub fn new(config: &LocalLimiterConfig) -> LocalLimiter {
        LocalLimiter { share_ppm: u64::from(config.share_ppm), capacity: config.max_keys, ..LocalLimiter::default() }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// A window's allowance per period: its share of `limit`, rounded up.
    fn share(&self, limit: u64) -> u64 {
        limit.saturating_mul(self.share_ppm).div_ceil(1_000_000).max(1)
    }

    /// The store decided `checks` at `now_ms`: each window's allowance is
    /// also at most what the store said remained, until every record the
    /// store counted has left the window (its reset; for the log, whose
    /// reset is when only its oldest entry leaves, a period). What this
    /// worker admitted by itself in the current period still counts: the
    /// store never saw it.
    pub fn learn(&mut self, checks: &[Check], decision: &Decision, now_ms: u64) {
        for (i, check) in checks.iter().enumerate() {
            let old = self.take(&check.key).unwrap_or_default();
            let windows = decision
                .windows
                .iter()
                .filter(|w| w.check == i)
                .enumerate()
                .map(|(j, w)| {
                    let allowance = w.remaining.min(self.share(w.limit));
                    let empty_ms = check.algorithm.empty_ms(w.reset_ms, w.period_ms);
                    if check.algorithm == Algorithm::Lease {
                        // What the store holds is its own; this worker's
                        // count is of what it admitted by itself.
                        let used = old.get(j).map_or(0, |o| o.used);
                        return Window { allowance: self.share(w.limit), used, until_ms: u64::MAX };
                    }
                    match old.get(j) {
                        Some(o) if now_ms < o.until_ms => Window { allowance, ..*o },
                        _ => Window { allowance, used: 0, until_ms: now_ms.saturating_add(empty_ms.max(1)) },
                    }
                })
                .collect();
            self.put(&check.key, windows);
        }
    }

    /// Decides `checks` at `now_ms` by this worker's counts: admitted (and
    /// counted in every window of every check, except checks that only
    /// check) only if every window has room for the check's cost.
    pub fn decide(&mut self, checks: &[Check], now_ms: u64) -> Decision {
        let mut windows = Vec::new();
        let mut allowed = true;
        let mut states = Vec::with_capacity(checks.len());
        for check in checks {
            let mut state = self.take(&check.key).unwrap_or_default();
            state.resize(check.windows.len(), Window { allowance: 0, used: 0, until_ms: 0 });
            let lease = check.algorithm == Algorithm::Lease;
            for (w, spec) in state.iter_mut().zip(check.windows.iter()) {
                if now_ms >= w.until_ms {
                    // A lease count never resets with a period.
                    let until_ms = if lease { u64::MAX } else { now_ms.saturating_add(spec.period_ms.get()) };
                    *w = Window { allowance: self.share(spec.limit.get()), used: 0, until_ms };
                }
                if w.used.saturating_add(check.cost.get()) > w.allowance {
                    allowed = false;
                }
            }
            states.push(state);
        }
        for ((i, check), mut state) in checks.iter().enumerate().zip(states) {
            let lease = check.algorithm == Algorithm::Lease;
            if allowed && lease {
                if let Some(id) = &check.lease {
                    self.leases.insert((check.key.clone(), Rc::clone(id)));
                }
            }
            for (j, (w, spec)) in state.iter_mut().zip(check.windows.iter()).enumerate() {
                let fits = w.used.saturating_add(check.cost.get()) <= w.allowance;
                if allowed && !check.check_only {
                    w.used = w.used.saturating_add(check.cost.get());
                }
                // A lease frees when a request ends: its TTL bounds the wait.
                let wait = if lease { spec.period_ms.get() } else { w.until_ms.saturating_sub(now_ms).max(1) };
                windows.push(WindowOutcome {
                    overridden: false,
                    check: i,
                    window: j,
                    limit: spec.limit.get(),
                    period_ms: spec.period_ms.get(),
                    remaining: w.allowance.saturating_sub(w.used),
                    reset_ms: wait,
                    retry_ms: if fits { 0 } else { wait },
                });
            }
            self.put(&check.key, state);
        }
        Decision { allowed, now_ms, windows, delay_ms: 0 }
    }

    /// A request's record in `check`'s bucket changes from `from` to `to`
    /// units at `now_ms` (counting on the response): what this worker
    /// counts in the current periods moves with it.
    pub fn settle(&mut self, check: &Check, from: u64, to: u64, now_ms: u64) {
        if from == to {
            return;
        }
        let mut state = self.take(&check.key).unwrap_or_default();
        state.resize(check.windows.len(), Window { allowance: 0, used: 0, until_ms: 0 });
        for (w, spec) in state.iter_mut().zip(check.windows.iter()) {
            if now_ms >= w.until_ms {
                let until_ms = now_ms.saturating_add(spec.period_ms.get());
                *w = Window { allowance: self.share(spec.limit.get()), used: 0, until_ms };
            }
            w.used = w.used.saturating_add(to).saturating_sub(from);
        }
        self.put(&check.key, state);
    }

    /// Lease check `check`'s request is gone: if this worker admitted it
    /// by itself, its lease is given back (true).
    pub fn release(&mut self, check: &Check) -> bool {
        let Some(id) = &check.lease else { return false };
        if !self.leases.remove(&(check.key.clone(), Rc::clone(id))) {
            return false;
        }
        if let Some(bucket) = self.buckets.get_mut(&check.key) {
            for w in &mut bucket.windows {
                w.used = w.used.saturating_sub(1);
            }
        }
        true
    }

    fn take(&mut self, key: &str) -> Option<Vec<Window>> {
        let bucket = self.buckets.remove(key)?;
        self.order.remove(&bucket.seq);
        Some(bucket.windows)
    }

    fn put(&mut self, key: &str, windows: Vec<Window>) {
        if let Some(old) = self.buckets.remove(key) {
            self.order.remove(&old.seq);
        }
        while self.buckets.len() >= self.capacity.max(1) {
            let Some((_, oldest)) = self.order.pop_first() else { break };
            self.buckets.remove(&oldest);
        }
        self.seq += 1;
        self.order.insert(self.seq, key.to_owned());
        self.buckets.insert(key.to_owned(), Bucket { windows, seq: self.seq });
    }
}

#[cfg(test)]
mod tests;
