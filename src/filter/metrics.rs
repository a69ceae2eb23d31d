//! Envoy stats of the filter: one Envoy metric per name the worker core
//! gives ([`crate::worker::stats`], derived from the configuration), defined
//! once per worker VM at configuration time. Envoy shows them with the prefix
//! `wasmcustom.`. `tollgate.config.errors` is defined only when a
//! configuration is refused.

use super::hostcalls;
use crate::config::Config;
use crate::idhash::IdMap;
use crate::worker::stats::{counters, in_store_errors, Sums, GAUGES, SHAPE_DELAY, STORE_ERRORS, STORE_TIME};
use crate::worker::{Gauge, Stat};
use proxy_wasm::types::MetricType;

#[derive(Debug, Default)]
pub struct Metrics {
    counters: IdMap<Stat, u32>,
    store_errors: Option<u32>,
    gauges: [Option<u32>; GAUGES.len()],
    store_time: Option<u32>,
    /// Defined only when a rule shapes.
    shape_delay: Option<u32>,
}

fn define(kind: MetricType, name: &str) -> Option<u32> {
    hostcalls::define_metric(kind, name).ok()
}

pub fn count_config_error() {
    add(define(MetricType::Counter, "tollgate.config.errors"), 1);
}

fn add(handle: Option<u32>, by: i64) {
    if let Some(id) = handle {
        let _ = hostcalls::increment_metric(id, by);
    }
}

/// Adds the VM entry's increments to Envoy's metrics.
pub fn emit(sums: &mut Sums) {
    for (handle, by) in sums.take() {
        add(Some(handle), by);
    }
}

impl Metrics {
    pub fn define(config: &Config) -> Metrics {
        let shaping = config.rules.iter().any(|r| r.shaping.is_some());
        Metrics {
            counters: counters(config)
                .into_iter()
                .filter_map(|(stat, name)| Some((stat, define(MetricType::Counter, &name)?)))
                .collect(),
            store_errors: define(MetricType::Counter, STORE_ERRORS),
            // The shaping gauge only when a rule shapes.
            gauges: GAUGES
                .map(|(g, name)| (shaping || g != Gauge::Waiting).then(|| define(MetricType::Gauge, name)).flatten()),
            store_time: define(MetricType::Histogram, STORE_TIME),
            shape_delay: shaping.then(|| define(MetricType::Histogram, SHAPE_DELAY)).flatten(),
        }
    }

    /// Adds `by` to `stat` in `sums` (the VM entry's increments, added to
    /// Envoy's metrics by [`emit`] when the entry ends).
    pub fn count(&self, sums: &mut Sums, stat: Stat, by: u64) {
        let by = i64::try_from(by).unwrap_or(i64::MAX);
        let total = in_store_errors(stat).then_some(self.store_errors).flatten();
        for handle in [self.counters.get(&stat).copied(), total].into_iter().flatten() {
            sums.add(handle, by);
        }
    }

    pub fn gauge(&self, sums: &mut Sums, gauge: Gauge, delta: i64) {
        let handle = GAUGES.iter().position(|(g, _)| *g == gauge).and_then(|i| self.gauges.get(i));
        if let Some(handle) = handle.copied().flatten() {
            sums.add(handle, delta);
        }
    }

    /// Records the delay of one request held for its turn, in ms.
    pub fn shape_delay(&self, ms: u64) {
        if let Some(id) = self.shape_delay {
            let _ = hostcalls::record_metric(id, ms);
        }
    }

    /// Records one store round trip, in milliseconds.
    pub fn store_time(&self, ms: u64) {
        if let Some(id) = self.store_time {
            let _ = hostcalls::record_metric(id, ms);
        }
    }
}
