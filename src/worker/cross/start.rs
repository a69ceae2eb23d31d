//! A request whose checks hash to several slots of a Valkey Cluster,
//! decided in two steps ([`crate::worker::cross::protocol`], docs/reliability.md):
//! one part per slot group, each a call on its slot's master (queued,
//! sent, redirected and failed as any request), sharing one outcome
//! ([`super::crossings::Crossing`]); then an undo on each group that recorded, when the
//! request is not admitted. Replies to the parts are handled in
//! [`crate::worker::cross::parts`].
//!
//! A request is answered once no part waits and every undo has replied:
//! a client that was denied never meets its own record. Until then its
//! records may deny concurrent requests (docs: the spurious-denial window).
//! Past [`crate::worker::MAX_WAIT_MS`] it is answered at once (overload, or its
//! denial with the undone windows given back) and its parts go on.

use crate::worker::calls::{CallId, Part, Pending, PARKED};
use crate::worker::cross::crossings::Crossing;
use crate::worker::cross::protocol::{slot_of, Step};
use crate::worker::host::{Host, Stat};
use crate::worker::request::fail::Failing;
use crate::worker::request::rule::answer_now;
use crate::worker::{Flow, Worker};

impl Worker {
    /// A fresh part id, not held by any call.
    pub(super) fn part_id(&mut self) -> CallId {
        loop {
            let id = self.crossings.next_part();
            if self.streams.get(id).is_none() {
                return id;
            }
        }
    }

    /// Decides request `id` (`p`), whose checks hash to several slots, in
    /// its own callback: one part per slot group, queued for its master.
    pub(in crate::worker) fn cross_start(&mut self, host: &mut dyn Host, id: u32, p: Pending, now_ms: u64) -> Flow {
        host.count(Stat::ClusterCrossShard, 1);
        if self.streams.full(None) {
            let verdict = self.overloaded(host, id, &p.checks);
            return answer_now(host, id, verdict);
        }
        if self.parks(&p.checks) {
            self.crossings.parked.push((id, p));
            return Flow::Pause;
        }
        let flow = self.cross_begin(host, id, p, true, now_ms);
        self.pump(host, false, now_ms);
        flow
    }

    /// Request `id`'s parts, queued (`own`: in its own callback; else it
    /// was parked and is paused).
    pub(super) fn cross_begin(&mut self, host: &mut dyn Host, id: u32, p: Pending, own: bool, now_ms: u64) -> Flow {
        let mut c = Crossing::new(p);
        let shapes = self.cross_shapes(&mut c, now_ms);
        for g in 0..c.slices.len() {
            let slot = c.slices.get(g).map_or(0, |s| s.group.slot);
            let shard =
                self.streams.route_slot(slot, now_ms).and_then(|shard| match self.streams.down(shard, now_ms) {
                    Some(failure) => Err(failure.clone()),
                    None => Ok(shard),
                });
            match shard {
                Ok(shard) => {
                    let part = self.part_id();
                    let shape = shapes.get(g).copied().flatten();
                    self.streams.push(part, c.pending(g, shard, false, Part::Decide { parent: id, group: g, shape }));
                    if let Some(s) = c.slices.get_mut(g) {
                        s.part = Some(part);
                        s.queued_ms = now_ms;
                    }
                }
                Err(failure) => {
                    if let Some(s) = c.slices.get_mut(g) {
                        s.step = Step::Failed { may_have_run: false };
                        s.failure = Some(failure);
                    }
                }
            }
        }
        if c.slices.iter().all(|s| s.part.is_none()) {
            // No group could be sent (nothing recorded): `failure_mode` now,
            // in its own callback (or delivered, once parked).
            let mut failures = c.slices.iter().filter_map(|s| s.failure.as_ref());
            let Some(first) = failures.next() else { return Flow::Continue };
            for other in failures {
                host.count(Stat::StoreError(other.kind()), 1);
            }
            let request = Failing { id, checks: &c.checks, at_ms: c.arrival.request_ms, headers: &c.headers };
            if own {
                return self.fail_now(host, id, first, &request, now_ms);
            }
            let verdict = self.failure(host, first, &request, now_ms);
            self.holding.leave(id);
            self.deliveries.deliver(host, id, verdict);
            return Flow::Pause;
        }
        self.crossings.map.insert(id, c);
        Flow::Pause
    }

    /// Queues the undo of group `g` of request `parent` (it recorded, at its
    /// slot): to where its call ran, or by the slot map if that shard is gone.
    pub(in crate::worker) fn send_undo(&mut self, host: &mut dyn Host, parent: u32, g: usize, now_ms: u64) {
        let Some(c) = self.crossings.map.get(&parent) else { return };
        let Some(slice) = c.slices.get(g).filter(|s| !s.undo_sent) else { return };
        let Step::Decided(d) = &slice.step else { return };
        let at_ms = slot_of(d);
        let ran = slice.ran.filter(|(s, _)| self.streams.has_shard(*s));
        let slot = slice.group.slot;
        let (shard, asking) = match ran {
            Some(ran) => ran,
            None => (self.streams.route_slot(slot, now_ms).unwrap_or(PARKED), false),
        };
        let id = self.part_id();
        let Some(c) = self.crossings.map.get_mut(&parent) else { return };
        // Its deadlines count from now, not from the request's arrival.
        let pending = c.pending(g, shard, asking, Part::Undo { parent, group: g, at_ms });
        let pending = Pending { arrival: pending.arrival.restarted(now_ms), ..pending };
        if let Some(s) = c.slices.get_mut(g) {
            s.undo_sent = true;
        }
        c.undoing += 1;
        self.streams.push(id, pending);
        host.count(Stat::ClusterUndo, 1);
    }

    /// Request `id`'s context is gone: it will not be admitted; its parts
    /// not yet sent are dropped, and what recorded is undone (at the next
    /// tick: there is no host here).
    pub(in crate::worker) fn cross_gone(&mut self, id: u32) {
        self.crossings.parked.retain(|(p, _)| *p != id);
        let Some(c) = self.crossings.map.get_mut(&id) else { return };
        c.answered.get_or_insert(false);
        for s in &mut c.slices {
            if s.part.is_some_and(|p| self.streams.drop_unsent(p)) {
                s.part = None;
                s.step = Step::NotSent;
            }
        }
    }

    /// Deadlines of requests decided across slots, at every tick: one
    /// waiting past `max_wait` is answered now (its parts go on); one that
    /// is gone has its undos sent.
    pub(in crate::worker) fn expire_crossings(&mut self, host: &mut dyn Host, now_ms: u64) {
        let cutoff = now_ms.saturating_sub(self.max_wait_ms);
        let ids: Vec<u32> = self.crossings.map.keys().copied().collect();
        for id in ids {
            let late =
                self.crossings.map.get(&id).is_some_and(|c| c.answered.is_none() && c.arrival.local_ms <= cutoff);
            if late {
                self.answer_late(host, id);
            }
            self.advance(host, id, now_ms);
        }
        self.expire_parked(host, now_ms);
    }
}
