//! Calls handed back by the streams ([`Landed`]), each to the room that owns
//! its kind: a request's decision to its lifecycle, a part across slots to
//! [`super::cross`], a settlement to [`super::counting`], a turn given back
//! to [`super::shaping`], a flush to [`super::synced`], leases ended or
//! renewed to [`super::leases`]. This is the only
//! place that knows every kind of call: a new kind is a [`CallId`] variant,
//! its room, and one arm in each match below.

use crate::store::{Failure, Outcome};
use crate::worker::calls::{CallId, Pending};
use crate::worker::cross::others;
use crate::worker::cx::cx;
use crate::worker::host::{Host, ShapeStat, Stat};
use crate::worker::request::fail::{self, Failing};
use crate::worker::streams::{Landed, Reply};
use crate::worker::Worker;

impl Worker {
    /// Sends what can be sent (from a request's callback no stream opens:
    /// the worker is woken instead), and hands what landed to its owners.
    pub(super) fn pump(&mut self, host: &mut dyn Host, own: bool, now_ms: u64) {
        self.streams.pump(host, own, now_ms);
        self.land(host, now_ms);
    }

    /// Deadlines, at every tick (see the module documentation).
    pub(super) fn expire(&mut self, host: &mut dyn Host, now_ms: u64) {
        if self.settlements.active() {
            // Before a stall fails their settlements: counted as expired.
            self.settlements.expire_pauses(cx!(self, host), now_ms);
        }
        self.streams.expire(host, now_ms);
        self.land(host, now_ms);
        if !self.crossings.is_empty() {
            self.crossings.expire(cx!(self, host), others!(self), now_ms);
        }
        self.streams.retire_idle(host);
    }

    /// Hands every landed call to its owner.
    pub(super) fn land(&mut self, host: &mut dyn Host, now_ms: u64) {
        while let Some(landed) = self.streams.next_landed() {
            match landed {
                Landed::Replied { id, call, reply, round_trip_ms } => {
                    self.replied(host, id, call, reply, (round_trip_ms, now_ms));
                }
                Landed::Failed { id, call, failure } => self.failed(host, id, call, &failure, now_ms),
                Landed::Shed { id, call } => self.shed(host, id, call, now_ms),
                Landed::Orphaned { id, reply } => {
                    self.holding.orphan_answered(cx!(self, host), id, reply.as_ref(), now_ms)
                }
            }
        }
    }

    /// A reply to call `id`, for its owner.
    fn replied(
        &mut self,
        host: &mut dyn Host,
        id: CallId,
        p: Pending,
        reply: Reply,
        (round_trip_ms, now_ms): (u64, u64),
    ) {
        let outcome = match reply {
            Reply::Raw(value) if matches!(id, CallId::Lease(_)) => {
                return self.leases.replied(cx!(self, host), id, p, &value, now_ms);
            }
            Reply::Raw(value) => return self.synced.flush_replied(cx!(self, host), id, p, &value, now_ms),
            Reply::Outcome(outcome) => outcome,
        };
        match id {
            CallId::Request(context) => match outcome {
                Outcome::Decided(decision) => self.decided(host, context, &p, &decision, round_trip_ms, now_ms),
                Outcome::NoScript => self.fail_call(host, id, p, &Failure::NoScriptAfterEval, now_ms),
                Outcome::Failed(failure) => self.fail_call(host, id, p, &failure, now_ms),
            },
            CallId::Part(_) => self.crossings.part_answered(cx!(self, host), others!(self), p, outcome, now_ms),
            CallId::GiveBack(_) => self.holding.given_back(cx!(self, host), id, &outcome),
            CallId::Flush(_) => {
                let failure = match outcome {
                    Outcome::Failed(failure) => failure,
                    Outcome::NoScript | Outcome::Decided(_) => Failure::NoScriptAfterEval,
                };
                self.synced.flush_failed(cx!(self, host), id, p, &failure, now_ms);
            }
            CallId::Settlement(_) => {
                if let Outcome::Failed(failure) = &outcome {
                    host.count(Stat::StoreError(failure.kind()), 1);
                }
                self.settlements.settlement_replied(cx!(self, host), &p, outcome);
            }
            CallId::Lease(_) => {
                if let Outcome::Failed(failure) = &outcome {
                    host.count(Stat::StoreError(failure.kind()), 1);
                }
                self.leases.failed(cx!(self, host), id, p, now_ms);
            }
        }
    }

    /// A call the store failed: suspected (the master or the map may have
    /// moved), then its owner's.
    fn fail_call(&mut self, host: &mut dyn Host, id: CallId, p: Pending, failure: &Failure, now_ms: u64) {
        self.streams.suspect(failure, now_ms);
        self.failed(host, id, p, failure, now_ms);
    }

    /// Call `id` failed: `failure_mode` for a request; each other kind's
    /// owner says what its failure means.
    fn failed(&mut self, host: &mut dyn Host, id: CallId, p: Pending, failure: &Failure, now_ms: u64) {
        match id {
            CallId::Request(id) => {
                self.holding.leave(id);
                let owes = (&mut self.settlements, &mut self.synced);
                let cx = cx!(self, host);
                let verdict = fail::failure(cx, owes, failure, &Failing::of(id, &p, now_ms), now_ms);
                cx.deliveries.deliver(cx.host, id, verdict);
            }
            CallId::Part(_) => self.crossings.part_failed(cx!(self, host), others!(self), &p, failure, now_ms),
            CallId::GiveBack(_) => self.holding.given_back(cx!(self, host), id, &Outcome::Failed(failure.clone())),
            CallId::Flush(_) => self.synced.flush_failed(cx!(self, host), id, p, failure, now_ms),
            CallId::Settlement(_) => {
                // A settlement: counted, never the response's failure.
                host.count(Stat::StoreError(failure.kind()), 1);
                self.settlements.settle_failed(cx!(self, host), &p);
            }
            CallId::Lease(_) => {
                host.count(Stat::StoreError(failure.kind()), 1);
                self.leases.failed(cx!(self, host), id, p, now_ms);
            }
        }
    }

    /// Call `id` waited too long on a busy store: `overload` for a request;
    /// each other kind's owner says what that means.
    fn shed(&mut self, host: &mut dyn Host, id: CallId, p: Pending, now_ms: u64) {
        match id {
            CallId::Request(id) => {
                self.holding.leave(id);
                let cx = cx!(self, host);
                let verdict = fail::overloaded(cx, &mut self.settlements, id, &p.checks);
                cx.deliveries.deliver(cx.host, id, verdict);
            }
            CallId::Part(_) => self.crossings.part_shed(cx!(self, host), &p),
            CallId::Settlement(_) => self.settlements.settle_failed(cx!(self, host), &p),
            CallId::GiveBack(_) => {
                host.count(Stat::Shape(ShapeStat::GiveBackFailed), 1);
                self.holding.returned(id);
            }
            CallId::Flush(_) => self.synced.flush_failed(cx!(self, host), id, p, &Failure::NoResponse, now_ms),
            CallId::Lease(_) => self.leases.failed(cx!(self, host), id, p, now_ms),
        }
    }
}
