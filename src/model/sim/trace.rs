//! What one run simulates, as data: the rule, the proxies and their
//! workers, the network, and the inputs in time order (requests and what
//! their clients do, store pauses and restarts, lost replies, workers that
//! die and start). A trace is made from a seed ([`super::random::trace`]) and can
//! be cut down ([`super::shrink`]); the run itself is deterministic.

use crate::limiter::Algorithm;

/// The clock's start: ms since the Unix epoch, as the store's clock reads.
pub const EPOCH_MS: u64 = 1_800_000_000_000;

/// How the rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// By the store, every request.
    Exact,
    /// By the store, holding a request until its turn (`shape`).
    Shaped { max_delay_ms: u64, max_waiting: u64 },
    /// On the workers, synced every interval (`sync`; each proxy has its
    /// own interval, [`Proxy::interval_ms`]).
    Synced,
}

/// The one rule every proxy has (keyed on `x-user-id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub algorithm: Algorithm,
    /// `(limit, period_ms)`, longest period first.
    pub windows: Vec<(u64, u64)>,
    pub mode: Mode,
    /// Counted on the response: reserved units (0: the request only
    /// checks), the response's cost read from `x-used`.
    pub count: Option<u64>,
    /// A concurrency limit: `(limit, lease_ttl_ms)` (never with
    /// [`Mode::Synced`], which the configuration refuses).
    pub concurrency: Option<(u64, u64)>,
    /// `"overrides": true`, and the override an operator wrote before the
    /// run (never with [`Mode::Synced`], which the configuration refuses).
    pub overrides: Option<Override>,
}

/// A per-key override (`tollgate override set`): user `key`'s limits,
/// every window's and the concurrency limit, `times` the configured, until
/// `until_ms` after the run's start (`None`: no expiry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Override {
    pub key: u8,
    pub times: u64,
    pub until_ms: Option<u64>,
}

impl Rule {
    pub fn longest_ms(&self) -> u64 {
        self.windows.iter().map(|w| w.1).max().unwrap_or(0)
    }

    /// The lease TTL of its concurrency limit (0: none).
    pub fn ttl_ms(&self) -> u64 {
        self.concurrency.map_or(0, |c| c.1)
    }
}

/// One Envoy: its workers, and its sync interval (`None`: its rule has no
/// `sync`, an exact proxy beside synced ones, as in a rollout) and
/// `sync.max_keys` (`None`: the default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxy {
    pub workers: usize,
    pub interval_ms: Option<u64>,
    pub max_keys: Option<u64>,
}

/// The network between workers and the store: one-way delays, uniform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Net {
    pub min_ms: u64,
    pub max_ms: u64,
}

/// What a client does after sending its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leave {
    /// Waits for its answer and its response.
    Never,
    /// Gives up this long after sending (its context is deleted then,
    /// whatever the request is doing: queued, with the store, held,
    /// released, or waiting for its settlement).
    After(u64),
}

/// One input of the run, at its time (ms after [`EPOCH_MS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// A request for user `key` to worker `worker` of proxy `proxy`; its
    /// response costs `used` units (rules that count). The upstream takes
    /// `upstream_ms` from its release to its response's end (`None`: 1 to
    /// 5 ms, drawn by the run).
    Request { proxy: usize, worker: usize, key: u8, leave: Leave, used: u64, upstream_ms: Option<u64> },
    /// The store takes no command for `ms` (`CLIENT PAUSE`, a slow command).
    Pause { ms: u64 },
    /// The store restarts: down for `ms`, its state kept (AOF) or not.
    Restart { ms: u64, keep: bool },
    /// The next replies on this worker's stream are lost: the stream goes
    /// silent until the worker gives up on it.
    Silence { proxy: usize, worker: usize },
    /// This worker's proxy dies (what it holds is lost) and a new one
    /// starts `ms` later.
    Kill { proxy: usize, worker: usize, ms: u64 },
}

/// A whole run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub seed: u64,
    pub rule: Rule,
    pub proxies: Vec<Proxy>,
    pub net: Net,
    /// `valkey.timeout` of every proxy.
    pub timeout_ms: u64,
    /// `(at_ms, input)`, in time order.
    pub inputs: Vec<(u64, Input)>,
    /// When the inputs end; the run goes on until everything settled.
    pub until_ms: u64,
}

impl Trace {
    /// Workers of every proxy, as `(proxy, worker)`.
    pub fn workers(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.proxies.iter().enumerate().flat_map(|(p, x)| (0..x.workers).map(move |w| (p, w)))
    }

    /// The plugin configuration of proxy `proxy`.
    pub fn config_json(&self, proxy: usize) -> String {
        let rule = &self.rule;
        let limits: Vec<String> =
            rule.windows.iter().map(|(l, p)| format!(r#"{{ "limit": {l}, "period": "{p}ms" }}"#)).collect();
        let mut fields = vec![
            r#""name": "api""#.to_string(),
            format!(r#""algorithm": "{}""#, rule.algorithm.name()),
            r#""key": [ { "header": "x-user-id" } ]"#.to_string(),
            format!(r#""limits": [ {} ]"#, limits.join(", ")),
        ];
        match rule.mode {
            Mode::Exact => {}
            Mode::Shaped { max_delay_ms, max_waiting } => {
                fields.push(format!(r#""shape": {{ "max_delay": "{max_delay_ms}ms", "max_waiting": {max_waiting} }}"#))
            }
            Mode::Synced => {
                if let Some(p) = self.proxies.get(proxy).filter(|p| p.interval_ms.is_some()) {
                    let keys = p.max_keys.map(|k| format!(r#", "max_keys": {k}"#)).unwrap_or_default();
                    let i = p.interval_ms.unwrap_or_default();
                    fields.push(format!(r#""sync": {{ "interval": "{i}ms"{keys} }}"#));
                }
            }
        }
        if let Some((limit, ttl)) = rule.concurrency {
            fields.push(format!(r#""concurrency": {{ "limit": {limit}, "lease_ttl": "{ttl}ms" }}"#));
        }
        if rule.overrides.is_some() {
            fields.push(r#""overrides": true"#.to_string());
        }
        if let Some(units) = rule.count {
            let reserve = if units > 0 { format!(r#""reserve": {{ "units": {units} }}, "#) } else { String::new() };
            fields.push(format!(r#""count": {{ {reserve}"cost": {{ "header": "x-used" }} }}"#));
        }
        format!(
            r#"{{ "valkey": {{ "cluster": "tollgate_valkey", "timeout": "{}ms" }}, "failure_mode": "deny",
              "response": {{ "filter_state": true }}, "rules": [ {{ {} }} ] }}"#,
            self.timeout_ms,
            fields.join(", ")
        )
    }
}
