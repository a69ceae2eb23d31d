//! A request of synced rules decided on the worker: all or nothing, every
//! window of every rule within this worker's share.

use crate::limiter::{Check, Decision};
use crate::worker::host::{Host, Stat};
use crate::worker::synced::Syncing;

impl Syncing {
    /// Decides a request of `checks` from the synced tables at `now_ms`
    /// (proxy clock), if every rule it matches is synced and every bucket
    /// has a view; `None`: the store decides it.
    pub(in crate::worker) fn decide(&mut self, host: &mut dyn Host, checks: &[Check], now_ms: u64) -> Option<Decision> {
        if !self.all_synced(checks) {
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
            match self.table(check.rule).and_then(|t| t.see(check, now_ms, take, &mut windows)) {
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
                if let Some(t) = self.table(check.rule) {
                    t.give_back(&check.key, check.cost.get());
                }
            }
        }
        if !known {
            return None;
        }
        host.count(Stat::Synced { allowed }, 1);
        Some(Decision { allowed, now_ms, windows, delay_ms: 0 })
    }
}
