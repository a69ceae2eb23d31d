//! The worker's store streams: opening each (to the Sentinels' master, or a
//! cluster master, when configured), sending its queued calls on it within
//! its bounds, and what a closed, refused or stalled stream means for the
//! calls on it. Replies are paired with requests in
//! [`crate::worker::stream::replies`].

use crate::config::Invoke;
use crate::limiter::script::{encode_load, Invocation};
use crate::store::cluster::asking_command;
use crate::store::sentinel::Change;
use crate::store::Failure;
use crate::worker::calls::{CallId, ShardId, PARKED};
use crate::worker::host::{Host, Reset, Stat};
use crate::worker::stream::link::Awaited;
use crate::worker::stream::shards::Carrier;
use crate::worker::{write_call, Worker, MAX_IN_FLIGHT_BYTES};
use std::net::SocketAddr;

/// The gRPC status of a stream that never reached the store: Envoy answers
/// `UNAVAILABLE` when the tunnel cannot connect upstream (nothing was sent
/// to the store, so the requests on it can be sent again).
pub const GRPC_UNAVAILABLE: u32 = 14;

/// The header that makes the tunnel's `ORIGINAL_DST` cluster connect to the
/// master learned from the Sentinels or the cluster's slot map.
pub const ORIGINAL_DST_HEADER: &str = "x-envoy-original-dst-host";

impl Worker {
    /// Sends queued requests while the streams have room. From a request's
    /// callback it cannot open a stream: it wakes the worker instead.
    pub(in crate::worker) fn pump(&mut self, host: &mut dyn Host, own: bool, now_ms: u64) {
        if self.calls.is_empty() {
            // Nothing held, so nothing to send (a queue may keep ids that
            // left it, which would be skipped).
            return;
        }
        self.route_parked(host, now_ms);
        if self.calls.queued_on(PARKED) > 0 && self.cluster.as_ref().is_some_and(|c| c.due(now_ms)) {
            // The slot map is asked for from the worker's own callback.
            self.wake(host, own);
        }
        // The ids are taken before the walk: a shard added on the way waits
        // for the next pump.
        if let Some(shard) = self.shards.only() {
            return self.pump_shard(host, shard, own, now_ms);
        }
        for shard in self.shards.ids() {
            self.pump_shard(host, shard, own, now_ms);
        }
    }

    fn pump_shard(&mut self, host: &mut dyn Host, shard: ShardId, own: bool, now_ms: u64) {
        while self.calls.queued_on(shard) > 0 {
            let Some(s) = self.shards.get(shard) else { return };
            // The address is formatted only to open a stream
            // ([`Worker::open_store`]): a request that finds the window full
            // pays nothing for it.
            let master = match (&self.sentinels, s.addr) {
                (Some(sentinels), _) => match sentinels.master() {
                    Some(m) => Some(m),
                    None => {
                        // Wait for the first lookup, which the worker's own
                        // callback sends: wake it when one is due.
                        if sentinels.due(now_ms) {
                            self.wake(host, own);
                        }
                        return;
                    }
                },
                (None, addr) => addr,
            };
            let Some(token) = s.link.token() else {
                if !s.link.may_open(now_ms) {
                    if own {
                        let failure = self.unreachable(shard, now_ms);
                        for id in self.calls.drain_queue(shard) {
                            self.fail(host, id, &failure, now_ms);
                        }
                    }
                    return;
                }
                if !own {
                    self.wake(host, own);
                    return;
                }
                self.open_store(host, shard, master, now_ms);
                continue;
            };
            if !s.link.ready() || !self.send_batch(host, shard, token, now_ms) {
                return;
            }
        }
    }

    pub(in crate::worker) fn wake(&mut self, host: &mut dyn Host, own: bool) {
        if !own && !self.woken {
            self.woken = host.wake();
        }
    }

    fn open_store(&mut self, host: &mut dyn Host, shard: ShardId, master: Option<SocketAddr>, now_ms: u64) {
        let cluster = self.config.valkey.cluster.clone();
        let master = master.map(|m| m.to_string());
        let metadata: Vec<(&str, &str)> = master.iter().map(|m| (ORIGINAL_DST_HEADER, m.as_str())).collect();
        let opened = host.open_stream(&cluster, &metadata);
        let preamble = self.preamble.bytes.clone();
        let Some(s) = self.shards.get_mut(shard) else { return };
        match opened {
            Ok(token) => {
                host.count(Stat::StreamOpen, 1);
                s.link.opened(token, preamble.is_empty(), now_ms);
                if preamble.is_empty() {
                    return;
                }
                match host.send(token, &preamble) {
                    Ok(()) => {
                        s.link.sent(Awaited::Preamble, preamble.len(), now_ms);
                        s.link.message_sent();
                    }
                    Err(e) => self.lose_store(host, shard, Reset::Closed, Failure::Unavailable(e), false, now_ms),
                }
            }
            Err(e) => {
                let failure = Failure::Unavailable(format!("cannot open a stream to cluster {cluster}: {e}"));
                s.link.closed(failure, true, now_ms);
                host.count(Stat::StreamReset(Reset::Refused), 1);
                self.shard_failed(host, now_ms);
            }
        }
    }

    /// One message of `shard`'s queued requests, as many as the stream's
    /// bounds allow (up to `valkey.max_batch`); false when nothing could be
    /// sent. Group commit: while `valkey.max_messages_in_flight` messages
    /// await their replies, nothing leaves; what waits meanwhile leaves
    /// together when a reply frees the window (no timer: the reply's VM
    /// entry sends it, [`Worker::pump`] at its end).
    fn send_batch(&mut self, host: &mut dyn Host, shard: ShardId, token: u32, now_ms: u64) -> bool {
        let valkey = &self.config.valkey;
        let (max_batch, max_commands) = (valkey.max_batch, valkey.max_in_flight);
        let shaping = self.holding.active();
        let Some(s) = self.shards.get_mut(shard) else { return false };
        if s.link.messages() >= valkey.max_messages_in_flight {
            return false;
        }
        let mut message = Vec::new();
        // Per request: its id, the bytes of its `ASKING` (0 if none), of its call.
        let mut batch: Vec<(CallId, usize, usize)> = Vec::with_capacity(self.calls.queued_on(shard).min(max_batch));
        let mut commands = 0;
        // The store lacks the function library: load it ahead of the calls.
        let mut load = 0;
        if s.code.wanted && s.code.carrier.is_none() && self.invoke == Invoke::Fcall {
            encode_load(&mut message, self.script);
            load = message.len();
        }
        while batch.len() < max_batch {
            let Some(id) = self.calls.peek_queued(shard) else { break };
            let Some(p) = self.calls.get(id) else { break };
            let start = message.len();
            if p.asking {
                message.extend_from_slice(&asking_command());
            }
            let asking = message.len() - start;
            // Under `evalsha`, after a NOSCRIPT one call carries the script
            // (EVAL caches it); every call after it finds it by its SHA. An
            // adjust (an undo, a settlement) or a flush has a SHA of its
            // own: after a NOSCRIPT it goes as EVAL itself, and never
            // carries the decisions'.
            let own = p.call.own_script();
            let carries = !own && s.code.wanted && s.code.carrier.is_none() && load == 0;
            let how = match self.invoke {
                Invoke::Fcall => Invocation::FCall,
                Invoke::Evalsha if carries || (own && p.noscripts > 0) => Invocation::Eval,
                Invoke::Evalsha => Invocation::EvalSha,
            };
            write_call(&mut message, self.script, how, p, shaping.then_some(&self.config));
            let len = message.len() - start - asking;
            let (outstanding, bytes) = s.link.in_flight();
            // An idle stream always takes one call (with the library's
            // load ahead of it, if wanted), whatever the bounds.
            let idle = outstanding == 0 && batch.is_empty();
            let outstanding = outstanding + usize::from(load > 0) + commands;
            let fits =
                idle || (outstanding < max_commands && bytes.saturating_add(message.len()) <= MAX_IN_FLIGHT_BYTES);
            if !fits {
                message.truncate(start);
                break;
            }
            self.calls.pop_queued(shard);
            if carries {
                s.code.carrier = Some(Carrier::Call(id));
                s.code.wanted = false;
            }
            commands += 1 + usize::from(asking > 0);
            batch.push((id, asking, len));
        }
        if batch.is_empty() {
            return false;
        }
        if load > 0 {
            s.code.carrier = Some(Carrier::Load);
            s.code.wanted = false;
        }
        if let Err(e) = host.send(token, &message) {
            // Never sent: back to the queue, and a new stream.
            s.code.forget_carrier();
            let ids: Vec<CallId> = batch.iter().map(|(id, _, _)| *id).collect();
            self.calls.requeue(&ids);
            self.lose_store(host, shard, Reset::Closed, Failure::Unavailable(e), false, now_ms);
            return false;
        }
        host.count(Stat::StoreMessages, 1);
        host.count(Stat::StoreRequests, batch.len() as u64);
        if load > 0 {
            s.link.sent(Awaited::Load, load, now_ms);
        }
        for (id, asking, len) in batch {
            if let Some(p) = self.calls.get_mut(id) {
                p.sent = true;
            }
            if asking > 0 {
                s.link.sent(Awaited::Asking, asking, now_ms);
            }
            s.link.sent(Awaited::Call(id), len, now_ms);
        }
        s.link.message_sent();
        true
    }

    pub(in crate::worker) fn on_store_close(&mut self, host: &mut dyn Host, shard: ShardId, status: u32, now_ms: u64) {
        let at = self.shards.describe(shard);
        if status == GRPC_UNAVAILABLE {
            let failure = Failure::Unavailable(format!("store unreachable{at} (stream status {status})"));
            self.drop_store(host, shard, Reset::Refused, failure, true, now_ms);
        } else {
            let failure = Failure::Lost(format!("stream{at} closed with status {status}"));
            self.lose_store(host, shard, Reset::Closed, failure, false, now_ms);
        }
    }

    /// The stream stalled, broke or must move: end it (`cancel`: we end it,
    /// it did not end by itself); the requests on it get `failure_mode` with
    /// `failure`: they may have run.
    pub(in crate::worker) fn lose_store(
        &mut self,
        host: &mut dyn Host,
        shard: ShardId,
        cause: Reset,
        failure: Failure,
        cancel: bool,
        now_ms: u64,
    ) {
        if cancel {
            if let Some(token) = self.shards.get(shard).and_then(|s| s.link.token()) {
                host.cancel(token);
            }
        }
        self.drop_store(host, shard, cause, failure, false, now_ms);
    }

    /// Forgets the stream. Its outstanding requests go back to the queue
    /// when it never reached the store (`requeue`), else fail with `failure`.
    fn drop_store(
        &mut self,
        host: &mut dyn Host,
        shard: ShardId,
        cause: Reset,
        failure: Failure,
        requeue: bool,
        now_ms: u64,
    ) {
        host.count(Stat::StreamReset(cause), 1);
        let at = self.shards.describe(shard);
        let Some(s) = self.shards.get_mut(shard) else { return };
        s.code.forget_carrier();
        // What requests meet while the link is down: never "may have run".
        let down = if failure.may_have_run() {
            Failure::Unavailable(format!("no store connection{at} (last stream {})", cause.name()))
        } else {
            failure.clone()
        };
        let mut back = Vec::new();
        let back_off = matches!(cause, Reset::Auth | Reset::Protocol);
        let mut orphans = Vec::new();
        for awaited in s.link.closed(down, back_off, now_ms) {
            if let Awaited::Abandoned(id) = awaited {
                orphans.push(id);
            }
            let Awaited::Call(id) = awaited else { continue };
            if requeue {
                back.push(id);
            } else if let Some(p) = self.calls.remove(id) {
                self.fail_held(host, id, &p, &failure, now_ms);
            }
        }
        self.calls.requeue(&back);
        for id in orphans {
            // Its reply will never come: whether it recorded is unknown.
            self.orphan_answered(host, id, None, now_ms);
        }
        if let Some(s) = &mut self.sentinels {
            s.suspect(now_ms);
        }
        if cause != Reset::Switched {
            self.shard_failed(host, now_ms);
        }
    }

    pub(in crate::worker) fn reset_store(&mut self, host: &mut dyn Host, shard: ShardId, cause: Reset, now_ms: u64) {
        let failure = match cause {
            Reset::Stalled => Failure::NoResponse,
            _ => Failure::Lost(format!("stream reset ({})", cause.name())),
        };
        self.lose_store(host, shard, cause, failure, true, now_ms);
    }

    /// What a Sentinel lookup changed: a new master moves the store stream.
    pub(in crate::worker) fn on_master(&mut self, host: &mut dyn Host, change: Option<Change>, now_ms: u64) {
        let (Some(Change::Switched { .. }), Some(shard)) = (change, self.home) else { return };
        if self.shards.get(shard).is_some_and(|s| s.link.token().is_some()) {
            self.reset_store(host, shard, Reset::Switched, now_ms);
        }
        // The next stream goes to the new master at once, without the
        // backoff the old one earned.
        if let Some(s) = self.shards.get_mut(shard) {
            s.link.forget();
        }
    }

    /// Requests on any stream that arrived at or before `cutoff_ms` (the
    /// parts of a request decided across slots and settlements wait for
    /// their replies: the request, or the held response, has its own
    /// deadline).
    pub(in crate::worker) fn sent_before(&self, cutoff_ms: u64) -> Vec<CallId> {
        self.shards
            .iter()
            .flat_map(|s| s.link.calls())
            .filter(|id| {
                self.calls.get(*id).is_some_and(|p| p.arrival.local_ms <= cutoff_ms && !p.call.serves_another())
            })
            .collect()
    }
}
