//! What a request gets when the store cannot decide it (`failure_mode`:
//! allow, deny, or the local limiter), and when the worker cannot take it
//! (`overload`: reject, or allow when explicitly asked).

use crate::answer::response::{self, store_unavailable};
use crate::config::{FailureMode, Overload};
use crate::limiter::{Check, Decision};
use crate::store::Failure;
use crate::worker::calls::Pending;
use crate::worker::counting::owed::Settlements;
use crate::worker::cx::Cx;
use crate::worker::decision::record::{Answer, Decider, DecisionRecord, Record};
use crate::worker::host::Throttle;
use crate::worker::host::{Flow, Level, ResponseHeaders, Stat};
use crate::worker::request::rule::{self, answer_now};
use crate::worker::synced::Syncing;
use crate::worker::verdict::Verdict;

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

/// Counts and logs a failure and gives what `failure_mode` makes of it
/// (an admission is noted where the request owes: its counting rules,
/// and under `failure_mode: local` the synced buckets the store learns of
/// at the next flush).
pub(in crate::worker) fn failure(
    cx: &mut Cx<'_>,
    (settlements, synced): (&mut Settlements, &mut Syncing),
    failure: &Failure,
    request: &Failing<'_>,
    now_ms: u64,
) -> Verdict {
    let host = &mut *cx.host;
    if cx.log.due(now_ms) {
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
    let config = cx.config;
    let undecided =
        |answer| Record::Made(DecisionRecord::undecided(config, request.checks, Decider::FailureMode, answer));
    match config.failure_mode {
        FailureMode::Allow => {
            host.count(Stat::FailureMode { allowed: true }, 1);
            rule::record(config, host, request.id, || undecided(Answer::Unchecked));
            settlements.admitted(host, config, request.id, None, false);
            Verdict::Admit(None)
        }
        FailureMode::Deny => {
            host.count(Stat::FailureMode { allowed: false }, 1);
            rule::record(config, host, request.id, || undecided(Answer::Refused));
            Verdict::Reply(store_unavailable())
        }
        FailureMode::Local => {
            let decision = cx.local.decide(request.checks, request.at_ms);
            host.count(Stat::Local { allowed: decision.allowed }, 1);
            if decision.allowed {
                // The store learns it at the next flush it answers.
                for check in request.checks.iter().filter(|c| c.recorded() > 0) {
                    synced.carry(check, check.recorded());
                }
            }
            settlements.admitted(host, config, request.id, Some(&decision), true);
            let decided = (request.checks, &decision, Decider::Local);
            rule::rule_by_worker(cx, request.id, decided, request.at_ms, request.headers)
        }
    }
}

/// The store decided `p`: under `failure_mode: local`, its buckets'
/// local counts start from the store's answer.
pub(in crate::worker) fn learn(cx: &mut Cx<'_>, p: &Pending, decision: &Decision, now_ms: u64) {
    if cx.config.failure_mode == FailureMode::Local {
        cx.local.learn(&p.checks, decision, Failing::of(0, p, now_ms).at_ms);
    }
}

/// `failure_mode` for the request being started, in its own callback.
pub(in crate::worker) fn fail_now(
    cx: &mut Cx<'_>,
    owes: (&mut Settlements, &mut Syncing),
    failure: &Failure,
    request: &Failing<'_>,
    now_ms: u64,
) -> Flow {
    cx.streams.suspect(failure, now_ms);
    let verdict = self::failure(cx, owes, failure, request, now_ms);
    answer_now(cx.host, request.id, verdict)
}

/// What `overload` makes of request `id` over `checks` that the worker
/// cannot take (counted, recorded; an admission noted where it owes).
pub(in crate::worker) fn overloaded(
    cx: &mut Cx<'_>,
    settlements: &mut Settlements,
    id: u32,
    checks: &[Check],
) -> Verdict {
    let (host, config) = (&mut *cx.host, cx.config);
    host.count(Stat::Overloaded, 1);
    let record = |answer| Record::Made(DecisionRecord::undecided(config, checks, Decider::Overload, answer));
    match config.overload {
        Overload::Reject => {
            rule::record(config, host, id, || record(Answer::Refused));
            Verdict::Reply(response::overloaded())
        }
        Overload::Allow => {
            rule::record(config, host, id, || record(Answer::Unchecked));
            settlements.admitted(host, config, id, None, false);
            Verdict::Admit(None)
        }
    }
}
