//! Rate-limit response headers (draft-ietf-httpapi-ratelimit-headers-10) and
//! the RFC 9457 problem body of a `429 Too Many Requests`.
//!
//! Both header fields are Structured-Field Lists with one Item per window:
//! `RateLimit-Policy` announces each quota (`q`: units, `w`: window in
//! seconds) and `RateLimit` its current state (`r`: remaining units, `t`:
//! seconds until the window frees up). Seconds are always rounded **up**, so
//! a client that waits as told is never early.
//!
//! ```
//! use tollgate::headers::{problem_json, ratelimit, ratelimit_policy, retry_after_secs, PolicyStat};
//! use tollgate::limiter::WindowOutcome;
//!
//! let minute = WindowOutcome {
//!     check: 0, window: 0, limit: 20, period_ms: 60_000,
//!     remaining: 15, reset_ms: 56_001, retry_ms: 0,
//! };
//! let burst = WindowOutcome {
//!     check: 0, window: 1, limit: 5, period_ms: 3_000,
//!     remaining: 0, reset_ms: 1_234, retry_ms: 1_234,
//! };
//! let stats = [
//!     PolicyStat { name: "auth.createToken/60s", outcome: &minute },
//!     PolicyStat { name: "auth.createToken/3s", outcome: &burst },
//! ];
//! assert_eq!(
//!     ratelimit_policy(&stats),
//!     r#""auth.createToken/60s";q=20;w=60, "auth.createToken/3s";q=5;w=3"#
//! );
//! assert_eq!(
//!     ratelimit(&stats),
//!     r#""auth.createToken/60s";r=15;t=57, "auth.createToken/3s";r=0;t=2"#
//! );
//! assert_eq!(retry_after_secs(1_234), 2);
//! assert!(problem_json(&stats[1..], 1_234).contains(r#""retry_after":2"#));
//! ```

use crate::limiter::WindowOutcome;
use crate::text::{push_json_escaped, push_json_string, push_u64, u64_string};

/// Name of the header announcing the quota policies.
pub const RATELIMIT_POLICY_HEADER: &str = "ratelimit-policy";
/// Name of the header carrying the current state of each quota.
pub const RATELIMIT_HEADER: &str = "ratelimit";
/// Media type of [`problem_json`] bodies.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// Largest integer a Structured Field may carry (15 decimal digits).
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// One window of one matching rule, with the policy name shown to clients
/// (for example `auth.createToken/3s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyStat<'a> {
    pub name: &'a str,
    pub outcome: &'a WindowOutcome,
}

/// The `RateLimit-Policy` value: `"<name>";q=<limit>;w=<window s>` per item,
/// joined by `", "`; the window is in whole seconds, rounded up, at least 1.
/// Empty for no items (then omit the header).
pub fn ratelimit_policy(items: &[PolicyStat<'_>]) -> String {
    sf_list(items, |out, o| {
        push_param(out, "q", o.limit);
        push_param(out, "w", ceil_secs(o.period_ms).max(1));
    })
}

/// The `RateLimit` value: `"<name>";r=<remaining>;t=<reset s>` per item,
/// joined by `", "`; the reset is in whole seconds, rounded up (0 stays 0).
/// Empty for no items (then omit the header).
pub fn ratelimit(items: &[PolicyStat<'_>]) -> String {
    sf_list(items, |out, o| {
        push_param(out, "r", o.remaining);
        push_param(out, "t", ceil_secs(o.reset_ms));
    })
}

/// Seconds for a `Retry-After` header: `ms` rounded up, so 0 gives 0 and any
/// positive delay gives at least 1.
pub fn retry_after_secs(ms: u64) -> u64 {
    ceil_secs(ms)
}

/// The RFC 9457 `application/problem+json` body of a 429 response, listing
/// the windows that denied the request. `retry_after` is in seconds, rounded
/// up from `retry_after_ms`.
pub fn problem_json(denied: &[PolicyStat<'_>], retry_after_ms: u64) -> String {
    problem_json_with_status(denied, retry_after_ms, 429)
}

/// [`problem_json`] for a configured denial status (`response.status`).
/// Written by hand into one buffer, byte for byte what serde_json writes
/// for the same document (the tests compare them).
pub fn problem_json_with_status(denied: &[PolicyStat<'_>], retry_after_ms: u64, status: u16) -> String {
    let names: usize = denied.iter().map(|s| s.name.len()).sum();
    let mut out =
        String::with_capacity(160usize.saturating_add(names.saturating_mul(2)).saturating_add(denied.len() * 96));
    out.push_str(r#"{"type":"about:blank","title":"#);
    push_json_string(&mut out, if status == 429 { "Too Many Requests" } else { "Rate Limit Exceeded" });
    out.push_str(r#","status":"#);
    push_u64(&mut out, u64::from(status));
    out.push_str(r#","detail":"rate limit exceeded"#);
    for (i, s) in denied.iter().enumerate() {
        out.push_str(if i == 0 { ": " } else { ", " });
        push_json_escaped(&mut out, s.name);
    }
    out.push_str(r#"","violated_policies":["#);
    for (i, s) in denied.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(r#"{"policy":"#);
        push_json_string(&mut out, s.name);
        for (key, value) in [
            (r#","limit":"#, s.outcome.limit),
            (r#","window_ms":"#, s.outcome.period_ms),
            (r#","remaining":"#, s.outcome.remaining),
            (r#","retry_after_ms":"#, s.outcome.retry_ms),
        ] {
            out.push_str(key);
            push_u64(&mut out, value);
        }
        out.push('}');
    }
    out.push_str(r#"],"retry_after":"#);
    push_u64(&mut out, retry_after_secs(retry_after_ms));
    out.push('}');
    out
}

/// `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset` for
/// one window (the most constrained), in the style of Envoy's
/// `DRAFT_VERSION_03` option: `X-RateLimit-Limit: 5, 5;w=3`.
pub fn x_ratelimit(item: &PolicyStat<'_>) -> [(&'static str, String); 3] {
    let o = item.outcome;
    let limit = o.limit.min(SF_INTEGER_MAX);
    let window = ceil_secs(o.period_ms).clamp(1, SF_INTEGER_MAX);
    let mut limits = String::with_capacity(48);
    push_u64(&mut limits, limit);
    limits.push_str(", ");
    push_u64(&mut limits, limit);
    limits.push_str(";w=");
    push_u64(&mut limits, window);
    [
        ("x-ratelimit-limit", limits),
        ("x-ratelimit-remaining", u64_string(o.remaining.min(SF_INTEGER_MAX))),
        ("x-ratelimit-reset", u64_string(ceil_secs(o.reset_ms).min(SF_INTEGER_MAX))),
    ]
}

/// `ms` in whole seconds, rounded up, without overflow.
fn ceil_secs(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

/// Serializes one sf-string Item per stat, its parameters added by `params`.
fn sf_list(items: &[PolicyStat<'_>], params: impl Fn(&mut String, &WindowOutcome)) -> String {
    let names: usize = items.iter().map(|i| i.name.len()).sum();
    let mut out = String::with_capacity(names.saturating_add(items.len() * 40));
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_sf_string(&mut out, item.name);
        params(&mut out, item.outcome);
    }
    out
}

/// Appends `;<key>=<value>` with the value clamped to an sf-integer.
fn push_param(out: &mut String, key: &str, value: u64) {
    out.push(';');
    out.push_str(key);
    out.push('=');
    push_u64(out, value.min(SF_INTEGER_MAX));
}

/// Appends `s` as an sf-string: `"` and `\` are backslash-escaped, and any
/// character outside printable ASCII (which an sf-string cannot carry) is
/// replaced by `?`.
fn push_sf_string(out: &mut String, s: &str) {
    out.push('"');
    if s.bytes().all(|b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\') {
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn outcome(limit: u64, period_ms: u64, remaining: u64, reset_ms: u64, retry_ms: u64) -> WindowOutcome {
        WindowOutcome { check: 0, window: 0, limit, period_ms, remaining, reset_ms, retry_ms }
    }

    /// The seed scenario: 20 per 60 s and 5 per 3 s, the 3 s window denying.
    fn seed() -> [WindowOutcome; 2] {
        [outcome(20, 60_000, 15, 56_001, 0), outcome(5, 3_000, 0, 1_234, 1_234)]
    }

    fn stats(outcomes: &[WindowOutcome; 2]) -> [PolicyStat<'_>; 2] {
        [
            PolicyStat { name: "auth.createToken/60s", outcome: &outcomes[0] },
            PolicyStat { name: "auth.createToken/3s", outcome: &outcomes[1] },
        ]
    }

    fn single(name: &str, o: &WindowOutcome) -> (String, String) {
        let item = [PolicyStat { name, outcome: o }];
        (ratelimit_policy(&item), ratelimit(&item))
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn seed_scenario_headers() {
        let outcomes = seed();
        let stats = stats(&outcomes);
        assert_eq!(ratelimit_policy(&stats), r#""auth.createToken/60s";q=20;w=60, "auth.createToken/3s";q=5;w=3"#);
        assert_eq!(ratelimit(&stats), r#""auth.createToken/60s";r=15;t=57, "auth.createToken/3s";r=0;t=2"#);
        assert_eq!(ratelimit_policy(&[]), "");
        assert_eq!(ratelimit(&[]), "");
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn seed_scenario_problem() {
        let outcomes = seed();
        let stats = stats(&outcomes);
        assert_eq!(
            problem_json(&stats[1..], 1_234),
            r#"{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit exceeded: auth.createToken/3s","violated_policies":[{"policy":"auth.createToken/3s","limit":5,"window_ms":3000,"remaining":0,"retry_after_ms":1234}],"retry_after":2}"#
        );
        assert_eq!(PROBLEM_CONTENT_TYPE, "application/problem+json");
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn problem_lists_every_denied_window() {
        let outcomes = seed();
        let stats = stats(&outcomes);
        let body: serde_json::Value = serde_json::from_str(&problem_json(&stats, 56_001)).unwrap();
        assert_eq!(body["detail"], "rate limit exceeded: auth.createToken/60s, auth.createToken/3s");
        assert_eq!(body["violated_policies"].as_array().unwrap().len(), 2);
        assert_eq!(body["violated_policies"][0]["window_ms"], 60_000);
        assert_eq!(body["retry_after"], 57);

        let empty: serde_json::Value = serde_json::from_str(&problem_json(&[], 0)).unwrap();
        assert_eq!(empty["detail"], "rate limit exceeded");
        assert_eq!(empty["violated_policies"], serde_json::json!([]));
        assert_eq!(empty["retry_after"], 0);
        assert_eq!(empty["status"], 429);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn problem_escapes_names() {
        let o = outcome(1, 1_000, 0, 10, 10);
        let name = "a\"b\\c\r\n</script>é";
        let body = problem_json(&[PolicyStat { name, outcome: &o }], u64::MAX);
        let parsed: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(parsed["violated_policies"][0]["policy"], name);
        assert_eq!(parsed["retry_after"], 18_446_744_073_709_552u64);
        assert!(!body.contains('\r') && !body.contains('\n'));
    }

    /// The document serde_json wrote before the body was written by hand.
    #[derive(serde::Serialize)]
    struct Problem<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        title: &'static str,
        status: u16,
        detail: String,
        violated_policies: Vec<Violation<'a>>,
        retry_after: u64,
    }

    #[derive(serde::Serialize)]
    struct Violation<'a> {
        policy: &'a str,
        limit: u64,
        window_ms: u64,
        remaining: u64,
        retry_after_ms: u64,
    }

    fn oracle(denied: &[PolicyStat<'_>], retry_after_ms: u64, status: u16) -> String {
        let names: Vec<&str> = denied.iter().map(|s| s.name).collect();
        let detail = if names.is_empty() {
            String::from("rate limit exceeded")
        } else {
            format!("rate limit exceeded: {}", names.join(", "))
        };
        let violated_policies = denied
            .iter()
            .map(|s| Violation {
                policy: s.name,
                limit: s.outcome.limit,
                window_ms: s.outcome.period_ms,
                remaining: s.outcome.remaining,
                retry_after_ms: s.outcome.retry_ms,
            })
            .collect();
        let title = if status == 429 { "Too Many Requests" } else { "Rate Limit Exceeded" };
        let retry_after = retry_after_secs(retry_after_ms);
        serde_json::to_string(&Problem { kind: "about:blank", title, status, detail, violated_policies, retry_after })
            .unwrap()
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn problem_is_byte_for_byte_what_serde_json_writes() {
        let names = ["auth.createToken/3s", "a/1d", "", "x\"y\\z\u{1}\té😀", "rule:with-dots.and_1/250ms"];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..500 {
            let n = usize::try_from(next() % 4).unwrap();
            let outcomes: Vec<WindowOutcome> = (0..n)
                .map(|_| {
                    let pick = |v: u64| if v.is_multiple_of(3) { v } else { v % 100_000 };
                    outcome(pick(next()), pick(next()), pick(next()), pick(next()), pick(next()))
                })
                .collect();
            let stats: Vec<PolicyStat<'_>> = outcomes
                .iter()
                .enumerate()
                .map(|(i, o)| PolicyStat { name: names[(round + i) % names.len()], outcome: o })
                .collect();
            let (retry, status) = (next() % 10_000_000, [429, 403, 503][round % 3]);
            assert_eq!(problem_json_with_status(&stats, retry, status), oracle(&stats, retry, status));
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn window_rounds_up_to_at_least_one_second() {
        for (period_ms, w) in
            [(250, 1), (1, 1), (0, 1), (999, 1), (1_000, 1), (1_001, 2), (1_500, 2), (60_000, 60), (86_400_000, 86_400)]
        {
            let o = outcome(7, period_ms, 0, 0, 0);
            assert_eq!(single("p", &o).0, format!("\"p\";q=7;w={w}"), "period {period_ms}");
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn reset_rounds_up_and_zero_stays_zero() {
        for (reset_ms, t) in [(0, 0), (1, 1), (999, 1), (1_000, 1), (1_001, 2), (2_000, 2), (56_001, 57)] {
            let o = outcome(7, 60_000, 3, reset_ms, 0);
            assert_eq!(single("p", &o).1, format!("\"p\";r=3;t={t}"), "reset {reset_ms}");
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn retry_after_rounding() {
        assert_eq!(retry_after_secs(0), 0);
        assert_eq!(retry_after_secs(1), 1);
        assert_eq!(retry_after_secs(999), 1);
        assert_eq!(retry_after_secs(1_000), 1);
        assert_eq!(retry_after_secs(1_001), 2);
        assert_eq!(retry_after_secs(u64::MAX), 18_446_744_073_709_552);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn sf_strings_are_escaped_and_printable() {
        let o = outcome(1, 1_000, 1, 0, 0);
        assert_eq!(single(r#"a"b\c"#, &o).0, r#""a\"b\\c";q=1;w=1"#);
        assert_eq!(single("a\r\nb\t\0\u{7f}é", &o).0, r#""a??b????";q=1;w=1"#);
        assert_eq!(single("", &o).1, r#""";r=1;t=0"#);
        assert_eq!(single(" ~", &o).1, r#"" ~";r=1;t=0"#);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn integers_are_clamped_to_sf_integer_range() {
        let o = outcome(u64::MAX, u64::MAX, u64::MAX, u64::MAX, 0);
        let (policy, state) = single("p", &o);
        assert_eq!(policy, r#""p";q=999999999999999;w=999999999999999"#);
        assert_eq!(state, r#""p";r=999999999999999;t=999999999999999"#);
    }
}
