//! The store streams: the shards that carry the held calls (one stream
//! each: one, or one per master of a Valkey Cluster, [`shards::Shards`],
//! with whether its server has the limiter's code), each stream's pipeline
//! ([`link::Link`], also used by the Sentinel and slot-map lookups),
//! writing queued calls into messages within the stream's bounds
//! ([`send`]: opening, closing and resetting streams too) and pairing
//! replies with the calls in order ([`replies`]).

pub(super) mod link;
pub(super) mod replies;
pub(super) mod send;
pub(super) mod shards;
