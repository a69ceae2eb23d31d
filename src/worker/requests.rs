//! The requests a worker holds (and the settlements of responses): each
//! waits in the queue until it is sent on the store stream, then until its
//! reply. Bounded by the worker (the queue by `valkey.max_queue`, the sent
//! ones by the stream's bounds).

use crate::limiter::Check;
use crate::worker::host::ResponseHeaders;
use crate::worker::settle::SettleCall;
use std::collections::{HashMap, VecDeque};

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
    /// A settlement (`adjust` of `checks`), not a decision.
    pub settle: Option<SettleCall>,
}

/// The worker's requests, by context id, and the queue of unsent ones.
#[derive(Debug, Default)]
pub struct Requests {
    map: HashMap<u32, Pending>,
    queue: VecDeque<u32>,
}

impl Requests {
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Requests waiting to be sent.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Adds a new request at the back of the queue.
    pub fn push(&mut self, id: u32, pending: Pending) {
        self.map.insert(id, pending);
        self.queue.push_back(id);
    }

    /// Puts requests back at the front of the queue, in the given order
    /// (their calls never ran: `NOSCRIPT`, a stream that never connected).
    pub fn requeue(&mut self, ids: &[u32]) {
        for id in ids.iter().rev() {
            if let Some(p) = self.map.get_mut(id) {
                p.sent = false;
                self.queue.push_front(*id);
            }
        }
    }

    /// The next queued request, taken off the queue (it stays held).
    pub fn pop_queued(&mut self) -> Option<u32> {
        while let Some(id) = self.queue.pop_front() {
            if self.map.contains_key(&id) {
                return Some(id);
            }
        }
        None
    }

    /// The next queued request, left in the queue.
    pub fn peek_queued(&mut self) -> Option<u32> {
        while let Some(&id) = self.queue.front() {
            if self.map.contains_key(&id) {
                return Some(id);
            }
            self.queue.pop_front();
        }
        None
    }

    pub fn get(&self, id: u32) -> Option<&Pending> {
        self.map.get(&id)
    }

    pub fn get_mut(&mut self, id: u32) -> Option<&mut Pending> {
        self.map.get_mut(&id)
    }

    /// Forgets a request (answered, or gone); a queued one leaves the queue
    /// lazily.
    pub fn remove(&mut self, id: u32) -> Option<Pending> {
        self.map.remove(&id)
    }

    /// Queued requests that arrived (proxy clock) at or before `cutoff_ms`,
    /// taken off the queue, oldest first. The queue is in arrival order (a
    /// request put back goes to the front, and is older than the rest).
    pub fn take_queued_before(&mut self, cutoff_ms: u64) -> Vec<u32> {
        let mut out = Vec::new();
        while let Some(id) = self.peek_queued() {
            if self.map.get(&id).is_some_and(|p| p.local_arrival_ms > cutoff_ms) {
                break;
            }
            self.queue.pop_front();
            out.push(id);
        }
        out
    }

    /// Takes every queued request off the queue, in order.
    pub fn drain_queue(&mut self) -> Vec<u32> {
        let ids: Vec<u32> = self.queue.drain(..).filter(|id| self.map.contains_key(id)).collect();
        ids
    }
}
