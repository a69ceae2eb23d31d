//! One request in rounds at a time per key, per worker (docs/shaping.md,
//! "Across slots"): a shaped request across slots that may wait, arriving
//! while another in rounds shares a key with it (or one parked before it
//! does), is parked until that one is placed (released, given up, denied,
//! answered, gone), then starts. Rounds run concurrently on a key place
//! its requests at or after its last slot, so room given back by moves is
//! lost; one at a time, each request's rounds see the previous one placed.
//! A parked request counts for `max_waiting`, and past `MAX_WAIT_MS` is
//! answered as overload.

use crate::limiter::Check;
use crate::worker::cross::crossings::{Crossing, Crossings};
use crate::worker::host::Host;
use crate::worker::shaping::max_delay;
use crate::worker::Worker;

fn shares(a: &[Check], b: &[Check]) -> bool {
    a.iter().any(|x| b.iter().any(|y| x.key == y.key))
}

impl Crossing {
    /// In rounds: not yet placed on every slot, nor denied or answered.
    fn in_rounds(&self) -> bool {
        self.rounds.is_some() && self.release_ms.is_none() && !self.gave_up && self.answered.is_none()
    }
}

impl Crossings {
    /// Whether a request of `checks` parked `before` others waits: one in
    /// rounds, or one parked before it, shares a key with it.
    fn busy(&self, checks: &[Check], before: usize) -> bool {
        self.map.values().any(|c| c.in_rounds() && shares(&c.checks, checks))
            || self.parked.iter().take(before).any(|(_, p)| shares(&p.checks, checks))
    }
}

impl Worker {
    /// Whether a request across slots of `checks` is parked.
    pub(super) fn parks(&self, checks: &[Check]) -> bool {
        let waits = self.holding.active() && max_delay(&self.config, checks).is_some_and(|d| d > 0);
        waits && self.crossings.busy(checks, self.crossings.parked.len())
    }

    /// Starts the parked requests no longer behind another.
    pub(super) fn unpark(&mut self, host: &mut dyn Host, now_ms: u64) {
        let mut i = 0;
        while let Some((_, p)) = self.crossings.parked.get(i) {
            if self.crossings.busy(&p.checks, i) {
                i += 1;
                continue;
            }
            let (id, p) = self.crossings.parked.remove(i);
            self.cross_begin(host, id, p, false, now_ms);
        }
    }

    /// Parked requests past `max_wait`: answered as overload.
    pub(super) fn expire_parked(&mut self, host: &mut dyn Host, now_ms: u64) {
        let cutoff = now_ms.saturating_sub(self.max_wait_ms);
        let (late, kept) =
            std::mem::take(&mut self.crossings.parked).into_iter().partition(|(_, p)| p.arrival.local_ms <= cutoff);
        self.crossings.parked = kept;
        for (id, p) in late {
            let verdict = self.overloaded(host, id, &p.checks);
            self.holding.leave(id);
            self.deliveries.deliver(host, id, verdict);
        }
        self.unpark(host, now_ms);
    }
}
