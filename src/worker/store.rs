//! The worker's store stream: opening it (to the Sentinels' master when
//! configured), sending queued requests on it within its bounds, pairing
//! replies with requests, and what a closed, refused or stalled stream
//! means for the requests on it.

use super::host::{Host, Level, Reset, Stat};
use super::link::Slot;
use super::respond::respond;
use super::{Carrier, Worker, MAX_IN_FLIGHT_BYTES};
use crate::config::Invoke;
use crate::limiter::script::{encode_call, encode_load, is_fcall_refused, is_loaded, Invocation};
use crate::resp::Value;
use crate::store::sentinel::Change;
use crate::store::{interpret_reply, preamble_failure, printable, Failure, Outcome};
use crate::worker::settle::{cacheable, encode_settlement};

/// The gRPC status of a stream that never reached the store: Envoy answers
/// `UNAVAILABLE` when the tunnel cannot connect upstream (nothing was sent
/// to the store, so the requests on it can be sent again).
pub const GRPC_UNAVAILABLE: u32 = 14;

/// The header that makes the tunnel's `ORIGINAL_DST` cluster connect to the
/// master learned from the Sentinels.
pub const ORIGINAL_DST_HEADER: &str = "x-envoy-original-dst-host";

/// "Missing code" answers (`NOSCRIPT`, `ERR Function not found`) one request
/// may get before it fails (`noscript`): the code was flushed again between
/// its calls, or a refused `FUNCTION LOAD` moved the worker to the script.
const MAX_NOSCRIPTS: u8 = 2;

impl Worker {
    /// Sends queued requests while the stream has room. From a request's
    /// callback it cannot open a stream: it wakes the worker instead.
    pub(super) fn pump(&mut self, host: &mut dyn Host, own: bool, now_ms: u64) {
        while self.requests.queued() > 0 {
            let master = match &self.sentinels {
                Some(s) => match s.master() {
                    Some(m) => Some(m.to_string()),
                    None => {
                        // Wait for the first lookup, which the worker's own
                        // callback sends: wake it when one is due.
                        if s.due(now_ms) {
                            self.wake(host, own);
                        }
                        return;
                    }
                },
                None => None,
            };
            let Some(token) = self.store.token() else {
                if !self.store.may_open(now_ms) {
                    if own {
                        let failure = self.unreachable(now_ms);
                        for id in self.requests.drain_queue() {
                            self.fail(host, id, &failure, now_ms);
                        }
                    }
                    return;
                }
                if !own {
                    self.wake(host, own);
                    return;
                }
                self.open_store(host, master.as_deref(), now_ms);
                continue;
            };
            if !self.store.ready() || !self.send_batch(host, token, now_ms) {
                return;
            }
        }
    }

    fn wake(&mut self, host: &mut dyn Host, own: bool) {
        if !own && !self.woken {
            self.woken = host.wake();
        }
    }

    fn open_store(&mut self, host: &mut dyn Host, master: Option<&str>, now_ms: u64) {
        let cluster = self.config.valkey.cluster.clone();
        let metadata: Vec<(&str, &str)> = master.map(|m| (ORIGINAL_DST_HEADER, m)).into_iter().collect();
        match host.open_stream(&cluster, &metadata) {
            Ok(token) => {
                host.count(Stat::StreamOpen, 1);
                let preamble = self.preamble.bytes.clone();
                self.store.opened(token, preamble.is_empty(), now_ms);
                if preamble.is_empty() {
                    return;
                }
                match host.send(token, &preamble) {
                    Ok(()) => self.store.sent(Slot::Preamble, preamble.len(), now_ms),
                    Err(e) => self.lose_store(host, Reset::Closed, Failure::Unavailable(e), false, now_ms),
                }
            }
            Err(e) => {
                let failure = Failure::Unavailable(format!("cannot open a stream to cluster {cluster}: {e}"));
                self.store.closed(failure, true, now_ms);
                host.count(Stat::StreamReset(Reset::Refused), 1);
            }
        }
    }

    /// One message of queued requests, as many as the stream's bounds allow
    /// (up to `valkey.max_batch`); false when nothing could be sent.
    fn send_batch(&mut self, host: &mut dyn Host, token: u32, now_ms: u64) -> bool {
        let valkey = &self.config.valkey;
        let (max_batch, max_commands) = (valkey.max_batch, valkey.max_in_flight);
        let mut message = Vec::new();
        let mut batch: Vec<(u32, usize)> = Vec::new();
        // The store lacks the function library: load it ahead of the calls.
        let mut load = 0;
        if self.code_wanted && self.carrier.is_none() && self.invoke == Invoke::Fcall {
            encode_load(&mut message, self.script);
            load = message.len();
        }
        while batch.len() < max_batch {
            let Some(id) = self.requests.peek_queued() else { break };
            let Some(p) = self.requests.get(id) else { break };
            let start = message.len();
            // Under `evalsha`, after a NOSCRIPT one call carries the script
            // (EVAL caches it); every call after it finds it by its SHA.
            // A settlement's script has a SHA of its own: after a NOSCRIPT
            // it goes as EVAL itself, and never carries the decisions'.
            let carries = p.settle.is_none() && self.code_wanted && self.carrier.is_none() && load == 0;
            let how = match self.invoke {
                Invoke::Fcall => Invocation::FCall,
                Invoke::Evalsha if carries || (p.settle.is_some() && p.noscripts > 0) => Invocation::Eval,
                Invoke::Evalsha => Invocation::EvalSha,
            };
            match &p.settle {
                None => encode_call(&mut message, self.script, how, &p.checks, p.now_override),
                Some(call) => encode_settlement(&mut message, self.script, how, &p.checks, call, p.now_override),
            }
            let len = message.len() - start;
            let (commands, bytes) = self.store.in_flight();
            let commands = commands + usize::from(load > 0);
            let fits = (commands == 0 && batch.is_empty())
                || (commands + batch.len() < max_commands
                    && bytes.saturating_add(message.len()) <= MAX_IN_FLIGHT_BYTES);
            if !fits {
                message.truncate(start);
                break;
            }
            self.requests.pop_queued();
            if carries {
                self.carrier = Some(Carrier::Call(id));
                self.code_wanted = false;
            }
            batch.push((id, len));
        }
        if batch.is_empty() {
            return false;
        }
        if load > 0 {
            self.carrier = Some(Carrier::Load);
            self.code_wanted = false;
        }
        if let Err(e) = host.send(token, &message) {
            // Never sent: back to the queue, and a new stream.
            self.forget_carrier();
            let ids: Vec<u32> = batch.iter().map(|(id, _)| *id).collect();
            self.requests.requeue(&ids);
            self.lose_store(host, Reset::Closed, Failure::Unavailable(e), false, now_ms);
            return false;
        }
        host.count(Stat::StoreMessages, 1);
        host.count(Stat::StoreRequests, batch.len() as u64);
        if load > 0 {
            self.store.sent(Slot::Load, load, now_ms);
        }
        for (id, len) in batch {
            if let Some(p) = self.requests.get_mut(id) {
                p.sent = true;
            }
            self.store.sent(Slot::Request(id), len, now_ms);
        }
        true
    }

    pub(super) fn on_store_bytes(&mut self, host: &mut dyn Host, bytes: &[u8], now_ms: u64) {
        let (replies, error) = self.store.feed(bytes, now_ms);
        let mut timed = false;
        let mut retry = Vec::new();
        for (slot, sent_ms, value) in replies {
            match slot {
                Slot::Preamble => {
                    if let Some(failure) = preamble_failure(&value) {
                        self.lose_store(host, Reset::Auth, failure, true, now_ms);
                        return;
                    }
                    self.store.set_ready();
                }
                Slot::Request(id) => {
                    if !timed {
                        host.record_store_time(now_ms.saturating_sub(sent_ms));
                        timed = true;
                    }
                    if self.carrier == Some(Carrier::Call(id)) {
                        self.carrier = None;
                    }
                    if self.answer(host, id, &value, now_ms) {
                        retry.push(id);
                    }
                }
                Slot::Abandoned(id) => {
                    if self.carrier == Some(Carrier::Call(id)) {
                        self.carrier = None;
                    }
                }
                Slot::Load => self.loaded(host, &value),
                Slot::Lookup => {}
            }
        }
        self.requests.requeue(&retry);
        if let Some(failure) = error {
            // Replies can no longer be paired with requests.
            self.lose_store(host, Reset::Protocol, failure, true, now_ms);
        }
    }

    /// Applies a reply to request `id`; true when it must be sent again
    /// (the code was missing, or `FCALL` is not allowed: nothing ran; at
    /// most twice per request).
    fn answer(&mut self, host: &mut dyn Host, id: u32, value: &Value, now_ms: u64) -> bool {
        let refused = self.invoke == Invoke::Fcall && is_fcall_refused(value);
        if refused {
            self.fall_back(host, value);
        }
        let Some(p) = self.requests.get_mut(id) else { return false };
        let mut outcome = if refused { Outcome::NoScript } else { interpret_reply(value, &p.checks) };
        // Behind a load the store refused (`OOM`, ...): that is the failure.
        // The next message tries the load again.
        if let (Outcome::NoScript, Some(failure)) = (&outcome, &self.load_failure) {
            outcome = Outcome::Failed(failure.clone());
            self.code_wanted |= self.carrier.is_none();
        }
        if outcome == Outcome::NoScript && p.noscripts < MAX_NOSCRIPTS {
            p.noscripts += 1;
            // (A settlement by `evalsha` goes as EVAL itself.)
            let own_eval = p.settle.is_some() && self.invoke == Invoke::Evalsha;
            if self.carrier.is_none() && !own_eval {
                self.code_wanted = true;
            }
            return true;
        }
        let Some(p) = self.requests.remove(id) else { return false };
        if p.settle.is_some() {
            if let Outcome::Failed(failure) = &outcome {
                host.count(Stat::StoreError(failure.kind()), 1);
            }
            self.settled(host, &p, outcome);
            return false;
        }
        match outcome {
            Outcome::Decided(decision) => {
                self.learn(&p, &decision, now_ms);
                if self.settlements.active {
                    self.admitted(host, id, Some(&decision), false);
                }
                let mut ruling = respond(&self.config, &p.checks, &decision, p.arrival_ms);
                if self.settlements.active {
                    ruling.denials.retain(|d| cacheable(&self.config, &p.checks, &d.key));
                }
                let settle = self.rule(host, ruling, p.arrival_ms, &p.headers);
                self.settle(host, id, settle);
            }
            Outcome::NoScript => self.fail_held(host, id, &p, &Failure::NoScriptAfterEval, now_ms),
            Outcome::Failed(failure) => self.fail_held(host, id, &p, &failure, now_ms),
        }
        false
    }

    /// No command carries the code any more (its stream is gone).
    fn forget_carrier(&mut self) {
        if self.carrier.take().is_some() {
            self.code_wanted = true;
        }
    }

    /// The reply to `FUNCTION LOAD`. A refusal for good (an ACL without
    /// `function|load`, a Redis before 7) moves this worker to the script:
    /// the calls behind the load are answered "missing" and go again, as
    /// `EVAL` then `EVALSHA`. Any other error (`OOM` under `noeviction`,
    /// ...) is the failure of the calls behind it; the next call that finds
    /// the code missing loads it again.
    fn loaded(&mut self, host: &mut dyn Host, value: &Value) {
        self.carrier = None;
        self.load_failure = None;
        if is_loaded(value, self.script) {
            return;
        }
        if is_fcall_refused(value) {
            self.fall_back(host, value);
        } else {
            self.load_failure = preamble_failure(value);
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
        self.code_wanted = self.carrier.is_none();
    }

    pub(super) fn on_store_close(&mut self, host: &mut dyn Host, status: u32, now_ms: u64) {
        if status == GRPC_UNAVAILABLE {
            let failure = Failure::Unavailable(format!("store unreachable (stream status {status})"));
            self.drop_store(host, Reset::Refused, failure, true, now_ms);
        } else {
            let failure = Failure::Lost(format!("stream closed with status {status}"));
            self.lose_store(host, Reset::Closed, failure, false, now_ms);
        }
    }

    /// The stream stalled, broke or must move: end it (`cancel`: we end it,
    /// it did not end by itself); the requests on it get `failure_mode` with
    /// `failure`: they may have run.
    pub(super) fn lose_store(
        &mut self,
        host: &mut dyn Host,
        cause: Reset,
        failure: Failure,
        cancel: bool,
        now_ms: u64,
    ) {
        if cancel {
            if let Some(token) = self.store.token() {
                host.cancel(token);
            }
        }
        self.drop_store(host, cause, failure, false, now_ms);
    }

    /// Forgets the stream. Its outstanding requests go back to the queue
    /// when it never reached the store (`requeue`), else fail with `failure`.
    fn drop_store(&mut self, host: &mut dyn Host, cause: Reset, failure: Failure, requeue: bool, now_ms: u64) {
        host.count(Stat::StreamReset(cause), 1);
        self.forget_carrier();
        // What requests meet while the link is down: never "may have run".
        let down = if failure.may_have_run() {
            Failure::Unavailable(format!("no store connection (last stream {})", cause.name()))
        } else {
            failure.clone()
        };
        let mut back = Vec::new();
        let back_off = matches!(cause, Reset::Auth | Reset::Protocol);
        for slot in self.store.closed(down, back_off, now_ms) {
            let Slot::Request(id) = slot else { continue };
            if requeue {
                back.push(id);
            } else if let Some(p) = self.requests.remove(id) {
                self.fail_held(host, id, &p, &failure, now_ms);
            }
        }
        self.requests.requeue(&back);
        if let Some(s) = &mut self.sentinels {
            s.suspect(now_ms);
        }
    }

    pub(super) fn reset_store(&mut self, host: &mut dyn Host, cause: Reset, now_ms: u64) {
        let failure = match cause {
            Reset::Stalled => Failure::NoResponse,
            _ => Failure::Lost(format!("stream reset ({})", cause.name())),
        };
        self.lose_store(host, cause, failure, true, now_ms);
    }

    /// What a Sentinel lookup changed: a new master moves the store stream.
    pub(super) fn on_master(&mut self, host: &mut dyn Host, change: Option<Change>, now_ms: u64) {
        if let Some(Change::Switched { .. }) = change {
            if self.store.token().is_some() {
                self.reset_store(host, Reset::Switched, now_ms);
            }
            // The next stream goes to the new master at once, without the
            // backoff the old one earned.
            self.store.forget();
        }
    }

    /// Requests on the stream that arrived at or before `cutoff_ms`
    /// (settlements wait for their replies: a held response has its own
    /// deadline).
    pub(super) fn sent_before(&self, cutoff_ms: u64) -> Vec<u32> {
        self.store
            .requests()
            .filter(|id| self.requests.get(*id).is_some_and(|p| p.local_arrival_ms <= cutoff_ms && p.settle.is_none()))
            .collect()
    }
}
