//! The store streams: everything between a held call and its reply. The
//! rooms that make calls hand them here ([`Streams::push`]); the streams
//! route each by the slot of its keys ([`discovery`]), write it into a
//! pipelined message within the stream's bounds ([`send`]), pair the
//! replies with the calls in order ([`receive`], [`link`]), follow cluster
//! redirections, send again what found the code missing, and hand every
//! call whose part here is over back to its owner as a [`Landed`]: its
//! reply, its failure, or its refusal for overload. The streams never
//! decide what a reply means for a request: that is the owner's.
//!
//! Owns the calls' table ([`crate::worker::calls::table::Calls`]), the
//! shards ([`shards::Shards`]: one stream each, with whether its server has
//! the limiter's code), the lookups of the master and the slot map, and how
//! the limiter is invoked (`valkey.invoke`, until the store refuses
//! `FUNCTION LOAD`).

pub(super) mod discovery;
pub(super) mod link;
mod receive;
mod send;
pub(super) mod shards;

#[cfg(test)]
pub(super) use receive::GRPC_UNAVAILABLE;

use crate::config::{Config, Invoke};
use crate::limiter::script::{limiter, Script};
use crate::limiter::Check;
use crate::resp::Value;
use crate::store::{Failure, Outcome, Preamble};
use crate::worker::calls::table::Calls;
use crate::worker::calls::{CallId, Pending, ShardId, PARKED};
use crate::worker::host::Host;
use discovery::{Route, Topology};
use shards::Shards;
use std::collections::VecDeque;

/// A call whose part on the streams is over, for its owner (the room of
/// its [`CallId`]'s kind).
#[derive(Debug)]
pub(in crate::worker) enum Landed {
    /// Its reply (after any `NOSCRIPT` or redirection was dealt with).
    Replied { id: CallId, call: Pending, reply: Reply, round_trip_ms: u64 },
    /// It cannot be answered: the store failed or could not be reached
    /// (`failure.may_have_run()` says whether it may have run).
    Failed { id: CallId, call: Pending, failure: Failure },
    /// It waited too long on a store that keeps answering others
    /// (overload); sent ones may still run.
    Shed { id: CallId, call: Pending },
    /// The reply to a call withdrawn after it was sent ([`Streams::withdraw`]);
    /// `None`: it never comes (its stream is gone).
    Orphaned { id: CallId, reply: Option<Value> },
}

/// A reply, as its call's [`Command`](crate::worker::calls::Command) reads it.
#[derive(Debug)]
pub(in crate::worker) enum Reply {
    /// A decision or an adjust, interpreted.
    Outcome(Outcome),
    /// A flush's reply, which is not an error (its owner reads it).
    Raw(Value),
}

/// The worker's store streams and the calls on them.
#[derive(Debug)]
pub(in crate::worker) struct Streams {
    calls: Calls,
    shards: Shards,
    /// The one shard of a single store or a Sentinel master (not in cluster
    /// mode).
    home: Option<ShardId>,
    topology: Topology,
    /// `valkey.cluster`, the Envoy cluster the streams go through.
    cluster: String,
    bounds: Bounds,
    timeout_ms: u64,
    max_wait_ms: u64,
    invoke: Invoke,
    script: &'static Script,
    preamble: Preamble,
    /// Whether this worker has served a request (Envoy's main thread never
    /// does, and cannot open streams to internal listeners).
    serving: bool,
    woken: bool,
    landed: VecDeque<Landed>,
}

/// The streams' bounds (`valkey.*`).
#[derive(Debug, Clone, Copy)]
struct Bounds {
    max_batch: usize,
    max_in_flight: usize,
    max_messages_in_flight: usize,
    max_queue: usize,
}

impl Streams {
    pub fn new(config: &Config, max_wait_ms: u64) -> Streams {
        let valkey = &config.valkey;
        let preamble = Preamble::auth(valkey.auth.as_ref());
        let topology = Topology::new(valkey, &preamble);
        let mut shards = Shards::default();
        let home = (!topology.clustered()).then(|| shards.add(None));
        Streams {
            calls: Calls::default(),
            shards,
            home,
            topology,
            cluster: valkey.cluster.clone(),
            bounds: Bounds {
                max_batch: valkey.max_batch,
                max_in_flight: valkey.max_in_flight,
                max_messages_in_flight: valkey.max_messages_in_flight,
                max_queue: valkey.max_queue,
            },
            timeout_ms: u64::try_from(valkey.timeout.as_millis()).unwrap_or(u64::MAX),
            max_wait_ms,
            invoke: valkey.invoke,
            script: limiter(),
            preamble,
            serving: false,
            woken: false,
            landed: VecDeque::new(),
        }
    }

    /// The next call handed back to its owner.
    pub fn next_landed(&mut self) -> Option<Landed> {
        self.landed.pop_front()
    }

    /// The worker serves requests: it may look the store up.
    pub fn serve(&mut self) {
        self.serving = true;
    }

    /// The worker was woken (its own callback).
    pub fn woke(&mut self) {
        self.woken = false;
    }

    /// Looks up the master or the slot map when due (from the worker's own
    /// callbacks, once it serves).
    pub fn lookup(&mut self, host: &mut dyn Host, now_ms: u64) {
        if self.serving {
            self.topology.lookup(host, now_ms, self.timeout_ms);
        }
    }

    /// Valkey Cluster: calls go by the slot of their keys.
    pub fn clustered(&self) -> bool {
        self.topology.clustered()
    }

    /// Calls held (queued or sent), and commands awaiting replies.
    pub fn load(&self) -> (usize, usize) {
        (self.calls.len(), self.shards.in_flight())
    }

    /// Whether the worker needs its quick tick for the streams: calls held,
    /// replies awaited, a lookup under way.
    pub fn busy(&self) -> bool {
        !self.calls.is_empty() || self.shards.in_flight() > 0 || self.topology.busy()
    }

    /// Whether the worker ticks while idle for its lookups.
    pub fn looks_up(&self) -> bool {
        self.topology.looks_up() && self.serving
    }

    /// Whether call `id` is held.
    pub fn holds(&self, id: CallId) -> bool {
        self.calls.get(id).is_some()
    }

    /// Where a call over `checks` goes, and (cluster mode) their slot.
    pub fn route(&mut self, checks: &[Check]) -> (Route, Option<u16>) {
        self.topology.route(checks, self.home, &mut self.shards)
    }

    /// The shard of `slot`'s master, [`PARKED`] without a map, or why none.
    pub fn route_slot(&mut self, slot: u16, now_ms: u64) -> Result<ShardId, Failure> {
        match self.topology.map().map(|m| m.owner(slot)) {
            None => Ok(PARKED),
            Some(Some(addr)) => Ok(self.shards.for_addr(addr)),
            Some(None) => Err(self.topology.unserved(slot, now_ms)),
        }
    }

    /// The failure of a call whose slot no master serves.
    pub fn unserved(&mut self, slot: u16, now_ms: u64) -> Failure {
        self.topology.unserved(slot, now_ms)
    }

    /// The failure calls for `shard` meet while its stream is down, if it is.
    pub fn down(&self, shard: ShardId, now_ms: u64) -> Option<Failure> {
        self.shards.down(shard, now_ms).cloned()
    }

    /// Whether `shard` still exists (its stream may be down).
    pub fn has_shard(&self, shard: ShardId) -> bool {
        self.shards.get(shard).is_some()
    }

    /// Whether the queues are full: `valkey.max_queue` calls wait, beyond
    /// what `shard`'s stream can take at once (none: no room is counted).
    pub fn full(&self, shard: Option<ShardId>) -> bool {
        let room = shard.map_or(0, |shard| {
            let link = self.shards.get(shard).map(|s| s.link());
            self.bounds.max_in_flight.saturating_sub(link.map_or(0, |l| l.in_flight().0))
        });
        self.calls.queued() >= self.bounds.max_queue.saturating_add(room)
    }

    /// Holds call `id` in its shard's queue (`pending.shard`) until it is sent.
    pub fn push(&mut self, id: CallId, pending: Pending) {
        self.calls.push(id, pending);
    }

    /// Drops call `id` if it was not sent yet; true if it was dropped.
    pub fn drop_unsent(&mut self, id: CallId) -> bool {
        if self.calls.get(id).is_some_and(|p| !p.sent) {
            self.calls.remove(id);
            return true;
        }
        false
    }

    /// Takes call `id` back: a queued one is dropped; a sent one is
    /// returned, and its reply will land as [`Landed::Orphaned`].
    pub fn withdraw(&mut self, id: CallId) -> Option<Pending> {
        let p = self.calls.remove(id)?;
        if !p.sent {
            return None;
        }
        self.shards.abandon(p.shard, id);
        Some(p)
    }

    /// A failure that suggests the master moved, or the slot map changed,
    /// has them looked up again soon.
    pub fn suspect(&mut self, failure: &Failure, now_ms: u64) {
        self.topology.suspect(failure, now_ms);
    }

    /// Call `id` fails with `failure`: handed back to its owner.
    fn fail(&mut self, id: CallId, failure: &Failure, now_ms: u64) {
        if let Some(call) = self.calls.remove(id) {
            self.fail_taken(id, call, failure.clone(), now_ms);
        }
    }

    /// Call `id`, already taken off the table, fails with `failure`.
    fn fail_taken(&mut self, id: CallId, call: Pending, failure: Failure, now_ms: u64) {
        self.topology.suspect(&failure, now_ms);
        self.landed.push_back(Landed::Failed { id, call, failure });
    }

    /// Call `id` is refused for overload: handed back to its owner.
    fn shed(&mut self, id: CallId) {
        if let Some(call) = self.calls.remove(id) {
            self.landed.push_back(Landed::Shed { id, call });
        }
    }

    /// Why a call of `shard`'s queue could not be sent in time.
    pub fn unreachable(&self, shard: ShardId, now_ms: u64) -> Failure {
        if let Some(f) = self.shards.down(shard, now_ms) {
            return f.clone();
        }
        if let Some(f) = self.topology.unknown() {
            return f;
        }
        if shard == PARKED {
            return Failure::Unavailable("no slot map from the cluster's seeds yet".into());
        }
        let at = self.shards.describe(shard);
        Failure::Unavailable(format!("no store connection{at} within the timeout"))
    }
}
