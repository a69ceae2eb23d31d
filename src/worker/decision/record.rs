//! What the worker decided about one request, for Envoy's access log: who
//! decided, what the request got, its rules, the windows that denied it,
//! what remains in each window, the store's round trip, and the rules
//! whose per-key override applied (`overrides`). The filter sets
//! it as filter state ([`DecisionRecord::plain`]), read by
//! `%FILTER_STATE(wasm.tollgate.decision:PLAIN)%`.

use crate::answer::response::{policy_name, policy_names};
use crate::answer::text::push_u64;
use crate::config::Config;
use crate::limiter::{Check, Decision, WindowOutcome};

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
    /// The rules whose per-key override applied (a window's limit in force
    /// was an override's), each once, in check order.
    pub overridden: Vec<String>,
}

impl DecisionRecord {
    /// A request decided over `checks` (by the store, the cache or the
    /// local limiter) that got `answer`.
    pub fn decided(config: &Config, checks: &[Check], decision: &Decision, decider: Decider, answer: Answer) -> Self {
        let names = policy_names(config, checks, decision);
        let names = names.as_slice();
        let denied_by = decision.windows.iter().zip(names).filter(|(w, _)| w.denied());
        DecisionRecord {
            decider,
            answer,
            rules: rule_names(config, checks),
            denied_by: denied_by.map(|(_, n)| (*n).to_owned()).collect(),
            remaining: decision.windows.iter().zip(names).map(|(w, n)| ((*n).to_owned(), w.remaining)).collect(),
            store_ms: None,
            overridden: overridden_rules(config, checks, decision).map(str::to_owned).collect(),
        }
    }

    /// A request no one decided (`failure_mode: allow` or `deny`, overload).
    pub fn undecided(config: &Config, checks: &[Check], decider: Decider, answer: Answer) -> Self {
        let rules = rule_names(config, checks);
        let (denied_by, remaining, overridden) = (Vec::new(), Vec::new(), Vec::new());
        DecisionRecord { decider, answer, rules, denied_by, remaining, store_ms: None, overridden }
    }

    /// One line of `key=value` fields, `-` for none, lists joined by `,`:
    /// `decider=store answer=denied rules=auth.createToken
    /// denied_by=auth.createToken/3s remaining=auth.createToken/60s:15,auth.createToken/3s:0 store_ms=1`,
    /// and ` override=<rule>,...` after it only when an override applied.
    pub fn plain(&self) -> String {
        let mut out = String::new();
        self.push_plain(&mut out);
        out
    }

    /// [`DecisionRecord::plain`], appended to `out`.
    pub fn push_plain(&self, out: &mut String) {
        let pairs = self.remaining.iter().map(|(policy, left)| (policy.as_str(), *left));
        let (rules, denied_by) = (self.rules.iter().map(String::as_str), self.denied_by.iter().map(String::as_str));
        push_plain(out, self.decider, self.answer, rules, denied_by, pairs, self.store_ms);
        push_overridden(out, self.overridden.iter().map(String::as_str));
    }
}

/// A request's record as the worker hands it to its host: the filter makes
/// it into text ([`Record::plain`]) straight from the decision, with no
/// record in between; the model host keeps it whole ([`Record::to_record`]).
pub enum Record<'a> {
    /// Decided over `checks`.
    Decided {
        config: &'a Config,
        checks: &'a [Check],
        decision: &'a Decision,
        decider: Decider,
        answer: Answer,
        store_ms: Option<u64>,
    },
    /// Made already.
    Made(DecisionRecord),
}

impl Record<'_> {
    /// [`DecisionRecord::plain`] of [`Record::to_record`].
    pub fn plain(&self) -> String {
        let mut out = String::new();
        self.push_plain(&mut out);
        out
    }

    /// [`Record::plain`], appended to `out` (the filter reuses one buffer).
    pub fn push_plain(&self, out: &mut String) {
        match self {
            Record::Made(record) => record.push_plain(out),
            Record::Decided { config, checks, decision, decider, answer, store_ms } => {
                let name = |w| policy_name(config, checks, w);
                let denied_by = decision.windows.iter().filter(|w| w.denied()).map(name);
                let pairs = decision.windows.iter().map(|w| (name(w), w.remaining));
                push_plain(out, *decider, *answer, unique_rules(config, checks), denied_by, pairs, *store_ms);
                push_overridden(out, overridden_rules(config, checks, decision));
            }
        }
    }

    pub fn to_record(&self) -> DecisionRecord {
        match self {
            Record::Made(record) => record.clone(),
            Record::Decided { config, checks, decision, decider, answer, store_ms } => {
                let record = DecisionRecord::decided(config, checks, decision, *decider, *answer);
                DecisionRecord { store_ms: *store_ms, ..record }
            }
        }
    }
}

/// Bytes reserved for a record's text before it is written.
const RECORD_ROOM: usize = 192;

/// The one formatter of [`DecisionRecord::plain`] and [`Record::plain`],
/// appending to `out`.
fn push_plain<'s>(
    out: &mut String,
    decider: Decider,
    answer: Answer,
    rules: impl Iterator<Item = &'s str>,
    denied_by: impl Iterator<Item = &'s str>,
    remaining: impl Iterator<Item = (&'s str, u64)>,
    store_ms: Option<u64>,
) {
    // Room for a usual line at once; the filter's buffer keeps what it
    // grew to, so the names are not measured first.
    out.reserve(RECORD_ROOM);
    out.push_str("decider=");
    out.push_str(decider.name());
    out.push_str(" answer=");
    out.push_str(answer.name());
    out.push_str(" rules=");
    push_list(out, rules);
    out.push_str(" denied_by=");
    push_list(out, denied_by);
    out.push_str(" remaining=");
    let mut none = true;
    for (i, (policy, left)) in remaining.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(policy);
        out.push(':');
        push_u64(out, left);
        none = false;
    }
    if none {
        out.push('-');
    }
    out.push_str(" store_ms=");
    match store_ms {
        Some(ms) => push_u64(out, ms),
        None => out.push('-'),
    }
}

/// ` override=<rule>,...` when `rules` has any; nothing otherwise (a line
/// without an override stays as it was).
fn push_overridden<'a>(out: &mut String, mut rules: impl Iterator<Item = &'a str>) {
    let Some(first) = rules.next() else { return };
    out.push_str(" override=");
    push_list(out, std::iter::once(first).chain(rules));
}

/// The names of the rules with a window whose limit came from an override,
/// each once, in window (so check) order, borrowed.
fn overridden_rules<'a>(
    config: &'a Config,
    checks: &'a [Check],
    decision: &'a Decision,
) -> impl Iterator<Item = &'a str> {
    let name = move |w: &WindowOutcome| {
        let check = checks.get(w.check).filter(|_| w.overridden)?;
        config.rules.get(check.rule).map(|r| r.name.as_str())
    };
    let windows = decision.windows.as_slice();
    windows.iter().enumerate().filter_map(move |(i, w)| {
        let n = name(w)?;
        let earlier = windows.get(..i).unwrap_or_default();
        (!earlier.iter().any(|e| name(e) == Some(n))).then_some(n)
    })
}

/// The names of the rules of `checks`, each once, in check order, borrowed.
fn unique_rules<'a>(config: &'a Config, checks: &'a [Check]) -> impl Iterator<Item = &'a str> + Clone {
    let name = move |c: &Check| config.rules.get(c.rule).map(|r| r.name.as_str());
    checks.iter().enumerate().filter_map(move |(i, c)| {
        let earlier = checks.get(..i).unwrap_or_default();
        name(c).filter(|n| !earlier.iter().any(|e| name(e) == Some(n)))
    })
}

/// The names of the rules of `checks`, each once, in check order.
fn rule_names(config: &Config, checks: &[Check]) -> Vec<String> {
    unique_rules(config, checks).map(str::to_owned).collect()
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
