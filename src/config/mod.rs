//! Filter configuration: the JSON document given to the plugin, parsed and
//! validated into [`Config`].
//!
//! ```
//! use std::time::Duration;
//! use tollgate::config::{Config, FailureMode, KeyPart};
//!
//! let config = Config::from_json(br#"{
//!   "valkey": { "cluster": "tollgate_valkey", "timeout": "100ms", "key_prefix": "tollgate" },
//!   "failure_mode": "allow",
//!   "rules": [
//!     {
//!       "name": "auth.createToken",
//!       "match": { "path_prefix": "/auth/token", "methods": ["post"] },
//!       "key": [ { "header": "X-User-Id" } ],
//!       "limits": [ { "limit": 20, "period": "60s" }, { "limit": 5, "period": 3 } ]
//!     }
//!   ]
//! }"#)?;
//!
//! assert_eq!(config.valkey.timeout, Duration::from_millis(100));
//! assert_eq!(config.failure_mode, FailureMode::Allow);
//! let rule = &config.rules[0];
//! assert_eq!(rule.matcher.methods, ["POST"]);
//! assert_eq!(rule.key, [KeyPart::header("x-user-id")]);
//! assert_eq!(rule.limits[1].limit.get(), 5);
//! assert_eq!(rule.limits[1].period.ms().get(), 3_000);
//! assert_eq!(rule.limits[1].period.label(), "3s");
//! assert_eq!(config.testing.now_header, None);
//!
//! let err = Config::from_json(br#"{ "valkey": { "cluster": "c" }, "rules": [] }"#).unwrap_err();
//! assert_eq!(err.to_string(), "rules: must not be empty");
//! assert_eq!(err.path(), "rules");
//! # Ok::<(), tollgate::config::ConfigError>(())
//! ```
//!
//! # Document (v1)
//!
//! | field | required | meaning |
//! | --- | --- | --- |
//! | `valkey.cluster` | yes | Envoy cluster of the Valkey server: 1..=255 bytes, no whitespace or control characters |
//! | `valkey.timeout` | no, `100ms` | a duration, > 0 and <= 60s |
//! | `valkey.key_prefix` | no, `tollgate` | 1..=64 characters from `[A-Za-z0-9._:-]` |
//! | `valkey.username` | no | ACL user for `AUTH`, 1..=128 bytes without whitespace; requires `password_env` |
//! | `valkey.password_env` | no | name of the VM environment variable holding the password (`[A-Za-z_][A-Za-z0-9_]*`, at most 128 bytes); read at configuration time |
//! | `valkey.sentinel.cluster` | with `sentinel` | Envoy cluster that tunnels to the Sentinels (as `valkey.cluster`) |
//! | `valkey.sentinel.master_name` | with `sentinel` | the monitored master's name, 1..=128 bytes without whitespace |
//! | `valkey.sentinel.refresh` | no, `5s` | a duration, > 0 and <= 1h: how often the master is asked for |
//! | `failure_mode` | no, `allow` | `allow` or `deny`: what to do when Valkey cannot answer |
//! | `rules` | yes | non-empty list of rules |
//! | `rules[i].name` | yes | 1..=64 characters from `[A-Za-z0-9._:-]`, unique |
//! | `rules[i].match` | no (all requests) | `path_prefix` (starts with `/`), `methods` (non-empty list of distinct letter-only methods, uppercased) |
//! | `rules[i].key` | no (one shared bucket) | at most 8 parts `{ "header": NAME }`; NAME is an HTTP token or a pseudo-header (`:authority`), lowercased |
//! | `rules[i].limits` | yes | 1..=8 windows `{ "limit": 1..=1000000000, "period": duration }`, periods > 0, <= 366d and distinct; every window must be able to bind (below); for `gcra` and `sliding_window`, `limit × period in ms <= 2^53` |
//! | `rules[i].algorithm` | no, `sliding_log` | `sliding_log`, `gcra`, `sliding_window` or `fixed_window` (see `docs/algorithms.md`) |
//! | `rules[i].cost` | no, `1` | units one request consumes in every window: an integer from 1 to the smallest limit of the rule (and at most 10000 for `sliding_log`) |
//! | `testing.now_header` | no | **tests only**, see [`Testing`] |
//!
//! A duration is a string `"<digits><unit>"` with unit `ms`, `s`, `m`, `h` or
//! `d` (`"250ms"`, `"3s"`, `"10m"`, `"1h"`, `"1d"`; no spaces, sign or
//! fraction; units are case-sensitive), or a non-negative JSON integer
//! counting seconds. An explicit `null` is the same as leaving an optional
//! field out. Unknown fields are errors everywhere, as are objects written as
//! arrays and fields given twice.
//!
//! # Errors
//!
//! [`Config::from_json`] stops at the first problem and returns a
//! [`ConfigError`] displayed as `path: message`. Problems of JSON syntax and
//! shape (the first five rows) are found while reading, before any value is
//! checked; values are then checked in document order. Paths look like
//! `valkey.timeout`, `rules[2].name` or `rules[0].limits[1].period`; keys that
//! are not plain identifiers are quoted (`rules[0]["per od"]`); problems with
//! the document as a whole have the path `(root)`. `"..."` below is the
//! offending string as a Rust string literal; `N`, `J`, `K` are numbers.
//!
//! | case | path | message |
//! | --- | --- | --- |
//! | not JSON (syntax, empty, trailing data) | `(root)` | `invalid JSON at line L column C: DETAIL` (DETAIL is serde_json's) |
//! | unknown field | the unknown field | `unknown field, expected one of A, B` (or `expected A` for a single field) |
//! | missing required field | the missing field | `missing field` |
//! | field given twice | the field | `duplicate field` |
//! | wrong JSON type | the value | `invalid type: FOUND, expected EXPECTED` (e.g. `invalid type: array, expected an object`, ``invalid type: integer `5`, expected a string``) |
//! | empty string or list | the field | `must not be empty` (`valkey.cluster`, `valkey.username`, `valkey.password_env`, `valkey.sentinel.cluster`, `valkey.sentinel.master_name`, `valkey.key_prefix`, `rules`, `rules[i].name`, `rules[i].match.methods`, `rules[i].limits`) |
//! | cluster too long | `valkey.cluster` | `must be at most 255 bytes (got N)` |
//! | cluster with a bad character | `valkey.cluster` | `invalid character ' ' in "...": whitespace and control characters are not allowed` |
//! | name/prefix with a bad character | `rules[i].name`, `valkey.key_prefix` | `invalid character '/' in "...": allowed are A-Z, a-z, 0-9, '.', '_', ':' and '-'` |
//! | name/prefix too long | `rules[i].name`, `valkey.key_prefix` | `must be at most 64 characters (got N)` |
//! | username without password | `valkey.username` | `requires valkey.password_env` |
//! | bad environment variable name | `valkey.password_env` | `invalid environment variable name "...": expected [A-Za-z_][A-Za-z0-9_]*` |
//! | variable not set / empty | `valkey.password_env` | `environment variable "NAME" is not set` / `environment variable "NAME" is empty` |
//! | username/master name with whitespace | `valkey.username`, `valkey.sentinel.master_name` | `invalid character ' ' in "...": whitespace and control characters are not allowed` |
//! | username/master name/variable name too long | same, `valkey.password_env` | `must be at most 128 bytes (got N)` |
//! | refresh too long | `valkey.sentinel.refresh` | `must be <= 1h` |
//! | unknown failure mode | `failure_mode` | `unknown value "...", expected one of allow, deny` |
//! | duplicate rule name | `rules[i].name` | `duplicate rule name "..." (also rules[J].name)` |
//! | path prefix without leading slash | `rules[i].match.path_prefix` | `must start with '/'` |
//! | bad method | `rules[i].match.methods[j]` | `invalid HTTP method "...": expected letters only` |
//! | duplicate method (after uppercasing) | `rules[i].match.methods[j]` | `duplicate method "GET" (also rules[i].match.methods[K])` |
//! | too many key parts | `rules[i].key` | `must have at most 8 parts (got N)` |
//! | bad header name | `rules[i].key[j].header`, `testing.now_header` | ``invalid header name "...": expected an HTTP token (letters, digits and !#$%&'*+-.^_`\|~), optionally after a leading ':'`` |
//! | too many windows | `rules[i].limits` | `must have at most 8 windows (got N)` |
//! | limit zero or negative | `rules[i].limits[j].limit` | `must be > 0` |
//! | limit too large | `rules[i].limits[j].limit` | `must be <= 1000000000` |
//! | limit not an integer | `rules[i].limits[j].limit` | `must be an integer` (a non-number: `invalid type: ..., expected a JSON number`) |
//! | malformed duration (any JSON type) | `valkey.timeout`, `rules[i].limits[j].period` | `invalid duration "100 ms": expected <digits><unit> with unit ms, s, m, h or d, or an integer number of seconds` (the value is shown as a string literal, a number, `true`, `null`, `[...]` or `{...}`) |
//! | zero duration | same | `must be > 0` |
//! | timeout too long (or too large to represent) | `valkey.timeout` | `must be <= 60s` |
//! | period too long (or too large to represent) | `rules[i].limits[j].period` | `must be <= 366d` |
//! | two windows with the same period | `rules[i].limits[j].period` | `same period as rules[i].limits[K].period (3s)`, or `(60s = 1m)` when spelled differently (this window's label first) |
//! | unknown algorithm | `rules[i].algorithm` | `unknown value "...", expected one of sliding_log, gcra, sliding_window, fixed_window` |
//! | cost zero or negative, too large, not an integer | `rules[i].cost` | `must be > 0`, `must be <= 1000000000`, `must be an integer` |
//! | cost above 10000 for `sliding_log` | `rules[i].cost` | `must be <= 10000 for sliding_log, which stores one entry per unit` |
//! | cost above a window's limit | `rules[i].cost` | `cost N is larger than rules[i].limits[j].limit (J): no request could ever be admitted` |
//! | `limit × period` beyond 2^53 (`gcra`, `sliding_window`) | `rules[i].limits[j]` | `limit × period = N × P ms = X exceeds 2^53 = 9007199254740992, the largest that gcra computes exactly; lower the limit or the period` |
//! | a window that can never bind | `rules[i].limits[j]` | `window N/P can never bind next to rules[i].limits[K] (N/P) under ALGORITHM: REASON` (the reasons are in `binding.rs`, e.g. `any interval of this period spans at most 60 of the other's, so at most 60 × 10 = 600 units are ever admitted in it`) |
//!
//! # Windows that can never bind
//!
//! Following seed `000` ("limit/period must grow as the period shrinks"), a
//! rule is rejected when one of its windows can never be the one that denies
//! a request because another window of the rule always denies first. The
//! exact condition depends on the algorithm (`k = ceil(longer / shorter
//! period)`, `m(L) = floor(L / cost) × cost`): for `sliding_log` and
//! `sliding_window` the longer window must have `limit < k × m(shorter
//! limit)` and the shorter `limit < m(longer limit)`; `fixed_window` counts
//! aligned windows (`k` can be one more, and a short window can straddle two
//! long ones); `gcra` needs the longer window to have the lower rate
//! (`limit / period`) and the shorter the smaller limit. The derivations are
//! in `src/config/binding.rs`.
//!
//! # Design
//!
//! Parsing has two stages: `raw` mirrors the JSON shape with serde
//! (`deny_unknown_fields`, read through `serde_path_to_error` so shape errors
//! carry their path), then `validate` checks meaning and builds the public
//! types, in which invalid states cannot be represented ([`NonZeroU64`]
//! limits and periods). Later versions of the document extend `raw` and
//! `validate` without changing the meaning of v1 documents.

mod access;
mod binding;
mod duration;
mod error;
mod keys;
mod matching;
mod raw;
mod response;
mod validate;

#[cfg(test)]
mod tests;

use std::fmt;
use std::num::NonZeroU64;
use std::time::Duration;

pub use crate::limiter::Algorithm;
pub use access::{
    Auth, Secret, SentinelConfig, DEFAULT_SENTINEL_REFRESH_MS, MAX_ACCESS_NAME_BYTES, MAX_SENTINEL_REFRESH_MS,
};
pub use error::ConfigError;
pub use keys::{KeyPart, KeySource, OnMissing, Prefixes, MAX_KEY_PARTS, MAX_LITERAL_BYTES, MAX_PROPERTY_SEGMENTS};
pub use matching::{HeaderCondition, HeaderMatch, Match, Pattern, MAX_HEADER_MATCHES};
pub use response::{Body, ResponseConfig, DEFAULT_TEXT_BODY, MAX_TEXT_BYTES};

/// `valkey.timeout` when omitted, in milliseconds.
pub const DEFAULT_TIMEOUT_MS: u64 = 100;
/// Largest `valkey.timeout`, in milliseconds (60 s).
pub const MAX_TIMEOUT_MS: u64 = 60_000;
/// `valkey.key_prefix` when omitted.
pub const DEFAULT_KEY_PREFIX: &str = "tollgate";
/// Longest `valkey.cluster`, in bytes.
pub const MAX_CLUSTER_BYTES: usize = 255;
/// Longest rule name or key prefix, in characters (all ASCII).
pub const MAX_NAME_CHARS: usize = 64;
/// Most windows (limits) in one rule.
pub const MAX_WINDOWS: usize = 8;
/// Largest `limit` of a window.
pub const MAX_LIMIT: u64 = 1_000_000_000;
/// Largest `cost` of a `sliding_log` rule: the log stores one entry per unit,
/// and one call must not write more than this many.
pub const MAX_LOG_COST: u64 = 10_000;
/// Longest window period, in milliseconds (366 days).
pub const MAX_PERIOD_MS: u64 = 366 * 86_400_000;

/// A validated filter configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Where the limiter state lives.
    pub valkey: ValkeyConfig,
    /// What to do with a request when Valkey cannot decide.
    pub failure_mode: FailureMode,
    /// The rules, in configuration order (never empty).
    pub rules: Vec<Rule>,
    /// How denials are answered and which headers are emitted.
    pub response: ResponseConfig,
    /// Global shadow mode: every rule decides and counts, none denies.
    pub shadow: bool,
    /// Keys remembered as denied per worker (0 disables; default 10000).
    pub denial_cache_keys: usize,
    /// Test-only switches; all off unless configured.
    pub testing: Testing,
}

impl Config {
    /// Parses and validates a JSON configuration.
    ///
    /// Returns the first problem found; see the [module documentation](self)
    /// for the document and every error message.
    pub fn from_json(bytes: &[u8]) -> Result<Config, ConfigError> {
        Config::from_json_with_env(bytes, &|name| std::env::var(name).ok())
    }

    /// [`Config::from_json`] with environment variables (`valkey.password_env`)
    /// looked up by `env` instead of the process (VM) environment.
    pub fn from_json_with_env(bytes: &[u8], env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        let raw::Obj(document): raw::Obj<raw::RawConfig> =
            serde_path_to_error::deserialize(&mut deserializer).map_err(error::from_serde)?;
        deserializer.end().map_err(|err| error::from_json_syntax(&err))?;
        validate::config(document, env)
    }
}

/// The Valkey (or Redis) connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValkeyConfig {
    /// Name of the Envoy cluster to call.
    pub cluster: String,
    /// How long to wait for an answer (> 0, <= 60 s).
    pub timeout: Duration,
    /// First component of every key (`[A-Za-z0-9._:-]{1,64}`).
    pub key_prefix: String,
    /// Decisions sent on the worker's store stream and awaiting replies, at
    /// most (1..=16384, default 1024).
    pub max_in_flight: usize,
    /// Decisions sent in one message on the stream at most (1..=1024,
    /// default 64).
    pub max_batch: usize,
    /// Requests waiting per worker to be sent, at most (0..=100000, default
    /// 4096); beyond it a request is refused as overload.
    pub max_queue: usize,
    /// `AUTH` credentials sent first on every store stream, if any.
    pub auth: Option<Auth>,
    /// Sentinel discovery of the master, if configured.
    pub sentinel: Option<SentinelConfig>,
}

/// What happens to a request when Valkey cannot decide (timeout, error,
/// unreadable answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureMode {
    /// Let the request through (fail open). The default.
    Allow,
    /// Reject the request (fail closed).
    Deny,
}

/// One rate-limiting rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Unique name (`[A-Za-z0-9._:-]{1,64}`).
    pub name: String,
    /// Which requests the rule applies to (JSON field `match`).
    pub matcher: Match,
    /// What identifies a bucket; empty means one bucket shared by all
    /// matching requests.
    pub key: Vec<KeyPart>,
    /// The windows, in configuration order: 1..=8, with distinct periods,
    /// each of which can bind (see the module documentation).
    pub limits: Vec<Limit>,
    /// How the rule's buckets count (`sliding_log` unless configured).
    pub algorithm: Algorithm,
    /// Units one request consumes in every window (1..=every window's limit).
    pub cost: NonZeroU64,
    /// Shadow rule: decides and consumes as if enforced, but never denies.
    pub shadow: bool,
    /// The policy name of each window, `"<name>/<period label>"` (as in the
    /// `RateLimit` headers), built once here instead of on every request.
    pub policy_names: Vec<String>,
}

/// One window of a rule: at most `limit` requests per `period`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// Requests allowed per period (1..=1_000_000_000).
    pub limit: NonZeroU64,
    /// Length of the window.
    pub period: Period,
}

/// Length of a window: milliseconds (> 0; at most 366 days when it comes from
/// a configuration) and how the configuration spelled it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Period {
    ms: NonZeroU64,
    label: String,
}

impl Period {
    /// A period of `ms` milliseconds labelled with its shortest exact spelling
    /// (`"3s"`, `"1m"`, `"250ms"`, `"1d"`). Meant for building configurations
    /// in code and tests; it does not apply the 366-day maximum.
    pub fn from_millis(ms: NonZeroU64) -> Period {
        Period { ms, label: duration::canonical_label(ms.get()) }
    }

    /// Length in milliseconds.
    pub fn ms(&self) -> NonZeroU64 {
        self.ms
    }

    /// Length as a [`Duration`].
    pub fn duration(&self) -> Duration {
        Duration::from_millis(self.ms.get())
    }

    /// Spelling for humans and policy names: the configuration string as
    /// written (`"3s"`, `"250ms"`, `"1m"`), or `"<N>s"` for an integer `N`.
    pub fn label(&self) -> &str {
        &self.label
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label)
    }
}

/// Test-only switches. **Never set any of these in production.**
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Testing {
    /// **DANGEROUS — FOR TESTS ONLY.** When set (lowercased header name), a
    /// request carrying this header chooses the limiter's clock: its value is
    /// taken as "now" in Unix milliseconds. Any client that can send the
    /// header can move time and so empty its windows at will, which bypasses
    /// rate limiting completely. It exists so that integration tests can
    /// drive time deterministically; production configurations must leave
    /// `testing` out.
    pub now_header: Option<String>,
}
