//! One synced rule's buckets as one worker sees them: per window, what the
//! store said remained at the last sync, this worker's share of it, and
//! what the worker admitted since; per bucket, the units not yet sent and
//! those in the flush on the way. Pure, time passed in (the proxy's clock).

use super::HORIZON_INTERVALS;
use crate::config::SyncPolicy;
use crate::limiter::{Check, WindowOutcome};
use std::collections::HashMap;

/// One window of a bucket, as the last sync left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct View {
    /// Units the store said remained (after this worker's flushed units).
    remaining: u64,
    /// When every record the store counted at the sync has left the window
    /// (0: it counted none): from then on the window holds at most what was
    /// recorded since. For the log that is a period after the sync, not its
    /// `reset_ms` (when only the oldest entry leaves).
    empty_at_ms: u64,
    /// This worker's share of `remaining` until the next sync.
    allowance: u64,
    /// Units this worker admitted against `allowance` since.
    used: u64,
}

/// A bucket of the rule.
#[derive(Debug, Clone)]
struct Bucket {
    /// The bucket's check (cost 1: a flush sends units).
    check: Check,
    /// Its windows after the first sync; empty until then (the store
    /// decides its requests meanwhile).
    views: Vec<View>,
    /// Units admitted locally and not yet in a flush.
    pending: u64,
    /// Units in the flush on the way (sent, or to be sent again).
    flushing: u64,
    /// A request came since the bucket's last flush was cut.
    touched: bool,
    /// The bucket's syncers at the last sync, and this worker's place.
    syncers: u64,
    rank: u64,
    last_used_ms: u64,
    /// When the bucket was last in a cut: the store keeps this worker
    /// among its syncers for the horizon after that flush, no longer.
    cut_at_ms: u64,
    /// Without a view (new, or stale): a join to send (a flush of nothing
    /// that makes the store count this worker among the bucket's syncers
    /// at once), and when the bucket is read (half an interval after).
    joining: bool,
    read_at_ms: u64,
}

impl Bucket {
    /// Whether the store may have dropped this worker from the bucket's
    /// syncers by `now_ms` and shared its part among the others: no flush
    /// of the bucket since `horizon_ms` and none on the way.
    fn stale(&self, now_ms: u64, horizon_ms: u64) -> bool {
        !self.views.is_empty() && self.flushing == 0 && now_ms >= self.cut_at_ms.saturating_add(horizon_ms)
    }

    /// `units` admitted here, in every window.
    fn take(&mut self, units: u64) {
        self.pending = self.pending.saturating_add(units);
        for v in &mut self.views {
            v.used = v.used.saturating_add(units);
        }
    }
}

/// One synced rule's buckets on one worker.
#[derive(Debug)]
pub struct Table {
    policy: SyncPolicy,
    buckets: HashMap<String, Bucket>,
    /// When the next flush is due, and when the last was cut.
    due_ms: u64,
    cut_ms: u64,
}

impl Table {
    pub fn new(policy: SyncPolicy) -> Table {
        Table { policy, buckets: HashMap::new(), due_ms: 0, cut_ms: 0 }
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn interval_ms(&self) -> u64 {
        self.policy.interval_ms
    }

    /// Whether a flush is due at `now_ms`.
    pub fn due(&self, now_ms: u64) -> bool {
        now_ms >= self.due_ms && !self.buckets.is_empty()
    }

    /// What the view says of `check` at `now_ms`: its windows pushed on
    /// `out` (`check` 0), and whether the cost fits every one; if it does
    /// and `take`, the cost is taken in the same lookup
    /// ([`Table::give_back`] undoes it). `None`: no view yet (the bucket
    /// is added, to be read at the next flush, when it is new and there is
    /// room); the store decides.
    pub fn see(&mut self, check: &Check, now_ms: u64, take: bool, out: &mut Vec<WindowOutcome>) -> Option<bool> {
        let Some(bucket) = self.buckets.get_mut(&check.key) else {
            if self.buckets.len() < self.policy.max_keys {
                let mut c = check.clone();
                c.check_only = false;
                let bucket = Bucket {
                    check: c,
                    views: Vec::new(),
                    pending: 0,
                    flushing: 0,
                    touched: true,
                    syncers: 1,
                    rank: 0,
                    last_used_ms: now_ms,
                    cut_at_ms: now_ms,
                    joining: false,
                    read_at_ms: 0,
                };
                let bucket = self.buckets.entry(check.key.clone()).or_insert(bucket);
                join(bucket, &mut self.due_ms, self.policy.interval_ms, now_ms);
            }
            return None;
        };
        bucket.touched = true;
        bucket.last_used_ms = now_ms;
        if bucket.stale(now_ms, self.policy.interval_ms.saturating_mul(HORIZON_INTERVALS)) {
            // Joined and read again as a new bucket is; the store decides
            // meanwhile.
            bucket.views.clear();
            join(bucket, &mut self.due_ms, self.policy.interval_ms, now_ms);
            return None;
        }
        if bucket.views.len() != check.windows.len() {
            return None;
        }
        let cost = check.cost.get();
        let until_sync = self.due_ms.saturating_sub(now_ms).max(1);
        let (syncers, rank) = (bucket.syncers, bucket.rank);
        let mut all_fit = true;
        for (j, (v, spec)) in bucket.views.iter_mut().zip(check.windows.iter()).enumerate() {
            if v.empty_at_ms != 0 && now_ms >= v.empty_at_ms {
                // Empty by the store's account: the whole limit, shared
                // as the last sync shared it.
                v.allowance = share(spec.limit.get(), syncers, rank);
                v.remaining = spec.limit.get();
                v.empty_at_ms = 0;
            }
            let fits = v.used.saturating_add(cost) <= v.allowance;
            let left = v.remaining.saturating_sub(v.used);
            let retry_ms = match (fits, left >= cost) {
                (true, _) => 0,
                // Room left elsewhere: this worker's next share.
                (false, true) => until_sync,
                (false, false) => v.empty_at_ms.saturating_sub(now_ms).max(until_sync),
            };
            let outcome = WindowOutcome {
                overridden: false,
                check: 0,
                window: j,
                limit: spec.limit.get(),
                period_ms: spec.period_ms.get(),
                remaining: left.saturating_sub(if fits { cost } else { 0 }),
                reset_ms: v.empty_at_ms.saturating_sub(now_ms),
                retry_ms,
            };
            all_fit &= fits;
            out.push(outcome);
        }
        if all_fit && take {
            bucket.take(cost);
        }
        Some(all_fit)
    }

    /// The buckets to join now (new, or their view stale): the store is to
    /// count this worker among their syncers before any worker that joins
    /// them at about the same time computes its share, so that the shares
    /// are computed with the same number of syncers. Each is read (its share
    /// given) half an interval later, at a cut.
    pub fn joins(&mut self) -> Vec<Check> {
        let joining = self.buckets.values_mut().filter_map(|b| std::mem::take(&mut b.joining).then_some(&b.check));
        joining.cloned().collect()
    }

    /// Gives back `units` taken from `key`'s bucket by [`Table::see`]
    /// for a request another bucket denied.
    pub fn give_back(&mut self, key: &str, units: u64) {
        if let Some(b) = self.buckets.get_mut(key) {
            b.pending = b.pending.saturating_sub(units);
            for v in &mut b.views {
                v.used = v.used.saturating_sub(units);
            }
        }
    }

    /// Cuts the flush due at `now_ms`: every bucket touched since its last
    /// flush (or holding units), with the units it admitted since; the next
    /// one is due an interval later. Buckets idle for their longest period
    /// with nothing to send leave first. Buckets whose last flush is still
    /// on the way are left for the next one, as are buckets without a view
    /// until their read time.
    pub fn cut(&mut self, now_ms: u64) -> Vec<(Check, u64)> {
        self.due_ms = now_ms.saturating_add(self.policy.interval_ms);
        self.cut_ms = now_ms;
        self.buckets.retain(|_, b| {
            let longest = b.check.windows.iter().map(|w| w.period_ms.get()).max().unwrap_or(0);
            b.pending > 0 || b.flushing > 0 || now_ms < b.last_used_ms.saturating_add(longest)
        });
        let mut out = Vec::new();
        for b in self.buckets.values_mut() {
            if b.views.is_empty() && now_ms < b.read_at_ms {
                self.due_ms = self.due_ms.min(b.read_at_ms);
                continue;
            }
            if b.flushing > 0 || !(b.touched || b.pending > 0) {
                continue;
            }
            b.flushing = b.pending;
            b.pending = 0;
            b.touched = false;
            b.cut_at_ms = now_ms;
            out.push((b.check.clone(), b.flushing));
        }
        out
    }

    /// [`Table::synced_since`] of a flush whose queueing is not known.
    #[cfg(test)]
    pub fn synced(&mut self, key: &str, windows: &[(u64, u64)], syncers: u64, rank: u64, now_ms: u64) {
        self.synced_since(key, (windows, syncers, rank), 0, now_ms);
    }

    /// The store answered the flush for `key`, last queued (sent again,
    /// perhaps) at `queued_ms`: `reply` holds `windows` (remaining,
    /// reset_ms per window, after the flushed units) and this worker's place
    /// among the bucket's syncers (`syncers`, `rank`), at `now_ms`. Units
    /// admitted since the flush was cut count against the new share. The
    /// store noted this worker after `queued_ms`: the view lives the horizon
    /// after that, whenever the flush was cut.
    pub fn synced_since(&mut self, key: &str, reply: (&[(u64, u64)], u64, u64), queued_ms: u64, now_ms: u64) {
        let (windows, syncers, rank) = reply;
        let Some(b) = self.buckets.get_mut(key) else { return };
        b.flushing = 0;
        b.cut_at_ms = b.cut_at_ms.max(queued_ms.min(now_ms));
        if windows.len() != b.check.windows.len() {
            return;
        }
        (b.syncers, b.rank) = (syncers.max(1), rank);
        b.views = windows
            .iter()
            .zip(b.check.windows.iter())
            .map(|(&(remaining, reset_ms), spec)| View {
                remaining,
                empty_at_ms: match b.check.algorithm.empty_ms(reset_ms, spec.period_ms.get()) {
                    0 => 0,
                    empty_ms => now_ms.saturating_add(empty_ms),
                },
                allowance: share(remaining, syncers, rank),
                used: b.pending,
            })
            .collect();
    }

    /// The flush for `key` was lost for good (its units never reach the
    /// store: too old to matter, or the bucket's call failed for good).
    pub fn lost(&mut self, key: &str) {
        if let Some(b) = self.buckets.get_mut(key) {
            b.flushing = 0;
        }
    }
}

/// Bucket `b`, without a view, joins at the next flushes and is read half
/// an interval after `now_ms` (the table's next cut `due_ms` no later).
fn join(b: &mut Bucket, due_ms: &mut u64, interval_ms: u64, now_ms: u64) {
    b.joining = true;
    b.read_at_ms = now_ms.saturating_add(interval_ms / 2);
    *due_ms = (*due_ms).min(b.read_at_ms);
}

/// Syncer `rank`'s share of `remaining` among `syncers`: equal shares,
/// the first `remaining % syncers` syncers one more, so the shares add up
/// to `remaining` exactly.
pub fn share(remaining: u64, syncers: u64, rank: u64) -> u64 {
    let n = syncers.max(1);
    remaining / n + u64::from(rank < remaining % n)
}

#[cfg(test)]
mod tests;
