//! Sending: opening each stream (to the Sentinels' master, or a cluster
//! master, when configured) and writing its queued calls into pipelined
//! messages within its bounds, each as its [`crate::worker::calls::Command`] says. What comes
//! back is [`super::receive`]'s.

use crate::config::Invoke;
use crate::limiter::script::{encode_load, Invocation};
use crate::store::cluster::asking_command;
use crate::store::Failure;
use crate::worker::calls::{CallId, ShardId, PARKED};
use crate::worker::host::{Host, Reset, Stat};
use crate::worker::streams::link::Awaited;
use crate::worker::streams::shards::Carrier;
use crate::worker::streams::Streams;
use std::net::SocketAddr;

/// The header that makes the tunnel's `ORIGINAL_DST` cluster connect to the
/// master learned from the Sentinels or the cluster's slot map.
pub const ORIGINAL_DST_HEADER: &str = "x-envoy-original-dst-host";

/// Bytes of commands awaiting replies on a stream, at most.
pub const MAX_IN_FLIGHT_BYTES: usize = 256 << 10;

impl Streams {
    /// Sends queued requests while the streams have room. From a request's
    /// callback it cannot open a stream: it wakes the worker instead.
    pub(in crate::worker) fn pump(&mut self, host: &mut dyn Host, own: bool, now_ms: u64) {
        if self.calls.is_empty() {
            // Nothing held, so nothing to send (a queue may keep ids that
            // left it, which would be skipped).
            return;
        }
        self.route_parked(now_ms);
        if self.calls.queued_on(PARKED) > 0 && self.topology.map_due(now_ms) {
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
            let master = match self.topology.master() {
                Ok(Some(m)) => Some(m),
                Ok(None) => s.addr,
                Err(()) => {
                    // Wait for the first lookup, which the worker's own
                    // callback sends: wake it when one is due.
                    if self.topology.master_due(now_ms) {
                        self.wake(host, own);
                    }
                    return;
                }
            };
            let Some(token) = s.link.token() else {
                if !s.link.may_open(now_ms) {
                    if own {
                        let failure = self.unreachable(shard, now_ms);
                        for id in self.calls.drain_queue(shard) {
                            self.fail(id, &failure, now_ms);
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
        let cluster = self.cluster.clone();
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
                self.topology.shard_failed(host, now_ms);
            }
        }
    }

    /// One message of `shard`'s queued requests, as many as the stream's
    /// bounds allow (up to `valkey.max_batch`); false when nothing could be
    /// sent. Group commit: while `valkey.max_messages_in_flight` messages
    /// await their replies, nothing leaves; what waits meanwhile leaves
    /// together when a reply frees the window (no timer: the reply's VM
    /// entry sends it, `Worker::pump` at its end).
    fn send_batch(&mut self, host: &mut dyn Host, shard: ShardId, token: u32, now_ms: u64) -> bool {
        let bounds = self.bounds;
        let (max_batch, max_commands) = (bounds.max_batch, bounds.max_in_flight);
        let Some(s) = self.shards.get_mut(shard) else { return false };
        if s.link.messages() >= bounds.max_messages_in_flight {
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
            let own = p.command.own_script();
            let carries = !own && s.code.wanted && s.code.carrier.is_none() && load == 0;
            let how = match self.invoke {
                Invoke::Fcall => Invocation::FCall,
                Invoke::Evalsha if carries || (own && p.noscripts > 0) => Invocation::Eval,
                Invoke::Evalsha => Invocation::EvalSha,
            };
            p.command.write(&mut message, self.script, how, &p.checks, p.arrival.now_override);
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

    /// Parked calls go to their masters once the map is known (cluster
    /// mode); those whose slot no master serves fail.
    fn route_parked(&mut self, now_ms: u64) {
        let Some(map) = self.topology.map() else { return };
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
                    let failure = self.topology.unserved(slot, now_ms);
                    self.fail(id, &failure, now_ms);
                }
            }
        }
    }
}
