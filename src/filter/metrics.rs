//! Envoy stats of the filter. Envoy shows metrics defined by wasm plugins
//! with the prefix `wasmcustom.` (see docs/configuration.md for the list).
//! Handles are defined once per worker VM at configuration time: their number
//! is bounded: 4 per rule, 12 others and one per [`FailureKind`] (12); plus
//! `tollgate.config.errors`, defined only when a configuration is refused.

use crate::config::Config;
use crate::store::FailureKind;
use crate::verdict::RuleOutcome;
use proxy_wasm::hostcalls;
use proxy_wasm::types::MetricType;

/// Handles of one rule's counters.
#[derive(Debug, Clone, Copy, Default)]
struct RuleMetrics {
    allowed: Option<u32>,
    denied: Option<u32>,
    shadow_denied: Option<u32>,
    skipped: Option<u32>,
}

/// Every metric handle of the filter (a missing handle is simply not counted).
#[derive(Debug, Default)]
pub struct Metrics {
    rules: Vec<RuleMetrics>,
    store_errors: Option<u32>,
    /// `tollgate.store.errors.<kind>`, indexed by [`FailureKind::index`].
    store_errors_by_kind: [Option<u32>; FailureKind::ALL.len()],
    failure_mode_allowed: Option<u32>,
    failure_mode_denied: Option<u32>,
    unknown_outcome: Option<u32>,
    store_rq_time: Option<u32>,
    store_calls: Option<u32>,
    store_requests: Option<u32>,
    cache_hits: Option<u32>,
    queue_overflow: Option<u32>,
    sentinel_lookups: Option<u32>,
    sentinel_failures: Option<u32>,
    sentinel_switches: Option<u32>,
}

fn define(kind: MetricType, name: &str) -> Option<u32> {
    hostcalls::define_metric(kind, name).ok()
}

fn counter(name: &str) -> Option<u32> {
    define(MetricType::Counter, name)
}

/// Counts a configuration the filter refused (`tollgate.config.errors`).
pub fn count_config_error() {
    increment(counter("tollgate.config.errors"));
}

fn increment(handle: Option<u32>) {
    if let Some(id) = handle {
        let _ = hostcalls::increment_metric(id, 1);
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
                }
            })
            .collect();
        Metrics {
            rules,
            store_errors: counter("tollgate.store.errors"),
            store_errors_by_kind: FailureKind::ALL.map(|k| counter(&format!("tollgate.store.errors.{}", k.name()))),
            failure_mode_allowed: counter("tollgate.failure_mode.allowed"),
            failure_mode_denied: counter("tollgate.failure_mode.denied"),
            unknown_outcome: counter("tollgate.store.unknown_outcome"),
            store_rq_time: define(MetricType::Histogram, "tollgate.store.rq_time"),
            store_calls: counter("tollgate.store.calls"),
            store_requests: counter("tollgate.store.requests"),
            cache_hits: counter("tollgate.cache.hits"),
            queue_overflow: counter("tollgate.queue.overflow"),
            sentinel_lookups: counter("tollgate.sentinel.lookups"),
            sentinel_failures: counter("tollgate.sentinel.failures"),
            sentinel_switches: counter("tollgate.sentinel.switches"),
        }
    }

    pub fn rule(&self, rule: usize, outcome: RuleOutcome) {
        let Some(m) = self.rules.get(rule) else { return };
        increment(match outcome {
            RuleOutcome::Allowed => m.allowed,
            RuleOutcome::Denied => m.denied,
            RuleOutcome::ShadowDenied => m.shadow_denied,
        });
    }

    pub fn skipped(&self, rule: usize) {
        increment(self.rules.get(rule).and_then(|m| m.skipped));
    }

    /// Counts a store failure in `store.errors` and `store.errors.<kind>`.
    pub fn store_error(&self, kind: FailureKind) {
        increment(self.store_errors);
        increment(self.store_errors_by_kind.get(kind.index()).copied().flatten());
    }

    /// A failed request whose call may have run on the store (and so may be
    /// charged): see [`crate::store::Failure::may_have_run`].
    pub fn unknown_outcome(&self) {
        increment(self.unknown_outcome);
    }

    pub fn failure_mode(&self, allowed: bool) {
        increment(if allowed { self.failure_mode_allowed } else { self.failure_mode_denied });
    }

    /// One store call dispatched, carrying `requests` requests' checks.
    pub fn store_call(&self, requests: usize) {
        increment(self.store_calls);
        if let Some(id) = self.store_requests {
            let _ = hostcalls::increment_metric(id, i64::try_from(requests).unwrap_or(i64::MAX));
        }
    }

    /// A request denied from the local denial cache, without a store call.
    pub fn cache_hit(&self) {
        increment(self.cache_hits);
    }

    /// A request that found the store call queue full.
    pub fn queue_overflow(&self) {
        increment(self.queue_overflow);
    }

    /// A master lookup sent to the Sentinels.
    pub fn sentinel_lookup(&self) {
        increment(self.sentinel_lookups);
    }

    /// A master lookup that gave no master (sent or not).
    pub fn sentinel_failure(&self) {
        increment(self.sentinel_failures);
    }

    /// The Sentinels reported a master other than the one in use.
    pub fn sentinel_switch(&self) {
        increment(self.sentinel_switches);
    }

    /// Records one store call's duration, in milliseconds.
    pub fn store_time(&self, ms: u64) {
        if let Some(id) = self.store_rq_time {
            let _ = hostcalls::record_metric(id, ms);
        }
    }
}
