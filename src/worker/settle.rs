//! Counting on the response (`rules[].count`, see docs/configuration.md):
//! what an admitted request owes its counting rules, how its response
//! (status, headers, body) says what it cost, and the settlement that makes
//! the store's record match: one `adjust` call for every window of every
//! counting rule of the request, atomically.
//!
//! * On admission the worker remembers the request ([`Owed`]): its checks,
//!   who decided it (the store, recording its reservations at its `now_ms`;
//!   the local limiter; or nobody, `failure_mode`/`overload: allow`).
//! * On the response headers, per counting check: the status and header
//!   conditions give 0 or a cost; the cost is the rule's `cost`, a
//!   response header, or (later) the body. What cannot be read costs the
//!   reservation (or the rule's `cost` without one): `cost_fallback`.
//! * The store gets what it recorded changed to the cost (`from` its
//!   reservation, 0 if it recorded nothing). A store-decided response that
//!   carries rate-limit headers and settles on its headers is **held** until
//!   the reply, at most `valkey.timeout`; its `RateLimit` then shows the
//!   settled state. Past that, or when the store fails, it goes on with the
//!   admission's headers corrected by its own change (`settle.hold_expired`).
//!   A cost read from the body settles when the body ends; the headers
//!   already left with the admission's state.
//! * The settlement is queued like a decision, under an id of its own
//!   ([`SETTLE_IDS`]), so it outlives the request's context; a failure is
//!   counted (`settle_failed`), never the response's.

use super::body::BodyReader;
use super::cluster_routing::Route;
use super::cost::ResponseFlow;
use super::host::{CountStat, Host, ResponseHeaders, Stat};
use super::requests::{Pending, PARKED};
use super::{Settle, Worker};
use crate::config::{Config, FailureMode, Reserve};
use crate::limiter::script::{encode_adjust, Invocation, Script};
use crate::limiter::{Adjustment, Check, Decision};
use crate::response::{allowed_headers, policy_names};
use crate::store::{FailureKind, Outcome};
use std::collections::{HashMap, VecDeque};

/// Settlements are held under ids with this bit set (context ids count up
/// from 1 and never reach it).
pub const SETTLE_IDS: u32 = 1 << 31;

/// Who admitted a request, and so what the store recorded for it.
#[derive(Debug)]
pub(super) enum Decided {
    /// Not admitted (yet).
    Not,
    /// The store, at its `now_ms`, recording every reservation.
    Store(Decision),
    /// The local limiter (`failure_mode: local`), recording them locally.
    Local(Decision),
    /// Nobody: let through unchecked.
    Unchecked,
}

#[derive(Debug)]
pub(super) enum Phase {
    /// Waiting for the response.
    Waiting,
    /// Reading the body for the costs still unknown (`None`).
    Body { reader: BodyReader, costs: Vec<Option<u64>> },
    /// The response waits for the settlement's reply (at most
    /// `valkey.timeout`, [`Settlements`]'s holds); `changes` per check.
    Held { changes: Vec<Option<(u64, u64)>> },
}

/// An admitted request's debt to its counting rules.
#[derive(Debug)]
pub(super) struct Owed {
    pub checks: Vec<Check>,
    pub now_override: Option<u64>,
    pub local_arrival_ms: u64,
    pub headers: ResponseHeaders,
    pub decided: Decided,
    pub phase: Phase,
}

/// A settlement on the store stream (the `settle` of its [`Pending`]).
#[derive(Debug, Clone)]
pub struct SettleCall {
    /// The request's context, whose response may be held.
    pub context: u32,
    /// When the store decided the request, on its clock.
    pub at_ms: u64,
    /// `(from, to)` per check of the pending.
    pub units: Vec<(u64, u64)>,
    /// The local limiter already settled the request (it decided it).
    pub local: bool,
}

/// One worker's settlements.
#[derive(Debug, Default)]
pub(super) struct Settlements {
    /// Some rule counts on the response.
    pub active: bool,
    pub owed: HashMap<u32, Owed>,
    /// Requests whose reservation waits for their body.
    pub awaiting_body: HashMap<u32, Pending>,
    /// Held responses by deadline (all holds last `valkey.timeout`, so
    /// they expire in the order they began).
    holds: VecDeque<(u64, u32)>,
    next: u32,
}

impl Settlements {
    pub fn new(config: &Config) -> Settlements {
        Settlements { active: config.rules.iter().any(|r| r.count.is_some()), ..Settlements::default() }
    }

    /// A fresh id for a settlement on the stream.
    fn next_id(&mut self) -> u32 {
        self.next = self.next.wrapping_add(1);
        SETTLE_IDS | (self.next & !SETTLE_IDS)
    }

    /// Forgets request `id`'s context (gone).
    pub fn gone(&mut self, id: u32) {
        self.owed.remove(&id);
        self.awaiting_body.remove(&id);
    }
}

/// Appends the `adjust` call of settlement `call` over `checks`.
pub(super) fn encode_settlement(
    out: &mut Vec<u8>,
    script: &Script,
    how: Invocation,
    checks: &[Check],
    call: &SettleCall,
    now_ms: Option<u64>,
) {
    let adjustments: Vec<Adjustment> = checks
        .iter()
        .zip(&call.units)
        .map(|(check, &(from, to))| Adjustment { check: check.clone(), from, to })
        .collect();
    encode_adjust(out, script, how, &adjustments, call.at_ms, now_ms);
}

/// Whether the store's denial of `key` may be remembered: not when the
/// request's reservation varies (another request's smaller one may fit).
pub(super) fn cacheable(config: &Config, checks: &[Check], key: &str) -> bool {
    let check = checks.iter().find(|c| c.key == key);
    let reserve = check.and_then(|c| config.rules.get(c.rule)).and_then(|r| r.count.as_ref()?.reserve.as_ref());
    !matches!(reserve, Some(Reserve::Header { .. } | Reserve::Body { .. }))
}

/// Whether `check`'s rule counts on the response.
pub(super) fn counts(config: &Config, check: &Check) -> bool {
    config.rules.get(check.rule).is_some_and(|r| r.count.is_some())
}

/// What the store (or the local limiter) recorded for `check` on admission.
fn recorded(check: &Check) -> u64 {
    if check.check_only {
        0
    } else {
        check.cost.get()
    }
}

impl Worker {
    /// Request `id` (`p`) is about to be decided: remember what it will owe
    /// if admitted.
    pub(super) fn owe(&mut self, id: u32, p: &Pending) {
        if !p.checks.iter().any(|c| counts(&self.config, c)) {
            return;
        }
        let owed = Owed {
            checks: p.checks.clone(),
            now_override: p.now_override,
            local_arrival_ms: p.local_arrival_ms,
            headers: p.headers.clone(),
            decided: Decided::Not,
            phase: Phase::Waiting,
        };
        self.settlements.owed.insert(id, owed);
    }

    /// Request `id` was admitted by the store (`decision.allowed`), the
    /// local limiter or nobody (`None`, `local`: whether the local limiter).
    pub(super) fn admitted(&mut self, host: &mut dyn Host, id: u32, decision: Option<&Decision>, local: bool) {
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
        if matches!(owed.decided, Decided::Unchecked) {
            return;
        }
        for c in owed.checks.iter().filter(|c| counts(&self.config, c)) {
            host.count(Stat::Count(c.rule, CountStat::Reserved), recorded(c));
        }
    }

    /// Settles `owed` with `costs` (per check; non-counting checks ignored).
    /// `at_headers`: the response headers are still here (they may be held
    /// or corrected).
    pub(super) fn settle_owed(
        &mut self,
        host: &mut dyn Host,
        id: u32,
        owed: Owed,
        costs: Vec<u64>,
        at_headers: bool,
        now_ms: u64,
    ) -> ResponseFlow {
        let store_recorded = matches!(owed.decided, Decided::Store(_));
        // (from, to) in the store, per counting check.
        let mut changes: Vec<Option<(u64, u64)>> = Vec::with_capacity(owed.checks.len());
        for (check, cost) in owed.checks.iter().zip(&costs) {
            if !counts(&self.config, check) {
                changes.push(None);
                continue;
            }
            let from = if store_recorded { recorded(check) } else { 0 };
            if let Decided::Local(_) = owed.decided {
                // The local limiter recorded the reservation: settled there
                // now, whatever the store does.
                let reserved = recorded(check);
                self.local.settle(check, reserved, *cost, self.request_time(&owed, now_ms));
                if reserved > *cost {
                    host.count(Stat::Count(check.rule, CountStat::Refunded), reserved - cost);
                }
            }
            if store_recorded && *cost < from {
                // Room came back: what this worker remembers as denied may
                // fit now (other workers' caches expire by themselves).
                self.cache.forget(&check.key);
            }
            changes.push(Some((from, *cost)));
        }
        let to_store: Vec<usize> =
            changes.iter().enumerate().filter_map(|(i, c)| c.filter(|(from, to)| from != to).map(|_| i)).collect();
        if to_store.is_empty() {
            self.completed(host, &owed.checks, &changes);
            return ResponseFlow::Continue;
        }
        let at_ms = match &owed.decided {
            Decided::Store(d) => d.now_ms,
            _ => self.request_time(&owed, now_ms),
        };
        let call = SettleCall {
            context: id,
            at_ms,
            units: to_store.iter().filter_map(|&i| changes.get(i).copied().flatten()).collect(),
            local: matches!(owed.decided, Decided::Local(_)),
        };
        let checks: Vec<Check> = to_store.iter().filter_map(|&i| owed.checks.get(i).cloned()).collect();
        // The store stream of the request's slot (an admitted request's
        // checks share one).
        let (route, slot) = self.route(&checks);
        let (shard, down) = match route {
            Route::Shard(shard) => (shard, self.shards.get(shard).and_then(|s| s.link.down(now_ms)).map(|f| f.kind())),
            Route::Parked => (PARKED, None),
            Route::Unserved(slot) => (PARKED, Some(self.unserved(slot, now_ms).kind())),
            Route::CrossSlot => (PARKED, Some(FailureKind::Unavailable)),
        };
        let pending = Pending {
            checks,
            now_override: owed.now_override.map(|o| o.saturating_add(now_ms.saturating_sub(owed.local_arrival_ms))),
            arrival_ms: self.request_time(&owed, now_ms),
            local_arrival_ms: now_ms,
            noscripts: 0,
            headers: ResponseHeaders::default(),
            sent: false,
            shard,
            slot,
            redirects: 0,
            asking: false,
            settle: Some(call),
        };
        let settle_id = self.settlements.next_id();
        if let Some(kind) = down {
            host.count(Stat::StoreError(kind), 1);
            self.settle_failed(host, &pending);
        } else {
            self.requests.push(settle_id, pending);
        }
        // Only the changes of checks settled on this call's reply count
        // now: the rest when it answers.
        let unchanged: Vec<Option<(u64, u64)>> = changes.iter().map(|c| c.filter(|(from, to)| from == to)).collect();
        self.completed(host, &owed.checks, &unchanged);
        let hold = at_headers && store_recorded && down.is_none() && !owed.headers.borrow().is_empty();
        if hold {
            let until_ms = now_ms.saturating_add(self.timeout_ms);
            self.settlements.holds.push_back((until_ms, id));
            self.settlements.owed.insert(id, Owed { phase: Phase::Held { changes }, ..owed });
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

    /// The request's clock at `now_ms` (the injected one in tests).
    fn request_time(&self, owed: &Owed, now_ms: u64) -> u64 {
        owed.now_override.map_or(now_ms, |o| o.saturating_add(now_ms.saturating_sub(owed.local_arrival_ms)))
    }

    /// Counts settlements that are complete in the store: `(from, to)` per
    /// check (`None`: not settled here).
    fn completed(&self, host: &mut dyn Host, checks: &[Check], changes: &[Option<(u64, u64)>]) {
        for (check, change) in checks.iter().zip(changes) {
            let Some((from, to)) = change else { continue };
            host.count(Stat::Count(check.rule, CountStat::Settled), *to);
            if from > to {
                host.count(Stat::Count(check.rule, CountStat::Refunded), from - to);
            }
        }
    }

    /// A settlement the store did not apply: counted; under `failure_mode:
    /// local` the local limiter records what it would have charged.
    pub(super) fn settle_failed(&mut self, host: &mut dyn Host, p: &Pending) {
        let Some(call) = &p.settle else { return };
        for (check, (from, to)) in p.checks.iter().zip(&call.units) {
            host.count(Stat::Count(check.rule, CountStat::Failed), 1);
            if self.config.failure_mode == FailureMode::Local && !call.local && to > from {
                self.local.settle(check, *from, *to, p.arrival_ms);
            }
        }
        self.release(host, call.context, None);
    }

    /// The store answered settlement `p` (taken off the stream).
    pub(super) fn settled(&mut self, host: &mut dyn Host, p: &Pending, outcome: Outcome) {
        let Some(call) = &p.settle else { return };
        let Outcome::Decided(reply) = outcome else {
            self.settle_failed(host, p);
            return;
        };
        let changes: Vec<Option<(u64, u64)>> = call.units.iter().copied().map(Some).collect();
        self.completed(host, &p.checks, &changes);
        if self.config.failure_mode == FailureMode::Local {
            self.local.learn(&p.checks, &reply, p.arrival_ms);
        }
        self.release(host, call.context, Some((&p.checks, &reply)));
    }

    /// Resumes the held response of `context`, if it still waits: with the
    /// settlement's reply (the buckets' state now), else with the
    /// admission's headers corrected by its own change.
    fn release(&mut self, host: &mut dyn Host, context: u32, reply: Option<(&[Check], &Decision)>) {
        let held = matches!(self.settlements.owed.get(&context), Some(Owed { phase: Phase::Held { .. }, .. }));
        if !held {
            return;
        }
        let Some(owed) = self.settlements.owed.remove(&context) else { return };
        let Phase::Held { changes, .. } = &owed.phase else { return };
        let headers = match (&owed.decided, reply) {
            (Decided::Store(decision), Some((checks, reply))) => {
                let mut now = decision.clone();
                for w in &mut now.windows {
                    let key = owed.checks.get(w.check).map(|c| c.key.as_str());
                    let settled = checks.iter().position(|c| Some(c.key.as_str()) == key);
                    let fresh =
                        settled.and_then(|j| reply.windows.iter().find(|r| r.check == j && r.window == w.window));
                    if let Some(fresh) = fresh {
                        w.remaining = fresh.remaining;
                        w.reset_ms = fresh.reset_ms;
                    }
                }
                let names = policy_names(&self.config, &owed.checks, &now);
                allowed_headers(&self.config, &names, &now)
            }
            _ => corrected(&self.config, &owed, changes),
        };
        self.settle(host, context, Settle::Resume(headers));
    }

    /// Held responses whose time is up go on (every tick).
    pub(super) fn expire_holds(&mut self, host: &mut dyn Host, now_ms: u64) {
        while let Some(&(until_ms, context)) = self.settlements.holds.front() {
            if now_ms < until_ms {
                return;
            }
            self.settlements.holds.pop_front();
            // (Released already, or gone: nothing to do.)
            if matches!(self.settlements.owed.get(&context), Some(Owed { phase: Phase::Held { .. }, .. })) {
                host.count(Stat::HoldExpired, 1);
                self.release(host, context, None);
            }
        }
    }

    /// Whether request `id`'s response is held (or its resumption waits
    /// for the next VM entry).
    pub fn holding(&self, id: u32) -> bool {
        matches!(self.settlements.owed.get(&id), Some(Owed { phase: Phase::Held { .. }, .. }))
            || self.deferred.iter().any(|(d, s)| *d == id && matches!(s, Settle::Resume(_)))
    }
}

/// The admission's headers, each window's remaining corrected by the
/// request's own change (`from` → `to`; a window empty until a charge now
/// resets within its period): what the response says when the store's
/// reply is not there.
fn corrected(config: &Config, owed: &Owed, changes: &[Option<(u64, u64)>]) -> Vec<(String, String)> {
    let (Decided::Store(decision) | Decided::Local(decision)) = &owed.decided else { return Vec::new() };
    let mut now = decision.clone();
    for w in &mut now.windows {
        if let Some(Some((from, to))) = changes.get(w.check) {
            w.remaining = w.remaining.saturating_add(*from).saturating_sub(*to).min(w.limit);
            if to > from && w.reset_ms == 0 {
                w.reset_ms = w.period_ms;
            }
        }
    }
    let names = policy_names(config, &owed.checks, &now);
    allowed_headers(config, &names, &now)
}
