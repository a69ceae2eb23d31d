//! The store stream: the calls the worker holds until their replies
//! ([`calls::Calls`]), the shards that carry them (one stream each, one per
//! master of a Valkey Cluster, [`shards::Shards`]), each stream's pipeline
//! ([`link::Link`]), writing queued calls into messages within the stream's
//! bounds ([`send`]) and pairing replies with the calls in order
//! ([`replies`]).

pub(super) mod link;
pub(super) mod replies;
pub(super) mod send;
pub(super) mod shards;
