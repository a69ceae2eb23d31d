//! Receiving: replies on a store stream paired with the calls in order,
//! sent again (the code was missing, a cluster redirection) or handed back
//! to their owners ([`Landed`]); the replies to `AUTH` and `FUNCTION LOAD`;
//! and what a closed, refused, stalled or moved stream means for the calls
//! on it.

use crate::config::Invoke;
use crate::limiter::script::{is_fcall_refused, is_loaded};
use crate::resp::Value;
use crate::store::cluster::parse_redirect;
use crate::store::sentinel::Change;
use crate::store::{interpret_reply, preamble_failure, printable, Failure, Outcome};
use crate::worker::calls::{CallId, ShardId};
use crate::worker::host::{Host, Level, Reset, Stat};
use crate::worker::streams::discovery::Learned;
use crate::worker::streams::link::Awaited;
use crate::worker::streams::shards::Carrier;
use crate::worker::streams::{Landed, Reply, Streams};

/// "Missing code" answers (`NOSCRIPT`, `ERR Function not found`) one call
/// may get before it fails (`noscript`): the code was flushed again between
/// its calls, or a refused `FUNCTION LOAD` moved the worker to the script.
const MAX_NOSCRIPTS: u8 = 2;

/// The gRPC status of a stream that never reached the store: Envoy answers
/// `UNAVAILABLE` when the tunnel cannot connect upstream (nothing was sent
/// to the store, so the calls on it can be sent again).
pub const GRPC_UNAVAILABLE: u32 = 14;

impl Streams {
    /// Bytes on `shard`'s stream: its replies, in order.
    pub(super) fn on_store_bytes(&mut self, host: &mut dyn Host, shard: ShardId, bytes: &[u8], now_ms: u64) {
        let Some(s) = self.shards.get_mut(shard) else { return };
        let (replies, error) = s.link.feed(bytes, now_ms);
        let mut timed = false;
        let mut retry = Vec::new();
        for (awaited, sent_ms, value) in replies {
            match awaited {
                Awaited::Preamble => {
                    if let Some(failure) = preamble_failure(&value) {
                        self.lose_store(host, shard, Reset::Auth, failure, true, now_ms);
                        return;
                    }
                    if let Some(s) = self.shards.get_mut(shard) {
                        s.link.set_ready();
                    }
                }
                Awaited::Call(id) => {
                    if !timed {
                        host.record_store_time(now_ms.saturating_sub(sent_ms));
                        timed = true;
                    }
                    self.call_answered(shard, id);
                    let round_trip = now_ms.saturating_sub(sent_ms);
                    if self.answer(host, shard, id, value, now_ms, round_trip) {
                        retry.push(id);
                    }
                }
                Awaited::Abandoned(id) => {
                    self.call_answered(shard, id);
                    self.landed.push_back(Landed::Orphaned { id, reply: Some(value) });
                }
                Awaited::Load => self.loaded(host, shard, &value),
                // `ASKING` answers `OK`; if it did not, the call after it
                // is redirected again and says so.
                Awaited::Lookup | Awaited::Asking => {}
            }
        }
        self.calls.requeue(&retry);
        if let Some(failure) = error {
            // Replies can no longer be paired with calls.
            self.lose_store(host, shard, Reset::Protocol, failure, true, now_ms);
        }
    }

    /// Call `id` was answered: if it carried the code, the code is there now.
    fn call_answered(&mut self, shard: ShardId, id: CallId) {
        if let Some(s) = self.shards.get_mut(shard).filter(|s| s.code.carrier == Some(Carrier::Call(id))) {
            s.code.carrier = None;
        }
    }

    /// A reply to call `id`: true when it must be sent again (the code was
    /// missing, or `FCALL` is not allowed: nothing ran; at most twice per
    /// call; or a cluster redirection: it goes to the shard now in its
    /// `shard`); else the call is handed back to its owner.
    /// `round_trip_ms`: since the call was sent.
    fn answer(
        &mut self,
        host: &mut dyn Host,
        shard: ShardId,
        id: CallId,
        value: Value,
        now_ms: u64,
        round_trip_ms: u64,
    ) -> bool {
        if self.topology.clustered() {
            let here = self.shards.get(shard).and_then(|s| s.addr).map(|a| a.ip());
            if let Some(redirect) = parse_redirect(&value, here) {
                let (calls, shards) = (&mut self.calls, &mut self.shards);
                if self.topology.redirect(host, (calls, shards), id, redirect, now_ms) {
                    return true;
                }
                if let Some(call) = self.calls.remove(id) {
                    let failure = match interpret_reply(&value, &call.checks) {
                        Outcome::Failed(f) => f,
                        _ => Failure::Unavailable("unusable cluster redirection".into()),
                    };
                    self.fail_taken(id, call, failure, now_ms);
                }
                return false;
            }
        }
        let refused = self.invoke == Invoke::Fcall && is_fcall_refused(&value);
        if refused {
            self.fall_back(host, &value);
        }
        let Some(code) = self.shards.get_mut(shard).map(|s| &mut s.code) else { return false };
        let Some(p) = self.calls.get_mut(id) else { return false };
        if p.command.raw_reply() && !refused && !value.is_error() {
            if let Some(call) = self.calls.remove(id) {
                self.landed.push_back(Landed::Replied { id, call, reply: Reply::Raw(value), round_trip_ms });
            }
            return false;
        }
        let mut outcome = if refused { Outcome::NoScript } else { interpret_reply(&value, &p.checks) };
        // Behind a load the store refused (`OOM`, ...): that is the failure.
        // The next message tries the load again.
        if let (Outcome::NoScript, Some(failure)) = (&outcome, &code.load_failure) {
            outcome = Outcome::Failed(failure.clone());
            code.wanted |= code.carrier.is_none();
        }
        if outcome == Outcome::NoScript && p.noscripts < MAX_NOSCRIPTS {
            p.noscripts += 1;
            // (An adjust by `evalsha` goes as EVAL itself.)
            let own_eval = p.command.own_script() && self.invoke == Invoke::Evalsha;
            if code.carrier.is_none() && !own_eval {
                code.wanted = true;
            }
            return true;
        }
        if let Some(call) = self.calls.remove(id) {
            self.landed.push_back(Landed::Replied { id, call, reply: Reply::Outcome(outcome), round_trip_ms });
        }
        false
    }

    /// The reply to `FUNCTION LOAD`. A refusal for good (an ACL without
    /// `function|load`, a Redis before 7) moves this worker to the script:
    /// the calls behind the load are answered "missing" and go again, as
    /// `EVAL` then `EVALSHA`. Any other error (`OOM` under `noeviction`,
    /// ...) is the failure of the calls behind it; the next call that finds
    /// the code missing loads it again.
    fn loaded(&mut self, host: &mut dyn Host, shard: ShardId, value: &Value) {
        let Some(s) = self.shards.get_mut(shard) else { return };
        s.code.carrier = None;
        s.code.load_failure = None;
        if is_loaded(value, self.script) {
            return;
        }
        if is_fcall_refused(value) {
            self.fall_back(host, value);
        } else {
            s.code.load_failure = preamble_failure(value);
        }
    }

    /// `FUNCTION LOAD` or `FCALL` refused by the store (`refusal`): this
    /// worker calls the script from now on (logged once per worker).
    fn fall_back(&mut self, host: &mut dyn Host, refusal: &Value) {
        if self.invoke == Invoke::Evalsha {
            return;
        }
        let why = match refusal.as_error() {
            Some(e) => printable(e, 256),
            None => "an unexpected reply".to_string(),
        };
        host.log(
            Level::Warn,
            &format!(
                "tollgate: the function library cannot be used ({why}); calling the limiter by EVALSHA from now on"
            ),
        );
        self.invoke = Invoke::Evalsha;
        for s in self.shards.iter_mut() {
            s.code.wanted = s.code.carrier.is_none();
        }
    }

    fn on_store_close(&mut self, host: &mut dyn Host, shard: ShardId, status: u32, now_ms: u64) {
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
    pub(super) fn lose_store(
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
            } else {
                self.fail(id, &failure, now_ms);
            }
        }
        self.calls.requeue(&back);
        for id in orphans {
            // Its reply will never come: whether it recorded is unknown.
            self.landed.push_back(Landed::Orphaned { id, reply: None });
        }
        self.topology.suspect_master(now_ms);
        if cause != Reset::Switched {
            self.topology.shard_failed(host, now_ms);
        }
    }

    fn reset_store(&mut self, host: &mut dyn Host, shard: ShardId, cause: Reset, now_ms: u64) {
        let failure = match cause {
            Reset::Stalled => Failure::NoResponse,
            _ => Failure::Lost(format!("stream reset ({})", cause.name())),
        };
        self.lose_store(host, shard, cause, failure, true, now_ms);
    }

    /// What a Sentinel lookup changed: a new master moves the store stream.
    fn on_master(&mut self, host: &mut dyn Host, change: Option<Change>, now_ms: u64) {
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

    /// Bytes on stream `token`: a store stream's replies, or a lookup's.
    pub fn on_message(&mut self, host: &mut dyn Host, token: u32, bytes: &[u8], now_ms: u64) {
        if let Some(shard) = self.shards.by_token(token) {
            return self.on_store_bytes(host, shard, bytes, now_ms);
        }
        match self.topology.on_message(host, token, bytes, now_ms) {
            Learned::Master(change) => self.on_master(host, change, now_ms),
            Learned::SlotMap => self.topology.follow_map(host, &mut self.calls, &mut self.shards),
            Learned::Same | Learned::Nothing => {}
        }
    }

    /// Stream `token` closed with gRPC `status`.
    pub fn on_close(&mut self, host: &mut dyn Host, token: u32, status: u32, now_ms: u64) {
        match self.shards.by_token(token) {
            Some(shard) => self.on_store_close(host, shard, status, now_ms),
            None => self.topology.on_close(host, token, status, now_ms),
        }
    }

    /// Deadlines, at every tick: streams that stalled are reset, calls that
    /// waited too long for a stream fail (or, on a busy stream that keeps
    /// answering, are refused as overload), and idle streams to former
    /// cluster masters close.
    pub fn expire(&mut self, host: &mut dyn Host, now_ms: u64) {
        let (timeout_ms, max_wait_ms) = (self.timeout_ms, self.max_wait_ms);
        for (shard, (outstanding, silent_ms, ticks)) in self.shards.stalled(now_ms, timeout_ms, max_wait_ms) {
            let at = self.shards.describe(shard);
            host.log(
                Level::Warn,
                &format!("tollgate: store stream{at} stalled: {outstanding} commands outstanding, no reply for {silent_ms} ms over {ticks} ticks; reconnecting"),
            );
            self.reset_store(host, shard, Reset::Stalled, now_ms);
            // What waited for that stream's window waited on a store that
            // stopped answering: it fails now, as it would have on the
            // stalled stream, but as never run (it was not sent), instead
            // of meeting a second timeout on the next stream.
            let failure = Failure::Unavailable(format!("store stream{at} stalled"));
            for id in self.calls.drain_queue(shard) {
                self.fail(id, &failure, now_ms);
            }
        }
        for queue in self.calls.queue_ids() {
            let link = self.shards.get(queue).map(|s| s.link());
            let healthy = link.is_some_and(|l| l.ready() && !l.stalled(now_ms, timeout_ms, max_wait_ms));
            let limit = if healthy { max_wait_ms } else { timeout_ms };
            let failure = self.unreachable(queue, now_ms);
            for id in self.calls.take_queued_before(queue, now_ms.saturating_sub(limit)) {
                if healthy {
                    self.shed(id);
                } else {
                    self.fail(id, &failure, now_ms);
                }
            }
        }
        // Sent long ago on a stream that keeps answering others: refused as
        // overload; its call may still run.
        for id in self.sent_before(now_ms.saturating_sub(max_wait_ms)) {
            if let Some(shard) = self.calls.get(id).map(|p| p.shard) {
                self.shards.abandon(shard, id);
            }
            host.count(Stat::UnknownOutcome, 1);
            self.shed(id);
        }
    }

    /// Closes the streams to nodes that are no longer masters, once idle.
    pub fn retire_idle(&mut self, host: &mut dyn Host) {
        self.topology.retire_idle(host, &mut self.calls, &mut self.shards);
    }

    /// Requests' own calls on any stream that arrived at or before
    /// `cutoff_ms` (calls made on behalf of a request or a response wait
    /// for their replies: the request, or the paused response, has its own
    /// deadline).
    fn sent_before(&self, cutoff_ms: u64) -> Vec<CallId> {
        self.shards
            .iter()
            .flat_map(|s| s.link.calls())
            .filter(|id| {
                matches!(id, CallId::Request(_)) && self.calls.get(*id).is_some_and(|p| p.arrival.local_ms <= cutoff_ms)
            })
            .collect()
    }
}
