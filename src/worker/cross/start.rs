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
//! Past `MAX_WAIT_MS` (or twice `valkey.timeout`) it is answered at once (overload, or its
//! denial with the undone windows given back) and its parts go on.
//!
//! One request in rounds at a time per key, per worker (docs/shaping.md,
//! "Across slots"): a shaped request across slots that may wait, arriving
//! while another in rounds shares a key with it (or one parked before it
//! does), is parked until that one is placed (released, given up, denied,
//! answered, gone), then starts. Rounds run concurrently on a key place
//! its requests at or after its last turn, so room given back by moves is
//! lost; one at a time, each request's rounds see the previous one placed.
//! A parked request counts for `max_waiting`, and past `MAX_WAIT_MS` is
//! answered as overload.

use crate::config::Config;
use crate::idhash::IdMap;
use crate::limiter::Check;
use crate::worker::calls::{CallId, Part, Pending, PARKED};
use crate::worker::cross::crossings::{Crossing, Crossings, Slice};
use crate::worker::cross::hold::cross_shapes;
use crate::worker::cross::protocol::{turn_of, Step};
use crate::worker::cross::Others;
use crate::worker::cx::Cx;
use crate::worker::host::{Flow, Stat, Throttle};
use crate::worker::request::fail::{self, Failing};
use crate::worker::request::rule::answer_now;
use crate::worker::shaping::{max_delay, Holding};
use crate::worker::streams::Streams;

impl Crossings {
    pub fn new(max_wait_ms: u64) -> Crossings {
        Crossings { map: IdMap::default(), next: 0, undo_log: Throttle::default(), parked: Vec::new(), max_wait_ms }
    }

    /// The next part id (one still held is skipped by the caller).
    pub fn next_part(&mut self) -> CallId {
        self.next = self.next.wrapping_add(1);
        CallId::Part(self.next)
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty() && self.parked.is_empty()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether request `id` waits for its decision across slots.
    pub fn waits(&self, id: u32) -> bool {
        self.map.get(&id).is_some_and(|c| c.answered.is_none()) || self.parked.iter().any(|(p, _)| *p == id)
    }

    /// Group `group` of request `parent`, while it is decided across slots.
    pub fn slice_mut(&mut self, parent: u32, group: usize) -> Option<&mut Slice> {
        self.map.get_mut(&parent)?.slices.get_mut(group)
    }

    /// Whether a request of `checks` parked `before` others waits: one in
    /// rounds, or one parked before it, shares a key with it.
    fn busy(&self, checks: &[Check], before: usize) -> bool {
        self.map.values().any(|c| c.in_rounds() && shares(&c.checks, checks))
            || self.parked.iter().take(before).any(|(_, p)| shares(&p.checks, checks))
    }

    /// Whether a request across slots of `checks` is parked.
    fn parks(&self, config: &Config, holding: &Holding, checks: &[Check]) -> bool {
        let waits = holding.active() && max_delay(config, checks).is_some_and(|d| d > 0);
        waits && self.busy(checks, self.parked.len())
    }

    /// Starts the parked requests no longer behind another.
    pub(super) fn unpark(&mut self, cx: &mut Cx<'_>, o: &mut Others<'_>, now_ms: u64) {
        let mut i = 0;
        while let Some((_, p)) = self.parked.get(i) {
            if self.busy(&p.checks, i) {
                i += 1;
                continue;
            }
            let (id, p) = self.parked.remove(i);
            self.begin(cx, o, id, p, false, now_ms);
        }
    }

    /// Parked requests past `max_wait`: answered as overload.
    pub(super) fn expire_parked(&mut self, cx: &mut Cx<'_>, o: &mut Others<'_>, now_ms: u64) {
        let cutoff = now_ms.saturating_sub(self.max_wait_ms);
        let (late, kept) =
            std::mem::take(&mut self.parked).into_iter().partition(|(_, p)| p.arrival.local_ms <= cutoff);
        self.parked = kept;
        for (id, p) in late {
            let verdict = fail::overloaded(cx, o.settlements, id, &p.checks);
            o.holding.leave(id);
            cx.deliveries.deliver(cx.host, id, verdict);
        }
        self.unpark(cx, o, now_ms);
    }

    /// A fresh part id, not held by any call.
    pub(super) fn part_id(&mut self, streams: &Streams) -> CallId {
        loop {
            let id = self.next_part();
            if !streams.holds(id) {
                return id;
            }
        }
    }

    /// Decides request `id` (`p`), whose checks hash to several slots, in
    /// its own callback: one part per slot group, queued for its master.
    pub(in crate::worker) fn start(
        &mut self,
        cx: &mut Cx<'_>,
        o: &mut Others<'_>,
        id: u32,
        p: Pending,
        now_ms: u64,
    ) -> Flow {
        cx.host.count(Stat::ClusterCrossShard, 1);
        if cx.streams.full(None) {
            let verdict = fail::overloaded(cx, o.settlements, id, &p.checks);
            return answer_now(cx.host, id, verdict);
        }
        if self.parks(cx.config, o.holding, &p.checks) {
            self.parked.push((id, p));
            return Flow::Pause;
        }
        self.begin(cx, o, id, p, true, now_ms)
    }

    /// Request `id`'s parts, queued (`own`: in its own callback; else it
    /// was parked and is paused).
    pub(super) fn begin(
        &mut self,
        cx: &mut Cx<'_>,
        o: &mut Others<'_>,
        id: u32,
        p: Pending,
        own: bool,
        now_ms: u64,
    ) -> Flow {
        let mut c = Crossing::new(p);
        let shapes = cross_shapes(cx.config, o.holding, &mut c, now_ms);
        for g in 0..c.slices.len() {
            let slot = c.slices.get(g).map_or(0, |s| s.group.slot);
            let shard = cx.streams.route_slot(slot, now_ms).and_then(|shard| match cx.streams.down(shard, now_ms) {
                Some(failure) => Err(failure.clone()),
                None => Ok(shard),
            });
            match shard {
                Ok(shard) => {
                    let part = self.part_id(cx.streams);
                    let shape = shapes.get(g).copied().flatten();
                    cx.streams.push(part, c.pending(g, shard, false, Part::Decide { parent: id, group: g, shape }));
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
                cx.host.count(Stat::StoreError(other.kind()), 1);
            }
            let request = Failing { id, checks: &c.checks, at_ms: c.arrival.request_ms, headers: &c.headers };
            if own {
                return fail::fail_now(cx, (&mut *o.settlements, &mut *o.synced), first, &request, now_ms);
            }
            let verdict = fail::failure(cx, (&mut *o.settlements, &mut *o.synced), first, &request, now_ms);
            o.holding.leave(id);
            cx.deliveries.deliver(cx.host, id, verdict);
            return Flow::Pause;
        }
        self.map.insert(id, c);
        Flow::Pause
    }

    /// Queues the undo of group `g` of request `parent` (it recorded, at its
    /// turn): to where its call ran, or by the slot map if that shard is gone.
    pub(in crate::worker) fn send_undo(&mut self, cx: &mut Cx<'_>, parent: u32, g: usize, now_ms: u64) {
        let Some(c) = self.map.get(&parent) else { return };
        let Some(slice) = c.slices.get(g).filter(|s| !s.undo_sent) else { return };
        let Step::Decided(d) = &slice.step else { return };
        let at_ms = turn_of(d);
        let ran = slice.ran.filter(|(s, _)| cx.streams.has_shard(*s));
        let slot = slice.group.slot;
        let (shard, asking) = match ran {
            Some(ran) => ran,
            None => (cx.streams.route_slot(slot, now_ms).unwrap_or(PARKED), false),
        };
        let id = self.part_id(cx.streams);
        let Some(c) = self.map.get_mut(&parent) else { return };
        // Its deadlines count from now, not from the request's arrival.
        let pending = c.pending(g, shard, asking, Part::Undo { parent, group: g, at_ms });
        let pending = Pending { arrival: pending.arrival.restarted(now_ms), ..pending };
        if let Some(s) = c.slices.get_mut(g) {
            s.undo_sent = true;
        }
        c.undoing += 1;
        cx.streams.push(id, pending);
        cx.host.count(Stat::ClusterUndo, 1);
    }

    /// Request `id`'s context is gone: it will not be admitted; its parts
    /// not yet sent are dropped, and what recorded is undone (at the next
    /// tick: there is no host here).
    pub(in crate::worker) fn gone(&mut self, streams: &mut Streams, id: u32) {
        self.parked.retain(|(p, _)| *p != id);
        let Some(c) = self.map.get_mut(&id) else { return };
        c.answered.get_or_insert(false);
        for s in &mut c.slices {
            if s.part.is_some_and(|p| streams.drop_unsent(p)) {
                s.part = None;
                s.step = Step::NotSent;
            }
        }
    }

    /// Deadlines of requests decided across slots, at every tick: one
    /// waiting past `max_wait` is answered now (its parts go on); one that
    /// is gone has its undos sent.
    pub(in crate::worker) fn expire(&mut self, cx: &mut Cx<'_>, o: &mut Others<'_>, now_ms: u64) {
        let cutoff = now_ms.saturating_sub(self.max_wait_ms);
        let ids: Vec<u32> = self.map.keys().copied().collect();
        for id in ids {
            let late = self.map.get(&id).is_some_and(|c| c.answered.is_none() && c.arrival.local_ms <= cutoff);
            if late {
                self.answer_late(cx, o, id);
            }
            self.advance(cx, o, id, now_ms);
        }
        self.expire_parked(cx, o, now_ms);
    }
}

fn shares(a: &[Check], b: &[Check]) -> bool {
    a.iter().any(|x| b.iter().any(|y| x.key == y.key))
}

impl Crossing {
    /// In rounds: not yet placed on every slot, nor denied or answered.
    fn in_rounds(&self) -> bool {
        self.rounds.is_some() && self.release_ms.is_none() && !self.gave_up && self.answered.is_none()
    }
}
