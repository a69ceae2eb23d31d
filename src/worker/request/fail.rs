//! What a request gets when the store cannot decide it (`failure_mode`:
//! allow, deny, or the local limiter), and when the worker cannot take it
//! (`overload`: reject, or allow when explicitly asked).

use crate::answer::response::{overloaded, store_unavailable};
use crate::config::{FailureMode, Overload};
use crate::limiter::{Check, Decision};
use crate::store::{Failure, FailureKind, Outcome};
use crate::worker::calls::{Call, CallId, Pending};
use crate::worker::host::Throttle;
use crate::worker::host::{Host, Level, ResponseHeaders, ShapeStat, Stat};
use crate::worker::request::record::{Answer, Decider, DecisionRecord, Record};
use crate::worker::request::rule::{self, answer_now};
use crate::worker::request::verdict::Verdict;
use crate::worker::{Flow, Worker};

/// Failure kinds that suggest the master moved: ask the Sentinels again.
fn master_suspect(kind: FailureKind) -> bool {
    matches!(kind, FailureKind::Unavailable | FailureKind::Timeout | FailureKind::ReadOnly)
}

/// Failure kinds that suggest the slot map changed (`CLUSTERDOWN` and
/// `TRYAGAIN` are `busy`): read it again.
fn slots_suspect(kind: FailureKind) -> bool {
    master_suspect(kind) || kind == FailureKind::Busy
}

/// What `failure_mode: local` needs of a request: its checks, the time on
/// its clock (the injected one in tests), and where admitted headers go.
pub(in crate::worker) struct Failing<'a> {
    pub id: u32,
    pub checks: &'a [Check],
    pub at_ms: u64,
    pub headers: &'a ResponseHeaders,
}

impl<'a> Failing<'a> {
    /// A held request at `now_ms` on the proxy's clock.
    fn of(id: u32, p: &'a Pending, now_ms: u64) -> Failing<'a> {
        Failing { id, checks: &p.checks, at_ms: p.arrival.at(now_ms), headers: &p.headers }
    }
}

impl Worker {
    /// Counts and logs a failure and gives what `failure_mode` makes of it.
    pub(in crate::worker) fn failure(
        &mut self,
        host: &mut dyn Host,
        failure: &Failure,
        request: &Failing<'_>,
        now_ms: u64,
    ) -> Verdict {
        if self.log.due(now_ms) {
            host.log(
                Level::Warn,
                &format!(
                    "tollgate: {failure} (failure_mode applies; repeats are not logged for {}s)",
                    Throttle::INTERVAL_MS / 1000
                ),
            );
        }
        host.count(Stat::StoreError(failure.kind()), 1);
        if failure.may_have_run() {
            host.count(Stat::UnknownOutcome, 1);
        }
        let undecided = |answer| {
            Record::Made(DecisionRecord::undecided(&self.config, request.checks, Decider::FailureMode, answer))
        };
        match self.config.failure_mode {
            FailureMode::Allow => {
                host.count(Stat::FailureMode { allowed: true }, 1);
                rule::record(&self.config, host, request.id, || undecided(Answer::Unchecked));
                self.admitted(host, request.id, None, false);
                Verdict::Admit(None)
            }
            FailureMode::Deny => {
                host.count(Stat::FailureMode { allowed: false }, 1);
                rule::record(&self.config, host, request.id, || undecided(Answer::Refused));
                Verdict::Reply(store_unavailable())
            }
            FailureMode::Local => {
                let decision = self.local.decide(request.checks, request.at_ms);
                host.count(Stat::Local { allowed: decision.allowed }, 1);
                if decision.allowed {
                    // The store learns it at the next flush it answers.
                    for check in request.checks.iter().filter(|c| c.recorded() > 0) {
                        self.synced.owe(check, check.recorded());
                    }
                }
                self.admitted(host, request.id, Some(&decision), true);
                let decided = (request.checks, &decision, Decider::Local);
                self.rule_by_worker(host, request.id, decided, request.at_ms, request.headers)
            }
        }
    }

    /// The store decided `p`: under `failure_mode: local`, its buckets'
    /// local counts start from the store's answer.
    pub(in crate::worker) fn learn(&mut self, p: &Pending, decision: &Decision, now_ms: u64) {
        if self.config.failure_mode == FailureMode::Local {
            self.local.learn(&p.checks, decision, Failing::of(0, p, now_ms).at_ms);
        }
    }

    /// `failure_mode` for the request being started, in its own callback.
    pub(in crate::worker) fn fail_now(
        &mut self,
        host: &mut dyn Host,
        id: u32,
        failure: &Failure,
        request: &Failing<'_>,
        now_ms: u64,
    ) -> Flow {
        self.suspect(failure, now_ms);
        let verdict = self.failure(host, failure, request, now_ms);
        answer_now(host, id, verdict)
    }

    /// `failure_mode` for held request `id`.
    pub(in crate::worker) fn fail(&mut self, host: &mut dyn Host, id: CallId, failure: &Failure, now_ms: u64) {
        if let Some(p) = self.calls.remove(id) {
            self.fail_held(host, id, &p, failure, now_ms);
        }
    }

    /// `failure_mode` for request `id`, already taken off the held ones.
    pub(in crate::worker) fn fail_held(
        &mut self,
        host: &mut dyn Host,
        id: CallId,
        p: &Pending,
        failure: &Failure,
        now_ms: u64,
    ) {
        self.suspect(failure, now_ms);
        match p.call {
            Call::Decide => {}
            Call::Part(_) => return self.part_failed(host, p, failure, now_ms),
            Call::GiveBack(_) => return self.given_back(host, id, &Outcome::Failed(failure.clone())),
            Call::Flush(_) => return self.flush_failed(host, id, p.clone(), failure, now_ms),
            Call::Settle(_) => {
                // A settlement: counted, never the response's failure.
                host.count(Stat::StoreError(failure.kind()), 1);
                return self.settle_failed(host, p);
            }
        }
        let CallId::Request(id) = id else { return };
        self.holding.leave(id);
        let verdict = self.failure(host, failure, &Failing::of(id, p, now_ms), now_ms);
        self.deliveries.deliver(host, id, verdict);
    }

    /// A failure that suggests the master moved, or the slot map changed,
    /// has them looked up again soon (at most every 100 ms).
    fn suspect(&mut self, failure: &Failure, now_ms: u64) {
        if master_suspect(failure.kind()) {
            if let Some(s) = &mut self.sentinels {
                s.suspect(now_ms);
            }
        }
        if slots_suspect(failure.kind()) {
            if let Some(c) = &mut self.cluster {
                c.suspect(now_ms);
            }
        }
    }

    /// What `overload` makes of a request over `checks` that the worker
    /// cannot take (counted, recorded).
    pub(in crate::worker) fn overloaded(&mut self, host: &mut dyn Host, id: u32, checks: &[Check]) -> Verdict {
        host.count(Stat::Overloaded, 1);
        let record = |answer| Record::Made(DecisionRecord::undecided(&self.config, checks, Decider::Overload, answer));
        match self.config.overload {
            Overload::Reject => {
                rule::record(&self.config, host, id, || record(Answer::Refused));
                Verdict::Reply(overloaded())
            }
            Overload::Allow => {
                rule::record(&self.config, host, id, || record(Answer::Unchecked));
                self.admitted(host, id, None, false);
                Verdict::Admit(None)
            }
        }
    }

    /// Refuses held request `id` (or lets it through, if `overload: allow`):
    /// the worker is overloaded.
    pub(in crate::worker) fn shed(&mut self, host: &mut dyn Host, id: CallId, now_ms: u64) {
        let Some(p) = self.calls.remove(id) else { return };
        match p.call {
            Call::Decide => {}
            Call::Part(_) => return self.part_shed(host, &p),
            Call::Settle(_) => return self.settle_failed(host, &p),
            Call::GiveBack(_) => {
                host.count(Stat::Shape(ShapeStat::GiveBackFailed), 1);
                return self.holding.returned(id);
            }
            Call::Flush(_) => return self.flush_failed(host, id, p, &Failure::NoResponse, now_ms),
        }
        let CallId::Request(id) = id else { return };
        self.holding.leave(id);
        let verdict = self.overloaded(host, id, &p.checks);
        self.deliveries.deliver(host, id, verdict);
    }
}
