//! Rate-limit response headers (draft-ietf-httpapi-ratelimit-headers-11;
//! the bodies of a denial are in [`crate::answer::problem`]).
//!
//! Both header fields are Structured-Field Lists with one Item per window
//! and per concurrency limit. `RateLimit-Policy` announces each quota: a
//! window's `q` (units) and `w` (window in seconds); a concurrency limit's
//! `q` (requests in flight) and `qu="concurrent-requests"`, without `w`: its
//! quota is not allocated per time window. `RateLimit` gives each quota's
//! state: `r`, the units available, and `t`, the seconds until more are
//! made available ([`t_ms`]; a concurrency limit has a `t` only when it is
//! full and denied the request). Seconds are always rounded **up**, so a
//! client that waits as told is never early. The mapping per algorithm is
//! tabled in docs/configuration.md, "Headers emitted".
//!
//! ```
//! use tollgate::answer::headers::{ratelimit, ratelimit_policy, retry_after_secs, PolicyStat};
//! use tollgate::limiter::{Algorithm, WindowOutcome};
//!
//! let minute = WindowOutcome {
//!     check: 0, window: 0, limit: 20, period_ms: 60_000,
//!     remaining: 15, reset_ms: 56_001, retry_ms: 0, overridden: false,
//! };
//! let burst = WindowOutcome {
//!     check: 0, window: 1, limit: 5, period_ms: 3_000,
//!     remaining: 0, reset_ms: 2_500, retry_ms: 1_234, overridden: false,
//! };
//! let in_flight = WindowOutcome {
//!     check: 1, window: 0, limit: 2, period_ms: 30_000,
//!     remaining: 1, reset_ms: 29_000, retry_ms: 0, overridden: false,
//! };
//! let log = Algorithm::SlidingLog;
//! let stats = [
//!     PolicyStat { name: "auth.createToken/60s", outcome: &minute, algorithm: log },
//!     PolicyStat { name: "auth.createToken/3s", outcome: &burst, algorithm: log },
//!     PolicyStat { name: "auth.createToken/concurrency", outcome: &in_flight, algorithm: Algorithm::Lease },
//! ];
//! assert_eq!(
//!     ratelimit_policy(&stats),
//!     r#""auth.createToken/60s";q=20;w=60, "auth.createToken/3s";q=5;w=3, "#.to_owned()
//!         + r#""auth.createToken/concurrency";q=2;qu="concurrent-requests""#
//! );
//! assert_eq!(
//!     ratelimit(&stats),
//!     r#""auth.createToken/60s";r=15;t=57, "auth.createToken/3s";r=0;t=2, "auth.createToken/concurrency";r=1"#
//! );
//! assert_eq!(retry_after_secs(1_234), 2);
//! ```

use crate::answer::text::{push_u64, u64_string};
use crate::limiter::{Algorithm, WindowOutcome};

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
/// The draft's quota unit of a concurrency limit (the `qu` parameter of `RateLimit-Policy`).
pub const CONCURRENT_REQUESTS: &str = "concurrent-requests";

/// One window of one matching rule, or its concurrency limit, with the
/// policy name shown to clients (for example `auth.createToken/3s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyStat<'a> {
    pub name: &'a str,
    pub outcome: &'a WindowOutcome,
    /// How the outcome's bucket counts: what its `t` is ([`t_ms`]), and
    /// [`Algorithm::Lease`] for a concurrency limit.
    pub algorithm: Algorithm,
}

/// The `RateLimit-Policy` value, one item per stat joined by `", "`: a
/// window's `"<name>";q=<limit>;w=<window s>`, the window in whole
/// seconds, rounded up, at least 1; a concurrency limit's
/// `"<name>";q=<limit>;qu="concurrent-requests"`. Empty for no items (then
/// omit the header).
pub fn ratelimit_policy(items: &[PolicyStat<'_>]) -> String {
    sf_list(items, |out, s| {
        push_param(out, ";q=", s.outcome.limit);
        if s.algorithm == Algorithm::Lease {
            out.push_str(";qu=\"");
            out.push_str(CONCURRENT_REQUESTS);
            out.push('"');
        } else {
            push_param(out, ";w=", ceil_secs(s.outcome.period_ms).max(1));
        }
    })
}

/// One window's `RateLimit-Policy` item, `"<name>";q=<limit>;w=<window s>`:
/// made once per rule at configuration time
/// ([`crate::config::Rule::policy_items`]).
pub fn policy_item(name: &str, limit: u64, period_ms: u64) -> String {
    quota_item(name, limit, period_ms, Algorithm::SlidingLog)
}

/// A concurrency limit's `RateLimit-Policy` item,
/// `"<name>";q=<limit>;qu="concurrent-requests"`: made once per rule at
/// configuration time ([`crate::config::Concurrency::policy_item`]).
pub fn concurrency_item(name: &str, limit: u64) -> String {
    quota_item(name, limit, 0, Algorithm::Lease)
}

fn quota_item(name: &str, limit: u64, period_ms: u64, algorithm: Algorithm) -> String {
    let outcome = WindowOutcome {
        check: 0,
        window: 0,
        limit,
        period_ms,
        remaining: 0,
        reset_ms: 0,
        retry_ms: 0,
        overridden: false,
    };
    ratelimit_policy(&[PolicyStat { name, outcome: &outcome, algorithm }])
}

/// The `RateLimit` value: `"<name>";r=<remaining>;t=<seconds>` per item,
/// joined by `", "` (see [`push_state_params`]). Empty for no items (then
/// omit the header).
pub fn ratelimit(items: &[PolicyStat<'_>]) -> String {
    sf_list(items, |out, s| push_state_params(out, s.outcome, s.algorithm))
}

/// Appends one `RateLimit` item's parameters, `;r=<remaining>;t=<seconds>`
/// (after its quoted name: [`sf_string`]): `t` is [`t_ms`] in whole
/// seconds, rounded up (0 stays 0), left out when the item has none.
pub fn push_state_params(out: &mut String, o: &WindowOutcome, algorithm: Algorithm) {
    push_param(out, ";r=", o.remaining);
    if let Some(t) = t_ms(o, algorithm) {
        push_param(out, ";t=", ceil_secs(t));
    }
}

/// The milliseconds an item's `t` stands for: until more than its
/// remaining units are available again (draft-11: within `t`, the client
/// can use no more than the available quota `r`). `None`: no `t`.
///
/// - A window that denied the request: until the request fits it, its
///   `retry_ms` (so `Retry-After`, the largest of them, is never earlier
///   than the `t` of a violated window).
/// - `gcra`: until the next unit has refilled ([`gcra_next_unit_ms`]);
///   its `reset_ms` is when the whole bucket has.
/// - `sliding_log`: its `reset_ms`, when the oldest counted entry leaves;
///   `fixed_window`: the window's end, when the count starts again.
/// - `sliding_window`: its `reset_ms`, when the estimate is 0. Later than
///   the next unit (the previous window's weight falls all along), which
///   the store does not report.
/// - A concurrency limit: until its earliest lease expires, only when the
///   set is full and denied the request; otherwise none (a lease frees
///   when a request ends, which no clock says).
pub fn t_ms(o: &WindowOutcome, algorithm: Algorithm) -> Option<u64> {
    match algorithm {
        _ if o.retry_ms > 0 => Some(o.retry_ms),
        Algorithm::Lease => None,
        Algorithm::Gcra => Some(gcra_next_unit_ms(o)),
        Algorithm::SlidingLog | Algorithm::SlidingWindow | Algorithm::FixedWindow => Some(o.reset_ms),
    }
}

/// A `gcra` window's milliseconds until one more unit is available (0 when
/// it is full). The bucket is full `reset_ms` after the reply and refills
/// a unit every `period_ms / limit` ms, so the next unit is
/// `limit - remaining - 1` emission intervals before that. Never early:
/// the store rounds `reset_ms` up and the intervals are rounded down (at
/// most 2 ms late).
pub fn gcra_next_unit_ms(o: &WindowOutcome) -> u64 {
    let Some(later) = o.limit.checked_sub(o.remaining.saturating_add(1)) else { return 0 };
    let intervals = u128::from(later) * u128::from(o.period_ms) / u128::from(o.limit.max(1));
    o.reset_ms.saturating_sub(u64::try_from(intervals).unwrap_or(u64::MAX))
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
/// `DRAFT_VERSION_03` option: `X-RateLimit-Limit: 5, 5;w=3`; the reset is
/// the window's `t` ([`t_ms`]).
pub fn x_ratelimit(item: &PolicyStat<'_>) -> [(&'static str, String); 3] {
    let o = item.outcome;
    let reset = t_ms(o, item.algorithm).unwrap_or(0);
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
        ("x-ratelimit-reset", u64_string(ceil_secs(reset).min(SF_INTEGER_MAX))),
    ]
}

/// `ms` in whole seconds, rounded up, without overflow.
fn ceil_secs(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

/// Serializes one sf-string Item per stat, its parameters added by `params`.
fn sf_list(items: &[PolicyStat<'_>], params: impl Fn(&mut String, &PolicyStat<'_>)) -> String {
    let names: usize = items.iter().map(|i| i.name.len()).sum();
    let mut out = String::with_capacity(names.saturating_add(items.len() * 40));
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_sf_string(&mut out, item.name);
        params(&mut out, item);
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
mod tests;
