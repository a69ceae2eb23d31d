//! Envoy stats of the filter. Envoy shows metrics defined by wasm plugins
//! with the prefix `wasmcustom.` (see docs/configuration.md for the list).
//! Handles are defined once per worker VM at configuration time: their number
//! is bounded: 4 per rule (9 for a rule with `count`), 27 others, one per
//! [`FailureKind`] (12) and one per [`Reset`] (6); plus
//! `tollgate.config.errors`, defined only when a configuration is refused.

use super::hostcalls;
use crate::config::Config;
use crate::store::FailureKind;
use crate::worker::respond::RuleOutcome;
use crate::worker::{CountStat, Gauge, Reset, Stat};
use proxy_wasm::types::MetricType;

/// Handles of one rule's counters.
#[derive(Debug, Clone, Copy, Default)]
struct RuleMetrics {
    allowed: Option<u32>,
    denied: Option<u32>,
    shadow_denied: Option<u32>,
    skipped: Option<u32>,
    /// Only for a rule with `count`, in [`CountStat::ALL`] order.
    count: [Option<u32>; CountStat::ALL.len()],
}

/// Every metric handle of the filter (a missing handle is simply not counted).
#[derive(Debug, Default)]
pub struct Metrics {
    rules: Vec<RuleMetrics>,
    store_errors: Option<u32>,
    /// `tollgate.store.errors.<kind>`, indexed by [`FailureKind::index`].
    store_errors_by_kind: [Option<u32>; FailureKind::ALL.len()],
    unknown_outcome: Option<u32>,
    failure_mode_allowed: Option<u32>,
    failure_mode_denied: Option<u32>,
    local_allowed: Option<u32>,
    local_denied: Option<u32>,
    store_rq_time: Option<u32>,
    store_calls: Option<u32>,
    store_requests: Option<u32>,
    cache_hits: Option<u32>,
    overloaded: Option<u32>,
    body_too_large: Option<u32>,
    hold_expired: Option<u32>,
    sentinel_lookups: Option<u32>,
    sentinel_failures: Option<u32>,
    sentinel_switches: Option<u32>,
    cluster_refreshes: Option<u32>,
    cluster_refresh_failures: Option<u32>,
    cluster_moved: Option<u32>,
    cluster_ask: Option<u32>,
    cluster_cross_shard: Option<u32>,
    cluster_undos: Option<u32>,
    cluster_undo_failed: Option<u32>,
    cluster_shard_failures: Option<u32>,
    stream_opens: Option<u32>,
    /// `tollgate.stream.resets.<cause>`, in [`Reset::ALL`] order.
    stream_resets: [Option<u32>; Reset::ALL.len()],
    in_flight: Option<u32>,
    held: Option<u32>,
}

fn define(kind: MetricType, name: &str) -> Option<u32> {
    hostcalls::define_metric(kind, name).ok()
}

fn counter(name: &str) -> Option<u32> {
    define(MetricType::Counter, name)
}

/// Counts a configuration the filter refused (`tollgate.config.errors`).
pub fn count_config_error() {
    add(counter("tollgate.config.errors"), 1);
}

fn add(handle: Option<u32>, by: i64) {
    if let Some(id) = handle {
        let _ = hostcalls::increment_metric(id, by);
    }
}

impl Metrics {
    pub fn define(config: &Config) -> Metrics {
        let rules = config
            .rules
            .iter()
            .map(|r| {
                let name = |what: &str| counter(&format!("tollgate.rule.{}.{what}", r.name));
                RuleMetrics {
                    allowed: name("allowed"),
                    denied: name("denied"),
                    shadow_denied: name("shadow_denied"),
                    skipped: name("skipped"),
                    count: match r.count {
                        Some(_) => CountStat::ALL.map(|s| name(s.name())),
                        None => [None; CountStat::ALL.len()],
                    },
                }
            })
            .collect();
        Metrics {
            rules,
            store_errors: counter("tollgate.store.errors"),
            store_errors_by_kind: FailureKind::ALL.map(|k| counter(&format!("tollgate.store.errors.{}", k.name()))),
            unknown_outcome: counter("tollgate.store.unknown_outcome"),
            failure_mode_allowed: counter("tollgate.failure_mode.allowed"),
            failure_mode_denied: counter("tollgate.failure_mode.denied"),
            local_allowed: counter("tollgate.local.allowed"),
            local_denied: counter("tollgate.local.denied"),
            store_rq_time: define(MetricType::Histogram, "tollgate.store.rq_time"),
            store_calls: counter("tollgate.store.calls"),
            store_requests: counter("tollgate.store.requests"),
            cache_hits: counter("tollgate.cache.hits"),
            overloaded: counter("tollgate.overloaded"),
            body_too_large: counter("tollgate.body_too_large"),
            hold_expired: counter("tollgate.settle.hold_expired"),
            sentinel_lookups: counter("tollgate.sentinel.lookups"),
            sentinel_failures: counter("tollgate.sentinel.failures"),
            sentinel_switches: counter("tollgate.sentinel.switches"),
            cluster_refreshes: counter("tollgate.cluster.refreshes"),
            cluster_refresh_failures: counter("tollgate.cluster.refresh_failures"),
            cluster_moved: counter("tollgate.cluster.moved"),
            cluster_ask: counter("tollgate.cluster.ask"),
            cluster_cross_shard: counter("tollgate.cluster.cross_shard"),
            cluster_undos: counter("tollgate.cluster.undos"),
            cluster_undo_failed: counter("tollgate.cluster.undo_failed"),
            cluster_shard_failures: counter("tollgate.cluster.shard_failures"),
            stream_opens: counter("tollgate.stream.opens"),
            stream_resets: Reset::ALL.map(|r| counter(&format!("tollgate.stream.resets.{}", r.name()))),
            in_flight: define(MetricType::Gauge, "tollgate.stream.in_flight"),
            held: define(MetricType::Gauge, "tollgate.requests.held"),
        }
    }

    fn handle(&self, stat: Stat) -> Option<u32> {
        let rule = |i: usize| self.rules.get(i).copied().unwrap_or_default();
        match stat {
            Stat::Rule(i, RuleOutcome::Allowed) => rule(i).allowed,
            Stat::Rule(i, RuleOutcome::Denied) => rule(i).denied,
            Stat::Rule(i, RuleOutcome::ShadowDenied) => rule(i).shadow_denied,
            Stat::RuleSkipped(i) => rule(i).skipped,
            Stat::StoreError(_) => self.store_errors,
            Stat::UnknownOutcome => self.unknown_outcome,
            Stat::FailureMode { allowed: true } => self.failure_mode_allowed,
            Stat::FailureMode { allowed: false } => self.failure_mode_denied,
            Stat::Local { allowed: true } => self.local_allowed,
            Stat::Local { allowed: false } => self.local_denied,
            Stat::StoreMessages => self.store_calls,
            Stat::StoreRequests => self.store_requests,
            Stat::CacheHit => self.cache_hits,
            Stat::Overloaded => self.overloaded,
            Stat::Count(i, s) => {
                CountStat::ALL.iter().position(|x| *x == s).and_then(|j| rule(i).count.get(j).copied()).flatten()
            }
            Stat::BodyTooLarge => self.body_too_large,
            Stat::HoldExpired => self.hold_expired,
            Stat::SentinelLookup => self.sentinel_lookups,
            Stat::SentinelFailure => self.sentinel_failures,
            Stat::SentinelSwitch => self.sentinel_switches,
            Stat::ClusterRefresh => self.cluster_refreshes,
            Stat::ClusterRefreshFailure => self.cluster_refresh_failures,
            Stat::ClusterMoved => self.cluster_moved,
            Stat::ClusterAsk => self.cluster_ask,
            Stat::ClusterCrossShard => self.cluster_cross_shard,
            Stat::ClusterUndo => self.cluster_undos,
            Stat::ClusterUndoFailed => self.cluster_undo_failed,
            Stat::ClusterShardFailure => self.cluster_shard_failures,
            Stat::StreamOpen => self.stream_opens,
            Stat::StreamReset(r) => {
                Reset::ALL.iter().position(|x| *x == r).and_then(|i| self.stream_resets.get(i)).copied().flatten()
            }
        }
    }

    pub fn count(&self, stat: Stat, by: u64) {
        let by = i64::try_from(by).unwrap_or(i64::MAX);
        add(self.handle(stat), by);
        if let Stat::StoreError(kind) = stat {
            add(self.store_errors_by_kind.get(kind.index()).copied().flatten(), by);
        }
    }

    pub fn gauge(&self, gauge: Gauge, delta: i64) {
        match gauge {
            Gauge::InFlight => add(self.in_flight, delta),
            Gauge::Held => add(self.held, delta),
        }
    }

    /// Records one store round trip, in milliseconds.
    pub fn store_time(&self, ms: u64) {
        if let Some(id) = self.store_rq_time {
            let _ = hostcalls::record_metric(id, ms);
        }
    }
}
