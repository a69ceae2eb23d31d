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
//! # Document
//!
//! The reference of every field, with an example of each match condition and
//! key part, is `docs/configuration.md`; the JSON Schema, generated from the
//! shapes of the structs declared in `raw.rs`, is
//! `schema/tollgate.schema.json`. Every error message has a fixture in
//! `tests/fixtures/config/invalid/` (the file's JSON and its exact message),
//! so the fixtures are the catalogue of errors.
//!
//! # Errors
//!
//! A [`ConfigError`] is displayed as `path: message`. Paths look like
//! `valkey.timeout`, `rules[2].name` or `rules[0].limits[1].period`; keys that
//! are not plain identifiers are quoted (`rules[0]["per od"]`); problems with
//! the document as a whole have the path `(root)`.
//!
//! Parsing has two stages. `read` parses the JSON against the shapes of the
//! structs of `raw.rs` (each field named once there) in one streaming pass,
//! into those structs, and stops at the first problem of syntax or shape
//! (unknown, repeated or missing field, wrong JSON type). `validate` then
//! checks meaning and builds the public types, in which invalid states cannot
//! be represented ([`NonZeroU64`] limits and periods). It checks each section
//! and each rule on its own, so [`Config::from_json_all`] reports one error
//! per section and per rule; [`Config::from_json`] returns the first of them,
//! which is what the filter logs (`tollgate: invalid plugin configuration:
//! <path>: <message>`).
//!
//! # Windows that can never bind
//!
//! Following seed `000` ("limit/period must grow as the period shrinks"), a
//! rule is rejected when one of its windows can never be the one that denies
//! a request because another window of the rule always denies first. The
//! exact condition depends on the algorithm; the derivations are in
//! `src/config/binding.rs`.

mod access;
mod binding;
mod concurrency;
mod count;
pub(crate) mod duration;
mod error;
mod keys;
mod limits;
mod matching;
mod node;
mod overrides;
mod primitives;
mod raw;
mod read;
mod response;
#[cfg(not(target_family = "wasm"))]
pub mod schema;
#[cfg(not(target_family = "wasm"))]
mod schema_fields;
mod shape;
mod shaping;
mod sync_policy;
mod validate;

#[cfg(test)]
mod tests;

use std::fmt;
use std::num::NonZeroU64;
use std::time::Duration;

use crate::key::KeyName;
pub use crate::limiter::Algorithm;
use crate::limiter::Window;
pub use access::{
    Auth, ClusterModeConfig, Secret, SentinelConfig, DEFAULT_CLUSTER_REFRESH_MS, DEFAULT_SENTINEL_REFRESH_MS,
    MAX_CLUSTER_REFRESH_MS, MAX_SENTINEL_REFRESH_MS,
};
pub use concurrency::{Concurrency, DEFAULT_LEASE_TTL_MS, MAX_CONCURRENCY, MAX_LEASE_TTL_MS, MIN_LEASE_TTL_MS};
pub use count::{
    CostSource, Count, JsonPath, Reserve, StatusRange, DEFAULT_MAX_BODY_BYTES, MAX_BODY_BYTES_BOUNDS,
    MAX_JSON_PATH_BYTES, MAX_JSON_PATH_SEGMENTS,
};
pub use error::ConfigError;
pub use keys::{KeyPart, KeySource, OnMissing, Prefixes, MAX_KEY_PARTS, MAX_LITERAL_BYTES, MAX_PROPERTY_SEGMENTS};
pub use limits::*;
pub use matching::{HeaderCondition, HeaderMatch, Match, Pattern, MAX_HEADER_MATCHES};
pub use response::{Body, ResponseConfig, DEFAULT_TEXT_BODY, MAX_TEXT_BYTES};
pub use shaping::{Shaping, DEFAULT_MAX_WAITING, MAX_SHAPE_DELAY_MS, MAX_WAITING_BOUNDS};
use std::rc::Rc;
pub use sync_policy::{
    SyncPolicy, DEFAULT_SYNC_MAX_KEYS, MAX_SYNC_INTERVAL_MS, MIN_SYNC_INTERVAL_MS, SYNC_MAX_KEYS_BOUNDS,
};

/// A validated filter configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Where the limiter state lives.
    pub valkey: ValkeyConfig,
    /// What to do with a request when Valkey cannot decide.
    pub failure_mode: FailureMode,
    /// The local limiter of `failure_mode: local` (defaults otherwise).
    pub local_limiter: LocalLimiterConfig,
    /// What to do with a request the worker cannot take (its bounds full).
    pub overload: Overload,
    /// The rules, in configuration order (never empty).
    pub rules: Vec<Rule>,
    /// How denials are answered and which headers are emitted.
    pub response: ResponseConfig,
    /// Global shadow mode: every rule decides and counts, none denies.
    pub shadow: bool,
    /// Keys remembered as denied per worker (0 disables; default
    /// [`DEFAULT_DENIAL_CACHE_KEYS`]).
    pub denial_cache_keys: usize,
    /// The most bytes of a request or response body read for a reservation
    /// or a cost ([`MAX_BODY_BYTES_BOUNDS`], default
    /// [`DEFAULT_MAX_BODY_BYTES`]).
    pub max_body_bytes: usize,
    /// Test-only switches; all off unless configured.
    pub testing: Testing,
}

impl Config {
    /// Parses and validates a JSON configuration.
    ///
    /// Returns the first problem found: the message the filter logs. See the
    /// [module documentation](self).
    pub fn from_json(bytes: &[u8]) -> Result<Config, ConfigError> {
        Config::from_json_with_env(bytes, &|name| std::env::var(name).ok())
    }

    /// [`Config::from_json`] with environment variables (`valkey.password_env`)
    /// looked up by `env` instead of the process (VM) environment.
    pub fn from_json_with_env(bytes: &[u8], env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        Config::from_json_all(bytes, env).map_err(|errors| {
            errors.into_iter().next().unwrap_or_else(|| ConfigError::new(error::ROOT, "invalid configuration"))
        })
    }

    /// [`Config::from_json_with_env`], reporting every problem it can: the
    /// first of syntax or shape alone (parsing stops there), or else the first
    /// of each section and of each rule, in document order (never empty).
    pub fn from_json_all(bytes: &[u8], env: &dyn Fn(&str) -> Option<String>) -> Result<Config, Vec<ConfigError>> {
        let raw = read::document::<raw::RawConfig>(bytes).map_err(|err| vec![err])?;
        let mut errors = Vec::new();
        match validate::config(raw, env, &mut errors) {
            Some(config) if errors.is_empty() => Ok(config),
            _ if errors.is_empty() => Err(vec![ConfigError::new(error::ROOT, "invalid configuration")]),
            _ => Err(errors),
        }
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
    /// most ([`MAX_IN_FLIGHT_BOUNDS`], default [`DEFAULT_MAX_IN_FLIGHT`]).
    pub max_in_flight: usize,
    /// Decisions sent in one message on the stream, at most
    /// ([`MAX_BATCH_BOUNDS`], default [`DEFAULT_MAX_BATCH`]).
    pub max_batch: usize,
    /// Messages on the stream awaiting replies, at most
    /// ([`MAX_MESSAGES_IN_FLIGHT_BOUNDS`], default
    /// [`DEFAULT_MAX_MESSAGES_IN_FLIGHT`]): while it is reached, decisions
    /// wait in the worker's queue and leave in one message when a reply
    /// frees the window (group commit).
    pub max_messages_in_flight: usize,
    /// Requests waiting per worker beyond what the stream can take, at most
    /// ([`MAX_QUEUE_BOUNDS`], default [`DEFAULT_MAX_QUEUE`]); beyond it a
    /// request is refused as overload.
    pub max_queue: usize,
    /// How the limiter's code is called.
    pub invoke: Invoke,
    /// `AUTH` credentials sent first on every store stream, if any.
    pub auth: Option<Auth>,
    /// Sentinel discovery of the master, if configured.
    pub sentinel: Option<SentinelConfig>,
    /// A Valkey Cluster (slot map from seeds, one stream per master), if
    /// configured; never together with `sentinel`.
    pub cluster_mode: Option<ClusterModeConfig>,
}

/// How the limiter's code is called on the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invoke {
    /// `FCALL` of the function library, loaded with `FUNCTION LOAD` when the
    /// store lacks it (Valkey, Redis 7+). The default: the definitions are
    /// evaluated once per server, not on every call.
    Fcall,
    /// `EVALSHA` of the script, sent with `EVAL` when the store lacks it
    /// (any Redis with Lua; ACLs that allow only scripts).
    Evalsha,
}

/// What happens to a request when Valkey cannot decide (timeout, error,
/// unreadable answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureMode {
    /// Let the request through (fail open). The default.
    Allow,
    /// Reject the request (fail closed).
    Deny,
    /// Decide it in the worker, from recent store answers and a share of
    /// each limit ([`LocalLimiterConfig`]).
    Local,
}

/// The local limiter that stands in for the store under `failure_mode:
/// local`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalLimiterConfig {
    /// The share of each limit a worker admits per period for a bucket it
    /// holds no recent store answer for, in millionths (0 < share <= 1).
    pub share_ppm: u32,
    /// Buckets tracked per worker; the least recently used go first.
    pub max_keys: usize,
}

impl Default for LocalLimiterConfig {
    fn default() -> Self {
        LocalLimiterConfig { share_ppm: DEFAULT_LOCAL_SHARE_PPM, max_keys: DEFAULT_LOCAL_KEYS }
    }
}

/// What happens to a request the worker cannot take: its queue is full, or
/// it waited `max_wait` for a busy store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overload {
    /// Refuse it (`503`, `rate limiter overloaded`). The default: a busy
    /// proxy never admits unchecked.
    Reject,
    /// Let it through unchecked (explicitly asked for).
    Allow,
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
    /// With `count`: the units a counted response costs when the response
    /// does not say, and what a request without a reservation must find
    /// room for.
    pub cost: NonZeroU64,
    /// Shadow rule: decides and consumes as if enforced, but never denies.
    pub shadow: bool,
    /// The key part (an index into `key`) whose value is the hash tag of
    /// the rule's keys, so that rules tagged by the same value share a
    /// Valkey Cluster slot; `None`: the tag is the rule name and every part.
    pub hash_tag: Option<usize>,
    /// Counted on the response (`count`): only some responses, or a cost
    /// the response reports, with an optional reservation on the request.
    /// `None`: counted on the request, `cost` units.
    pub count: Option<Count>,
    /// Holds a request that does not fit until it does (`shape`,
    /// docs/shaping.md); `None`: a request that does not fit is denied.
    pub shaping: Option<Shaping>,
    /// Decided on the worker from its view of each window, synced with the
    /// store every interval (`sync`, docs/sync.md); `None`: every request
    /// is decided by the store.
    pub sync: Option<SyncPolicy>,
    /// The policy name of each window, `"<name>/<period label>"` (as in the
    /// `RateLimit` headers), built once here instead of on every request.
    pub policy_names: Vec<String>,
    /// The `RateLimit-Policy` item of each window (`"<policy name>";q=<limit>;w=<s>`),
    /// built once here: a decision's header joins those of its windows.
    pub policy_items: Vec<String>,
    /// The name as the rule's keys carry it, encoded once.
    pub key_name: KeyName,
    /// The limits as the checks carry them, shared by every request's
    /// check instead of copied into each.
    pub windows: Rc<[Window]>,
    /// Each policy name as an sf-string (`"<policy name>"`), built once
    /// here: a decision's `RateLimit` header starts each item with it.
    pub quoted_names: Vec<String>,
    /// At most this many of the rule's requests in flight per bucket, each
    /// holding a lease (`concurrency`, docs/configuration.md); `None`: no
    /// such limit. Never with `sync`.
    pub concurrency: Option<Concurrency>,
    /// Reads the bucket's per-key override in the decision's store call
    /// (`overrides`, docs/configuration.md): limits an operator set with
    /// `tollgate override set` apply instead of the configured ones until
    /// they expire. Never with `sync`.
    pub overrides: bool,
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
