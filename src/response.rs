//! What the filter sends: headers for admitted requests and the local reply
//! for denied ones, built from a [`Decision`]. Pure; the filter only copies
//! the result into Envoy.

use crate::config::{Body, Config};
use crate::headers::{
    problem_json_with_status, ratelimit, ratelimit_policy, retry_after_secs, x_ratelimit, PolicyStat,
    PROBLEM_CONTENT_TYPE,
};
use crate::limiter::{Check, Decision};
use crate::text::u64_string;
use std::borrow::Cow;

/// Request header that tells the upstream which policies would have denied
/// a request that shadow mode let through (`"rule/period", ...`).
pub const SHADOW_HEADER: &str = "x-tollgate-shadow-denied";
/// The request header that tells the upstream how long (ms) a request was
/// held for its slot (shaping, docs/shaping.md); a client's own is removed.
pub const DELAY_HEADER: &str = "x-tollgate-delay-ms";
/// The response header that tells the client the same:
/// `tollgate-delay;dur=<ms>`.
pub const SERVER_TIMING: &str = "server-timing";

/// A response the filter answers itself instead of forwarding the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalReply {
    pub status: u32,
    /// Names are the filter's own (static: no copy per reply).
    pub headers: Vec<(Cow<'static, str>, String)>,
    pub body: Vec<u8>,
}

/// Policy names (`"<rule>/<period>"`), one per window of the decision,
/// borrowed from the names built at configuration time
/// ([`crate::config::Rule::policy_names`]). Computed once per request and
/// passed to the builders below.
pub fn policy_names<'a>(config: &'a Config, checks: &[Check], decision: &Decision) -> Vec<&'a str> {
    decision
        .windows
        .iter()
        .map(|w| {
            let rule = checks.get(w.check).and_then(|c| config.rules.get(c.rule));
            rule.and_then(|r| r.policy_names.get(w.window)).map_or("unknown", String::as_str)
        })
        .collect()
}

fn stats<'a>(names: &[&'a str], decision: &'a Decision) -> Vec<PolicyStat<'a>> {
    names.iter().zip(&decision.windows).map(|(name, outcome)| PolicyStat { name, outcome }).collect()
}

/// The rate-limit headers of the configured families (`response.headers`):
/// draft-10 `RateLimit-Policy`/`RateLimit` for every window, and/or
/// `X-RateLimit-*` for the most constrained window. `names` are the
/// decision's [`policy_names`].
pub fn ratelimit_headers(config: &Config, names: &[&str], decision: &Decision) -> Vec<(String, String)> {
    headers_of(config, &stats(names, decision)).into_iter().map(|(k, v)| (k.into_owned(), v)).collect()
}

fn headers_of(config: &Config, all: &[PolicyStat<'_>]) -> Vec<(Cow<'static, str>, String)> {
    // Room for every header a denial adds too (Retry-After, Content-Type).
    let mut out = Vec::with_capacity(7);
    if all.is_empty() {
        return out;
    }
    if config.response.ratelimit_headers {
        out.push((Cow::Borrowed("ratelimit-policy"), ratelimit_policy(all)));
        out.push((Cow::Borrowed("ratelimit"), ratelimit(all)));
    }
    if config.response.x_ratelimit_headers {
        let tightest = all.iter().min_by(|a, b| {
            a.outcome.remaining.cmp(&b.outcome.remaining).then(b.outcome.reset_ms.cmp(&a.outcome.reset_ms))
        });
        if let Some(item) = tightest {
            out.extend(x_ratelimit(item).map(|(k, v)| (Cow::Borrowed(k), v)));
        }
    }
    out
}

/// Headers for the upstream's response to an admitted request (none when
/// `response.on_allowed` is false).
pub fn allowed_headers(config: &Config, names: &[&str], decision: &Decision) -> Vec<(String, String)> {
    if config.response.on_allowed {
        ratelimit_headers(config, names, decision)
    } else {
        Vec::new()
    }
}

/// The denial: the configured status, rate-limit headers, `Retry-After`
/// (always) and the configured body.
pub fn denied(config: &Config, names: &[&str], decision: &Decision) -> LocalReply {
    let all = stats(names, decision);
    let violated: Vec<PolicyStat<'_>> = all.iter().filter(|s| s.outcome.denied()).copied().collect();
    let retry_ms = decision.retry_after_ms();
    let mut headers = headers_of(config, &all);
    headers.push((Cow::Borrowed("retry-after"), u64_string(retry_after_secs(retry_ms))));
    let status = config.response.status;
    let body = match &config.response.body {
        Body::ProblemJson => {
            headers.push((Cow::Borrowed("content-type"), PROBLEM_CONTENT_TYPE.to_string()));
            problem_json_with_status(&violated, retry_ms, status).into_bytes()
        }
        Body::Text(text) => {
            headers.push((Cow::Borrowed("content-type"), "text/plain; charset=utf-8".to_string()));
            text.clone().into_bytes()
        }
        Body::None => Vec::new(),
    };
    LocalReply { status: u32::from(status), headers, body }
}

/// The 503 of a request refused because the worker is overloaded: its
/// queue is full, or it waited `max_wait` for a store that keeps answering
/// others. Never admitted unchecked.
pub fn overloaded() -> LocalReply {
    LocalReply {
        status: 503,
        headers: vec![
            (Cow::Borrowed("retry-after"), "1".to_string()),
            (Cow::Borrowed("content-type"), "text/plain".to_string()),
        ],
        body: b"rate limiter overloaded\n".to_vec(),
    }
}

/// The 503 of `failure_mode: deny` when the store cannot answer.
pub fn store_unavailable() -> LocalReply {
    LocalReply {
        status: 503,
        headers: vec![
            (Cow::Borrowed("retry-after"), "1".to_string()),
            (Cow::Borrowed("content-type"), "text/plain".to_string()),
        ],
        body: b"rate limit store unavailable\n".to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::WindowOutcome;

    fn setup() -> (Config, Vec<Check>) {
        let config = Config::from_json(
            br#"{"valkey":{"cluster":"c"},"rules":[{"name":"auth.createToken",
                "limits":[{"limit":20,"period":"60s"},{"limit":5,"period":"3s"}]}]}"#,
        )
        .unwrap();
        let checks = vec![Check::for_test(0, "k", &[(20, 60_000), (5, 3_000)], 1)];
        (config, checks)
    }

    fn decision(retry_3s: u64) -> Decision {
        let w = |window, limit, period_ms, remaining, reset_ms, retry_ms| WindowOutcome {
            check: 0,
            window,
            limit,
            period_ms,
            remaining,
            reset_ms,
            retry_ms,
        };
        Decision {
            allowed: retry_3s == 0,
            now_ms: 0,
            delay_ms: 0,
            windows: vec![w(0, 20, 60_000, 15, 59_500, 0), w(1, 5, 3_000, 0, 2_500, retry_3s)],
        }
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn denial_names_the_violated_window_and_rounds_retry_up() {
        let (config, checks) = setup();
        let d = decision(2_100);
        let reply = denied(&config, &policy_names(&config, &checks, &d), &d);
        assert_eq!(reply.status, 429);
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
        assert_eq!(body["violated_policies"].as_array().unwrap().len(), 1);
        assert_eq!(body["violated_policies"][0]["policy"], "auth.createToken/3s");
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
        let names: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, vec!["ratelimit-policy", "ratelimit"]);
    }
}
