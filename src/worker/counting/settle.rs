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
//!   carries rate-limit headers and settles on its headers is **held** until
//!   the replies, at most `valkey.timeout`; its `RateLimit` then shows the
//!   settled state. Past that, or when the store fails, it goes on with the
//!   admission's headers corrected by its own change (`settle.hold_expired`).
//!   A cost read from the body settles when the body ends; the headers
//!   already left with the admission's state. (The replies: [`crate::worker::counting::settle_reply`].)
//! * The settlement is queued like a decision, under an id of its own
//!   ([`crate::worker::calls::CallId::Settlement`]), so it outlives the request's context; a failure is
//!   counted (`settle_failed`), never the response's.
//! * In cluster mode each slot of the changed checks gets its own call, on
//!   its master, at the time that slot's decision recorded (a request
//!   decided across slots was decided by one call per slot, see
//!   [`crate::worker::cross::protocol`]); each call is all or nothing for its slot.

use crate::limiter::{Check, Decision};
use crate::store::cluster::key_slot;
use crate::store::FailureKind;
use crate::worker::calls::{Call, Command, Pending, SettleCall, PARKED};
use crate::worker::counting::owed::{corrected, counts, Decided, Owed, Stage};
use crate::worker::host::{CountStat, Host, ResponseFlow, ResponseHeaders, Stat};
use crate::worker::streams::discovery::Route;
use crate::worker::Worker;

impl Worker {
    /// Request `id` (`p`) is about to be decided: remember what it will owe
    /// if admitted.
    pub(in crate::worker) fn owe(&mut self, id: u32, p: &Pending) {
        if !p.checks.iter().any(|c| counts(&self.config, c)) {
            return;
        }
        let owed = Owed {
            checks: p.checks.clone(),
            stored: vec![None; p.checks.len()],
            arrival: p.arrival,
            headers: p.headers.clone(),
            decided: Decided::Not,
            stage: Stage::Waiting,
        };
        self.settlements.owed.insert(id, owed);
    }

    /// Request `id` was admitted by the store (`decision.allowed`, which
    /// recorded every check at its slot: `now_ms + delay_ms`, `now_ms` when
    /// not shaped), the local limiter or nobody
    /// (`None`, `local`: whether the local limiter).
    pub(in crate::worker) fn admitted(
        &mut self,
        host: &mut dyn Host,
        id: u32,
        decision: Option<&Decision>,
        local: bool,
    ) {
        let Some(owed) = self.settlements.owed.get_mut(&id) else { return };
        owed.decided = match (decision, local) {
            (Some(d), false) if d.allowed => Decided::Store(d.clone()),
            (Some(d), true) if d.allowed => Decided::Local(d.clone()),
            (None, _) => Decided::Unchecked,
            _ => {
                // A denial (a shadow rule's lets it pass, recording nothing).
                self.settlements.owed.remove(&id);
                return;
            }
        };
        match &owed.decided {
            Decided::Store(d) => owed.stored.fill(Some(d.now_ms.saturating_add(d.delay_ms))),
            Decided::Local(_) => {}
            _ => return,
        }
        for c in owed.checks.iter().filter(|c| counts(&self.config, c)) {
            host.count(Stat::Count(c.rule, CountStat::Reserved), c.recorded());
        }
    }

    /// The store recorded checks `indices` of admitted request `id` at
    /// `at_ms` (its clock): one slot of a request decided across slots (see
    /// [`crate::worker::cross::protocol`]), whose record is kept.
    pub(in crate::worker) fn stored(&mut self, host: &mut dyn Host, id: u32, indices: &[usize], at_ms: u64) {
        let Some(owed) = self.settlements.owed.get_mut(&id) else { return };
        for &i in indices {
            let (Some(at), Some(check)) = (owed.stored.get_mut(i), owed.checks.get(i)) else { continue };
            // Reserved once: by the store's admission or the local limiter's.
            if at.is_none() && matches!(owed.decided, Decided::Unchecked) && counts(&self.config, check) {
                host.count(Stat::Count(check.rule, CountStat::Reserved), check.recorded());
            }
            *at = Some(at_ms);
        }
    }

    /// Settles `owed` with `costs` (per check; non-counting checks ignored).
    /// `at_headers`: the response headers are still here (they may be held
    /// or corrected).
    pub(in crate::worker) fn settle_owed(
        &mut self,
        host: &mut dyn Host,
        id: u32,
        owed: Owed,
        costs: Vec<u64>,
        at_headers: bool,
        now_ms: u64,
    ) -> ResponseFlow {
        // (from, to) in the store, per counting check.
        let mut changes: Vec<Option<(u64, u64)>> = Vec::with_capacity(owed.checks.len());
        for ((check, cost), stored) in owed.checks.iter().zip(&costs).zip(&owed.stored) {
            if !counts(&self.config, check) {
                changes.push(None);
                continue;
            }
            let from = if stored.is_some() { check.recorded() } else { 0 };
            if let Decided::Local(_) = owed.decided {
                // The local limiter recorded the reservation: settled there
                // now, whatever the store does.
                let reserved = check.recorded();
                self.local.settle(check, reserved, *cost, owed.arrival.at(now_ms));
                if reserved > *cost {
                    host.count(Stat::Count(check.rule, CountStat::Refunded), reserved - cost);
                }
            }
            if stored.is_some() && *cost < from {
                // Room came back: what this worker remembers as denied may
                // fit now (other workers' caches expire by themselves).
                self.cache.forget(&check.key);
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
            let slot = if self.streams.clustered() { key_slot(check.key.as_bytes()) } else { 0 };
            let at_ms = owed.stored.get(i).copied().flatten().unwrap_or_else(|| owed.arrival.at(now_ms));
            match calls.iter_mut().find(|(k, _)| *k == (slot, at_ms)) {
                Some((_, indices)) => indices.push(i),
                None => calls.push(((slot, at_ms), vec![i])),
            }
        }
        // Only the changes of checks settled on no call's reply count now:
        // the rest when their call answers.
        let unchanged: Vec<Option<(u64, u64)>> = changes.iter().map(|c| c.filter(|(from, to)| from == to)).collect();
        self.completed(host, &owed.checks, &unchanged);
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
            sent += usize::from(self.send_settlement(host, &owed, checks, call, now_ms));
        }
        let hold = at_headers && sent == total && !owed.headers.borrow().is_empty();
        if let (true, Decided::Store(decision)) = (hold, &owed.decided) {
            let until_ms = now_ms.saturating_add(self.timeout_ms);
            self.settlements.holds.push_back((until_ms, id));
            let now = decision.clone();
            self.settlements.owed.insert(id, Owed { stage: Stage::Holding { changes, waiting: sent, now }, ..owed });
            return ResponseFlow::Hold;
        }
        if at_headers {
            let headers = corrected(&self.config, &owed, &changes);
            if let Ok(mut slot) = owed.headers.try_borrow_mut() {
                *slot = headers;
            }
        }
        ResponseFlow::Continue
    }

    /// Queues a settlement of `checks` (one slot) for its master's stream;
    /// false if it failed at once (the store known down, no master).
    fn send_settlement(
        &mut self,
        host: &mut dyn Host,
        owed: &Owed,
        checks: Vec<Check>,
        call: SettleCall,
        now_ms: u64,
    ) -> bool {
        let (route, slot) = self.streams.route(&checks);
        let (shard, down) = match route {
            Route::Shard(shard) => (shard, self.streams.down(shard, now_ms).map(|f| f.kind())),
            Route::Parked => (PARKED, None),
            Route::Unserved(slot) => (PARKED, Some(self.streams.unserved(slot, now_ms).kind())),
            // (Never: a call's checks share a slot.)
            Route::CrossSlot => (PARKED, Some(FailureKind::Unavailable)),
        };
        let command = Command::Adjust { adjustments: call.adjustments(&checks), at_ms: call.at_ms };
        let pending = Pending {
            checks,
            arrival: owed.arrival.on_behalf(now_ms),
            noscripts: 0,
            headers: ResponseHeaders::default(),
            sent: false,
            shard,
            slot,
            redirects: 0,
            asking: false,
            command,
            call: Call::Settle(call),
        };
        if let Some(kind) = down {
            host.count(Stat::StoreError(kind), 1);
            self.settle_failed(host, &pending);
            return false;
        }
        let settle_id = self.settlements.next_id();
        self.streams.push(settle_id, pending);
        true
    }

    /// Counts settlements that are complete in the store: `(from, to)` per
    /// check (`None`: not settled here).
    pub(in crate::worker) fn completed(&self, host: &mut dyn Host, checks: &[Check], changes: &[Option<(u64, u64)>]) {
        for (check, change) in checks.iter().zip(changes) {
            let Some((from, to)) = change else { continue };
            host.count(Stat::Count(check.rule, CountStat::Settled), *to);
            if from > to {
                host.count(Stat::Count(check.rule, CountStat::Refunded), from - to);
            }
        }
    }
}
