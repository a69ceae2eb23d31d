//! Replies on a store stream: paired with the commands in order, each
//! request's reply ruled on, sent again (the code was missing, a cluster
//! redirection) or failed; the replies to `AUTH` and `FUNCTION LOAD`.

use crate::config::Invoke;
use crate::limiter::script::{is_fcall_refused, is_loaded};
use crate::resp::Value;
use crate::store::cluster::parse_redirect;
use crate::store::{interpret_reply, preamble_failure, printable, Failure, Outcome};
use crate::worker::calls::{Call, CallId, ShardId};
use crate::worker::host::{Host, Level, Reset, Stat};
use crate::worker::stream::link::Awaited;
use crate::worker::stream::shards::Carrier;
use crate::worker::Worker;

/// "Missing code" answers (`NOSCRIPT`, `ERR Function not found`) one request
/// may get before it fails (`noscript`): the code was flushed again between
/// its calls, or a refused `FUNCTION LOAD` moved the worker to the script.
const MAX_NOSCRIPTS: u8 = 2;

impl Worker {
    pub(in crate::worker) fn on_store_bytes(&mut self, host: &mut dyn Host, shard: ShardId, bytes: &[u8], now_ms: u64) {
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
                    if self.answer(host, shard, id, &value, now_ms, round_trip) {
                        retry.push(id);
                    }
                }
                Awaited::Abandoned(id) => {
                    self.call_answered(shard, id);
                    self.orphan_answered(host, id, Some(&value), now_ms);
                }
                Awaited::Load => self.loaded(host, shard, &value),
                // `ASKING` answers `OK`; if it did not, the call after it
                // is redirected again and says so.
                Awaited::Lookup | Awaited::Asking => {}
            }
        }
        self.calls.requeue(&retry);
        if let Some(failure) = error {
            // Replies can no longer be paired with requests.
            self.lose_store(host, shard, Reset::Protocol, failure, true, now_ms);
        }
    }

    /// Request `id`'s call was answered: if it carried the code, the code is there now.
    fn call_answered(&mut self, shard: ShardId, id: CallId) {
        if let Some(s) = self.shards.get_mut(shard).filter(|s| s.code.carrier == Some(Carrier::Call(id))) {
            s.code.carrier = None;
        }
    }

    /// Applies a reply to request `id`; true when it must be sent again
    /// (the code was missing, or `FCALL` is not allowed: nothing ran; at
    /// most twice per request; or a cluster redirection: it goes to the
    /// shard now in its `shard`). `round_trip_ms`: since the call was sent.
    fn answer(
        &mut self,
        host: &mut dyn Host,
        shard: ShardId,
        id: CallId,
        value: &Value,
        now_ms: u64,
        round_trip_ms: u64,
    ) -> bool {
        if self.cluster.is_some() {
            let here = self.shards.get(shard).and_then(|s| s.addr).map(|a| a.ip());
            if let Some(redirect) = parse_redirect(value, here) {
                return self.redirect(host, id, redirect, value, now_ms);
            }
        }
        let refused = self.invoke == Invoke::Fcall && is_fcall_refused(value);
        if refused {
            self.fall_back(host, value);
        }
        let Some(code) = self.shards.get_mut(shard).map(|s| &mut s.code) else { return false };
        let Some(p) = self.calls.get_mut(id) else { return false };
        if matches!(p.call, Call::Flush(_)) && !refused && !value.is_error() {
            if let Some(p) = self.calls.remove(id) {
                self.flush_replied(host, id, p, value, now_ms);
            }
            return false;
        }
        let mut outcome = if refused { Outcome::NoScript } else { interpret_reply(value, &p.checks) };
        // Behind a load the store refused (`OOM`, ...): that is the failure.
        // The next message tries the load again.
        if let (Outcome::NoScript, Some(failure)) = (&outcome, &code.load_failure) {
            outcome = Outcome::Failed(failure.clone());
            code.wanted |= code.carrier.is_none();
        }
        if outcome == Outcome::NoScript && p.noscripts < MAX_NOSCRIPTS {
            p.noscripts += 1;
            // (An adjust by `evalsha` goes as EVAL itself.)
            let own_eval = p.call.own_script() && self.invoke == Invoke::Evalsha;
            if code.carrier.is_none() && !own_eval {
                code.wanted = true;
            }
            return true;
        }
        let Some(p) = self.calls.remove(id) else { return false };
        match p.call {
            Call::Decide => {}
            Call::Part(_) => {
                self.part_answered(host, id, p, outcome, now_ms);
                return false;
            }
            Call::GiveBack(_) => {
                self.given_back(host, id, &outcome);
                return false;
            }
            Call::Flush(_) => {
                let failure = match outcome {
                    Outcome::Failed(failure) => failure,
                    Outcome::NoScript | Outcome::Decided(_) => Failure::NoScriptAfterEval,
                };
                self.flush_failed(host, id, p, &failure, now_ms);
                return false;
            }
            Call::Settle(_) => {
                if let Outcome::Failed(failure) = &outcome {
                    host.count(Stat::StoreError(failure.kind()), 1);
                }
                self.settlement_replied(host, &p, outcome);
                return false;
            }
        }
        match outcome {
            Outcome::Decided(decision) => {
                let CallId::Request(context) = id else { return false };
                self.learn(&p, &decision, now_ms);
                let (arrival_ms, round_trip) = (p.arrival.request_ms, Some(round_trip_ms));
                let mut verdict =
                    Some(self.rule_decided(host, context, &p.checks, &decision, arrival_ms, &p.headers, round_trip));
                if self.holding.active() {
                    verdict = verdict.and_then(|v| self.shaped(host, context, &p, &decision, v, now_ms));
                }
                if let Some(verdict) = verdict {
                    self.deliveries.deliver(host, context, verdict);
                }
            }
            Outcome::NoScript => self.fail_held(host, id, &p, &Failure::NoScriptAfterEval, now_ms),
            Outcome::Failed(failure) => self.fail_held(host, id, &p, &failure, now_ms),
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
}
