//! Counting on the response (`rules[].count`, see docs/configuration.md):
//! what an admitted request owes its counting rules, how its response
//! (status, headers, body) says what it cost, and the settlement that makes
//! the store's record match: one `adjust` call for every window of every
//! counting rule of the request, atomically (in cluster mode, one call per
//! slot: see below).
//!
//! * On admission the worker remembers the request ([`Owed`]): its checks,
//!   who decided it (the store, recording its reservations; the local
//!   limiter; or nobody, `failure_mode`/`overload: allow`), and for each
//!   check whether and when (on the store's clock) the store recorded it.
//! * On the response headers, per counting check: the status and header
//!   conditions give 0 or a cost; the cost is the rule's `cost`, a
//!   response header, or (later) the body. What cannot be read costs the
//!   reservation (or the rule's `cost` without one): `cost_fallback`.
//! * The store gets what it recorded changed to the cost (`from` its
//!   reservation, 0 if it recorded nothing). A store-decided response that
//!   carries rate-limit headers and settles on its headers is **paused** until
//!   the replies, at most `valkey.timeout`; its `RateLimit` then shows the
//!   settled state. Past that, or when the store fails, it goes on with the
//!   admission's headers corrected by its own change (`settle.hold_expired`).
//!   A cost read from the body settles when the body ends; the headers
//!   already left with the admission's state. (The replies: below.)
//! * The settlement is queued like a decision, under an id of its own
//!   ([`crate::worker::calls::CallId::Settlement`]), so it outlives the request's context; a failure is
//!   counted (`settle_failed`), never the response's.
//! * In cluster mode each slot of the changed checks gets its own call, on
//!   its master, at the time that slot's decision recorded (a request
//!   decided across slots was decided by one call per slot, see
//!   [`crate::worker::cross::protocol`]); each call is all or nothing for its slot.

use crate::answer::response::{allowed_headers, policy_names};
use crate::config::FailureMode;
use crate::limiter::{Check, Decision};
use crate::store::cluster::key_slot;
use crate::store::{FailureKind, Outcome};
use crate::worker::calls::{Call, Command, Pending, SettleCall, PARKED};
use crate::worker::counting::owed::Settlements;
use crate::worker::counting::owed::{corrected, counts, with_delay, Decided, Owed, Stage};
use crate::worker::cx::Cx;
use crate::worker::host::{CountStat, ResponseFlow, Stat};
use crate::worker::streams::discovery::Route;
use crate::worker::verdict::{Deliveries, Verdict};

impl Settlements {
    /// Settles `owed` with `costs` (per check; non-counting checks ignored).
    /// `at_headers`: the response headers are still here (they may be paused
    /// or corrected).
    pub(in crate::worker) fn settle_owed(
        &mut self,
        cx: &mut Cx<'_>,
        id: u32,
        owed: Owed,
        costs: Vec<u64>,
        at_headers: bool,
        now_ms: u64,
    ) -> ResponseFlow {
        // (from, to) in the store, per counting check.
        let mut changes: Vec<Option<(u64, u64)>> = Vec::with_capacity(owed.checks.len());
        for ((check, cost), stored) in owed.checks.iter().zip(&costs).zip(&owed.stored) {
            if !counts(cx.config, check) {
                changes.push(None);
                continue;
            }
            let from = if stored.is_some() { check.recorded() } else { 0 };
            if let Decided::Local(_) = owed.decided {
                // The local limiter recorded the reservation: settled there
                // now, whatever the store does.
                let reserved = check.recorded();
                cx.local.settle(check, reserved, *cost, owed.arrival.at(now_ms));
                if reserved > *cost {
                    cx.host.count(Stat::Count(check.rule, CountStat::Refunded), reserved - cost);
                }
            }
            if stored.is_some() && *cost < from {
                // Room came back: what this worker remembers as denied may
                // fit now (other workers' caches expire by themselves).
                cx.cache.forget(&check.key);
            }
            changes.push(Some((from, *cost)));
        }
        // The checks to change in the store, by call: one per slot (and
        // time of record).
        let mut calls: Vec<((u16, u64), Vec<usize>)> = Vec::new();
        for (i, change) in changes.iter().enumerate() {
            let (Some((from, to)), Some(check)) = (change, owed.checks.get(i)) else { continue };
            if from == to {
                continue;
            }
            let slot = if cx.streams.clustered() { key_slot(check.key.as_bytes()) } else { 0 };
            let at_ms = owed.stored.get(i).copied().flatten().unwrap_or_else(|| owed.arrival.at(now_ms));
            match calls.iter_mut().find(|(k, _)| *k == (slot, at_ms)) {
                Some((_, indices)) => indices.push(i),
                None => calls.push(((slot, at_ms), vec![i])),
            }
        }
        // Only the changes of checks settled on no call's reply count now:
        // the rest when their call answers.
        let unchanged: Vec<Option<(u64, u64)>> = changes.iter().map(|c| c.filter(|(from, to)| from == to)).collect();
        self.completed(cx, &owed.checks, &unchanged);
        if calls.is_empty() {
            return ResponseFlow::Continue;
        }
        let total = calls.len();
        let mut sent = 0;
        for ((_, at_ms), indices) in calls {
            let call = SettleCall {
                context: id,
                at_ms,
                units: indices.iter().filter_map(|&i| changes.get(i).copied().flatten()).collect(),
                local: matches!(owed.decided, Decided::Local(_)),
            };
            let checks: Vec<Check> = indices.iter().filter_map(|&i| owed.checks.get(i).cloned()).collect();
            sent += usize::from(self.send_settlement(cx, &owed, checks, call, now_ms));
        }
        let pause = at_headers && sent == total && !owed.headers.borrow().is_empty();
        if let (true, Decided::Store(decision)) = (pause, &owed.decided) {
            let until_ms = now_ms.saturating_add(self.timeout_ms);
            self.pauses.push_back((until_ms, id));
            let now = decision.clone();
            self.owed.insert(id, Owed { stage: Stage::Paused { changes, waiting: sent, now }, ..owed });
            return ResponseFlow::Pause;
        }
        if at_headers {
            let headers = corrected(cx.config, &owed, &changes);
            if let Ok(mut current) = owed.headers.try_borrow_mut() {
                *current = headers;
            }
        }
        ResponseFlow::Continue
    }

    /// Queues a settlement of `checks` (one slot) for its master's stream;
    /// false if it failed at once (the store known down, no master).
    fn send_settlement(
        &mut self,
        cx: &mut Cx<'_>,
        owed: &Owed,
        checks: Vec<Check>,
        call: SettleCall,
        now_ms: u64,
    ) -> bool {
        let (route, slot) = cx.streams.route(&checks);
        let (shard, down) = match route {
            Route::Shard(shard) => (shard, cx.streams.down(shard, now_ms).map(|f| f.kind())),
            Route::Parked => (PARKED, None),
            Route::Unserved(slot) => (PARKED, Some(cx.streams.unserved(slot, now_ms).kind())),
            // (Never: a call's checks share a slot.)
            Route::CrossSlot => (PARKED, Some(FailureKind::Unavailable)),
        };
        let command = Command::Adjust { adjustments: call.adjustments(&checks), at_ms: call.at_ms };
        let pending = Pending::made(checks, owed.arrival.on_behalf(now_ms), (shard, slot), command, Call::Settle(call));
        if let Some(kind) = down {
            cx.host.count(Stat::StoreError(kind), 1);
            self.settle_failed(cx, &pending);
            return false;
        }
        let settle_id = self.next_id();
        cx.streams.push(settle_id, pending);
        true
    }

    /// Counts settlements that are complete in the store: `(from, to)` per
    /// check (`None`: not settled here).
    pub(in crate::worker) fn completed(&self, cx: &mut Cx<'_>, checks: &[Check], changes: &[Option<(u64, u64)>]) {
        for (check, change) in checks.iter().zip(changes) {
            let Some((from, to)) = change else { continue };
            cx.host.count(Stat::Count(check.rule, CountStat::Settled), *to);
            if from > to {
                cx.host.count(Stat::Count(check.rule, CountStat::Refunded), from - to);
            }
        }
    }

    /// A settlement the store did not apply: counted; under `failure_mode:
    /// local` the local limiter records what it would have charged.
    pub(in crate::worker) fn settle_failed(&mut self, cx: &mut Cx<'_>, p: &Pending) {
        let Call::Settle(call) = &p.call else { return };
        for (check, (from, to)) in p.checks.iter().zip(&call.units) {
            cx.host.count(Stat::Count(check.rule, CountStat::Failed), 1);
            if cx.config.failure_mode == FailureMode::Local && !call.local && to > from {
                cx.local.settle(check, *from, *to, p.arrival.request_ms);
            }
        }
        self.release(cx, call.context, false);
    }

    /// The store answered settlement `p` (taken off the stream).
    pub(in crate::worker) fn settlement_replied(&mut self, cx: &mut Cx<'_>, p: &Pending, outcome: Outcome) {
        let Call::Settle(call) = &p.call else { return };
        let Outcome::Decided(reply) = outcome else {
            self.settle_failed(cx, p);
            return;
        };
        let changes: Vec<Option<(u64, u64)>> = call.units.iter().copied().map(Some).collect();
        self.completed(cx, &p.checks, &changes);
        if cx.config.failure_mode == FailureMode::Local {
            cx.local.learn(&p.checks, &reply, p.arrival.request_ms);
        }
        let Some(Owed { checks, stage: Stage::Paused { waiting, now, .. }, .. }) = self.owed.get_mut(&call.context)
        else {
            return;
        };
        refresh(now, checks, &p.checks, &reply);
        *waiting = waiting.saturating_sub(1);
        if *waiting == 0 {
            self.release(cx, call.context, true);
        }
    }

    /// Resumes the paused response of `context`, if it still waits: with the
    /// buckets' state the settlement's replies reported (`fresh`), else with
    /// the admission's headers corrected by its own change.
    fn release(&mut self, cx: &mut Cx<'_>, context: u32, fresh: bool) {
        let paused = matches!(self.owed.get(&context), Some(Owed { stage: Stage::Paused { .. }, .. }));
        if !paused {
            return;
        }
        let Some(owed) = self.owed.remove(&context) else { return };
        let Stage::Paused { changes, now, .. } = &owed.stage else { return };
        let headers = if fresh {
            let names = policy_names(cx.config, &owed.checks, now);
            with_delay(allowed_headers(cx.config, &names, now), &owed)
        } else {
            corrected(cx.config, &owed, changes)
        };
        cx.deliveries.deliver(cx.host, context, Verdict::Resume(headers));
    }

    /// Paused responses whose time is up go on (every tick).
    pub(in crate::worker) fn expire_pauses(&mut self, cx: &mut Cx<'_>, now_ms: u64) {
        while let Some(&(until_ms, context)) = self.pauses.front() {
            if now_ms < until_ms {
                return;
            }
            self.pauses.pop_front();
            // (Released already, or gone: nothing to do.)
            if matches!(self.owed.get(&context), Some(Owed { stage: Stage::Paused { .. }, .. })) {
                cx.host.count(Stat::PauseExpired, 1);
                self.release(cx, context, false);
            }
        }
    }

    /// Whether request `id`'s response is paused (or its resumption waits
    /// for the next VM entry).
    pub(in crate::worker) fn paused(&self, id: u32, deliveries: &Deliveries) -> bool {
        matches!(self.owed.get(&id), Some(Owed { stage: Stage::Paused { .. }, .. })) || deliveries.resume_waits(id)
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
