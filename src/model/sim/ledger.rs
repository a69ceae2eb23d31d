//! What a run admitted and what the store recorded, per bucket, read from
//! the parts' own records: the workers' hosts (each request's decision,
//! with its time and delay, and whether it was released) and the store's
//! journal (every call it ran, and whose stream carried it).

use super::world::Run;
use crate::limiter::{Algorithm, Check};
use crate::model::store::Ran;
use crate::worker::{Answer, Decider};
use std::collections::BTreeMap;

/// Units at times, per bucket key: `(time, units)` sorted by time.
pub type Ledger = BTreeMap<String, Vec<(u64, u64)>>;

/// Every admitted request that reached the upstream, per bucket: its
/// units at the time they count there (a store decision's time plus its
/// delay, the turn; a decision on the worker, the worker's time). A
/// request held and then gone (or whose proxy died) never reached it.
pub fn admissions(run: &Run) -> Ledger {
    let mut out = Ledger::new();
    for n in &run.nodes {
        for j in &n.host.judged {
            let decided = matches!(j.decider, Decider::Store | Decider::Sync | Decider::Local);
            let released = run.requests.get(&j.id).is_some_and(|r| r.released_ms.is_some());
            if j.answer != Answer::Allowed || !decided || !released {
                continue;
            }
            for c in j.checks.iter().filter(|c| counts(c)) {
                out.entry(c.key.clone()).or_default().push((j.now_ms + j.delay_ms, c.cost.get()));
            }
        }
    }
    for v in out.values_mut() {
        v.sort_unstable();
    }
    out
}

/// Whether `check` records units in a window (not a check only, not a
/// lease set: leases bound what is in flight, [`super::concurrent`]).
pub fn counts(check: &Check) -> bool {
    !check.check_only && check.algorithm != Algorithm::Lease
}

/// What the store recorded per bucket, replayed from its journal in the
/// order the calls ran: a decision's units at its turn; an extra charge
/// (`adjust`, a flush) at the later of its time and the bucket's last
/// record (it never lands before a turn already given); a refund taken
/// from the record at its `at`, never more than is there.
#[derive(Debug, Default)]
pub struct Records {
    pub by_key: BTreeMap<String, BTreeMap<u64, u64>>,
}

impl Records {
    pub fn last(&self, key: &str) -> u64 {
        self.by_key.get(key).and_then(|m| m.keys().next_back().copied()).unwrap_or(0)
    }

    /// Units recorded in `key` at times in `from..=to`.
    pub fn units(&self, key: &str, from: u64, to: u64) -> u64 {
        self.by_key.get(key).map_or(0, |m| m.range(from..=to).map(|(_, u)| u).sum())
    }

    fn add(&mut self, key: &str, at: u64, units: u64) {
        if units > 0 {
            *self.by_key.entry(key.to_string()).or_default().entry(at).or_default() += units;
        }
    }

    /// Takes up to `units` from the record at `at`: what was taken.
    fn take(&mut self, key: &str, at: u64, units: u64) -> u64 {
        let Some(m) = self.by_key.get_mut(key) else { return 0 };
        let Some(there) = m.get_mut(&at) else { return 0 };
        let taken = units.min(*there);
        *there -= taken;
        if *there == 0 {
            m.remove(&at);
        }
        taken
    }

    /// An extra charge of `units` in `check`'s bucket at `now`.
    fn charge(&mut self, check: &Check, units: u64, now: u64) {
        let most = check.windows.iter().map(|w| w.limit.get()).max().unwrap_or(0);
        let units = if check.algorithm == Algorithm::SlidingLog { units.min(most) } else { units };
        let at = now.max(self.last(&check.key));
        self.add(&check.key, at, units);
    }

    /// Applies call `ran`; `before` sees the records just before a
    /// decision that admits, with the decision (the turn and checks).
    pub fn apply(&mut self, ran: &Ran, mut before: impl FnMut(&Records, u64, &[Check])) {
        match ran {
            Ran::Decide { now_ms, checks, allowed, delay_ms } => {
                if !allowed {
                    return;
                }
                let turn = now_ms + delay_ms;
                before(self, turn, checks);
                for c in checks.iter().filter(|c| counts(c)) {
                    self.add(&c.key, turn, c.cost.get());
                }
            }
            Ran::Adjust { now_ms, at_ms, adjustments } => {
                for a in adjustments.iter().filter(|a| a.check.algorithm != Algorithm::Lease) {
                    if a.to > a.from {
                        self.charge(&a.check, a.to - a.from, *now_ms);
                    } else {
                        self.take(&a.check.key, *at_ms, a.from - a.to);
                    }
                }
            }
            Ran::Flush { now_ms, entries, applied, .. } => {
                if *applied {
                    for e in entries {
                        self.charge(&e.check, e.units, *now_ms);
                    }
                }
            }
            // Leases bound what is in flight, not what is recorded per period.
            Ran::Lease { .. } => {}
        }
    }
}

/// Units per bucket as a ledger (for comparing with [`admissions`]).
pub fn records_ledger(records: &Records) -> Ledger {
    records.by_key.iter().map(|(k, m)| (k.clone(), m.iter().map(|(&t, &u)| (t, u)).collect())).collect()
}

/// Per bucket, the units flushed from each node's streams (applied).
pub fn flushed_by_node(run: &Run) -> BTreeMap<(usize, String), u64> {
    let mut out = BTreeMap::new();
    for (ran, &node) in run.store.ran.iter().zip(&run.ran_by) {
        if let Ran::Flush { entries, applied: true, .. } = ran {
            for e in entries {
                *out.entry((node, e.check.key.clone())).or_default() += e.units;
            }
        }
    }
    out
}

/// A flush's cut time, from its token (`<syncer>-<cut_ms>-<seq>`).
pub fn cut_of(token: &str) -> Option<u64> {
    token.split('-').nth(1)?.parse().ok()
}
