//! RFC 9457 `application/problem+json` bodies with the problem types of
//! draft-ietf-httpapi-ratelimit-headers-11, Section 5 (unchanged since -10):
//! `quota-exceeded` for a denial and `temporary-reduced-capacity` for the
//! 503 of a limiter that cannot decide. Both carry the draft's
//! `violated-policies` member (the names of the policies whose quota was
//! exceeded) and the filter's own members `retry_after` (seconds, as the
//! `Retry-After` header) and, for a denial, `windows` (one object per
//! violated window or concurrency limit).
//!
//! ```
//! use tollgate::answer::headers::PolicyStat;
//! use tollgate::limiter::{Algorithm, WindowOutcome};
//! use tollgate::answer::problem::quota_exceeded;
//!
//! let burst = WindowOutcome {
//!     check: 0, window: 1, limit: 5, period_ms: 3_000,
//!     remaining: 0, reset_ms: 1_234, retry_ms: 1_234, overridden: false,
//! };
//! let stat = PolicyStat { name: "auth.createToken/3s", outcome: &burst, algorithm: Algorithm::SlidingLog };
//! let body = quota_exceeded(&[stat], 1_234, 429);
//! assert!(body.starts_with(r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded""#));
//! assert!(body.contains(r#""violated-policies":["auth.createToken/3s"]"#));
//! assert!(body.ends_with(r#""retry_after":2}"#));
//! ```

use crate::answer::headers::{retry_after_secs, PolicyStat};
use crate::answer::text::{push_json_escaped, push_json_string, push_u64};
use crate::limiter::Algorithm;

/// Media type of the bodies below.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";
/// Problem type of a denial (the draft's Section 5.1; registered title
/// "Quota Exceeded", recommended status 429).
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";
/// Problem type of a request the limiter could not decide (Section 5.2;
/// registered title "Temporary Reduced Capacity", recommended status 503).
pub const TEMPORARY_REDUCED_CAPACITY: &str =
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

/// The body of a denial with `status` (`response.status`, 429 by default),
/// listing the windows that denied the request: each one's `policy`,
/// `limit`, `window_ms`, `remaining` and `retry_after_ms`; a concurrency
/// limit's `policy`, `concurrent` (its limit), `lease_ttl_ms`, `remaining`
/// (free leases) and `retry_after_ms` (until its earliest lease expires).
/// The limits are those in force: a window whose limit came from a per-key
/// override (`rules[].overrides`) also has `"override":true`, after the
/// others (left out otherwise). `retry_after` is in
/// seconds, rounded up from `retry_after_ms`. Written by hand into one
/// buffer, byte for byte what serde_json writes for the same document (the
/// tests compare them).
pub fn quota_exceeded(denied: &[PolicyStat<'_>], retry_after_ms: u64, status: u16) -> String {
    let names: usize = denied.iter().map(|s| s.name.len()).sum();
    let mut out =
        String::with_capacity(220usize.saturating_add(names.saturating_mul(3)).saturating_add(denied.len() * 96));
    out.push_str(r#"{"type":"#);
    push_json_string(&mut out, QUOTA_EXCEEDED);
    out.push_str(r#","title":"Quota Exceeded","status":"#);
    push_u64(&mut out, u64::from(status));
    out.push_str(r#","detail":"rate limit exceeded"#);
    for (i, s) in denied.iter().enumerate() {
        out.push_str(if i == 0 { ": " } else { ", " });
        push_json_escaped(&mut out, s.name);
    }
    out.push_str(r#"","violated-policies":["#);
    for (i, s) in denied.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_json_string(&mut out, s.name);
    }
    out.push_str(r#"],"windows":["#);
    for (i, s) in denied.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(r#"{"policy":"#);
        push_json_string(&mut out, s.name);
        let o = s.outcome;
        let members = match s.algorithm {
            Algorithm::Lease => [(r#","concurrent":"#, o.limit), (r#","lease_ttl_ms":"#, o.period_ms)],
            _ => [(r#","limit":"#, o.limit), (r#","window_ms":"#, o.period_ms)],
        };
        for (key, value) in
            members.into_iter().chain([(r#","remaining":"#, o.remaining), (r#","retry_after_ms":"#, o.retry_ms)])
        {
            out.push_str(key);
            push_u64(&mut out, value);
        }
        if o.overridden {
            out.push_str(r#","override":true"#);
        }
        out.push('}');
    }
    out.push_str(r#"],"retry_after":"#);
    push_u64(&mut out, retry_after_secs(retry_after_ms));
    out.push('}');
    out
}

/// The body of a `503` that no quota caused (the worker overloaded, or the
/// store unavailable under `failure_mode: deny`): `violated-policies` is
/// empty, `detail` says why.
pub fn reduced_capacity(detail: &str, retry_after: u64) -> String {
    let mut out = String::with_capacity(200usize.saturating_add(detail.len()));
    out.push_str(r#"{"type":"#);
    push_json_string(&mut out, TEMPORARY_REDUCED_CAPACITY);
    out.push_str(r#","title":"Temporary Reduced Capacity","status":503,"detail":"#);
    push_json_string(&mut out, detail);
    out.push_str(r#","violated-policies":[],"retry_after":"#);
    push_u64(&mut out, retry_after);
    out.push('}');
    out
}

#[cfg(test)]
mod tests;
