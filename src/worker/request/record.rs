//! What the worker decided about one request, for Envoy's access log: who
//! decided, what the request got, its rules, the windows that denied it,
//! what remains in each window and the store's round trip. The filter sets
//! it as filter state ([`DecisionRecord::plain`]), read by
//! `%FILTER_STATE(wasm.tollgate.decision:PLAIN)%`.

use crate::config::Config;
use crate::limiter::{Check, Decision};
use crate::response::policy_names;
use crate::text::push_u64;

/// The filter state key the filter sets (Envoy prefixes it with `wasm.`).
pub const DECISION_PROPERTY: &str = "tollgate.decision";

/// Who decided a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decider {
    /// The store's decision.
    Store,
    /// The local denial cache, without a store call.
    Cache,
    /// The local limiter of `failure_mode: local`.
    Local,
    /// A synced rule's view on the worker (`rules[].sync`).
    Sync,
    /// `failure_mode: allow` or `deny`: the store could not decide.
    FailureMode,
    /// `overload`: the worker could not take the request.
    Overload,
}

impl Decider {
    pub fn name(self) -> &'static str {
        match self {
            Decider::Store => "store",
            Decider::Cache => "cache",
            Decider::Local => "local",
            Decider::Sync => "sync",
            Decider::FailureMode => "failure_mode",
            Decider::Overload => "overload",
        }
    }
}

/// What the request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Every window had room.
    Allowed,
    /// A window of an enforced rule denied: the denial status.
    Denied,
    /// Only windows of rules in shadow mode denied: forwarded.
    ShadowDenied,
    /// Forwarded without a decision (`failure_mode: allow`, `overload: allow`).
    Unchecked,
    /// Refused with `503` (`failure_mode: deny`, `overload: reject`).
    Refused,
}

impl Answer {
    pub fn name(self) -> &'static str {
        match self {
            Answer::Allowed => "allowed",
            Answer::Denied => "denied",
            Answer::ShadowDenied => "shadow_denied",
            Answer::Unchecked => "unchecked",
            Answer::Refused => "refused",
        }
    }
}

/// One request's decision, as the access log shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionRecord {
    pub decider: Decider,
    pub answer: Answer,
    /// The matching rules, in check order.
    pub rules: Vec<String>,
    /// The windows (policy names, `rule/period`) that denied the request.
    pub denied_by: Vec<String>,
    /// Units left in each window after the decision: `(policy, remaining)`.
    pub remaining: Vec<(String, u64)>,
    /// The round trip of the store call that decided it, in ms.
    pub store_ms: Option<u64>,
}

impl DecisionRecord {
    /// A request decided over `checks` (by the store, the cache or the
    /// local limiter) that got `answer`.
    pub fn decided(config: &Config, checks: &[Check], decision: &Decision, decider: Decider, answer: Answer) -> Self {
        DecisionRecord::named(config, checks, decision, &policy_names(config, checks, decision), decider, answer)
    }

    /// [`DecisionRecord::decided`], with the decision's policy names already made.
    pub fn named(
        config: &Config,
        checks: &[Check],
        decision: &Decision,
        names: &[&str],
        decider: Decider,
        answer: Answer,
    ) -> Self {
        let denied_by = decision.windows.iter().zip(names).filter(|(w, _)| w.denied());
        DecisionRecord {
            decider,
            answer,
            rules: rule_names(config, checks),
            denied_by: denied_by.map(|(_, n)| (*n).to_owned()).collect(),
            remaining: decision.windows.iter().zip(names).map(|(w, n)| ((*n).to_owned(), w.remaining)).collect(),
            store_ms: None,
        }
    }

    /// A request no one decided (`failure_mode: allow` or `deny`, overload).
    pub fn undecided(config: &Config, checks: &[Check], decider: Decider, answer: Answer) -> Self {
        let rules = rule_names(config, checks);
        DecisionRecord { decider, answer, rules, denied_by: Vec::new(), remaining: Vec::new(), store_ms: None }
    }

    /// One line of `key=value` fields, `-` for none, lists joined by `,`:
    /// `decider=store answer=denied rules=auth.createToken
    /// denied_by=auth.createToken/3s remaining=auth.createToken/60s:15,auth.createToken/3s:0 store_ms=1`.
    pub fn plain(&self) -> String {
        // Room for the names and a u64 per number, so that it never grows.
        let names: usize = self.rules.iter().chain(&self.denied_by).map(|n| n.len() + 1).sum();
        let remaining: usize = self.remaining.iter().map(|(policy, _)| policy.len() + 22).sum();
        let mut out = String::with_capacity(96 + names + remaining);
        out.push_str("decider=");
        out.push_str(self.decider.name());
        out.push_str(" answer=");
        out.push_str(self.answer.name());
        out.push_str(" rules=");
        push_list(&mut out, self.rules.iter().map(String::as_str));
        out.push_str(" denied_by=");
        push_list(&mut out, self.denied_by.iter().map(String::as_str));
        out.push_str(" remaining=");
        if self.remaining.is_empty() {
            out.push('-');
        }
        for (i, (policy, left)) in self.remaining.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(policy);
            out.push(':');
            push_u64(&mut out, *left);
        }
        out.push_str(" store_ms=");
        match self.store_ms {
            Some(ms) => push_u64(&mut out, ms),
            None => out.push('-'),
        }
        out
    }
}

/// The names of the rules of `checks`, each once, in check order.
fn rule_names(config: &Config, checks: &[Check]) -> Vec<String> {
    let mut names: Vec<String> = Vec::with_capacity(checks.len());
    for rule in checks.iter().filter_map(|c| config.rules.get(c.rule)) {
        if !names.contains(&rule.name) {
            names.push(rule.name.clone());
        }
    }
    names
}

fn push_list<'a>(out: &mut String, items: impl Iterator<Item = &'a str>) {
    let mut none = true;
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(item);
        none = false;
    }
    if none {
        out.push('-');
    }
}

#[cfg(test)]
mod tests;
