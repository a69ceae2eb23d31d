//! Shaping (docs/shaping.md): a request that does not fit now is given the
//! earliest time at which it fits every window of every check, its *turn*,
//! and is recorded at that time if the turn is within the call's
//! `max_delay_ms`; otherwise it is denied and records nothing.
//!
//! * **t0** = the latest of `now + floor_ms` (the floor: 0 but for a
//!   request held across cluster slots) and every bucket's last recorded
//!   turn ([`Bucket::last_turn`]): a request is never placed before a turn
//!   already given in one of its buckets, so requests of a key leave in the
//!   order of their turns, whichever proxy holds them.
//! * Per window, [`Bucket::earliest`]: the first time `>= t0` at which
//!   `cost` fits. Nothing is recorded after `t0`, so what a window counts
//!   only shrinks as time goes on: the request fits every window at the
//!   latest of them, the **turn**, and recording it there keeps every
//!   window within its limit in every span of time (the log: entries in
//!   `(turn - P, turn]` plus `cost` at most the limit, and no entry after
//!   the turn; gcra: the debt at the turn plus `cost × P` at most `P × L`).
//! * **allowed** when `turn - now <= max_delay_ms`: every bucket (except
//!   those that only check) records `cost` at the turn, all or nothing, and
//!   `delay_ms = turn - now`.
//! * Per window, `retry_ms = max(0, earliest - now - max_delay_ms)`: how
//!   long until the same request would be given a turn within the delay
//!   allowed (0 for every window when allowed).
//! * Per window `remaining` and `reset_ms` at `now`, from the state after
//!   the decision ([`Bucket::shaped_stats`]).
//!
//! Every algorithm shapes; the counters (`sliding_window`, `fixed_window`)
//! store their last turn, as their records do not say when they were made.

use super::{lease, sat, Bucket, Model};
use crate::limiter::{Algorithm, Check, Decision};

impl Model {
    /// Decides for all `checks` at once at `now_ms`, shaping: admitted at the
    /// turn if it is at most `max_delay_ms` away (module doc).
    pub fn decide_shaped(&mut self, checks: &[Check], max_delay_ms: u64, now_ms: u64) -> Decision {
        self.decide_floored(checks, max_delay_ms, 0, now_ms)
    }

    /// [`Model::decide_shaped`] placing the turn at `now_ms + floor_ms` or
    /// later (module doc), the limits of `checks` those in force
    /// ([`Model::decide_floored`]); recording nothing when not `commit` (a
    /// dry run, on a copy).
    pub(super) fn floored_as(
        &mut self,
        checks: &[Check],
        (max_delay_ms, floor_ms): (u64, u64),
        now_ms: u64,
        commit: bool,
    ) -> Decision {
        for check in checks {
            self.state_mut(check).bucket_mut().prepare(&check.windows, now_ms);
        }
        let mut t0 = now_ms.saturating_add(floor_ms);
        for check in checks {
            let last = self.bucket(check).map_or(0, |b| b.last_turn(&check.windows));
            t0 = t0.max(last);
        }
        let mut earliest: Vec<u64> = Vec::new();
        for check in checks {
            for w in check.windows.iter() {
                // A lease is never waited for: free now, or never (lease.rs).
                let at = if check.algorithm == Algorithm::Lease { now_ms } else { t0 };
                let e = self.bucket(check).map_or(t0, |b: &dyn Bucket| b.earliest(w, check.cost.get(), at));
                earliest.push(if e == at { t0 } else { e });
            }
        }
        let turn = earliest.iter().copied().fold(t0, u64::max);
        let allowed = turn - now_ms <= max_delay_ms;
        if allowed && commit {
            for check in checks.iter().filter(|c| !c.check_only) {
                let bucket = self.state_mut(check).bucket_mut();
                bucket.commit(&check.windows, check.cost.get(), turn);
                if turn > now_ms {
                    bucket.note_turn(turn);
                }
            }
        }
        let limit = i128::from(now_ms) + i128::from(max_delay_ms);
        let mut retries: Vec<u64> = earliest.iter().map(|&e| sat(i128::from(e) - limit)).collect();
        // A full lease set's retry is its unshaped one (lease.rs).
        let mut i = 0;
        for check in checks {
            for w in check.windows.iter() {
                if earliest.get(i) == Some(&lease::NEVER) {
                    if let (Some(r), Some(b)) = (retries.get_mut(i), self.bucket(check)) {
                        *r = b.retry(w, check.cost.get(), now_ms);
                    }
                }
                i += 1;
            }
        }
        let checks: Vec<&Check> = checks.iter().collect();
        let mut decision = self.outcome_with(&checks, allowed, retries, now_ms, &vec![true; checks.len()]);
        decision.delay_ms = if allowed { turn - now_ms } else { 0 };
        decision
    }
}

#[cfg(test)]
mod tests;
