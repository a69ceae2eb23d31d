//! Shaping (`rules[].shape`, docs/shaping.md): requests the store admitted
//! at a later turn, held until then, and the bound on them.
//!
//! * A request of a rule that shapes is *counted* from its arrival until it
//!   leaves: decided without delay, failed, released at its turn, or gone.
//!   At most `shape.max_waiting` requests of a rule are counted per worker;
//!   any request of a full rule is refused (429) without a store call, as
//!   it might have to wait ([`Holding::enter`]).
//! * A request the store admitted with a delay is *held* ([`Held`]) until
//!   its release time on the proxy's clock (the reply's arrival plus the
//!   delay); every VM entry releases those due ([`hold`]), and the tick is
//!   the short one while any is held.
//! * A held request that goes away gives its turn back: an `adjust` of its
//!   whole cost at its turn, queued at the next VM entry of the worker's own.
//!   One that goes away while its call is with the store (an *orphan*)
//!   gives back the turn the reply names, if it admitted. Either way it
//!   stays counted until the give-back is answered (or fails): a worker
//!   never has more than `max_waiting` turns of a rule recorded ahead.

pub(super) mod hold;

use crate::config::Config;
use crate::limiter::Check;
use crate::worker::calls::{Arrival, CallId, Shape};
use std::collections::{BTreeSet, HashMap};

/// The longest any request of `checks` may wait: the smallest `max_delay`
/// of their rules (a rule without `shape` counts 0), or `None` when no rule
/// of theirs shapes (an unshaped call).
pub fn max_delay(config: &Config, checks: &[Check]) -> Option<u64> {
    let delays = checks.iter().map(|c| config.rules.get(c.rule).and_then(|r| r.shaping).map(|s| s.max_delay_ms));
    let mut shaped = false;
    let mut least = u64::MAX;
    for delay in delays {
        shaped |= delay.is_some();
        least = least.min(delay.unwrap_or(0));
    }
    shaped.then_some(least)
}

/// How a decision over `checks` is shaped: up to the least `max_delay` of
/// their shaping rules, or not at all.
pub fn shape(config: &Config, checks: &[Check]) -> Shape {
    max_delay(config, checks).map_or(Shape::Unshaped, Shape::Shaped)
}

/// A request admitted at a later turn, held until its release.
#[derive(Debug, Clone)]
pub struct Held {
    /// On the proxy's clock.
    pub release_ms: u64,
    pub delay_ms: u64,
    /// The shadow-mode report for the upstream, if any.
    pub shadow_denied: Option<String>,
    /// What it recorded, for giving its turn back: per slot of the cluster
    /// (one, but across slots), its checks and its turn on that store's
    /// clock (where its record is).
    pub records: Vec<(Vec<Check>, u64)>,
    pub arrival: Arrival,
}

/// One worker's counted and held requests.
#[derive(Debug, Default)]
pub struct Holding {
    /// Per rule: its `max_waiting`, 0 for a rule that does not shape.
    max_waiting: Vec<usize>,
    /// Per rule: requests of it counted now.
    waiting: Vec<usize>,
    /// The rules each counted request counts against, by context id.
    counted: HashMap<u32, Vec<usize>>,
    /// Held requests by release time, then id.
    due: BTreeSet<(u64, u32)>,
    held: HashMap<u32, Held>,
    /// Turns of gone requests to give back at the next VM entry, by id.
    given: Vec<(u32, Held)>,
    /// Gone requests whose shaped call is with the store: what it checks,
    /// for giving back the turn its reply names.
    orphans: HashMap<u32, (Vec<Check>, Arrival)>,
    /// Give-backs of gone requests on their way: whose, by give-back id.
    returning: HashMap<u32, u32>,
    /// The last give-back's id.
    next: u32,
}

impl Holding {
    pub fn new(config: &Config) -> Holding {
        let max_waiting: Vec<usize> = config.rules.iter().map(|r| r.shaping.map_or(0, |s| s.max_waiting)).collect();
        Holding { waiting: vec![0; max_waiting.len()], max_waiting, ..Holding::default() }
    }

    /// Whether some rule shapes.
    pub fn active(&self) -> bool {
        self.max_waiting.iter().any(|&m| m > 0)
    }

    /// Counts request `id` against the shaping rules of `checks`; the first
    /// rule that is full otherwise (nothing counted). When one is full,
    /// requests counted that are no longer `live` (left by a path that did
    /// not say so) are forgotten first.
    pub fn enter(&mut self, id: u32, checks: &[Check], live: impl Fn(u32) -> bool) -> Result<(), usize> {
        let rules: Vec<usize> =
            checks.iter().map(|c| c.rule).filter(|&r| self.max_waiting.get(r).is_some_and(|&m| m > 0)).collect();
        if rules.is_empty() {
            return Ok(());
        }
        if self.full(&rules).is_some() {
            let own = |c: &u32| {
                self.held.contains_key(c)
                    || self.orphans.contains_key(c)
                    || self.returning.values().any(|o| o == c)
                    || self.given.iter().any(|(g, _)| g == c)
            };
            let stale: Vec<u32> = self.counted.keys().copied().filter(|&c| !live(c) && !own(&c)).collect();
            for c in stale {
                self.leave(c);
            }
        }
        if let Some(rule) = self.full(&rules) {
            return Err(rule);
        }
        for &r in &rules {
            if let Some(w) = self.waiting.get_mut(r) {
                *w += 1;
            }
        }
        self.counted.insert(id, rules);
        Ok(())
    }

    fn full(&self, rules: &[usize]) -> Option<usize> {
        rules.iter().copied().find(|&r| self.waiting.get(r) >= self.max_waiting.get(r))
    }

    /// Request `id` is no longer counted (decided without delay, failed,
    /// released, gone).
    pub fn leave(&mut self, id: u32) {
        for r in self.counted.remove(&id).unwrap_or_default() {
            if let Some(w) = self.waiting.get_mut(r) {
                *w = w.saturating_sub(1);
            }
        }
    }

    /// Holds request `id` until `held.release_ms` (it stays counted).
    pub fn hold(&mut self, id: u32, held: Held) {
        self.due.insert((held.release_ms, id));
        self.held.insert(id, held);
    }

    /// The held requests due at `now_ms`, in release order, no longer
    /// counted.
    pub fn take_due(&mut self, now_ms: u64) -> Vec<(u32, Held)> {
        let mut out = Vec::new();
        while let Some(&(release_ms, id)) = self.due.first() {
            if release_ms > now_ms {
                break;
            }
            self.due.pop_first();
            if let Some(held) = self.held.remove(&id) {
                self.leave(id);
                out.push((id, held));
            }
        }
        out
    }

    /// Request `id` is gone: if it was held, its turn is to be given back
    /// (it stays counted until then), else it is no longer counted.
    pub fn gone(&mut self, id: u32) {
        if let Some(held) = self.held.remove(&id) {
            self.due.remove(&(held.release_ms, id));
            self.given.push((id, held));
            return;
        }
        self.leave(id);
    }

    /// Request `id` is gone while its shaped call over `checks` is with the
    /// store: it stays counted until the reply ([`Holding::take_orphan`]).
    pub fn orphan(&mut self, id: u32, checks: Vec<Check>, arrival: Arrival) {
        self.orphans.insert(id, (checks, arrival));
    }

    /// The reply to orphan `id`'s call came (or never will): its checks.
    pub fn take_orphan(&mut self, id: u32) -> Option<(Vec<Check>, Arrival)> {
        self.orphans.remove(&id)
    }

    /// A new give-back's id, for gone request `owner` if it is one: the
    /// owner stays counted until every give-back of its is answered.
    pub fn next_id(&mut self, owner: Option<u32>) -> CallId {
        self.next = self.next.wrapping_add(1);
        if let Some(owner) = owner {
            self.returning.insert(self.next, owner);
        }
        CallId::GiveBack(self.next)
    }

    /// Give-back `id` was answered or failed: its owner leaves with its
    /// last one.
    pub fn returned(&mut self, id: CallId) {
        let CallId::GiveBack(n) = id else { return };
        if let Some(owner) = self.returning.remove(&n) {
            self.settle_gone(owner);
        }
    }

    /// Gone request `owner` has no give-back on its way (none could be
    /// sent, or none was needed): it is no longer counted.
    pub fn settle_gone(&mut self, owner: u32) {
        if !self.returning.values().any(|&o| o == owner) {
            self.leave(owner);
        }
    }

    /// The turns to give back now, by request id.
    pub fn take_given(&mut self) -> Vec<(u32, Held)> {
        std::mem::take(&mut self.given)
    }

    /// Whether request `id` is held.
    pub fn holds(&self, id: u32) -> bool {
        self.held.contains_key(&id)
    }

    /// Requests held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Nothing held, no turn to give back, no orphan's reply awaited.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty() && self.given.is_empty() && self.orphans.is_empty()
    }
}

#[cfg(test)]
mod tests;
