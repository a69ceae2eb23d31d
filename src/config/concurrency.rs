//! `rules[i].concurrency`: at most N of the rule's requests in flight per
//! bucket, each admitted request holding a lease in a sorted set of the
//! store until it ends (docs/configuration.md, "Concurrency"). A number (the
//! limit, the lease TTL [`DEFAULT_LEASE_TTL_MS`]) or `{ "limit": N,
//! "lease_ttl": "30s" }`; not with `sync` (exact errors here).

use std::num::NonZeroU64;
use std::rc::Rc;

use super::error::ConfigError;
use super::primitives::{duration, fail, positive_integer};
use super::raw::{NumOrObj, RawConcurrency};
use crate::answer::headers::{concurrency_item, sf_string, CONCURRENCY_SUFFIX};
use crate::limiter::Window;

/// The largest concurrency limit: a bucket's lease set holds up to this many
/// sorted-set entries.
pub const MAX_CONCURRENCY: u64 = 1_000_000;
/// `lease_ttl` when omitted, in milliseconds.
pub const DEFAULT_LEASE_TTL_MS: u64 = 30_000;
/// The shortest `lease_ttl`, in milliseconds: the worker renews a lease every
/// sixth of it, a store call per worker each time.
pub const MIN_LEASE_TTL_MS: u64 = 1_000;
/// The longest `lease_ttl`, in milliseconds: a proxy that dies leaves its
/// leases counted this long at most.
pub const MAX_LEASE_TTL_MS: u64 = 3_600_000;
/// Spellings of [`MIN_LEASE_TTL_MS`] and [`MAX_LEASE_TTL_MS`] in messages.
pub(crate) const MIN_LEASE_TTL_LABEL: &str = "1s";
pub(crate) const MAX_LEASE_TTL_LABEL: &str = "1h";

/// A rule's concurrency limit: at most `limit` requests in flight per
/// bucket, each admission a lease that ends with its request, expires
/// `lease_ttl_ms` after it was taken or last renewed (a proxy that died
/// leaks it for no longer), and is renewed while its request goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Concurrency {
    pub limit: NonZeroU64,
    pub lease_ttl_ms: NonZeroU64,
    /// Its one window as the lease check carries it (`limit`, `lease_ttl_ms`).
    pub window: Rc<[Window]>,
    /// Its policy name, `"<rule>/concurrency"` (as in the `RateLimit`
    /// headers), built once here.
    pub policy_name: String,
    /// Its `RateLimit-Policy` item,
    /// `"<rule>/concurrency";q=<limit>;qu="concurrent-requests"`, built once.
    pub policy_item: String,
    /// The policy name as an sf-string, built once: its `RateLimit` item
    /// starts with it.
    pub quoted_name: String,
}

impl Concurrency {
    /// The limit of `limit` leases of `lease_ttl_ms` of the rule `rule`.
    pub fn new(rule: &str, limit: NonZeroU64, lease_ttl_ms: NonZeroU64) -> Concurrency {
        let policy_name = format!("{rule}{CONCURRENCY_SUFFIX}");
        Concurrency {
            limit,
            lease_ttl_ms,
            window: Rc::new([Window { limit, period_ms: lease_ttl_ms }]),
            policy_item: concurrency_item(&policy_name, limit.get()),
            quoted_name: sf_string(&policy_name),
            policy_name,
        }
    }
}

/// `rules[i].concurrency` of the rule `name`; `sync`: whether the rule has
/// `sync`.
pub(crate) fn concurrency(
    i: usize,
    raw: Option<NumOrObj<RawConcurrency>>,
    name: &str,
    sync: bool,
) -> Result<Option<Concurrency>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let path = format!("rules[{i}].concurrency");
    if sync {
        return fail(
            path,
            format!(
                "does not apply with rules[{i}].sync: a lease taken on one proxy is invisible to the others until \
                 they sync, so more than the limit would be in flight; a concurrency limit is decided by the store \
                 on every request"
            ),
        );
    }
    let (limit, ttl) = match raw {
        NumOrObj::Num(n) => (positive_integer(&path, &n, MAX_CONCURRENCY)?, None),
        NumOrObj::Obj(o) => (positive_integer(&format!("{path}.limit"), &o.limit, MAX_CONCURRENCY)?, o.lease_ttl),
    };
    let lease_ttl_ms = match ttl {
        None => NonZeroU64::new(DEFAULT_LEASE_TTL_MS).unwrap_or(NonZeroU64::MIN),
        Some(raw) => {
            let ttl_path = format!("{path}.lease_ttl");
            let (ms, _) = duration(&raw, &ttl_path, MAX_LEASE_TTL_MS, MAX_LEASE_TTL_LABEL)?;
            if ms.get() < MIN_LEASE_TTL_MS {
                return fail(ttl_path, format!("must be >= {MIN_LEASE_TTL_LABEL}"));
            }
            ms
        }
    };
    Ok(Some(Concurrency::new(name, limit, lease_ttl_ms)))
}
