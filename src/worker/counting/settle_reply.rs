//! What follows a settlement's call ([`crate::worker::counting::settle`]): its reply or its
//! failure, counted; and the held response, resumed once every call of its
//! settlement replied (with the buckets' state the replies report), at the
//! first failure, or when its time is up (with the admission's headers
//! corrected by its own change).

use crate::answer::response::{allowed_headers, policy_names};
use crate::config::FailureMode;
use crate::limiter::{Check, Decision};
use crate::store::Outcome;
use crate::worker::calls::{Call, Pending};
use crate::worker::counting::owed::{corrected, with_delay, Owed, Stage};
use crate::worker::host::{CountStat, Host, Stat};
use crate::worker::request::verdict::Verdict;
use crate::worker::Worker;

impl Worker {
    /// A settlement the store did not apply: counted; under `failure_mode:
    /// local` the local limiter records what it would have charged.
    pub(in crate::worker) fn settle_failed(&mut self, host: &mut dyn Host, p: &Pending) {
        let Call::Settle(call) = &p.call else { return };
        for (check, (from, to)) in p.checks.iter().zip(&call.units) {
            host.count(Stat::Count(check.rule, CountStat::Failed), 1);
            if self.config.failure_mode == FailureMode::Local && !call.local && to > from {
                self.local.settle(check, *from, *to, p.arrival.request_ms);
            }
        }
        self.release(host, call.context, false);
    }

    /// The store answered settlement `p` (taken off the stream).
    pub(in crate::worker) fn settlement_replied(&mut self, host: &mut dyn Host, p: &Pending, outcome: Outcome) {
        let Call::Settle(call) = &p.call else { return };
        let Outcome::Decided(reply) = outcome else {
            self.settle_failed(host, p);
            return;
        };
        let changes: Vec<Option<(u64, u64)>> = call.units.iter().copied().map(Some).collect();
        self.completed(host, &p.checks, &changes);
        if self.config.failure_mode == FailureMode::Local {
            self.local.learn(&p.checks, &reply, p.arrival.request_ms);
        }
        let Some(Owed { checks, stage: Stage::Holding { waiting, now, .. }, .. }) =
            self.settlements.owed.get_mut(&call.context)
        else {
            return;
        };
        refresh(now, checks, &p.checks, &reply);
        *waiting = waiting.saturating_sub(1);
        if *waiting == 0 {
            self.release(host, call.context, true);
        }
    }

    /// Resumes the held response of `context`, if it still waits: with the
    /// buckets' state the settlement's replies reported (`fresh`), else with
    /// the admission's headers corrected by its own change.
    fn release(&mut self, host: &mut dyn Host, context: u32, fresh: bool) {
        let held = matches!(self.settlements.owed.get(&context), Some(Owed { stage: Stage::Holding { .. }, .. }));
        if !held {
            return;
        }
        let Some(owed) = self.settlements.owed.remove(&context) else { return };
        let Stage::Holding { changes, now, .. } = &owed.stage else { return };
        let headers = if fresh {
            let names = policy_names(&self.config, &owed.checks, now);
            with_delay(allowed_headers(&self.config, &names, now), &owed)
        } else {
            corrected(&self.config, &owed, changes)
        };
        self.deliveries.deliver(host, context, Verdict::Resume(headers));
    }

    /// Held responses whose time is up go on (every tick).
    pub(in crate::worker) fn expire_holds(&mut self, host: &mut dyn Host, now_ms: u64) {
        while let Some(&(until_ms, context)) = self.settlements.holds.front() {
            if now_ms < until_ms {
                return;
            }
            self.settlements.holds.pop_front();
            // (Released already, or gone: nothing to do.)
            if matches!(self.settlements.owed.get(&context), Some(Owed { stage: Stage::Holding { .. }, .. })) {
                host.count(Stat::HoldExpired, 1);
                self.release(host, context, false);
            }
        }
    }

    /// Whether request `id`'s response is held (or its resumption waits
    /// for the next VM entry).
    pub(in crate::worker) fn holding(&self, id: u32) -> bool {
        matches!(self.settlements.owed.get(&id), Some(Owed { stage: Stage::Holding { .. }, .. }))
            || self.deliveries.resume_waits(id)
    }
}

/// The windows of `now` (a decision over `checks`) that a settlement's
/// `reply` over `settled` reports, as it reports them.
fn refresh(now: &mut Decision, checks: &[Check], settled: &[Check], reply: &Decision) {
    for w in &mut now.windows {
        let key = checks.get(w.check).map(|c| c.key.as_str());
        let j = settled.iter().position(|c| Some(c.key.as_str()) == key);
        if let Some(fresh) = j.and_then(|j| reply.windows.iter().find(|r| r.check == j && r.window == w.window)) {
            w.remaining = fresh.remaining;
            w.reset_ms = fresh.reset_ms;
        }
    }
}
