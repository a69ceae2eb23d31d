//! What a run leaves behind for its checks: every request as its client
//! saw it, every node, the store and its journal, and the world's own
//! record of faults and lease sets.

use super::leases::LeaseRecord;
use super::node::Node;
use crate::model::store::ModelStore;
use std::collections::BTreeMap;

/// A request, as its client sees it.
#[derive(Debug, Clone)]
pub struct Request {
    pub node: usize,
    pub key: u8,
    pub sent_ms: u64,
    pub used: u64,
    /// How long the upstream takes with it (`None`: 1 to 5 ms, drawn).
    pub upstream_ms: Option<u64>,
    /// When it went on to the upstream (admitted now, or released).
    pub released_ms: Option<u64>,
    /// The status of a local reply (`429`, `503`).
    pub refused: Option<u32>,
    pub gone: bool,
    /// When its context was deleted (its client left, or it was done).
    pub gone_ms: Option<u64>,
}

/// A finished run: what every part did.
pub struct Run {
    pub nodes: Vec<Node>,
    pub requests: BTreeMap<u32, Request>,
    pub store: ModelStore,
    /// The node whose stream carried each call of `store.ran`.
    pub ran_by: Vec<usize>,
    /// When the store restarted without its state.
    pub wipes: Vec<u64>,
    /// Every flush a node sent (reaching the store or not): when, its
    /// token, its bucket keys.
    pub flushes_sent: Vec<(usize, u64, String, Vec<String>)>,
    /// When the store could not answer a node (`None`: any node): paused,
    /// down, or the node's stream silent, as `(from, to)`.
    pub troubles: Vec<(u64, u64, Option<usize>)>,
    /// The largest one-way delay of the network.
    pub max_delay_ms: u64,
    /// The store's lease sets over the run, and the links to it.
    pub leases: LeaseRecord,
    pub end_ms: u64,
}

impl Run {
    /// Nothing run yet, against a store that keeps a journal, on a
    /// network of at most `max_delay_ms` one way.
    pub fn new(max_delay_ms: u64) -> Run {
        Run {
            nodes: Vec::new(),
            requests: BTreeMap::new(),
            store: ModelStore { journal: true, ..ModelStore::default() },
            ran_by: Vec::new(),
            wipes: Vec::new(),
            troubles: Vec::new(),
            flushes_sent: Vec::new(),
            max_delay_ms,
            leases: LeaseRecord::default(),
            end_ms: 0,
        }
    }
}
