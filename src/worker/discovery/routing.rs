//! Routing in cluster mode: a request whose checks hash to one slot goes to
//! the shard (store stream) of that slot's master; it waits in the
//! [`PARKED`] queue until the worker knows the slot map. A `MOVED` reply
//! updates the map and sends the call to the new master; an `ASK` sends it
//! once to the named node after `ASKING`, without changing the map. When
//! the map changes, queued requests follow their slots, and streams to
//! nodes that are no longer masters are closed once idle.

use crate::limiter::Check;
use crate::resp::Value;
use crate::store::cluster::{common_slot, Redirect};
use crate::store::{interpret_reply, Failure, Outcome};
use crate::worker::calls::{CallId, ShardId, PARKED};
use crate::worker::discovery::cluster_lookup::ClusterLookup;
use crate::worker::host::{Host, Reset, Stat};
use crate::worker::Worker;
use std::net::SocketAddr;

/// Redirections (`MOVED`, `ASK`) one request follows before it fails.
pub const MAX_REDIRECTS: u8 = 5;

/// Where a new request goes.
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

fn unserved(slot: u16) -> Failure {
    Failure::Unavailable(format!("no master serves slot {slot} in the cluster's slot map"))
}

impl Worker {
    /// Where a request with `checks` goes, and (cluster mode) their slot.
    pub(in crate::worker) fn route(&mut self, checks: &[Check]) -> (Route, Option<u16>) {
        let Some(cluster) = &self.cluster else {
            return (self.home.map_or(Route::Parked, Route::Shard), None);
        };
        let Some(slot) = common_slot(checks.iter().map(|c| c.key.as_bytes())) else {
            return (Route::CrossSlot, None);
        };
        let route = match cluster.map().map(|m| m.owner(slot)) {
            None => Route::Parked,
            Some(Some(addr)) => Route::Shard(self.shards.for_addr(addr)),
            Some(None) => Route::Unserved(slot),
        };
        (route, Some(slot))
    }

    /// The failure of a request whose slot no master serves (the map is
    /// read again soon).
    pub(in crate::worker) fn unserved(&mut self, slot: u16, now_ms: u64) -> Failure {
        if let Some(c) = &mut self.cluster {
            c.suspect(now_ms);
        }
        unserved(slot)
    }

    /// Parked requests go to their masters once the map is known.
    pub(in crate::worker) fn route_parked(&mut self, host: &mut dyn Host, now_ms: u64) {
        let Some(map) = self.cluster.as_ref().and_then(ClusterLookup::map) else { return };
        if self.calls.queued_on(PARKED) == 0 {
            return;
        }
        let ids = self.calls.drain_queue(PARKED);
        let owners: Vec<(CallId, u16, Option<SocketAddr>)> = ids
            .into_iter()
            .filter_map(|id| {
                let slot = self.calls.get(id)?.slot?;
                Some((id, slot, map.owner(slot)))
            })
            .collect();
        for (id, slot, owner) in owners {
            match owner {
                Some(addr) => {
                    let shard = self.shards.for_addr(addr);
                    self.calls.set_shard(id, shard);
                }
                None => {
                    let failure = self.unserved(slot, now_ms);
                    self.fail(host, id, &failure, now_ms);
                }
            }
        }
    }

    /// A `MOVED` or `ASK` answered request `id`'s call (which did not run):
    /// true when it goes again (to the shard now in its `shard`), false
    /// when it failed (too many redirections, or one that cannot be
    /// followed: a hostname).
    pub(in crate::worker) fn redirect(
        &mut self,
        host: &mut dyn Host,
        id: CallId,
        redirect: Result<Redirect, String>,
        reply: &Value,
        now_ms: u64,
    ) -> bool {
        let Some(p) = self.calls.get_mut(id) else { return false };
        p.redirects = p.redirects.saturating_add(1);
        let redirect = redirect.ok().filter(|_| p.redirects <= MAX_REDIRECTS);
        let (addr, asking) = match redirect {
            Some(Redirect::Moved { slot, addr }) => {
                host.count(Stat::ClusterMoved, 1);
                if let Some(c) = &mut self.cluster {
                    c.moved(slot, addr, now_ms);
                }
                (addr, false)
            }
            Some(Redirect::Ask { addr, .. }) => {
                host.count(Stat::ClusterAsk, 1);
                (addr, true)
            }
            None => {
                if let Some(c) = &mut self.cluster {
                    c.suspect(now_ms);
                }
                let Some(p) = self.calls.remove(id) else { return false };
                let failure = match interpret_reply(reply, &p.checks) {
                    Outcome::Failed(f) => f,
                    _ => Failure::Unavailable("unusable cluster redirection".into()),
                };
                self.fail_held(host, id, &p, &failure, now_ms);
                return false;
            }
        };
        let shard = self.shards.for_addr(addr);
        self.calls.set_shard(id, shard);
        if let Some(p) = self.calls.get_mut(id) {
            p.asking = asking;
        }
        true
    }

    /// The slot map changed: queued requests follow their slots (a request
    /// following an `ASK` stays), and idle streams to former masters close.
    pub(in crate::worker) fn on_slot_map(&mut self, host: &mut dyn Host) {
        let Some(map) = self.cluster.as_ref().and_then(ClusterLookup::map) else { return };
        let mut moves = Vec::new();
        for shard in self.shards.iter() {
            for id in self.calls.queued_ids(shard.id) {
                let Some(p) = self.calls.get(id).filter(|p| !p.asking) else { continue };
                let Some(slot) = p.slot else { continue };
                let owner = map.owner(slot);
                if owner != shard.addr() {
                    moves.push((id, owner));
                }
            }
        }
        for (id, owner) in moves {
            let to = owner.map_or(PARKED, |addr| self.shards.for_addr(addr));
            self.calls.set_shard(id, to);
        }
        self.retire_idle(host);
    }

    /// Closes the streams to nodes that are no longer masters, once nothing
    /// waits for them.
    pub(in crate::worker) fn retire_idle(&mut self, host: &mut dyn Host) {
        let Some(map) = self.cluster.as_ref().and_then(ClusterLookup::map) else { return };
        let idle: Vec<ShardId> = self
            .shards
            .iter()
            .filter(|s| s.addr().is_some_and(|a| !map.is_master(a)))
            .filter(|s| s.link().in_flight().0 == 0 && self.calls.queued_ids(s.id).is_empty())
            .map(|s| s.id)
            .collect();
        for id in idle {
            let Some(shard) = self.shards.remove(id) else { continue };
            self.calls.drain_queue(id);
            if let Some(token) = shard.link().token() {
                host.cancel(token);
                host.count(Stat::StreamReset(Reset::Switched), 1);
            }
        }
    }

    /// A master's stream failed (cluster mode): counted, and the map is read
    /// again soon.
    pub(in crate::worker) fn shard_failed(&mut self, host: &mut dyn Host, now_ms: u64) {
        if let Some(c) = &mut self.cluster {
            host.count(Stat::ClusterShardFailure, 1);
            c.suspect(now_ms);
        }
    }
}
