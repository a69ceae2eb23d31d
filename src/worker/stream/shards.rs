//! The worker's store streams, one per shard: a single one for a single
//! store or the Sentinels' master, one per master of a Valkey Cluster (and
//! one per node an `ASK` sends a call to). Each holds its stream ([`Link`])
//! and whether the server behind it lacks the limiter's code (`FUNCTION
//! LOAD` is per server). The requests waiting for a shard are in its queue
//! ([`crate::worker::calls`]).

use crate::store::Failure;
use crate::worker::calls::CallId;
use crate::worker::calls::ShardId;
use crate::worker::stream::link::Link;
use std::net::SocketAddr;

/// What carries the limiter's code to a store that lacks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    /// `FUNCTION LOAD`, ahead of the calls.
    Load,
    /// Held call `id`, sent as `EVAL`.
    Call(CallId),
}

/// Whether the server lacks the limiter's code, and what is bringing it.
#[derive(Debug, Default)]
pub struct Code {
    /// The store lacks the limiter's code: the next message carries it
    /// (`FUNCTION LOAD` before the calls, or one call as `EVAL`), and the
    /// calls after it in the pipeline find it.
    pub wanted: bool,
    /// What carries the code, until its reply.
    pub carrier: Option<Carrier>,
    /// Why the last `FUNCTION LOAD` failed, when the store refused it for
    /// now (`OOM`): the failure of the calls behind it.
    pub load_failure: Option<Failure>,
}

impl Code {
    /// No command carries the code any more (its stream is gone).
    pub fn forget_carrier(&mut self) {
        if self.carrier.take().is_some() {
            self.wanted = true;
        }
    }
}

/// One store stream.
#[derive(Debug)]
pub struct Shard {
    pub id: ShardId,
    /// The master it goes to (`x-envoy-original-dst-host`), in cluster
    /// mode; `None`: `valkey.cluster` as configured (with the Sentinels'
    /// master, if any, when the stream opens).
    pub addr: Option<SocketAddr>,
    pub link: Link,
    pub code: Code,
}

/// Every shard of the worker.
#[derive(Debug, Default)]
pub struct Shards {
    list: Vec<Shard>,
    next: ShardId,
}

impl Shards {
    /// A new shard going to `addr`.
    pub fn add(&mut self, addr: Option<SocketAddr>) -> ShardId {
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        self.list.push(Shard { id, addr, link: Link::default(), code: Code::default() });
        id
    }

    /// The shard going to `addr`, added if there is none.
    pub fn for_addr(&mut self, addr: SocketAddr) -> ShardId {
        match self.list.iter().find(|s| s.addr == Some(addr)) {
            Some(s) => s.id,
            None => self.add(Some(addr)),
        }
    }

    pub fn get(&self, id: ShardId) -> Option<&Shard> {
        self.list.iter().find(|s| s.id == id)
    }

    pub fn get_mut(&mut self, id: ShardId) -> Option<&mut Shard> {
        self.list.iter_mut().find(|s| s.id == id)
    }

    /// The shard whose stream has `token`.
    pub fn by_token(&self, token: u32) -> Option<ShardId> {
        self.list.iter().find(|s| s.link.token() == Some(token)).map(|s| s.id)
    }

    pub fn ids(&self) -> Vec<ShardId> {
        self.list.iter().map(|s| s.id).collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Shard> {
        self.list.iter()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Shard> {
        self.list.iter_mut()
    }

    pub fn remove(&mut self, id: ShardId) -> Option<Shard> {
        let i = self.list.iter().position(|s| s.id == id)?;
        Some(self.list.swap_remove(i))
    }

    /// Commands awaiting replies on every stream.
    pub fn in_flight(&self) -> usize {
        self.list.iter().map(|s| s.link.in_flight().0).sum()
    }

    /// For logs: ` (master <addr>)` of a cluster shard, else nothing.
    pub fn describe(&self, id: ShardId) -> String {
        match self.get(id).and_then(|s| s.addr) {
            Some(addr) => format!(" (master {addr})"),
            None => String::new(),
        }
    }
}
