//! A request of synced rules decided on the worker: all or nothing, every
//! window of every rule within this worker's share.

use super::table::Seen;
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
        let mut windows = Vec::new();
        let mut known = true;
        for (i, check) in checks.iter().enumerate() {
            // Every bucket is seen (a new one is added to be read), even
            // after one is found unknown.
            match self.synced.table(check.rule).map(|t| t.see(check, now_ms)) {
                Some(Seen::Windows(seen)) => windows.extend(seen.into_iter().map(|(w, fits)| (i, w, fits))),
                Some(Seen::Unknown) | None => known = false,
            }
        }
        if !known {
            return None;
        }
        let allowed = windows.iter().all(|(_, _, fits)| *fits);
        if allowed {
            for check in checks {
                if let Some(t) = self.synced.table(check.rule) {
                    t.admit(&check.key, check.cost.get());
                }
            }
        }
        let windows = windows.into_iter().map(|(i, w, _)| crate::limiter::WindowOutcome { check: i, ..w }).collect();
        let decision = Decision { allowed, now_ms, windows, delay_ms: 0 };
        host.count(Stat::Synced { allowed }, 1);
        let verdict = self.rule_by_worker(host, id, (checks, &decision, Decider::Sync), now_ms, headers);
        Some(answer_now(host, id, verdict))
    }
}
