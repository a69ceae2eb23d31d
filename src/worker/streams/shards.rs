//! The worker's store streams, one per shard: a single one for a single
//! store or the Sentinels' master, one per master of a Valkey Cluster (and
//! one per node an `ASK` sends a call to). Each holds its stream ([`Link`])
//! and whether the server behind it lacks the limiter's code (`FUNCTION
//! LOAD` is per server). The requests waiting for a shard are in its queue
//! ([`crate::worker::calls`]).

use crate::store::Failure;
use crate::worker::calls::{CallId, ShardId};
use crate::worker::streams::link::Link;
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
    pub(super) wanted: bool,
    /// What carries the code, until its reply.
    pub(super) carrier: Option<Carrier>,
    /// Why the last `FUNCTION LOAD` failed, when the store refused it for
    /// now (`OOM`): the failure of the calls behind it.
    pub(super) load_failure: Option<Failure>,
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
    pub(super) addr: Option<SocketAddr>,
    pub(super) link: Link,
    pub(super) code: Code,
}

impl Shard {
    /// The master it goes to, in cluster mode.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// Its stream, to read.
    pub fn link(&self) -> &Link {
        &self.link
    }
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

    /// The id of the one shard, when there is exactly one (a single store
    /// or a Sentinel master): what [`Shards::ids`] holds, without a list.
    pub fn only(&self) -> Option<ShardId> {
        match self.list.as_slice() {
            [one] => Some(one.id),
            _ => None,
        }
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

    /// The failure calls for `shard` meet while its stream is down, if it is.
    pub fn down(&self, shard: ShardId, now_ms: u64) -> Option<&Failure> {
        self.get(shard).and_then(|s| s.link.down(now_ms))
    }

    /// Held call `id`, outstanding on `shard`'s stream, left: its reply
    /// will be read and dropped.
    pub fn abandon(&mut self, shard: ShardId, id: CallId) {
        if let Some(s) = self.get_mut(shard) {
            s.link.abandon(id);
        }
    }

    /// The worker ticked: the shards whose streams stalled (see
    /// [`Link::stalled`]), with what the log says of each.
    pub fn stalled(&mut self, now_ms: u64, timeout_ms: u64, cap_ms: u64) -> Vec<(ShardId, (usize, u64, u32))> {
        let mut out = Vec::new();
        for s in &mut self.list {
            s.link.tick();
            if s.link.stalled(now_ms, timeout_ms, cap_ms) {
                out.push((s.id, s.link.silence(now_ms)));
            }
        }
        out
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
