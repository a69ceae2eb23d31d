//! The calls a worker holds (requests' decisions, the parts of requests
//! decided across cluster slots, the settlements of responses): each waits
//! in the queue of its shard (the store stream it goes to, see
//! [`super::shards`]) until it is sent, then until its reply. In cluster
//! mode a call waits in the [`PARKED`] queue until the worker knows the slot
//! map. Bounded by the worker (the queues by `valkey.max_queue`, the sent
//! ones by each stream's bounds).

use crate::limiter::Check;
use crate::worker::host::ResponseHeaders;
use std::collections::{HashMap, VecDeque};

/// A shard of the worker (one store stream), by a number never reused.
pub type ShardId = u32;
/// The queue of requests waiting for the slot map (cluster mode).
pub const PARKED: ShardId = ShardId::MAX;

/// One request waiting for its decision.
#[derive(Debug)]
pub struct Pending {
    pub checks: Vec<Check>,
    /// The injected clock (`testing.now_header`), if any.
    pub now_override: Option<u64>,
    /// When it arrived, on the request's clock (the injected one if any):
    /// denials are remembered from here.
    pub arrival_ms: u64,
    /// When it arrived, on the proxy's clock: deadlines count from here.
    pub local_arrival_ms: u64,
    /// `NOSCRIPT` answers it got (its call is sent again after each: the
    /// script did not run).
    pub noscripts: u8,
    /// Where the admitted request's response headers go.
    pub headers: ResponseHeaders,
    /// On the stream, awaiting its reply (else queued).
    pub sent: bool,
    /// The shard whose queue it waits in, or whose stream it was sent on.
    pub shard: ShardId,
    /// The hash slot of its checks (cluster mode).
    pub slot: Option<u16>,
    /// `MOVED` and `ASK` redirections it followed.
    pub redirects: u8,
    /// Its call goes after `ASKING` (it follows an `ASK`).
    pub asking: bool,
    /// What the call is.
    pub call: Call,
}

/// What a held call is.
#[derive(Debug, Clone)]
pub enum Call {
    /// A request's decision (held under its context id).
    Decide,
    /// A step of one slot group of a request decided across cluster slots.
    Part(Part),
    /// A settlement (`adjust` of `checks`) of a response.
    Settle(SettleCall),
}

impl Call {
    /// An `adjust` (an undo, a settlement): its script has a SHA of its
    /// own, so after a `NOSCRIPT` it goes as `EVAL` itself.
    pub fn adjusts(&self) -> bool {
        match self {
            Call::Decide => false,
            Call::Part(part) => part.undo_at().is_some(),
            Call::Settle(_) => true,
        }
    }

    /// Not a request of its own: no request deadline applies (the request
    /// it serves has its own, or a held response has).
    pub fn serves_another(&self) -> bool {
        !matches!(self, Call::Decide)
    }
}

/// The worker's requests, by context id, and the queues of unsent ones.
#[derive(Debug, Default)]
pub struct Requests {
    map: HashMap<u32, Pending>,
    queues: HashMap<ShardId, VecDeque<u32>>,
}

impl Requests {
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Requests waiting to be sent, in every queue.
    pub fn queued(&self) -> usize {
        self.queues.values().map(VecDeque::len).sum()
    }

    /// Requests waiting in `shard`'s queue.
    pub fn queued_on(&self, shard: ShardId) -> usize {
        self.queues.get(&shard).map_or(0, VecDeque::len)
    }

    /// The queues that hold requests.
    pub fn queue_ids(&self) -> Vec<ShardId> {
        self.queues.iter().filter(|(_, q)| !q.is_empty()).map(|(s, _)| *s).collect()
    }

    /// Whether `id` waits in `shard`'s queue (a queue may keep ids that
    /// left it: they are skipped).
    fn waits_in(&self, id: u32, shard: ShardId) -> bool {
        self.map.get(&id).is_some_and(|p| p.shard == shard && !p.sent)
    }

    /// Adds a new request at the back of its shard's queue.
    pub fn push(&mut self, id: u32, pending: Pending) {
        self.queues.entry(pending.shard).or_default().push_back(id);
        self.map.insert(id, pending);
    }

    /// Puts requests back at the front of their shards' queues, in the given
    /// order (their calls never ran: `NOSCRIPT`, a redirection, a stream that
    /// never connected).
    pub fn requeue(&mut self, ids: &[u32]) {
        for id in ids.iter().rev() {
            if let Some(p) = self.map.get_mut(id) {
                p.sent = false;
                self.queues.entry(p.shard).or_default().push_front(*id);
            }
        }
    }

    /// Moves request `id` to `shard`: a queued one leaves its queue for the
    /// back of `shard`'s; a sent one goes there when it is requeued.
    pub fn set_shard(&mut self, id: u32, shard: ShardId) {
        let Some(p) = self.map.get_mut(&id) else { return };
        let old = std::mem::replace(&mut p.shard, shard);
        if p.sent || old == shard {
            return;
        }
        if let Some(q) = self.queues.get_mut(&old) {
            q.retain(|x| *x != id);
        }
        self.queues.entry(shard).or_default().push_back(id);
    }

    /// The next request of `shard`'s queue, taken off the queue (it stays held).
    pub fn pop_queued(&mut self, shard: ShardId) -> Option<u32> {
        while let Some(id) = self.queues.get_mut(&shard)?.pop_front() {
            if self.waits_in(id, shard) {
                return Some(id);
            }
        }
        None
    }

    /// The next request of `shard`'s queue, left in the queue.
    pub fn peek_queued(&mut self, shard: ShardId) -> Option<u32> {
        while let Some(&id) = self.queues.get(&shard)?.front() {
            if self.waits_in(id, shard) {
                return Some(id);
            }
            self.queues.get_mut(&shard)?.pop_front();
        }
        None
    }

    /// The requests waiting in `shard`'s queue, in order (left there).
    pub fn queued_ids(&self, shard: ShardId) -> Vec<u32> {
        let Some(queue) = self.queues.get(&shard) else { return Vec::new() };
        queue.iter().copied().filter(|id| self.waits_in(*id, shard)).collect()
    }

    pub fn get(&self, id: u32) -> Option<&Pending> {
        self.map.get(&id)
    }

    pub fn get_mut(&mut self, id: u32) -> Option<&mut Pending> {
        self.map.get_mut(&id)
    }

    /// Forgets a request (answered, or gone); a queued one leaves its queue
    /// lazily.
    pub fn remove(&mut self, id: u32) -> Option<Pending> {
        self.map.remove(&id)
    }

    /// Requests of `shard`'s queue that arrived (proxy clock) at or before
    /// `cutoff_ms`, taken off the queue, oldest first. A queue is in
    /// arrival order (a request put back goes to the front, and is older
    /// than the rest; one moved from another queue may be older than those
    /// before it, and waits for them).
    pub fn take_queued_before(&mut self, shard: ShardId, cutoff_ms: u64) -> Vec<u32> {
        let mut out = Vec::new();
        while let Some(id) = self.peek_queued(shard) {
            if self.map.get(&id).is_some_and(|p| p.local_arrival_ms > cutoff_ms) {
                break;
            }
            if let Some(q) = self.queues.get_mut(&shard) {
                q.pop_front();
            }
            out.push(id);
        }
        out
    }

    /// Takes every request off `shard`'s queue, in order, and forgets the
    /// queue.
    pub fn drain_queue(&mut self, shard: ShardId) -> Vec<u32> {
        let queue = self.queues.remove(&shard).unwrap_or_default();
        queue.into_iter().filter(|id| self.waits_in(*id, shard)).collect()
    }
}

/// What a part of a request decided across slots does (its `Pending`'s
/// `part`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The first step of group `group` of request `parent`.
    Decide { parent: u32, group: usize },
    /// The undo of that group, which the store decided at `at_ms` (its clock).
    Undo { parent: u32, group: usize, at_ms: u64 },
}

impl Part {
    /// When the decision it undoes was made, for an undo.
    pub fn undo_at(self) -> Option<u64> {
        match self {
            Part::Undo { at_ms, .. } => Some(at_ms),
            Part::Decide { .. } => None,
        }
    }
}

/// A settlement on the store stream (the call of its [`Pending`]).
#[derive(Debug, Clone)]
pub struct SettleCall {
    /// The request's context, whose response may be held.
    pub context: u32,
    /// When the store decided the request, on its clock.
    pub at_ms: u64,
    /// `(from, to)` per check of the pending.
    pub units: Vec<(u64, u64)>,
    /// The local limiter already settled the request (it decided it).
    pub local: bool,
}
