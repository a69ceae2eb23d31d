//! Deadlines, at every tick of the worker (see the module documentation of
//! [`crate::worker`]): streams that stalled are reset, requests that waited too long
//! for a stream get `failure_mode` (or, on a busy stream that keeps
//! answering, are refused as overload), and idle streams to former cluster
//! masters close.

use crate::store::Failure;
use crate::worker::calls::{ShardId, PARKED};
use crate::worker::host::{Host, Level, Reset, Stat};
use crate::worker::Worker;

impl Worker {
    /// Deadlines, at every tick.
    pub(in crate::worker) fn expire(&mut self, host: &mut dyn Host, now_ms: u64) {
        if self.settlements.active() {
            // Before a stall fails their settlements: counted as expired.
            self.expire_holds(host, now_ms);
        }
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
                self.fail(host, id, &failure, now_ms);
            }
        }
        for queue in self.calls.queue_ids() {
            let link = self.shards.get(queue).map(|s| s.link());
            let healthy = link.is_some_and(|l| l.ready() && !l.stalled(now_ms, timeout_ms, max_wait_ms));
            let limit = if healthy { max_wait_ms } else { timeout_ms };
            let failure = self.unreachable(queue, now_ms);
            for id in self.calls.take_queued_before(queue, now_ms.saturating_sub(limit)) {
                if healthy {
                    self.shed(host, id, now_ms);
                } else {
                    self.fail(host, id, &failure, now_ms);
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
            self.shed(host, id, now_ms);
        }
        if !self.crossings.is_empty() {
            self.expire_crossings(host, now_ms);
        }
        self.retire_idle(host);
    }

    /// Why a request of `shard`'s queue could not be sent in time.
    pub(in crate::worker) fn unreachable(&self, shard: ShardId, now_ms: u64) -> Failure {
        if let Some(f) = self.shards.down(shard, now_ms) {
            return f.clone();
        }
        if self.sentinels.as_ref().is_some_and(|s| s.master().is_none()) {
            return Failure::Unavailable("no master known from the Sentinels yet".into());
        }
        if shard == PARKED {
            return Failure::Unavailable("no slot map from the cluster's seeds yet".into());
        }
        let at = self.shards.describe(shard);
        Failure::Unavailable(format!("no store connection{at} within the timeout"))
    }
}
