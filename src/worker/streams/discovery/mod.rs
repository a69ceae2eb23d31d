//! Where the store is: the master the Sentinels report
//! ([`sentinel_lookup`]), the slot map of a Valkey Cluster
//! ([`cluster_lookup`]), each read on a stream of its own, and where a call
//! goes by the slot of its keys ([`Route`]). Owns what the lookups learned,
//! each behind its type; [`Topology`] is the room's face.

pub(super) mod cluster_lookup;
mod routing;
pub(super) mod sentinel_lookup;

use super::shards::Shards;
use crate::config::ValkeyConfig;
use crate::limiter::Check;
use crate::store::cluster::{common_slot, SlotMap};
use crate::store::sentinel::Change;
use crate::store::{Failure, FailureKind, Preamble};
use crate::worker::calls::ShardId;
use crate::worker::host::{Host, Stat};
use cluster_lookup::ClusterLookup;
use sentinel_lookup::SentinelLookup;
use std::net::SocketAddr;

/// Where a new call goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::worker) enum Route {
    /// To the queue of this shard.
    Shard(ShardId),
    /// To wait for the slot map.
    Parked,
    /// Nowhere: no master serves its slot.
    Unserved(u16),
    /// Its checks hash to several slots: more than one call decides it.
    CrossSlot,
}

/// What a lookup's stream brought.
#[derive(Debug)]
pub(in crate::worker) enum Learned {
    /// Not a lookup's stream.
    Nothing,
    /// The Sentinels' answer: the master moved, or not.
    Master(Option<Change>),
    /// A new slot map.
    SlotMap,
    /// A reply that changed nothing.
    Same,
}

/// The lookups of one worker: the Sentinels' master, or the cluster's slot
/// map, or neither (a single store).
#[derive(Debug)]
pub(in crate::worker) struct Topology {
    sentinels: Option<SentinelLookup>,
    cluster: Option<ClusterLookup>,
}

impl Topology {
    pub fn new(valkey: &ValkeyConfig, preamble: &Preamble) -> Topology {
        Topology {
            sentinels: valkey.sentinel.as_ref().map(SentinelLookup::new),
            cluster: valkey.cluster_mode.as_ref().map(|c| ClusterLookup::new(c, preamble.clone())),
        }
    }

    /// Valkey Cluster: one shard per master.
    pub fn clustered(&self) -> bool {
        self.cluster.is_some()
    }

    /// Whether the worker looks the store up (Sentinels or cluster): its
    /// tick stays on while it serves.
    pub fn looks_up(&self) -> bool {
        self.sentinels.is_some() || self.cluster.is_some()
    }

    /// Whether a lookup of the master or the slot map is under way.
    pub fn busy(&self) -> bool {
        self.sentinels.as_ref().is_some_and(SentinelLookup::busy)
            || self.cluster.as_ref().is_some_and(ClusterLookup::busy)
    }

    /// Looks up the master or the slot map when due.
    pub fn lookup(&mut self, host: &mut dyn Host, now_ms: u64, timeout_ms: u64) {
        if let Some(s) = &mut self.sentinels {
            s.lookup(host, now_ms, timeout_ms);
        }
        if let Some(c) = &mut self.cluster {
            c.lookup(host, now_ms, timeout_ms);
        }
    }

    /// Bytes on stream `token`, if it is a lookup's.
    pub fn on_message(&mut self, host: &mut dyn Host, token: u32, bytes: &[u8], now_ms: u64) -> Learned {
        if let Some(s) = self.sentinels.as_mut().filter(|s| s.token() == Some(token)) {
            return Learned::Master(s.on_message(host, bytes, now_ms));
        }
        if let Some(c) = self.cluster.as_mut().filter(|c| c.token() == Some(token)) {
            return if c.on_message(host, bytes, now_ms) { Learned::SlotMap } else { Learned::Same };
        }
        Learned::Nothing
    }

    /// Stream `token` closed, if it is a lookup's.
    pub fn on_close(&mut self, host: &mut dyn Host, token: u32, status: u32, now_ms: u64) {
        if let Some(s) = self.sentinels.as_mut().filter(|s| s.token() == Some(token)) {
            s.on_close(host, status, now_ms);
        } else if let Some(c) = self.cluster.as_mut().filter(|c| c.token() == Some(token)) {
            c.on_close(host, status, now_ms);
        }
    }

    /// The Sentinels' master: `Err(())` while it is not known yet (`Ok(None)`:
    /// no Sentinels).
    pub fn master(&self) -> Result<Option<SocketAddr>, ()> {
        match &self.sentinels {
            Some(s) => s.master().map(Some).ok_or(()),
            None => Ok(None),
        }
    }

    /// Whether a Sentinel lookup is due (sent from the worker's own callback).
    pub fn master_due(&self, now_ms: u64) -> bool {
        self.sentinels.as_ref().is_some_and(|s| s.due(now_ms))
    }

    /// Whether a slot-map lookup is due (sent from the worker's own callback).
    pub fn map_due(&self, now_ms: u64) -> bool {
        self.cluster.as_ref().is_some_and(|c| c.due(now_ms))
    }

    /// The slot map, once known (cluster mode).
    pub fn map(&self) -> Option<&SlotMap> {
        self.cluster.as_ref().and_then(ClusterLookup::map)
    }

    /// Where a call over `checks` goes, and (cluster mode) their slot; `home`:
    /// the one shard of a single store or a Sentinel master.
    pub fn route(&self, checks: &[Check], home: Option<ShardId>, shards: &mut Shards) -> (Route, Option<u16>) {
        let Some(cluster) = &self.cluster else {
            return (home.map_or(Route::Parked, Route::Shard), None);
        };
        let Some(slot) = common_slot(checks.iter().map(|c| c.key.as_bytes())) else {
            return (Route::CrossSlot, None);
        };
        let route = match cluster.map().map(|m| m.owner(slot)) {
            None => Route::Parked,
            Some(Some(addr)) => Route::Shard(shards.for_addr(addr)),
            Some(None) => Route::Unserved(slot),
        };
        (route, Some(slot))
    }

    /// The failure of a call whose slot no master serves (the map is read
    /// again soon).
    pub fn unserved(&mut self, slot: u16, now_ms: u64) -> Failure {
        self.suspect_slots(now_ms);
        Failure::Unavailable(format!("no master serves slot {slot} in the cluster's slot map"))
    }

    /// A `MOVED` reply: the slot moved to `addr`.
    pub fn moved(&mut self, host: &mut dyn Host, slot: u16, addr: SocketAddr, now_ms: u64) {
        host.count(Stat::ClusterMoved, 1);
        if let Some(c) = &mut self.cluster {
            c.moved(slot, addr, now_ms);
        }
    }

    /// The slot map is read again soon.
    pub fn suspect_slots(&mut self, now_ms: u64) {
        if let Some(c) = &mut self.cluster {
            c.suspect(now_ms);
        }
    }

    /// The master is asked for again soon.
    pub fn suspect_master(&mut self, now_ms: u64) {
        if let Some(s) = &mut self.sentinels {
            s.suspect(now_ms);
        }
    }

    /// A failure that suggests the master moved, or the slot map changed,
    /// has them looked up again soon (at most every 100 ms).
    pub fn suspect(&mut self, failure: &Failure, now_ms: u64) {
        let kind = failure.kind();
        // `CLUSTERDOWN` and `TRYAGAIN` are `busy`: the map may have changed.
        let master = matches!(kind, FailureKind::Unavailable | FailureKind::Timeout | FailureKind::ReadOnly);
        if master {
            self.suspect_master(now_ms);
        }
        if master || kind == FailureKind::Busy {
            self.suspect_slots(now_ms);
        }
    }

    /// A master's stream failed (cluster mode): counted, and the map is read
    /// again soon.
    pub fn shard_failed(&mut self, host: &mut dyn Host, now_ms: u64) {
        if let Some(c) = &mut self.cluster {
            host.count(Stat::ClusterShardFailure, 1);
            c.suspect(now_ms);
        }
    }

    /// Why a call could not be sent for want of the master or the map.
    pub fn unknown(&self) -> Option<Failure> {
        if self.sentinels.as_ref().is_some_and(|s| s.master().is_none()) {
            return Some(Failure::Unavailable("no master known from the Sentinels yet".into()));
        }
        None
    }
}
