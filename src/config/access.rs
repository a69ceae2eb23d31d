//! How the store is reached beyond the tunnel cluster: credentials
//! (`valkey.username`, `valkey.password_env`), Sentinel discovery
//! (`valkey.sentinel`) and Valkey Cluster (`valkey.cluster_mode`).
//!
//! The password never appears in the document: it names an environment
//! variable of the Wasm VM (Envoy's `vm_config.environment_variables`), read
//! once at configuration time. It is kept in a [`Secret`], whose `Debug`
//! prints `***`, so no log line or error can show it.
//!
//! ```
//! use tollgate::config::Config;
//!
//! let doc = br#"{ "valkey": { "cluster": "c", "username": "limiter", "password_env": "PW",
//!                             "sentinel": { "cluster": "s", "master_name": "mymaster" } },
//!                 "rules": [ { "name": "r", "limits": [ { "limit": 1, "period": "1s" } ] } ] }"#;
//! let env = |name: &str| (name == "PW").then(|| "s3cret".to_string());
//! let config = Config::from_json_with_env(doc, &env)?;
//! let auth = config.valkey.auth.as_ref().unwrap();
//! assert_eq!(auth.username.as_deref(), Some("limiter"));
//! assert_eq!(auth.password.expose(), b"s3cret");
//! assert!(!format!("{config:?}").contains("s3cret"));
//! let sentinel = config.valkey.sentinel.as_ref().unwrap();
//! assert_eq!((sentinel.cluster.as_str(), sentinel.master_name.as_str()), ("s", "mymaster"));
//! assert_eq!(sentinel.refresh.as_secs(), 5);
//!
//! let err = Config::from_json_with_env(doc, &|_| None).unwrap_err();
//! assert_eq!(err.to_string(), r#"valkey.password_env: environment variable "PW" is not set"#);
//! # Ok::<(), tollgate::config::ConfigError>(())
//! ```

use std::fmt;
use std::time::Duration;

use super::error::ConfigError;
use super::primitives::{duration, env_var_name, envoy_cluster, fail, token};
use super::raw::{RawClusterMode, RawSentinel};

/// `valkey.sentinel.refresh` when omitted, in milliseconds.
pub const DEFAULT_SENTINEL_REFRESH_MS: u64 = 5_000;
/// Largest `valkey.sentinel.refresh`, in milliseconds (1 h).
pub const MAX_SENTINEL_REFRESH_MS: u64 = 3_600_000;

/// `valkey.cluster_mode.refresh` when omitted, in milliseconds.
pub const DEFAULT_CLUSTER_REFRESH_MS: u64 = 5_000;
/// Largest `valkey.cluster_mode.refresh`, in milliseconds (1 h).
pub const MAX_CLUSTER_REFRESH_MS: u64 = 3_600_000;

/// A value that must never be shown: `Debug` prints `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    pub fn new(bytes: Vec<u8>) -> Secret {
        Secret(bytes)
    }

    /// The secret's bytes, for the one place that sends them (`AUTH`).
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Credentials sent with `AUTH [username] password` at the head of every
/// store call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Auth {
    /// An ACL user; `None` authenticates as the default user (`requirepass`).
    pub username: Option<String>,
    pub password: Secret,
}

/// Where the current master is learned: the Sentinels behind an Envoy cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelConfig {
    /// The Envoy cluster that tunnels to the Sentinels.
    pub cluster: String,
    /// The name the Sentinels monitor the master under.
    pub master_name: String,
    /// How often the master is asked for while nothing goes wrong.
    pub refresh: Duration,
}

/// `valkey.username` and `valkey.password_env`; `env` looks a variable up.
pub(crate) fn auth(
    username: Option<String>,
    password_env: Option<String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Auth>, ConfigError> {
    const PATH: &str = "valkey.password_env";
    let Some(name) = password_env else {
        return match username {
            Some(_) => fail("valkey.username", "requires valkey.password_env"),
            None => Ok(None),
        };
    };
    let username = username.map(|u| token("valkey.username", u)).transpose()?;
    let name = env_var_name(PATH, name)?;
    match env(&name) {
        None => fail(PATH, format!("environment variable {name:?} is not set")),
        Some(value) if value.is_empty() => fail(PATH, format!("environment variable {name:?} is empty")),
        Some(value) => Ok(Some(Auth { username, password: Secret::new(value.into_bytes()) })),
    }
}

/// `valkey.sentinel`.
pub(crate) fn sentinel(raw: Option<RawSentinel>) -> Result<Option<SentinelConfig>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let cluster = envoy_cluster("valkey.sentinel.cluster", raw.cluster)?;
    let master_name = token("valkey.sentinel.master_name", raw.master_name)?;
    let refresh_ms = match raw.refresh {
        None => DEFAULT_SENTINEL_REFRESH_MS,
        Some(value) => duration(&value, "valkey.sentinel.refresh", MAX_SENTINEL_REFRESH_MS, "1h")?.0.get(),
    };
    Ok(Some(SentinelConfig { cluster, master_name, refresh: Duration::from_millis(refresh_ms) }))
}

/// A Valkey Cluster: each worker reads the slot map from a seed node and
/// sends every decision to the master of its slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterModeConfig {
    /// The Envoy cluster that tunnels to seed nodes (any nodes of the
    /// Valkey Cluster), where `CLUSTER SHARDS` is asked.
    pub seeds: String,
    /// How often the slot map is read while nothing goes wrong.
    pub refresh: Duration,
}

/// `valkey.cluster_mode`; `store` is `valkey.cluster`, `sentinel` whether
/// `valkey.sentinel` is set too (an error: the cluster fails over by itself).
pub(crate) fn cluster_mode(
    raw: Option<RawClusterMode>,
    store: &str,
    sentinel: bool,
) -> Result<Option<ClusterModeConfig>, ConfigError> {
    const PATH: &str = "valkey.cluster_mode";
    let Some(raw) = raw else { return Ok(None) };
    if sentinel {
        return fail(
            PATH,
            "cannot be combined with valkey.sentinel: a Valkey Cluster promotes its own replicas, its masters are read from the slot map",
        );
    }
    let seeds = envoy_cluster("valkey.cluster_mode.seeds", raw.seeds)?;
    if seeds == store {
        return fail(
            "valkey.cluster_mode.seeds",
            format!("must not be valkey.cluster ({store:?}): that one reaches the masters by their address, the seeds need a cluster of their own"),
        );
    }
    let refresh_ms = match raw.refresh {
        None => DEFAULT_CLUSTER_REFRESH_MS,
        Some(value) => duration(&value, "valkey.cluster_mode.refresh", MAX_CLUSTER_REFRESH_MS, "1h")?.0.get(),
    };
    Ok(Some(ClusterModeConfig { seeds, refresh: Duration::from_millis(refresh_ms) }))
}
