//! Where the store is: the master the Sentinels report
//! ([`sentinel_lookup`]), the slot map of a Valkey Cluster
//! ([`cluster_lookup`]), each read on a stream of its own, and routing a call
//! by the slot of its keys ([`routing`]: `MOVED`, `ASK`, a new slot map,
//! streams to former masters retired). Owns what the lookups learned, each
//! behind its type ([`sentinel_lookup::SentinelLookup`],
//! [`cluster_lookup::ClusterLookup`]).

pub(super) mod cluster_lookup;
pub(super) mod routing;
pub(super) mod sentinel_lookup;

use super::host::Host;
use super::Worker;
use cluster_lookup::ClusterLookup;
use sentinel_lookup::SentinelLookup;

impl Worker {
    /// Whether a lookup of the master or the slot map is under way.
    pub(super) fn discovery_busy(&self) -> bool {
        self.sentinels.as_ref().is_some_and(SentinelLookup::busy)
            || self.cluster.as_ref().is_some_and(ClusterLookup::busy)
    }

    /// Looks up the master or the slot map when due (from the worker's own
    /// callbacks, once it serves).
    pub(super) fn lookup(&mut self, host: &mut dyn Host, now_ms: u64) {
        if !self.serving {
            return;
        }
        let timeout_ms = self.timeout_ms;
        if let Some(s) = &mut self.sentinels {
            s.lookup(host, now_ms, timeout_ms);
        }
        if let Some(c) = &mut self.cluster {
            c.lookup(host, now_ms, timeout_ms);
        }
    }
}
