//! What a run's store held in its lease sets, as the world saw it (not as
//! the workers account for it): after every call that touched a lease set,
//! and at every restart without state, each lease's expiry as the store
//! holds it; which node's stream took each lease; and when each node was
//! cut from the store (the store paused or down, the node's stream silent
//! or lost until it opens another). [`super::concurrent`] checks the
//! concurrency bound against it.

use crate::limiter::Algorithm;
use crate::model::store::{ModelStore, Ran};
use std::collections::{BTreeMap, BTreeSet};

/// A lease's expiry over time: `(when, expiry)` each time the store
/// changed it (`None`: not in the set), in time order.
pub type History = Vec<(u64, Option<u64>)>;

/// The store's lease sets and the links to it, over a run.
#[derive(Debug, Default)]
pub struct LeaseRecord {
    /// Per `(lease set key, lease id)`, its history.
    pub history: BTreeMap<(String, String), History>,
    /// The node whose stream carried the decision that took each lease
    /// (by lease set key and id).
    pub owner: BTreeMap<(String, String), usize>,
    /// When the store could not serve a node (`None`: any node), as
    /// `(from, to)`: paused, down, or the node's stream silent or lost
    /// until the node opened another.
    pub cuts: Vec<(u64, u64, Option<usize>)>,
    /// Per lease set, the most leases it held live at once, and when.
    pub most_live: BTreeMap<String, (usize, u64)>,
    /// Each lease set as last seen: id → expiry.
    last: BTreeMap<String, BTreeMap<String, u64>>,
    /// Nodes whose stream went silent or was lost, since when.
    lost_since: BTreeMap<usize, u64>,
}

impl LeaseRecord {
    /// The store ran `store.ran[from..]` at `now`, carried by `node`'s
    /// stream: the lease sets they touched, as the store now holds them.
    pub fn ran(&mut self, store: &ModelStore, from: usize, node: usize, now: u64) {
        let mut keys = BTreeSet::new();
        for ran in store.ran.iter().skip(from) {
            match ran {
                Ran::Decide { checks, allowed, .. } => {
                    for c in checks.iter().filter(|c| c.algorithm == Algorithm::Lease) {
                        keys.insert(c.key.clone());
                        if let (true, Some(id)) = (allowed, &c.lease) {
                            self.owner.entry((c.key.clone(), id.to_string())).or_insert(node);
                        }
                    }
                }
                Ran::Adjust { adjustments, .. } => {
                    let leases = adjustments.iter().filter(|a| a.check.algorithm == Algorithm::Lease);
                    keys.extend(leases.map(|a| a.check.key.clone()));
                }
                Ran::Lease { ops, .. } => keys.extend(ops.iter().map(|op| op.key.clone())),
                Ran::Flush { .. } => {}
            }
        }
        for key in keys {
            let now_held: BTreeMap<String, u64> = store.model.leases(&key).into_iter().collect();
            self.changed(&key, now_held, now);
        }
    }

    /// The store restarted without its state at `now`: every lease is gone.
    pub fn wiped(&mut self, now: u64) {
        let keys: Vec<String> = self.last.keys().cloned().collect();
        for key in keys {
            self.changed(&key, BTreeMap::new(), now);
        }
    }

    /// Lease set `key` holds `held` at `now`: each lease that changed is
    /// noted.
    fn changed(&mut self, key: &str, held: BTreeMap<String, u64>, now: u64) {
        let before = self.last.remove(key).unwrap_or_default();
        for (id, &expiry) in &held {
            if before.get(id) != Some(&expiry) {
                self.history.entry((key.to_string(), id.clone())).or_default().push((now, Some(expiry)));
            }
        }
        for id in before.keys().filter(|id| !held.contains_key(*id)) {
            self.history.entry((key.to_string(), id.clone())).or_default().push((now, None));
        }
        let live = held.values().filter(|&&e| e > now).count();
        let most = self.most_live.entry(key.to_string()).or_insert((0, now));
        if live > most.0 {
            *most = (live, now);
        }
        self.last.insert(key.to_string(), held);
    }

    /// The store cannot serve any node in `[from, to)` (paused, down).
    pub fn store_cut(&mut self, from: u64, to: u64) {
        self.cuts.push((from, to, None));
    }

    /// `node`'s stream went silent or was lost at `now`: it is cut until
    /// it opens another.
    pub fn lost(&mut self, node: usize, now: u64) {
        self.lost_since.entry(node).or_insert(now);
    }

    /// `node` opened a stream at `now`.
    pub fn opened(&mut self, node: usize, now: u64) {
        if let Some(since) = self.lost_since.remove(&node) {
            self.cuts.push((since, now, Some(node)));
        }
    }

    /// The run ended at `end`: nodes still cut are cut until then.
    pub fn close(&mut self, end: u64) {
        for (node, since) in std::mem::take(&mut self.lost_since) {
            self.cuts.push((since, end, Some(node)));
        }
    }

    /// How long `node` was cut from the store within `[from, to]`.
    pub fn cut_within(&self, node: usize, from: u64, to: u64) -> u64 {
        let mut spans: Vec<(u64, u64)> = self
            .cuts
            .iter()
            .filter(|c| c.2.is_none_or(|n| n == node))
            .map(|c| (c.0.max(from), c.1.min(to)))
            .filter(|(a, b)| a < b)
            .collect();
        spans.sort_unstable();
        let (mut total, mut reached) = (0, from);
        for (a, b) in spans {
            let a = a.max(reached);
            if b > a {
                total += b - a;
                reached = b;
            }
        }
        total
    }
}

/// Whether a lease of `history` is live at `t` (held, expiring after `t`).
pub fn live_at(history: &[(u64, Option<u64>)], t: u64) -> bool {
    let i = history.partition_point(|(at, _)| *at <= t);
    i > 0 && history.get(i - 1).and_then(|h| h.1).is_some_and(|e| e > t)
}

/// How a lease stopped being live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// It expired at its expiry.
    Expired(u64),
    /// The store took it out of its set at this time while it was live
    /// (an end, an undo, a restart without state).
    Removed(u64),
}

impl Loss {
    pub fn at(self) -> u64 {
        match self {
            Loss::Expired(t) | Loss::Removed(t) => t,
        }
    }
}

/// When a lease of `history` first stopped being live after it was first
/// held, and how (it may expire after the run ended; `None`: never held).
pub fn first_loss(history: &[(u64, Option<u64>)]) -> Option<Loss> {
    let start = history.iter().position(|h| h.1.is_some())?;
    let mut expiry = 0;
    for (i, &(at, state)) in history.iter().enumerate().skip(start) {
        match state {
            // Live from `at` until `e` or the next change. (The store
            // writes an expiry ahead of its clock: `e <= at` is a lease
            // that was no longer live, never written.)
            Some(e) if e > at => expiry = e,
            Some(_) => return Some(Loss::Expired(expiry.min(at))),
            None if expiry > at => return Some(Loss::Removed(at)),
            None => return Some(Loss::Expired(expiry)),
        }
        let next = history.get(i + 1).map_or(u64::MAX, |h| h.0);
        if expiry <= next {
            return Some(Loss::Expired(expiry));
        }
    }
    None
}
