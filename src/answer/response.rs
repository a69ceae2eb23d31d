//! What the filter sends: headers for admitted requests and the local reply
//! for denied ones, built from a [`Decision`]. Pure; the filter only copies
//! the result into Envoy.

use crate::answer::headers::{
    push_state_params, ratelimit, ratelimit_policy, retry_after_secs, x_ratelimit, PolicyStat, RATELIMIT_HEADER,
    RATELIMIT_POLICY_HEADER,
};
use crate::answer::problem::{quota_exceeded, reduced_capacity, PROBLEM_CONTENT_TYPE};
use crate::answer::text::u64_string;
use crate::config::{Body, Config, Rule};
use crate::limiter::{Check, Decision, WindowOutcome};
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

/// Policy names (`"<rule>/<period>"`), one per window of the decision,
/// borrowed from the names built at configuration time
/// ([`crate::config::Rule::policy_names`]). Computed once per request and
/// passed to the builders below.
pub fn policy_names<'a>(config: &'a Config, checks: &[Check], decision: &Decision) -> Vec<&'a str> {
    decision.windows.iter().map(|w| policy_name(config, checks, w)).collect()
}

/// The policy name of window `w` of a decision over `checks` (`unknown`
/// for a window of no configured rule).
pub fn policy_name<'a>(config: &'a Config, checks: &[Check], w: &WindowOutcome) -> &'a str {
    let rule = checks.get(w.check).and_then(|c| config.rules.get(c.rule));
    rule.and_then(|r| r.policy_names.get(w.window)).map_or("unknown", String::as_str)
}

fn stats<'a>(names: &[&'a str], decision: &'a Decision) -> Vec<PolicyStat<'a>> {
    names.iter().zip(&decision.windows).map(|(name, outcome)| PolicyStat { name, outcome }).collect()
}

/// A header the filter adds: its name is the filter's own (static: no copy
/// per request), its value made for the request.
pub type Header = (Cow<'static, str>, String);

/// The rate-limit headers of the configured families (`response.headers`):
/// draft-10 `RateLimit-Policy`/`RateLimit` for every window, and/or
/// `X-RateLimit-*` for the most constrained window. `names` are the
/// decision's [`policy_names`].
pub fn ratelimit_headers(config: &Config, names: &[&str], decision: &Decision) -> Vec<Header> {
    headers_of(config, &stats(names, decision))
}

/// A decision's `RateLimit-Policy` or `RateLimit` value joined from items
/// made at configuration time, each finished by `item` (`None` when a
/// window is not its rule's configured one: then the value is formatted
/// from the policy names, as [`ratelimit_policy`] and [`ratelimit`] do).
fn configured(
    config: &Config,
    checks: &[Check],
    decision: &Decision,
    item: impl Fn(&mut String, &Rule, &WindowOutcome) -> Option<()>,
) -> Option<String> {
    let mut out = String::with_capacity(decision.windows.len() * 48);
    for (i, w) in decision.windows.iter().enumerate() {
        let rule = checks.get(w.check).and_then(|c| config.rules.get(c.rule))?;
        if i > 0 {
            out.push_str(", ");
        }
        item(&mut out, rule, w)?;
    }
    Some(out)
}

/// The `RateLimit-Policy` value from the rules' items
/// ([`Rule::policy_items`]), when every window is its rule's configured one.
fn configured_policy(config: &Config, checks: &[Check], decision: &Decision) -> Option<String> {
    configured(config, checks, decision, |out, rule, w| {
        let limit = rule.limits.get(w.window)?;
        if limit.limit.get() != w.limit || limit.period.ms().get() != w.period_ms {
            return None;
        }
        out.push_str(rule.policy_items.get(w.window)?);
        Some(())
    })
}

/// The `RateLimit` value from the rules' quoted policy names
/// ([`Rule::quoted_names`]) and each window's state.
fn configured_state(config: &Config, checks: &[Check], decision: &Decision) -> Option<String> {
    configured(config, checks, decision, |out, rule, w| {
        out.push_str(rule.quoted_names.get(w.window)?);
        push_state_params(out, w);
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
        let policy =
            configured_policy(config, checks, decision).unwrap_or_else(|| ratelimit_policy(&stats(&names(), decision)));
        let state = configured_state(config, checks, decision).unwrap_or_else(|| ratelimit(&stats(&names(), decision)));
        out.push((Cow::Borrowed(RATELIMIT_POLICY_HEADER), policy));
        out.push((Cow::Borrowed(RATELIMIT_HEADER), state));
    }
    if families.x_ratelimit_headers {
        push_x_ratelimit(&mut out, &stats(&names(), decision));
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

/// The `X-RateLimit-*` headers of the most constrained of `all`.
fn push_x_ratelimit(out: &mut Vec<Header>, all: &[PolicyStat<'_>]) {
    let tightest = all
        .iter()
        .min_by(|a, b| a.outcome.remaining.cmp(&b.outcome.remaining).then(b.outcome.reset_ms.cmp(&a.outcome.reset_ms)));
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
/// `retry_ms`) rather than until it is empty: the draft-11 "effective
/// window", the time within which the client can use no more than its
/// available quota, 0. So `Retry-After`, the largest `retry_ms`, is never
/// earlier than the `t` of any violated window (the draft's Section 6).
pub fn denied(config: &Config, names: &[&str], decision: &Decision) -> LocalReply {
    let shown: Vec<WindowOutcome> = decision
        .windows
        .iter()
        .map(|w| if w.denied() { WindowOutcome { reset_ms: w.retry_ms, ..*w } } else { *w })
        .collect();
    let all: Vec<PolicyStat<'_>> =
        names.iter().zip(&shown).map(|(name, outcome)| PolicyStat { name, outcome }).collect();
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
mod tests {
    use super::*;
    use crate::testing::{outcome as w, seed_decision as decision, seed_setup as setup};

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn admitted_headers_from_configured_items_match_the_formatted_ones() {
        let (config, checks) = setup();
        let mut d = decision(0);
        let names = policy_names(&config, &checks, &d);
        let formatted = allowed_headers(&config, &names, &d);
        assert_eq!(allowed_headers_of(&config, &checks, &d), formatted);
        assert_eq!(formatted[0].1, r#""auth.createToken/60s";q=20;w=60, "auth.createToken/3s";q=5;w=3"#);
        assert_eq!(formatted[1].1, r#""auth.createToken/60s";r=15;t=60, "auth.createToken/3s";r=0;t=3"#);
        // A window that is not its rule's configured one: formatted from it.
        d.windows[1].limit = 7;
        let formatted = allowed_headers(&config, &names, &d);
        assert_eq!(allowed_headers_of(&config, &checks, &d), formatted);
        assert!(formatted[0].1.ends_with(";q=7;w=3"));
        // A check of a rule the configuration does not have: formatted
        // from the policy names ("unknown").
        let stray = [Check { rule: 9, ..checks[0].clone() }];
        let names = policy_names(&config, &stray, &d);
        assert_eq!(names, ["unknown", "unknown"]);
        assert_eq!(allowed_headers_of(&config, &stray, &d), allowed_headers(&config, &names, &d));
        let names = policy_names(&config, &checks, &d);
        // Both families, only X-RateLimit-* headers, or none.
        for response in
            [r#""headers":["ratelimit","x-ratelimit"]"#, r#""headers":["x-ratelimit"]"#, r#""on_allowed":false"#]
        {
            let config = Config::from_json(
                format!(
                    r#"{{"valkey":{{"cluster":"c"}},"response":{{{response}}},"rules":[{{"name":"auth.createToken",
                    "limits":[{{"limit":20,"period":"60s"}},{{"limit":5,"period":"3s"}}]}}]}}"#
                )
                .as_bytes(),
            )
            .unwrap();
            assert_eq!(allowed_headers_of(&config, &checks, &d), allowed_headers(&config, &names, &d));
        }
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn denial_names_the_violated_window_and_rounds_retry_up() {
        let (config, checks) = setup();
        let d = decision(2_100);
        let reply = denied(&config, &policy_names(&config, &checks, &d), &d);
        assert_eq!((reply.status, reply.details), (429, "tollgate_quota_exceeded"));
        let header = |n: &str| reply.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        assert_eq!(header("retry-after").as_deref(), Some("3"));
        assert_eq!(
            header("ratelimit-policy").as_deref(),
            Some(r#""auth.createToken/60s";q=20;w=60, "auth.createToken/3s";q=5;w=3"#)
        );
        assert_eq!(
            header("ratelimit").as_deref(),
            Some(r#""auth.createToken/60s";r=15;t=60, "auth.createToken/3s";r=0;t=3"#)
        );
        let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(body["status"], 429);
        assert_eq!(body["retry_after"], 3);
        assert_eq!(body["type"], "https://iana.org/assignments/http-problem-types#quota-exceeded");
        assert_eq!(body["violated-policies"], serde_json::json!(["auth.createToken/3s"]));
        assert_eq!(body["windows"][0]["policy"], "auth.createToken/3s");
    }

    /// A violated window that frees a unit long before it is empty (a
    /// GCRA, a sliding window): its `t` is the retry, so `Retry-After` is
    /// never earlier than the `t` of a violated window.
    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn retry_after_is_never_earlier_than_a_violated_windows_t() {
        let (config, checks) = setup();
        for (minute, burst, retry_after, ratelimit, x_reset) in [
            (
                w(0, 20, 60_000, 0, 58_000, 1_400),
                w(1, 5, 3_000, 0, 2_500, 600),
                "2",
                "r=0;t=2, \"auth.createToken/3s\";r=0;t=1",
                "2",
            ),
            (
                w(0, 20, 60_000, 3, 58_000, 0),
                w(1, 5, 3_000, 0, 2_500, 600),
                "1",
                "r=3;t=58, \"auth.createToken/3s\";r=0;t=1",
                "1",
            ),
        ] {
            let d = Decision { allowed: false, now_ms: 0, windows: vec![minute, burst], delay_ms: 0 };
            let mut config = config.clone();
            config.response.x_ratelimit_headers = true;
            let reply = denied(&config, &policy_names(&config, &checks, &d), &d);
            let header = |n: &str| reply.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
            assert_eq!(header("retry-after").as_deref(), Some(retry_after));
            assert_eq!(header("ratelimit"), Some(format!("\"auth.createToken/60s\";{ratelimit}")));
            assert_eq!(header("x-ratelimit-reset").as_deref(), Some(x_reset));
        }
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn refusals_are_temporary_reduced_capacity() {
        for (reply, detail, details) in [
            (overloaded(), OVERLOADED_DETAIL, "tollgate_overloaded"),
            (store_unavailable(), STORE_UNAVAILABLE_DETAIL, "tollgate_store_unavailable"),
        ] {
            assert_eq!((reply.status, reply.details), (503, details));
            let header = |n: &str| reply.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
            assert_eq!((header("retry-after"), header("content-type")), (Some("1"), Some(PROBLEM_CONTENT_TYPE)));
            let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
            assert_eq!(body["type"], "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity");
            assert_eq!(
                (&body["detail"], &body["violated-policies"]),
                (&serde_json::json!(detail), &serde_json::json!([]))
            );
        }
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn configured_families_status_and_text_body() {
        let (_, checks) = setup();
        let config = Config::from_json(
            br#"{"valkey":{"cluster":"c"},"rules":[{"name":"auth.createToken",
                "limits":[{"limit":20,"period":"60s"},{"limit":5,"period":"3s"}]}],
                "response":{"status":403,"headers":["x-ratelimit"],"body":"text","text":"slow down","on_allowed":false}}"#,
        )
        .unwrap();
        let d = decision(2_100);
        let reply = denied(&config, &policy_names(&config, &checks, &d), &d);
        assert_eq!(reply.status, 403);
        let names: Vec<&str> = reply.headers.iter().map(|(k, _)| &**k).collect();
        assert_eq!(
            names,
            ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after", "content-type"]
        );
        assert_eq!(reply.headers[0].1, "5, 5;w=3");
        assert_eq!(reply.headers[1].1, "0");
        assert_eq!(reply.headers[2].1, "3");
        assert_eq!(reply.body, b"slow down");
        let d = decision(0);
        assert!(allowed_headers(&config, &policy_names(&config, &checks, &d), &d).is_empty(), "on_allowed: false");
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn admitted_requests_get_both_headers() {
        let (config, checks) = setup();
        let d = decision(0);
        let headers = ratelimit_headers(&config, &policy_names(&config, &checks, &d), &d);
        let names: Vec<&str> = headers.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(names, vec!["ratelimit-policy", "ratelimit"]);
    }
}
