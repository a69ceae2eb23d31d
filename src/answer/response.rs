//! What the filter sends: headers for admitted requests and the local reply
//! for denied ones, built from a [`Decision`]. Pure; the filter only copies
//! the result into Envoy.

use crate::answer::headers::{
    push_state_params, ratelimit, ratelimit_policy, retry_after_secs, t_ms, x_ratelimit, PolicyStat,
    CONCURRENCY_SUFFIX, RATELIMIT_HEADER, RATELIMIT_POLICY_HEADER,
};
use crate::answer::problem::{quota_exceeded, reduced_capacity, PROBLEM_CONTENT_TYPE};
use crate::answer::text::u64_string;
use crate::config::{Body, Config, Rule};
use crate::limiter::{Algorithm, Check, Decision, WindowOutcome};
use std::borrow::Cow;

/// Request header that tells the upstream which policies would have denied
/// a request that shadow mode let through (`"rule/period", ...`).
pub const SHADOW_HEADER: &str = "x-tollgate-shadow-denied";
/// The request header that tells the upstream how long (ms) a request was
/// held for its turn (shaping, docs/shaping.md); a client's own is removed.
pub const DELAY_HEADER: &str = "x-tollgate-delay-ms";
/// The response header that tells the client the same:
/// `tollgate-delay;dur=<ms>`.
pub const SERVER_TIMING: &str = "server-timing";

/// A response the filter answers itself instead of forwarding the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalReply {
    pub status: u32,
    /// Envoy's response code details (`%RESPONSE_CODE_DETAILS%`): tollgate
    /// and the reason, one of the `DETAILS_*` constants.
    pub details: &'static str,
    /// Names are the filter's own (static: no copy per reply).
    pub headers: Vec<Header>,
    pub body: Vec<u8>,
}

/// Policy names (`"<rule>/<period>"`, `"<rule>/concurrency"`), one per
/// window of the decision, borrowed from the names built at configuration
/// time ([`crate::config::Rule::policy_names`],
/// [`crate::config::Concurrency::policy_name`]). Computed once per request
/// and passed to the builders below.
pub fn policy_names<'a>(config: &'a Config, checks: &[Check], decision: &Decision) -> Vec<&'a str> {
    decision.windows.iter().map(|w| policy_name(config, checks, w)).collect()
}

/// The policy name of window `w` of a decision over `checks` (`unknown`
/// for a window of no configured rule, or of a concurrency limit its rule
/// does not have).
pub fn policy_name<'a>(config: &'a Config, checks: &[Check], w: &WindowOutcome) -> &'a str {
    let check = checks.get(w.check);
    let rule = check.and_then(|c| config.rules.get(c.rule));
    let name = match (rule, check.map(|c| c.algorithm)) {
        (Some(r), Some(Algorithm::Lease)) => r.concurrency.as_ref().map(|c| &c.policy_name),
        (Some(r), _) => r.policy_names.get(w.window),
        (None, _) => None,
    };
    name.map_or("unknown", String::as_str)
}

/// The algorithm of the policy named `name` (one of [`policy_names`]):
/// [`Algorithm::Lease`] for a concurrency limit's (`"<rule>/concurrency"`,
/// which no window's name can be: see [`CONCURRENCY_SUFFIX`]), else its
/// rule's (the default for `unknown`).
pub fn algorithm_of(config: &Config, name: &str) -> Algorithm {
    if name.ends_with(CONCURRENCY_SUFFIX) {
        return Algorithm::Lease;
    }
    let rule = name.split_once('/').and_then(|(rule, _)| config.rules.iter().find(|r| r.name == rule));
    rule.map_or_else(Algorithm::default, |r| r.algorithm)
}

fn stats<'a>(config: &Config, names: &[&'a str], decision: &'a Decision) -> Vec<PolicyStat<'a>> {
    names
        .iter()
        .zip(&decision.windows)
        .map(|(name, outcome)| PolicyStat { name, outcome, algorithm: algorithm_of(config, name) })
        .collect()
}

/// A header the filter adds: its name is the filter's own (static: no copy
/// per request), its value made for the request.
pub type Header = (Cow<'static, str>, String);

/// The rate-limit headers of the configured families (`response.headers`):
/// draft-11 `RateLimit-Policy`/`RateLimit` for every window and
/// concurrency limit, and/or `X-RateLimit-*` for the most constrained
/// window. `names` are the decision's [`policy_names`].
pub fn ratelimit_headers(config: &Config, names: &[&str], decision: &Decision) -> Vec<Header> {
    headers_of(config, &stats(config, names, decision))
}

/// A decision's `RateLimit-Policy` or `RateLimit` value joined from items
/// made at configuration time, each finished by `item` from its check,
/// its rule and its window (`None` when a window is not its rule's
/// configured one: then the value is formatted from the policy names, as
/// [`ratelimit_policy`] and [`ratelimit`] do).
fn configured(
    config: &Config,
    checks: &[Check],
    decision: &Decision,
    item: impl Fn(&mut String, &Check, &Rule, &WindowOutcome) -> Option<()>,
) -> Option<String> {
    let mut out = String::with_capacity(decision.windows.len() * 48);
    for (i, w) in decision.windows.iter().enumerate() {
        let check = checks.get(w.check)?;
        let rule = config.rules.get(check.rule)?;
        if i > 0 {
            out.push_str(", ");
        }
        item(&mut out, check, rule, w)?;
    }
    Some(out)
}

/// The `RateLimit-Policy` value from the rules' items
/// ([`Rule::policy_items`], [`crate::config::Concurrency::policy_item`]),
/// when every window is its rule's configured one.
fn configured_policy(config: &Config, checks: &[Check], decision: &Decision) -> Option<String> {
    configured(config, checks, decision, |out, check, rule, w| {
        let (limit, period_ms, item) = match (check.algorithm, &rule.concurrency) {
            (Algorithm::Lease, Some(c)) if w.window == 0 => (c.limit, c.lease_ttl_ms, &c.policy_item),
            (Algorithm::Lease, _) => return None,
            _ => {
                let limit = rule.limits.get(w.window)?;
                (limit.limit, limit.period.ms(), rule.policy_items.get(w.window)?)
            }
        };
        if limit.get() != w.limit || period_ms.get() != w.period_ms {
            return None;
        }
        out.push_str(item);
        Some(())
    })
}

/// The `RateLimit` value from the rules' quoted policy names
/// ([`Rule::quoted_names`], [`crate::config::Concurrency::quoted_name`])
/// and each window's state.
fn configured_state(config: &Config, checks: &[Check], decision: &Decision) -> Option<String> {
    configured(config, checks, decision, |out, check, rule, w| {
        let quoted = match check.algorithm {
            Algorithm::Lease => &rule.concurrency.as_ref()?.quoted_name,
            _ => rule.quoted_names.get(w.window)?,
        };
        out.push_str(quoted);
        push_state_params(out, w, check.algorithm);
        Some(())
    })
}

/// [`allowed_headers`] for a decision over `checks`: the same headers, the
/// `RateLimit` ones joined from items made at configuration time (the
/// policy names are made only where those do not serve).
pub fn allowed_headers_of(config: &Config, checks: &[Check], decision: &Decision) -> Vec<Header> {
    let families = &config.response;
    if !families.on_allowed || decision.windows.is_empty() {
        return Vec::new();
    }
    let names = || policy_names(config, checks, decision);
    let mut out = Vec::with_capacity(5);
    if families.ratelimit_headers {
        let policy = configured_policy(config, checks, decision)
            .unwrap_or_else(|| ratelimit_policy(&stats(config, &names(), decision)));
        let state =
            configured_state(config, checks, decision).unwrap_or_else(|| ratelimit(&stats(config, &names(), decision)));
        out.push((Cow::Borrowed(RATELIMIT_POLICY_HEADER), policy));
        out.push((Cow::Borrowed(RATELIMIT_HEADER), state));
    }
    if families.x_ratelimit_headers {
        push_x_ratelimit(&mut out, &stats(config, &names(), decision));
    }
    out
}

/// The headers of the configured families for the windows `all`.
fn headers_of(config: &Config, all: &[PolicyStat<'_>]) -> Vec<Header> {
    // Room for every header a denial adds too (Retry-After, Content-Type).
    let mut out = Vec::with_capacity(7);
    if all.is_empty() {
        return out;
    }
    if config.response.ratelimit_headers {
        out.push((Cow::Borrowed(RATELIMIT_POLICY_HEADER), ratelimit_policy(all)));
        out.push((Cow::Borrowed(RATELIMIT_HEADER), ratelimit(all)));
    }
    if config.response.x_ratelimit_headers {
        push_x_ratelimit(&mut out, all);
    }
    out
}

/// The `X-RateLimit-*` headers of the most constrained window of `all`:
/// the fewest remaining, on a tie the longest `t`. A concurrency limit is
/// not a rate and has no reset: it is not shown there (a denial it caused
/// still says so in `Retry-After` and the body).
fn push_x_ratelimit(out: &mut Vec<Header>, all: &[PolicyStat<'_>]) {
    let t = |s: &PolicyStat<'_>| t_ms(s.outcome, s.algorithm).unwrap_or(0);
    let tightest = all
        .iter()
        .filter(|s| s.algorithm != Algorithm::Lease)
        .min_by(|a, b| a.outcome.remaining.cmp(&b.outcome.remaining).then(t(b).cmp(&t(a))));
    if let Some(item) = tightest {
        out.extend(x_ratelimit(item).map(|(k, v)| (Cow::Borrowed(k), v)));
    }
}

/// Headers for the upstream's response to an admitted request (none when
/// `response.on_allowed` is false).
pub fn allowed_headers(config: &Config, names: &[&str], decision: &Decision) -> Vec<Header> {
    if config.response.on_allowed {
        ratelimit_headers(config, names, decision)
    } else {
        Vec::new()
    }
}

/// The denial: the configured status, rate-limit headers, `Retry-After`
/// (always) and the configured body.
///
/// A window that denied the request shows, as its `t` (and
/// `X-RateLimit-Reset`), the time until the request fits it (its
/// `retry_ms`, [`t_ms`]) rather than until it is empty: the draft-11
/// "effective window", the time within which the client can use no more
/// than its available quota, 0. So `Retry-After`, the largest `retry_ms`,
/// is never earlier than the `t` of any violated window. A full
/// concurrency limit's `retry_ms` is until its earliest lease expires: a
/// bound for leases nobody renews, as a request that ends frees its lease
/// at once (and one that goes on renews it).
pub fn denied(config: &Config, names: &[&str], decision: &Decision) -> LocalReply {
    let all = stats(config, names, decision);
    let violated: Vec<PolicyStat<'_>> = all.iter().filter(|s| s.outcome.denied()).copied().collect();
    let retry_ms = decision.retry_after_ms();
    let mut headers = headers_of(config, &all);
    headers.push((Cow::Borrowed("retry-after"), u64_string(retry_after_secs(retry_ms))));
    let status = config.response.status;
    let body = match &config.response.body {
        Body::ProblemJson => {
            headers.push((Cow::Borrowed("content-type"), PROBLEM_CONTENT_TYPE.to_string()));
            quota_exceeded(&violated, retry_ms, status).into_bytes()
        }
        Body::Text(text) => {
            headers.push((Cow::Borrowed("content-type"), "text/plain; charset=utf-8".to_string()));
            text.clone().into_bytes()
        }
        Body::None => Vec::new(),
    };
    LocalReply { status: u32::from(status), details: DETAILS_QUOTA_EXCEEDED, headers, body }
}

/// Response code details of a denial (the store's, the denial cache's or
/// the local limiter's).
pub const DETAILS_QUOTA_EXCEEDED: &str = "tollgate_quota_exceeded";
/// Response code details of [`overloaded`].
pub const DETAILS_OVERLOADED: &str = "tollgate_overloaded";
/// Response code details of [`store_unavailable`].
pub const DETAILS_STORE_UNAVAILABLE: &str = "tollgate_store_unavailable";

/// Detail of the 503 of an overloaded worker ([`overloaded`]).
pub const OVERLOADED_DETAIL: &str = "rate limiter overloaded";
/// Detail of the 503 of an unavailable store ([`store_unavailable`]).
pub const STORE_UNAVAILABLE_DETAIL: &str = "rate limit store unavailable";

/// The 503 of a request refused because the worker is overloaded: its
/// queue is full, or it waited `max_wait` for a store that keeps answering
/// others. Never admitted unchecked.
pub fn overloaded() -> LocalReply {
    reduced(OVERLOADED_DETAIL, DETAILS_OVERLOADED)
}

/// The 503 of `failure_mode: deny` when the store cannot answer.
pub fn store_unavailable() -> LocalReply {
    reduced(STORE_UNAVAILABLE_DETAIL, DETAILS_STORE_UNAVAILABLE)
}

/// A `503`, `Retry-After: 1`, with a `temporary-reduced-capacity` body.
fn reduced(detail: &str, details: &'static str) -> LocalReply {
    LocalReply {
        status: 503,
        details,
        headers: vec![
            (Cow::Borrowed("retry-after"), "1".to_string()),
            (Cow::Borrowed("content-type"), PROBLEM_CONTENT_TYPE.to_string()),
        ],
        body: reduced_capacity(detail, 1).into_bytes(),
    }
}

#[cfg(test)]
mod tests;
