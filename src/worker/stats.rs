//! The names of the stats a worker counts (`wasmcustom.` + these in Envoy,
//! listed in docs/configuration.md), derived from the configuration once:
//! the filter defines one Envoy metric per name and counts a [`Stat`] into
//! the metric named for it. Bounded: 4 per rule (9 for a rule with
//! `count`), 23 others, one per [`FailureKind`] and one per [`Reset`], 4
//! when a rule shapes, 7 when a rule syncs (or `failure_mode` is local); plus the total of store errors, two gauges (three
//! when a rule shapes), the histogram of store time (and of shaping delay
//! when a rule shapes).

use super::decision::ruling::RuleOutcome;
use super::host::{CountStat, Gauge, LeaseStat, Reset, ShapeStat, Stat};
use crate::config::{Config, FailureMode};
use crate::store::FailureKind;

/// Every store error counts here too, beside its kind's counter.
pub const STORE_ERRORS: &str = "tollgate.store.errors";
/// The histogram of store round trips, in ms.
pub const STORE_TIME: &str = "tollgate.store.rq_time";
/// The histogram of shaping delays (requests held for their turn), in ms.
pub const SHAPE_DELAY: &str = "tollgate.shape.delay";

/// The gauges, by name.
pub const GAUGES: [(Gauge, &str); 3] = [
    (Gauge::InFlight, "tollgate.stream.in_flight"),
    (Gauge::Held, "tollgate.requests.held"),
    (Gauge::Waiting, "tollgate.shape.waiting"),
];

/// The counters other than rules', errors' and resets', by name.
const OTHERS: [(Stat, &str); 23] = [
    (Stat::UnknownOutcome, "store.unknown_outcome"),
    (Stat::FailureMode { allowed: true }, "failure_mode.allowed"),
    (Stat::FailureMode { allowed: false }, "failure_mode.denied"),
    (Stat::Local { allowed: true }, "local.allowed"),
    (Stat::Local { allowed: false }, "local.denied"),
    (Stat::StoreMessages, "store.messages"),
    (Stat::StoreRequests, "store.requests"),
    (Stat::CacheHit, "cache.hits"),
    (Stat::Overloaded, "overloaded"),
    (Stat::BodyTooLarge, "body_too_large"),
    (Stat::PauseExpired, "settle.hold_expired"),
    (Stat::SentinelLookup, "sentinel.lookups"),
    (Stat::SentinelFailure, "sentinel.failures"),
    (Stat::SentinelSwitch, "sentinel.switches"),
    (Stat::ClusterRefresh, "cluster.refreshes"),
    (Stat::ClusterRefreshFailure, "cluster.refresh_failures"),
    (Stat::ClusterMoved, "cluster.moved"),
    (Stat::ClusterAsk, "cluster.ask"),
    (Stat::ClusterCrossShard, "cluster.cross_shard"),
    (Stat::ClusterUndo, "cluster.undos"),
    (Stat::ClusterUndoFailed, "cluster.undo_failed"),
    (Stat::ClusterShardFailure, "cluster.shard_failures"),
    (Stat::StreamOpen, "stream.opens"),
];

/// The counters of synced rules (`tollgate.sync.<name>`), when a rule syncs.
const SYNC: [(Stat, &str); 7] = [
    (Stat::Synced { allowed: true }, "allowed"),
    (Stat::Synced { allowed: false }, "denied"),
    (Stat::SyncFlush, "flushes"),
    (Stat::SyncKeys, "keys"),
    (Stat::SyncFailure, "failures"),
    (Stat::SyncDropped, "dropped"),
    (Stat::SyncDuplicate, "duplicates"),
];

/// Whether `stat` also counts in the total of store errors
/// ([`STORE_ERRORS`]), beside its own counter.
pub fn in_store_errors(stat: Stat) -> bool {
    matches!(stat, Stat::StoreError(_))
}

/// Every counter a worker with `config` can count, with its name. A
/// [`Stat::StoreError`] names its kind's counter ([`STORE_ERRORS`] counts
/// them all).
pub fn counters(config: &Config) -> Vec<(Stat, String)> {
    let mut out = Vec::new();
    for (i, rule) in config.rules.iter().enumerate() {
        let name = |what: &str| format!("tollgate.rule.{}.{what}", rule.name);
        out.push((Stat::Rule(i, RuleOutcome::Allowed), name("allowed")));
        out.push((Stat::Rule(i, RuleOutcome::Denied), name("denied")));
        out.push((Stat::Rule(i, RuleOutcome::ShadowDenied), name("shadow_denied")));
        out.push((Stat::RuleSkipped(i), name("skipped")));
        if rule.count.is_some() {
            out.extend(CountStat::ALL.map(|s| (Stat::Count(i, s), name(s.name()))));
        }
    }
    out.extend(FailureKind::ALL.map(|k| (Stat::StoreError(k), format!("{STORE_ERRORS}.{}", k.name()))));
    out.extend(OTHERS.map(|(stat, name)| (stat, format!("tollgate.{name}"))));
    out.extend(Reset::ALL.map(|r| (Stat::StreamReset(r), format!("tollgate.stream.resets.{}", r.name()))));
    // (`failure_mode: local` flushes what it admitted, too.)
    if config.rules.iter().any(|r| r.sync.is_some()) || config.failure_mode == FailureMode::Local {
        out.extend(SYNC.map(|(stat, name)| (stat, format!("tollgate.sync.{name}"))));
    }
    if config.rules.iter().any(|r| r.shaping.is_some()) {
        out.extend(ShapeStat::ALL.map(|s| (Stat::Shape(s), format!("tollgate.shape.{}", s.name()))));
    }
    if config.rules.iter().any(|r| r.concurrency.is_some()) {
        out.extend(LeaseStat::ALL.map(|s| (Stat::Lease(s), format!("tollgate.lease.{}", s.name()))));
    }
    out
}

/// Increments gathered, summed by metric (the host's handle): a counter
/// counted for every request of a reply message is added once when the
/// entry ends, not once per request; requests' counters may wait for the
/// next tick ([`super::reporting`]). Envoy reads its stats between VM
/// entries, so they are exact whenever read, or at most a tick late.
#[derive(Debug, Default)]
pub struct Sums(Vec<(u32, i64)>);

impl Sums {
    /// Adds `by` to metric `handle`'s sum.
    pub fn add(&mut self, handle: u32, by: i64) {
        match self.0.iter_mut().find(|(h, _)| *h == handle) {
            Some((_, sum)) => *sum = sum.saturating_add(by),
            None => self.0.push((handle, by)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The sums that change something, taken.
    pub fn take(&mut self) -> impl Iterator<Item = (u32, i64)> + '_ {
        self.0.drain(..).filter(|(_, by)| *by != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{plugin, rule};
    use std::collections::HashSet;

    #[test]
    fn every_counter_has_one_name_and_the_bound_holds() {
        let config = plugin()
            .with(rule("plain").header("x-user-id").limit(5, "1s"))
            .with(rule("counted").header("x-user-id").limit(5, "1s").field(r#""count": { "status": [401] }"#))
            .build();
        let all = counters(&config);
        let names: HashSet<_> = all.iter().map(|(_, n)| n.as_str()).collect();
        let stats: HashSet<_> = all.iter().map(|(s, _)| *s).collect();
        assert_eq!(names.len(), all.len(), "names are unique");
        assert_eq!(stats.len(), all.len(), "each stat is named once");
        assert!(!names.contains(STORE_ERRORS) && !names.contains(STORE_TIME));
        assert_eq!(all.len(), 4 + 9 + FailureKind::ALL.len() + OTHERS.len() + Reset::ALL.len());
        assert!(names.contains("tollgate.rule.counted.settled") && !names.contains("tollgate.rule.plain.settled"));
        assert!(names.contains("tollgate.store.errors.timeout") && names.contains("tollgate.stream.resets.stalled"));
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn every_store_error_and_nothing_else_counts_in_the_total() {
        assert!(FailureKind::ALL.iter().all(|k| in_store_errors(Stat::StoreError(*k))));
        let others = OTHERS.iter().map(|(s, _)| *s).chain(Reset::ALL.map(Stat::StreamReset));
        assert!(others.into_iter().all(|s| !in_store_errors(s)));
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn sums_add_up_by_metric_and_drop_what_cancels_out() {
        let mut sums = Sums::default();
        for (handle, by) in [(3, 1), (5, 2), (3, 1), (7, 1), (7, -1), (3, i64::MAX)] {
            sums.add(handle, by);
        }
        assert_eq!(sums.take().collect::<Vec<_>>(), [(3, i64::MAX), (5, 2)]);
        assert_eq!(sums.take().count(), 0, "taken");
    }
}
