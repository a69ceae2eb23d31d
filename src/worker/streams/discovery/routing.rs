//! Routing in cluster mode, as the slot map changes: a `MOVED` reply
//! updates the map and sends the call to the new master; an `ASK` sends it
//! once to the named node after `ASKING`, without changing the map. When the
//! map changes, queued calls follow their slots, and streams to nodes that
//! are no longer masters are closed once idle. (A new call's route is
//! [`Topology::route`].)

use super::Topology;
use crate::store::cluster::Redirect;
use crate::worker::calls::table::Calls;
use crate::worker::calls::{CallId, ShardId, PARKED};
use crate::worker::host::{Host, Reset, Stat};
use crate::worker::streams::shards::Shards;

/// Redirections (`MOVED`, `ASK`) one call follows before it fails.
pub const MAX_REDIRECTS: u8 = 5;

impl Topology {
    /// A `MOVED` or `ASK` answered call `id` (which did not run): true when
    /// it goes again (to the shard now in its `shard`), false when it
    /// cannot (too many redirections, or one that cannot be followed: a
    /// hostname; the map is read again soon).
    pub fn redirect(
        &mut self,
        host: &mut dyn Host,
        (calls, shards): (&mut Calls, &mut Shards),
        id: CallId,
        redirect: Result<Redirect, String>,
        now_ms: u64,
    ) -> bool {
        let Some(p) = calls.get_mut(id) else { return false };
        p.redirects = p.redirects.saturating_add(1);
        let redirect = redirect.ok().filter(|_| p.redirects <= MAX_REDIRECTS);
        let (addr, asking) = match redirect {
            Some(Redirect::Moved { slot, addr }) => {
                self.moved(host, slot, addr, now_ms);
                (addr, false)
            }
            Some(Redirect::Ask { addr, .. }) => {
                host.count(Stat::ClusterAsk, 1);
                (addr, true)
            }
            None => {
                self.suspect_slots(now_ms);
                return false;
            }
        };
        let shard = shards.for_addr(addr);
        calls.set_shard(id, shard);
        if let Some(p) = calls.get_mut(id) {
            p.asking = asking;
        }
        true
    }

    /// The slot map changed: queued calls follow their slots (a call
    /// following an `ASK` stays), and idle streams to former masters close.
    pub fn follow_map(&self, host: &mut dyn Host, calls: &mut Calls, shards: &mut Shards) {
        let Some(map) = self.map() else { return };
        let mut moves = Vec::new();
        for shard in shards.iter() {
            for id in calls.queued_ids(shard.id) {
                let Some(p) = calls.get(id).filter(|p| !p.asking) else { continue };
                let Some(slot) = p.slot else { continue };
                let owner = map.owner(slot);
                if owner != shard.addr() {
                    moves.push((id, owner));
                }
            }
        }
        for (id, owner) in moves {
            let to = owner.map_or(PARKED, |addr| shards.for_addr(addr));
            calls.set_shard(id, to);
        }
        self.retire_idle(host, calls, shards);
    }

    /// Closes the streams to nodes that are no longer masters, once nothing
    /// waits for them.
    pub fn retire_idle(&self, host: &mut dyn Host, calls: &mut Calls, shards: &mut Shards) {
        let Some(map) = self.map() else { return };
        let idle: Vec<ShardId> = shards
            .iter()
            .filter(|s| s.addr().is_some_and(|a| !map.is_master(a)))
            .filter(|s| s.link().in_flight().0 == 0 && calls.queued_ids(s.id).is_empty())
            .map(|s| s.id)
            .collect();
        for id in idle {
            let Some(shard) = shards.remove(id) else { continue };
            calls.drain_queue(id);
            if let Some(token) = shard.link().token() {
                host.cancel(token);
                host.count(Stat::StreamReset(Reset::Switched), 1);
            }
        }
    }
}
