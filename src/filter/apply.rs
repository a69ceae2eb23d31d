//! Applying a store answer (or a failure) to one request: stats, shadow mode,
//! the denial cache, and then resume or a local reply. Runs with the
//! request's context as the effective one: from its own callback, or from
//! the root after [`set_context`].

use super::root::Shared;
use crate::batch::Answer;
use crate::config::FailureMode;
use crate::limiter::{Check, Decision};
use crate::response::{self, LocalReply, SHADOW_HEADER};
use crate::store::{Failure, Outcome};
use crate::verdict::{is_shadow, rule_outcomes, verdict, Verdict};
use proxy_wasm::hostcalls;
use proxy_wasm::types::{Action, MapType};

/// Makes `context` the effective context; false if it no longer exists.
pub fn set_context(context: u32) -> bool {
    hostcalls::set_effective_context(context).is_ok()
}

/// Resumes the effective request when `resume` is set and the action says so.
fn finish(action: Action, resume: bool) -> Action {
    if resume && action == Action::Continue {
        if let Err(status) = hostcalls::resume_http_request() {
            log::warn!("tollgate: could not resume request: {status:?}");
        }
    }
    action
}

pub fn send(reply: &LocalReply) {
    let headers: Vec<(&str, &str)> = reply.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    if let Err(status) = hostcalls::send_http_response(reply.status, headers, Some(&reply.body)) {
        log::warn!("tollgate: could not send local reply: {status:?}");
    }
}

/// Applies the store's answer for request `id`. With `resume`, a paused
/// request is resumed here (callbacks other than the request headers one).
pub fn apply_answer(shared: &Shared, answer: Answer, resume: bool) -> Action {
    let id = answer.request;
    let action = match answer.outcome {
        Ok(Outcome::Decided(decision)) => decided(shared, id, &answer.checks, &decision),
        Ok(Outcome::NoScript) => fail(shared, id, &Failure::NoScriptAfterEval),
        Ok(Outcome::Failed(failure)) | Err(failure) => fail(shared, id, &failure),
    };
    shared.arrivals.borrow_mut().remove(&id);
    finish(action, resume)
}

/// Applies `failure_mode` to request `id`.
pub fn apply_failure(shared: &Shared, id: u32, failure: &Failure, resume: bool) -> Action {
    let action = fail(shared, id, failure);
    shared.arrivals.borrow_mut().remove(&id);
    finish(action, resume)
}

fn fail(shared: &Shared, _id: u32, failure: &Failure) -> Action {
    shared.log_failure(failure);
    shared.metrics.store_error(failure.kind());
    if failure.may_have_run() {
        shared.metrics.unknown_outcome();
    }
    match shared.config.failure_mode {
        FailureMode::Allow => {
            shared.metrics.failure_mode(true);
            Action::Continue
        }
        FailureMode::Deny => {
            shared.metrics.failure_mode(false);
            send(&response::store_unavailable());
            Action::Pause
        }
    }
}

/// Counts the decision per rule, remembers denied buckets, and admits or
/// denies the request.
pub fn decided(shared: &Shared, id: u32, checks: &[Check], decision: &Decision) -> Action {
    let config = &shared.config;
    for (rule, outcome) in rule_outcomes(config, checks, decision) {
        shared.metrics.rule(rule, outcome);
    }
    remember_denials(shared, id, checks, decision);
    let names = response::policy_names(config, checks, decision);
    match verdict(config, checks, decision, &names) {
        Verdict::Admit { shadow_denied } => {
            if !shadow_denied.is_empty() {
                let value = shadow_denied.join(", ");
                let _ = hostcalls::set_map_value(MapType::HttpRequestHeaders, SHADOW_HEADER, Some(&value));
            }
            let headers = response::allowed_headers(config, checks, decision);
            if !headers.is_empty() {
                shared.response_headers.borrow_mut().insert(id, headers);
            }
            Action::Continue
        }
        Verdict::Deny => {
            send(&response::denied(config, checks, decision));
            Action::Pause
        }
    }
}

/// Enforced buckets that denied are denied locally until they could fit,
/// counted from the request's arrival (never later than the store's view).
fn remember_denials(shared: &Shared, id: u32, checks: &[Check], decision: &Decision) {
    let Some(arrival) = shared.arrivals.borrow().get(&id).copied() else { return };
    let mut cache = shared.cache.borrow_mut();
    for (i, check) in checks.iter().enumerate() {
        if is_shadow(&shared.config, check) {
            continue;
        }
        let windows: Vec<_> = decision
            .windows
            .iter()
            .filter(|w| w.check == i)
            .map(|w| crate::limiter::WindowOutcome { check: 0, ..*w })
            .collect();
        let retry = windows.iter().map(|w| w.retry_ms).max().unwrap_or(0);
        if retry > 0 {
            cache.insert(&check.key, arrival.saturating_add(retry), arrival, windows);
        }
    }
}

/// Denies the request from the local cache if one of its enforced buckets
/// is known to deny now; `now` is the request's clock.
pub fn deny_from_cache(shared: &Shared, checks: &[Check], now: u64) -> Option<Action> {
    let hit = checks.iter().find_map(|check| {
        if is_shadow(&shared.config, check) {
            return None;
        }
        let windows = shared.cache.borrow_mut().lookup(&check.key, now)?;
        Some((check.clone(), windows))
    })?;
    let (check, windows) = hit;
    shared.metrics.cache_hit();
    let rule = check.rule;
    let single = [check];
    let decision = Decision { allowed: false, now_ms: now, windows };
    shared.metrics.rule(rule, crate::verdict::RuleOutcome::Denied);
    send(&response::denied(&shared.config, &single, &decision));
    Some(Action::Pause)
}
