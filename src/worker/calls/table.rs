//! The table of held calls: by id, and the queue of each shard for the
//! unsent ones.

use super::{CallId, Pending, ShardId};
use crate::idhash::IdMap;
use std::collections::VecDeque;

/// The worker's held calls, by id, and the queues of unsent ones.
#[derive(Debug, Default)]
pub struct Calls {
    map: IdMap<CallId, Pending>,
    queues: IdMap<ShardId, VecDeque<CallId>>,
}

impl Calls {
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
    fn waits_in(&self, id: CallId, shard: ShardId) -> bool {
        self.map.get(&id).is_some_and(|p| p.shard == shard && !p.sent)
    }

    /// Adds a new request at the back of its shard's queue.
    pub fn push(&mut self, id: CallId, pending: Pending) {
        self.queues.entry(pending.shard).or_default().push_back(id);
        self.map.insert(id, pending);
    }

    /// Puts requests back at the front of their shards' queues, in the given
    /// order (their calls never ran: `NOSCRIPT`, a redirection, a stream that
    /// never connected).
    pub fn requeue(&mut self, ids: &[CallId]) {
        for id in ids.iter().rev() {
            if let Some(p) = self.map.get_mut(id) {
                p.sent = false;
                self.queues.entry(p.shard).or_default().push_front(*id);
            }
        }
    }

    /// Moves request `id` to `shard`: a queued one leaves its queue for the
    /// back of `shard`'s; a sent one goes there when it is requeued.
    pub fn set_shard(&mut self, id: CallId, shard: ShardId) {
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
    pub fn pop_queued(&mut self, shard: ShardId) -> Option<CallId> {
        while let Some(id) = self.queues.get_mut(&shard)?.pop_front() {
            if self.waits_in(id, shard) {
                return Some(id);
            }
        }
        None
    }

    /// The next request of `shard`'s queue, left in the queue.
    pub fn peek_queued(&mut self, shard: ShardId) -> Option<CallId> {
        while let Some(&id) = self.queues.get(&shard)?.front() {
            if self.waits_in(id, shard) {
                return Some(id);
            }
            self.queues.get_mut(&shard)?.pop_front();
        }
        None
    }

    /// The requests waiting in `shard`'s queue, in order (left there).
    pub fn queued_ids(&self, shard: ShardId) -> Vec<CallId> {
        let Some(queue) = self.queues.get(&shard) else { return Vec::new() };
        queue.iter().copied().filter(|id| self.waits_in(*id, shard)).collect()
    }

    pub fn get(&self, id: CallId) -> Option<&Pending> {
        self.map.get(&id)
    }

    pub fn get_mut(&mut self, id: CallId) -> Option<&mut Pending> {
        self.map.get_mut(&id)
    }

    /// Forgets a request (answered, or gone); a queued one leaves its queue
    /// lazily.
    pub fn remove(&mut self, id: CallId) -> Option<Pending> {
        self.map.remove(&id)
    }

    /// Requests of `shard`'s queue that arrived (proxy clock) at or before
    /// `cutoff_ms`, taken off the queue, oldest first. A queue is in
    /// arrival order (a request put back goes to the front, and is older
    /// than the rest; one moved from another queue may be older than those
    /// before it, and waits for them).
    pub fn take_queued_before(&mut self, shard: ShardId, cutoff_ms: u64) -> Vec<CallId> {
        let mut out = Vec::new();
        while let Some(id) = self.peek_queued(shard) {
            if self.map.get(&id).is_some_and(|p| p.arrival.local_ms > cutoff_ms) {
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
    pub fn drain_queue(&mut self, shard: ShardId) -> Vec<CallId> {
        let queue = self.queues.remove(&shard).unwrap_or_default();
        queue.into_iter().filter(|id| self.waits_in(*id, shard)).collect()
    }
}
