//! Rate-limit response headers (draft-ietf-httpapi-ratelimit-headers-11;
//! the bodies of a denial are in [`crate::answer::problem`]).
//!
//! Both header fields are Structured-Field Lists with one Item per window:
//! `RateLimit-Policy` announces each quota (`q`: units, `w`: window in
//! seconds) and `RateLimit` its current state (`r`: remaining units, `t`:
//! seconds until the window frees up). Seconds are always rounded **up**, so
//! a client that waits as told is never early.
//!
//! ```
//! use tollgate::answer::headers::{ratelimit, ratelimit_policy, retry_after_secs, PolicyStat};
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
//! ```

use crate::answer::text::{push_u64, u64_string};
use crate::limiter::WindowOutcome;

/// Name of the header announcing the quota policies.
pub const RATELIMIT_POLICY_HEADER: &str = "ratelimit-policy";
/// Name of the header carrying the current state of each quota.
pub const RATELIMIT_HEADER: &str = "ratelimit";

/// Largest integer a Structured Field may carry (15 decimal digits).
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// What a rule's name takes to name its concurrency limit's policy:
/// `"<rule>/concurrency"`. No window's policy name ends so: rule names
/// have no `/`, and a window's is `"<rule>/<period>"`, its period starting
/// with a digit.
pub const CONCURRENCY_SUFFIX: &str = "/concurrency";
/// The draft's quota unit of a concurrency limit (the `qu` parameter of
/// `RateLimit-Policy`).
pub const CONCURRENT_REQUESTS: &str = "concurrent-requests";

/// A concurrency limit's `RateLimit-Policy` item,
/// `"<name>";q=<limit>;qu="concurrent-requests"`: made once per rule at
/// configuration time ([`crate::config::Concurrency::policy_item`]).
pub fn concurrency_item(name: &str, limit: u64) -> String {
    let mut out = sf_string(name);
    push_param(&mut out, ";q=", limit);
    out.push_str(";qu=\"");
    out.push_str(CONCURRENT_REQUESTS);
    out.push('"');
    out
}

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
        push_param(out, ";q=", o.limit);
        push_param(out, ";w=", ceil_secs(o.period_ms).max(1));
    })
}

/// One window's `RateLimit-Policy` item, `"<name>";q=<limit>;w=<window s>`:
/// made once per rule at configuration time
/// ([`crate::config::Rule::policy_items`]).
pub fn policy_item(name: &str, limit: u64, period_ms: u64) -> String {
    let outcome = WindowOutcome { check: 0, window: 0, limit, period_ms, remaining: 0, reset_ms: 0, retry_ms: 0 };
    ratelimit_policy(&[PolicyStat { name, outcome: &outcome }])
}

/// The `RateLimit` value: `"<name>";r=<remaining>;t=<reset s>` per item,
/// joined by `", "`; the reset is in whole seconds, rounded up (0 stays 0).
/// Empty for no items (then omit the header).
pub fn ratelimit(items: &[PolicyStat<'_>]) -> String {
    sf_list(items, push_state_params)
}

/// Appends one `RateLimit` item's parameters, `;r=<remaining>;t=<reset s>`
/// (after its quoted name: [`sf_string`]).
pub fn push_state_params(out: &mut String, o: &WindowOutcome) {
    push_param(out, ";r=", o.remaining);
    push_param(out, ";t=", ceil_secs(o.reset_ms));
}

/// `s` as an sf-string, quoted and escaped as in both headers: made once
/// per window at configuration time ([`crate::config::Rule::quoted_names`]).
pub fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len().saturating_add(2));
    push_sf_string(&mut out, s);
    out
}

/// Seconds for a `Retry-After` header: `ms` rounded up, so 0 gives 0 and any
/// positive delay gives at least 1.
pub fn retry_after_secs(ms: u64) -> u64 {
    ceil_secs(ms)
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

/// Appends `key` (`;<name>=`) and the value clamped to an sf-integer.
fn push_param(out: &mut String, key: &str, value: u64) {
    out.push_str(key);
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
