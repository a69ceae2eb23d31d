//! Carrying out a ruling on a request: its rules counted, its denials
//! remembered in the denial cache, and its verdict.

use crate::config::Config;
use crate::limiter::{Check, Decision};
use crate::worker::counting::owed::Settlements;
use crate::worker::cx::Cx;
use crate::worker::decision::record::{Answer, Decider, Record};
use crate::worker::decision::ruling::{cacheable, cap_denials, remember, respond, Action, Ruling};
use crate::worker::host::{Flow, Host, ResponseHeaders, Stat};
use crate::worker::verdict::Verdict;

/// Counts a ruling's rules, remembers its denials, and gives its verdict.
pub(in crate::worker) fn rule(
    cx: &mut Cx<'_>,
    mut ruling: Ruling,
    arrival_ms: u64,
    headers: &ResponseHeaders,
) -> Verdict {
    for (rule, outcome) in &ruling.rules {
        cx.host.count(Stat::Rule(*rule, *outcome), 1);
    }
    if cx.streams.clustered() && cx.config.rules.len() > 1 {
        cap_denials(&mut ruling.denials, arrival_ms);
    }
    remember(cx.cache, ruling.denials, arrival_ms);
    match ruling.action {
        Action::Admit { shadow_denied, headers: extra } => {
            if let Ok(mut h) = headers.try_borrow_mut() {
                *h = extra;
            }
            Verdict::Admit(shadow_denied)
        }
        Action::Deny(reply) => Verdict::Reply(reply),
    }
}

/// A ruling for request `id`, being started, in its own callback.
pub(in crate::worker) fn rule_now(cx: &mut Cx<'_>, id: u32, ruling: Ruling, headers: &ResponseHeaders) -> Flow {
    // Only cache denials are ruled on at once: nothing to remember.
    let verdict = rule(cx, ruling, 0, headers);
    answer_now(cx.host, id, verdict)
}

/// A decision the worker made by itself (`decided`: its checks, the
/// decision, who made it: the local limiter, a synced rule's view) for
/// request `id` at `at_ms`: recorded, counted; its denials are not
/// remembered (the cache holds the store's).
pub(in crate::worker) fn rule_by_worker(
    cx: &mut Cx<'_>,
    id: u32,
    decided: (&[Check], &Decision, Decider),
    at_ms: u64,
    headers: &ResponseHeaders,
) -> Verdict {
    let (checks, decision, decider) = decided;
    let mut ruling = respond(cx.config, checks, decision, at_ms);
    ruling.denials.clear();
    let answer = answer_of(&ruling.action);
    record_decision(cx.config, cx.host, id, (checks, decision), (decider, answer, None));
    rule(cx, ruling, at_ms, headers)
}

/// What the store's `decision` over `checks` makes of request `id`:
/// recorded (with the call's round trip, `store_ms`, when one call
/// decided it), counted, its denials remembered (not those of a
/// reservation of its own), and what it owes noted if admitted.
#[allow(clippy::too_many_arguments)]
pub(in crate::worker) fn rule_decided(
    cx: &mut Cx<'_>,
    settlements: &mut Settlements,
    id: u32,
    checks: &[Check],
    decision: &Decision,
    arrival_ms: u64,
    headers: &ResponseHeaders,
    store_ms: Option<u64>,
) -> Verdict {
    let config = cx.config;
    if settlements.active() {
        settlements.admitted(cx.host, config, id, Some(decision), false);
    }
    let mut ruling = respond(config, checks, decision, arrival_ms);
    if settlements.active() {
        ruling.denials.retain(|d| cacheable(config, checks, &d.key));
    }
    let answer = answer_of(&ruling.action);
    let how = (Decider::Store, answer, store_ms);
    record_decision(config, cx.host, id, (checks, decision), how);
    rule(cx, ruling, arrival_ms, headers)
}

/// Sets request `id`'s decision, made by `make`, as its filter state,
/// unless `response.filter_state` is off: then it is never made.
pub(in crate::worker) fn record<'a>(config: &Config, host: &mut dyn Host, id: u32, make: impl FnOnce() -> Record<'a>) {
    if config.response.filter_state {
        host.decided(id, &make());
    }
}

/// [`record`] of a decision over `checks`: who decided, what the request
/// got, and the store's round trip if one call decided it.
fn record_decision(
    config: &Config,
    host: &mut dyn Host,
    id: u32,
    decided: (&[Check], &Decision),
    how: (Decider, Answer, Option<u64>),
) {
    let ((checks, decision), (decider, answer, store_ms)) = (decided, how);
    record(config, host, id, || Record::Decided { config, checks, decision, decider, answer, store_ms });
}

/// What a ruling's action gives the request.
pub(in crate::worker) fn answer_of(action: &Action) -> Answer {
    match action {
        Action::Deny(_) => Answer::Denied,
        Action::Admit { shadow_denied: Some(_), .. } => Answer::ShadowDenied,
        Action::Admit { shadow_denied: None, .. } => Answer::Allowed,
    }
}

/// What the request being started does next, with its verdict given in
/// its own callback.
pub(in crate::worker) fn answer_now(host: &mut dyn Host, id: u32, verdict: Verdict) -> Flow {
    match verdict {
        Verdict::Admit(_) | Verdict::AdmitDelayed(..) | Verdict::Resume(_) => Flow::Continue,
        Verdict::Reply(reply) => {
            host.reply(id, &reply);
            Flow::Pause
        }
    }
}
