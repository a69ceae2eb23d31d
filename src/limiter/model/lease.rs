//! `lease`: a rule's concurrency limit (script: `lease.lua`).
//!
//! * A bucket (a lease set) stores one lease per admitted request: its id
//!   ([`crate::limiter::Check::lease`]) and its expiry. Its one window is
//!   `(limit, ttl_ms)`: at most `limit` live leases, each expiring `ttl_ms`
//!   after it was taken or last renewed.
//! * A lease is live while `now < expiry`; housekeeping drops the others.
//! * **check**: fits when `live + 1 <= limit` (a request holds one lease,
//!   whatever its cost); otherwise `retry_ms` = until the earliest live
//!   lease expires (at least 1): a bound, as a release frees one sooner.
//! * **commit**: the lease `id → now + ttl_ms` (a lease already held under
//!   `id` gets that expiry; it still counts once).
//! * **stats**: `remaining = limit - live`; `reset_ms` = until the latest
//!   live lease expires (0 if none).
//! * **refund** (`adjust` to 0, an undo across slots): the lease `id` ends.
//! * Shaping: a lease is never waited for. A full set denies a shaped call
//!   at once, whatever `max_delay` (a lease frees when a request ends,
//!   which the store cannot foresee); its `retry_ms` is the unshaped one.
//!   Admitted at a turn `t`, the lease expires at `t + ttl_ms`.
//! * [`super::Model::lease`] ends or renews leases ([`crate::limiter::LeaseOp`]).

use super::{sat, Bucket};
use crate::limiter::{LeaseChange, Window};
use std::collections::BTreeMap;
use std::rc::Rc;

/// `earliest` of a full lease set: never (the script's shape() special-cases it).
pub const NEVER: u64 = u64::MAX;

/// Leases by id: their expiry (ms).
#[derive(Debug, Default, Clone)]
pub struct Leases {
    expiry: BTreeMap<Rc<str>, u64>,
    /// The lease id of the call at hand (the check's), set before every
    /// commit and refund, as the script reads it from the call's arguments.
    pub(super) holder: Option<Rc<str>>,
}

impl Leases {
    /// The stored leases (live or not yet dropped): `(id, expiry)`, by id.
    pub fn stored(&self) -> Vec<(String, u64)> {
        self.expiry.iter().map(|(id, &e)| (id.to_string(), e)).collect()
    }

    fn live(&self, now: u64) -> impl Iterator<Item = u64> + '_ {
        self.expiry.values().copied().filter(move |&e| e > now)
    }

    /// Ends or renews lease `id` at `now`: whether it was live.
    pub(super) fn change(&mut self, id: &str, change: LeaseChange, now: u64) -> bool {
        let live = self.expiry.get(id).is_some_and(|&e| e > now);
        match change {
            LeaseChange::End => {
                self.expiry.remove(id);
            }
            LeaseChange::Renew { ttl_ms } if live => {
                if let Some(e) = self.expiry.get_mut(id) {
                    *e = now.saturating_add(ttl_ms);
                }
            }
            LeaseChange::Renew { .. } => {
                self.expiry.remove(id);
            }
        }
        live
    }
}

impl Bucket for Leases {
    fn prepare(&mut self, _windows: &[Window], now: u64) {
        self.expiry.retain(|_, e| *e > now);
    }

    fn retry(&self, w: &Window, _cost: u64, now: u64) -> u64 {
        let live = self.live(now).count() as u64;
        if live < w.limit.get() {
            return 0;
        }
        let first = self.live(now).min().unwrap_or(now);
        sat(i128::from(first) - i128::from(now)).max(1)
    }

    fn commit(&mut self, windows: &[Window], _cost: u64, now: u64) {
        let ttl = windows.first().map_or(0, |w| w.period_ms.get());
        if let Some(id) = self.holder.clone() {
            self.expiry.insert(id, now.saturating_add(ttl));
        }
    }

    fn refund(&mut self, _windows: &[Window], _at: u64, _units: u64, _now: u64) {
        if let Some(id) = &self.holder {
            self.expiry.remove(id);
        }
    }

    fn last_turn(&self, _windows: &[Window]) -> u64 {
        0
    }

    /// `t0` if a lease is free now, else [`NEVER`].
    fn earliest(&self, w: &Window, cost: u64, t0: u64) -> u64 {
        if self.retry(w, cost, t0) == 0 {
            t0
        } else {
            NEVER
        }
    }

    fn stats(&self, w: &Window, now: u64) -> (u64, u64) {
        let live = self.live(now).count() as u64;
        let reset = self.live(now).max().map_or(0, |last| last - now);
        (w.limit.get().saturating_sub(live), reset)
    }
}
