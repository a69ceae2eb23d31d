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
