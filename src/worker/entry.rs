//! VM entries: each callback of the worker begins by carrying out the
//! settlements left from the last one (within [`MAX_SETTLED_PER_ENTRY`]) and
//! ends by sending what can be sent, reporting the gauges and setting the
//! tick. A request's own callback never sends a local reply for another
//! request: Envoy would turn the current request's `Continue` into a pause
//! that never ends.

use super::cluster::Cluster;
use super::host::{Gauge, Host};
use super::sentinels::Sentinels;
use super::{Settle, Worker, DEFERRED_TICK, IDLE_TICK, MAX_SETTLED_PER_ENTRY, TICK};
use std::time::Duration;

impl Worker {
    /// Every VM entry starts here: settlements left over from the last one
    /// go first, within this entry's budget (in a request's callback, only
    /// the admissions ahead of the first reply).
    pub(super) fn begin(&mut self, host: &mut dyn Host, in_request: bool) {
        self.settled = 0;
        self.in_request = in_request;
        while self.settled < MAX_SETTLED_PER_ENTRY {
            if in_request && matches!(self.deferred.front(), Some((_, Settle::Reply(_)))) {
                break;
            }
            let Some((id, settle)) = self.deferred.pop_front() else { break };
            self.settled += 1;
            Self::carry_out(host, id, &settle);
        }
    }

    /// Every VM entry ends here: send what can be sent, look up the master
    /// or the slot map when due (from the worker's own callbacks), report,
    /// and set the tick.
    pub(super) fn finish(&mut self, host: &mut dyn Host, own: bool, now_ms: u64) {
        if own {
            self.lookup(host, now_ms);
        }
        self.pump(host, own, now_ms);
        let now = [self.shards.in_flight(), self.requests.len() + self.deferred.len()];
        for ((gauge, value), reported) in Gauge::ALL.into_iter().zip(now).zip(&mut self.reported) {
            let value = i64::try_from(value).unwrap_or(i64::MAX);
            if value != *reported {
                host.gauge(gauge, value - *reported);
                *reported = value;
            }
        }
        let want = if !self.deferred.is_empty() {
            DEFERRED_TICK
        } else if !self.requests.is_empty() || self.shards.in_flight() > 0 || self.discovery_busy() {
            TICK
        } else if (self.sentinels.is_some() || self.cluster.is_some()) && self.serving {
            IDLE_TICK
        } else {
            Duration::ZERO
        };
        if want != self.tick {
            host.set_tick(want);
            self.tick = want;
        }
    }

    fn discovery_busy(&self) -> bool {
        self.sentinels.as_ref().is_some_and(Sentinels::busy) || self.cluster.as_ref().is_some_and(Cluster::busy)
    }

    pub(super) fn lookup(&mut self, host: &mut dyn Host, now_ms: u64) {
        if !self.serving {
            return;
        }
        let timeout_ms = self.timeout_ms;
        if let Some(s) = &mut self.sentinels {
            s.lookup(host, now_ms, timeout_ms);
        }
        if let Some(c) = &mut self.cluster {
            c.lookup(host, now_ms, timeout_ms);
        }
    }

    /// Carries out a settlement of a held request now, or defers it past
    /// this entry's budget (and, as a reply, past a request's callback).
    pub(super) fn settle(&mut self, host: &mut dyn Host, id: u32, settle: Settle) {
        let reply_in_request = self.in_request && matches!(settle, Settle::Reply(_));
        if self.settled < MAX_SETTLED_PER_ENTRY && self.deferred.is_empty() && !reply_in_request {
            self.settled += 1;
            Self::carry_out(host, id, &settle);
        } else {
            self.deferred.push_back((id, settle));
        }
    }

    fn carry_out(host: &mut dyn Host, id: u32, settle: &Settle) {
        match settle {
            Settle::Admit(shadow) => host.admit(id, shadow.as_deref()),
            Settle::Reply(reply) => host.reply(id, reply),
            Settle::Resume(headers) => host.resume_response(id, headers),
        }
    }
}
