//! Coalescing: the checks of requests that arrive while store calls are in
//! flight are gathered and sent together, one `EVALSHA` per request in one
//! RESP pipeline, in one tunnel call. Each request keeps its own atomic
//! script call and gets its own reply.
//!
//! This is the pure bookkeeping, with time passed in (milliseconds of the
//! proxy's clock); the filter performs the effects (dispatching calls,
//! resuming requests). Every structure is bounded by [`Limits`]:
//!
//! * a new request is queued and a call is sent as soon as a call slot is
//!   free ([`Batcher::next_call`]), taking every queued request along (up to
//!   `max_batch`): a lone request goes out at once, batches grow with load;
//! * at most `max_in_flight` calls are in flight, and at most `max_queue`
//!   requests wait (beyond that [`Submit::Overflow`]: `failure_mode` applies);
//! * every request keeps its own deadline (`arrival + timeout`): a queued
//!   request past it is expired, and a call's timeout is the earliest
//!   deadline among its requests;
//! * a [`Preamble`] (`AUTH`) leads every call body; its replies are checked
//!   first and an error reply among them fails the whole call.

use crate::limiter::script::{encode_call, Invocation, Script};
use crate::limiter::Check;
use crate::resp::{decode_all, Limits as RespLimits};
use crate::store::{interpret_reply, preamble_failure, Failure, Outcome, Preamble};
use std::collections::{HashMap, VecDeque};

/// Bounds of the batcher (per worker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_in_flight: usize,
    pub max_batch: usize,
    pub max_queue: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_in_flight: 4, max_batch: 64, max_queue: 4096 }
    }
}

/// One request waiting for its decision.
#[derive(Debug, Clone)]
struct Waiter {
    checks: Vec<Check>,
    now_override: Option<u64>,
    deadline_ms: u64,
    how: Invocation,
}

/// A store call to dispatch: its body, its timeout and the requests in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub body: Vec<u8>,
    pub timeout_ms: u64,
    pub requests: Vec<u32>,
}

/// A request's answer: its checks and what the store said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub request: u32,
    pub checks: Vec<Check>,
    pub outcome: Result<Outcome, Failure>,
}

/// What became of a new request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submit {
    /// The request is queued; [`Batcher::next_call`] sends it with the next call.
    Queued,
    /// The queue is full: `failure_mode` applies.
    Overflow,
}

/// The coalescing state of one worker.
#[derive(Debug, Default)]
pub struct Batcher {
    limits: Limits,
    waiters: HashMap<u32, Waiter>,
    queue: VecDeque<u32>,
    /// Calls in flight by token: the requests of each, in pipeline order,
    /// and when it was sent.
    calls: HashMap<u32, (Vec<u32>, u64)>,
    /// Commands leading every call body.
    preamble: Preamble,
}

impl Batcher {
    pub fn new(limits: Limits) -> Batcher {
        Batcher { limits, ..Batcher::default() }
    }

    /// A batcher whose every call starts with `preamble` (e.g. `AUTH`).
    pub fn with_preamble(limits: Limits, preamble: Preamble) -> Batcher {
        Batcher { limits, preamble, ..Batcher::default() }
    }

    pub fn in_flight(&self) -> usize {
        self.calls.len()
    }

    /// Whether a call could be sent now: requests wait and a slot is free.
    pub fn ready(&self) -> bool {
        !self.queue.is_empty() && self.calls.len() < self.limits.max_in_flight
    }

    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Requests known to the batcher (queued or in a call).
    pub fn pending(&self) -> usize {
        self.waiters.len()
    }

    /// The checks of a pending request.
    pub fn checks(&self, request: u32) -> Option<&[Check]> {
        self.waiters.get(&request).map(|w| w.checks.as_slice())
    }

    /// A new request `id` with its checks, arriving at `now_ms` with
    /// `timeout_ms` to get an answer.
    pub fn submit(
        &mut self,
        id: u32,
        checks: Vec<Check>,
        now_override: Option<u64>,
        now_ms: u64,
        timeout_ms: u64,
    ) -> Submit {
        let waiter =
            Waiter { checks, now_override, deadline_ms: now_ms.saturating_add(timeout_ms), how: Invocation::EvalSha };
        // The bound applies to requests that must wait: with a call slot free,
        // the queue leaves with the next call at once.
        let slot_free = self.calls.len() < self.limits.max_in_flight;
        if !slot_free && self.queue.len() >= self.limits.max_queue {
            return Submit::Overflow;
        }
        self.waiters.insert(id, waiter);
        self.queue.push_back(id);
        Submit::Queued
    }

    /// The next call to send, if a slot is free and requests are queued.
    pub fn next_call(&mut self, script: &Script, now_ms: u64) -> Option<Call> {
        if self.calls.len() >= self.limits.max_in_flight || self.queue.is_empty() {
            return None;
        }
        let take = self.queue.len().min(self.limits.max_batch);
        let requests: Vec<u32> = self.queue.drain(..take).collect();
        Some(self.build(script, requests, now_ms))
    }

    fn build(&self, script: &Script, requests: Vec<u32>, now_ms: u64) -> Call {
        let mut body = Vec::with_capacity(self.preamble.bytes.len() + 256 * requests.len());
        body.extend_from_slice(&self.preamble.bytes);
        let mut deadline = u64::MAX;
        for id in &requests {
            if let Some(w) = self.waiters.get(id) {
                encode_call(&mut body, script, w.how, &w.checks, w.now_override);
                deadline = deadline.min(w.deadline_ms);
            }
        }
        Call { body, timeout_ms: deadline.saturating_sub(now_ms).max(1), requests }
    }

    /// The call was dispatched under `token` at `now_ms`.
    pub fn dispatched(&mut self, token: u32, call: Call, now_ms: u64) {
        self.calls.insert(token, (call.requests, now_ms));
    }

    /// When call `token` was sent, while it is in flight.
    pub fn sent_at(&self, token: u32) -> Option<u64> {
        self.calls.get(&token).map(|(_, at)| *at)
    }

    /// The call could not be dispatched: its requests fail.
    pub fn dispatch_failed(&mut self, call: &Call) -> Vec<u32> {
        call.requests.iter().filter(|id| self.waiters.remove(id).is_some()).copied().collect()
    }

    /// The reply of call `token` (`status`: the tunnel's `:status`, `None`
    /// when the call produced no response). Returns each still-pending
    /// request with its outcome; requests answered `NOSCRIPT` are queued
    /// again, first, to be sent with `EVAL`.
    pub fn on_reply(&mut self, token: u32, status: Option<&str>, body: &[u8]) -> Vec<Answer> {
        let Some((requests, _)) = self.calls.remove(&token) else {
            return Vec::new();
        };
        let replies = match status {
            Some("200") => decode_all(body, &RespLimits::default()).map_err(Failure::NotResp),
            Some(other) => Err(Failure::Unavailable(format!("tunnel status {other}"))),
            None => Err(Failure::NoResponse),
        };
        let lead = self.preamble.replies;
        // A failed AUTH fails the call whatever follows it: an unauthenticated
        // client's long commands are refused with a protocol error and the
        // connection closed, so the count of replies may fall short.
        let replies = match replies {
            Ok(r) => match r.iter().take(lead).find_map(preamble_failure) {
                Some(failure) => Err(failure),
                None if r.len() == lead + requests.len() => Ok(r.into_iter().skip(lead).collect::<Vec<_>>()),
                None => Err(Failure::Lost(format!("expected {} replies, got {}", lead + requests.len(), r.len()))),
            },
            Err(e) => Err(e),
        };
        let mut out = Vec::with_capacity(requests.len());
        let mut retry = Vec::new();
        for (i, id) in requests.into_iter().enumerate() {
            let Some(waiter) = self.waiters.get_mut(&id) else { continue };
            let outcome = match &replies {
                Err(failure) => Err(failure.clone()),
                Ok(values) => match values.get(i).map(|v| interpret_reply(v, &waiter.checks)) {
                    Some(Outcome::NoScript) if waiter.how == Invocation::EvalSha => {
                        waiter.how = Invocation::Eval;
                        retry.push(id);
                        continue;
                    }
                    Some(Outcome::NoScript) => Err(Failure::NoScriptAfterEval),
                    Some(outcome) => Ok(outcome),
                    None => Err(Failure::Lost("missing reply".into())),
                },
            };
            if let Some(waiter) = self.waiters.remove(&id) {
                out.push(Answer { request: id, checks: waiter.checks, outcome });
            }
        }
        for id in retry.into_iter().rev() {
            self.queue.push_front(id);
        }
        out
    }

    /// Queued requests whose deadline has passed: they leave the queue and
    /// `failure_mode` applies to them.
    pub fn expire(&mut self, now_ms: u64) -> Vec<u32> {
        let waiters = &self.waiters;
        let (expired, kept): (Vec<u32>, Vec<u32>) =
            self.queue.iter().partition(|id| waiters.get(id).is_none_or(|w| w.deadline_ms <= now_ms));
        self.queue = kept.into();
        for id in &expired {
            self.waiters.remove(id);
        }
        expired
    }

    /// The request went away (client reset): forget it. A call it was in
    /// still completes; its reply is ignored.
    pub fn cancel(&mut self, id: u32) {
        self.waiters.remove(&id);
        self.queue.retain(|q| *q != id);
    }
}

#[cfg(test)]
mod tests;
