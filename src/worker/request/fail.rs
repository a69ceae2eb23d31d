//! What a request gets when the store cannot decide it (`failure_mode`:
//! allow, deny, or the local limiter), and when the worker cannot take it
//! (`overload`: reject, or allow when explicitly asked).

use crate::config::{FailureMode, Overload};
use crate::limiter::{Check, Decision};
use crate::response::{overloaded, store_unavailable};
use crate::store::Failure;
use crate::worker::calls::Pending;
use crate::worker::host::Throttle;
use crate::worker::host::{Host, Level, ResponseHeaders, Stat};
use crate::worker::request::record::{Answer, Decider, DecisionRecord, Record};
use crate::worker::request::rule::{self, answer_now};
use crate::worker::request::verdict::Verdict;
use crate::worker::{Flow, Worker};

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
    pub fn of(id: u32, p: &'a Pending, now_ms: u64) -> Failing<'a> {
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
        self.streams.suspect(failure, now_ms);
        let verdict = self.failure(host, failure, request, now_ms);
        answer_now(host, id, verdict)
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
}
