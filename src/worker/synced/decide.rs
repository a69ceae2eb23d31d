//! A request of synced rules decided on the worker: all or nothing, every
//! window of every rule within this worker's share.

use crate::limiter::{Check, Decision};
use crate::worker::host::{Flow, Host, ResponseHeaders, Stat};
use crate::worker::request::record::Decider;
use crate::worker::request::rule::answer_now;
use crate::worker::Worker;

impl Worker {
    /// Decides request `id` from the synced tables at `now_ms` (proxy
    /// clock), if every rule it matches is synced and every bucket has a
    /// view; `None`: the store decides it.
    pub(in crate::worker) fn sync_decide(
        &mut self,
        host: &mut dyn Host,
        id: u32,
        checks: &[Check],
        now_ms: u64,
        headers: &ResponseHeaders,
    ) -> Option<Flow> {
        if !self.synced.all_synced(checks) {
            return None;
        }
        let mut windows = Vec::with_capacity(checks.iter().map(|c| c.windows.len()).sum());
        // Buckets are taken from while every one so far fits; `taken`:
        // how many were.
        let (mut known, mut allowed, mut taken) = (true, true, 0);
        for (i, check) in checks.iter().enumerate() {
            // Every bucket is seen (a new one is added to be read), even
            // after one is found unknown.
            let from = windows.len();
            let take = known && allowed;
            match self.synced.table(check.rule).and_then(|t| t.see(check, now_ms, take, &mut windows)) {
                Some(fits) => allowed &= fits,
                None => known = false,
            }
            if take && known && allowed {
                taken += 1;
            }
            for w in windows.get_mut(from..).unwrap_or_default() {
                w.check = i;
            }
        }
        if !(known && allowed) {
            // What the buckets before the first that did not fit gave, for
            // a request not admitted here: given back.
            for check in checks.iter().take(taken) {
                if let Some(t) = self.synced.table(check.rule) {
                    t.give_back(&check.key, check.cost.get());
                }
            }
        }
        if !known {
            return None;
        }
        let decision = Decision { allowed, now_ms, windows, delay_ms: 0 };
        host.count(Stat::Synced { allowed }, 1);
        let verdict = self.rule_by_worker(host, id, (checks, &decision, Decider::Sync), now_ms, headers);
        Some(answer_now(host, id, verdict))
    }
}
