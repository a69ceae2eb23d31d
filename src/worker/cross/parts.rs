//! The parts of a request decided across slots ([`crate::worker::cross::crossings`]):
//! their replies, failures and refusals, and what follows for the request
//! ([`Crossings::advance`]): groups not yet sent are dropped once one denied,
//! every group that recorded is undone when the request will not be
//! admitted (at once for a known denial, even while others wait), and the
//! request is answered once no part waits and every undo replied.
//!
//! A group whose call may have run without a reply (`unknown_outcome`)
//! cannot be undone: the time its record carries is unknown. If the
//! request is not admitted, up to its cost stays in that group's buckets
//! until their windows pass, as for a lost reply on one slot. An undo that
//! fails is counted (`cluster.undo_failed`) and logged, with the same
//! consequence; it is never sent twice (a second undo could take back
//! another request's record).

use crate::limiter::{Check, Decision};
use crate::store::{Failure, Outcome};
use crate::worker::calls::{Call, Part, Pending};
use crate::worker::cross::crossings::Crossings;
use crate::worker::cross::hold::hold_crossing;
use crate::worker::cross::protocol::{turn_of, Fate, Step};
use crate::worker::cross::Others;
use crate::worker::cx::Cx;
use crate::worker::host::Throttle;
use crate::worker::host::{Level, Stat};
use crate::worker::request::fail::{self, Failing};
use crate::worker::request::rule;
use crate::worker::verdict::Verdict;

impl Crossings {
    /// The reply to a part (`p`, no longer held).
    pub(in crate::worker) fn part_answered(
        &mut self,
        cx: &mut Cx<'_>,
        o: &mut Others<'_>,
        p: Pending,
        outcome: Outcome,
        now_ms: u64,
    ) {
        let failure = match outcome {
            Outcome::Decided(d) => Ok(d),
            Outcome::NoScript => Err(Failure::NoScriptAfterEval),
            Outcome::Failed(f) => Err(f),
        };
        let decision = match failure {
            Ok(d) => d,
            Err(f) => {
                cx.streams.suspect(&f, now_ms);
                return self.part_failed(cx, o, &p, &f, now_ms);
            }
        };
        let Call::Part(part) = p.call else { return };
        match part {
            Part::Decide { parent, group, .. } => {
                fail::learn(cx, &p, &decision, now_ms);
                let kept = self.map.get(&parent).is_some_and(|c| c.answered == Some(true));
                if kept && decision.allowed && o.settlements.active() {
                    // Admitted already (`overload: allow`): its record stays.
                    let indices = self.slice_mut(parent, group).map(|s| s.group.checks.clone());
                    let indices = indices.unwrap_or_default();
                    o.settlements.stored((&mut *cx.host, cx.config), parent, &indices, turn_of(&decision));
                }
                if let Some(c) = self.map.get_mut(&parent) {
                    c.placed(group, &decision, now_ms);
                }
                if let Some(s) = self.slice_mut(parent, group) {
                    s.step = Step::Decided(decision);
                    s.part = None;
                    s.ran = Some((p.shard, p.asking));
                }
                self.advance(cx, o, parent, now_ms);
            }
            Part::Undo { parent, group, .. } => {
                if let Some(s) = self.slice_mut(parent, group) {
                    s.undo = Some(decision);
                }
                if let Some(c) = self.map.get_mut(&parent) {
                    c.undoing = c.undoing.saturating_sub(1);
                }
                self.advance(cx, o, parent, now_ms);
            }
        }
    }

    /// Part `p` failed with `failure` (no longer held).
    pub(in crate::worker) fn part_failed(
        &mut self,
        cx: &mut Cx<'_>,
        o: &mut Others<'_>,
        p: &Pending,
        failure: &Failure,
        now_ms: u64,
    ) {
        let Call::Part(part) = p.call else { return };
        match part {
            Part::Decide { parent, group, .. } => {
                if let Some(s) = self.slice_mut(parent, group) {
                    s.step = Step::Failed { may_have_run: failure.may_have_run() };
                    s.failure = Some(failure.clone());
                    s.part = None;
                }
                self.advance(cx, o, parent, now_ms);
            }
            Part::Undo { parent, .. } => {
                self.undo_failed(cx, &p.checks, failure, now_ms);
                if let Some(c) = self.map.get_mut(&parent) {
                    c.undoing = c.undoing.saturating_sub(1);
                }
                self.advance(cx, o, parent, now_ms);
            }
        }
    }

    /// Part `p` was refused as overload before it was sent (the request
    /// moves on at the end of this tick, [`Crossings::expire`]).
    pub(in crate::worker) fn part_shed(&mut self, cx: &mut Cx<'_>, p: &Pending) {
        let Call::Part(part) = p.call else { return };
        match part {
            Part::Decide { parent, group, .. } => {
                if let Some(s) = self.slice_mut(parent, group) {
                    s.step = Step::NotSent;
                    s.part = None;
                }
                if let Some(c) = self.map.get_mut(&parent) {
                    c.shed = true;
                }
            }
            Part::Undo { parent, .. } => {
                let failure = Failure::Unavailable("the undo could not be sent in time (overload)".into());
                self.undo_failed(cx, &p.checks, &failure, p.arrival.local_ms);
                if let Some(c) = self.map.get_mut(&parent) {
                    c.undoing = c.undoing.saturating_sub(1);
                }
            }
        }
    }

    fn undo_failed(&mut self, cx: &mut Cx<'_>, checks: &[Check], failure: &Failure, now_ms: u64) {
        cx.host.count(Stat::StoreError(failure.kind()), 1);
        cx.host.count(Stat::ClusterUndoFailed, 1);
        if self.undo_log.due(now_ms) {
            let keys: Vec<&str> = checks.iter().map(|c| c.key.as_str()).collect();
            cx.host.log(
                Level::Warn,
                &format!(
                    "tollgate: an undo across cluster slots failed ({failure}): up to the request's cost stays counted in {} until its windows pass (repeats are not logged for {}s)",
                    keys.join(", "),
                    Throttle::INTERVAL_MS / 1000
                ),
            );
        }
    }

    /// What follows for request `parent` from its parts as they stand, and
    /// for the requests parked behind it.
    pub(in crate::worker) fn advance(&mut self, cx: &mut Cx<'_>, o: &mut Others<'_>, parent: u32, now_ms: u64) {
        self.advance_one(cx, o, parent, now_ms);
        if !self.parked.is_empty() {
            self.unpark(cx, o, now_ms);
        }
    }

    fn advance_one(&mut self, cx: &mut Cx<'_>, o: &mut Others<'_>, parent: u32, now_ms: u64) {
        let Some(c) = self.map.get_mut(&parent) else { return };
        if c.fate() == Some(Fate::Deny) || c.answered == Some(false) {
            // The groups still queued are not needed any more.
            for s in &mut c.slices {
                if s.part.is_some_and(|id| cx.streams.drop_unsent(id)) {
                    s.part = None;
                    s.step = Step::NotSent;
                }
            }
        }
        self.cross_round(cx, o, parent, now_ms);
        let Some(c) = self.map.get(&parent) else { return };
        let fate = c.fate();
        if fate == Some(Fate::Undecided) && c.answered.is_none() && c.verdict.is_none() {
            self.undecided(cx, o, parent, now_ms);
        }
        let Some(c) = self.map.get(&parent) else { return };
        let undo = match (c.answered, fate) {
            (Some(keep), _) => !keep,
            (None, Some(Fate::Deny)) => true,
            (None, Some(Fate::Undecided)) => matches!(c.verdict, Some(Verdict::Reply(_))),
            _ => false,
        };
        if undo {
            let owed: Vec<usize> = (0..c.slices.len())
                .filter(|&g| c.slices.get(g).is_some_and(|s| s.step.recorded() && !s.undo_sent))
                .collect();
            for g in owed {
                self.send_undo(cx, parent, g, now_ms);
            }
        }
        let Some(c) = self.map.get(&parent) else { return };
        if !c.slices.iter().any(|s| s.step == Step::Waiting) && c.undoing == 0 {
            self.close_crossing(cx, o, parent, now_ms);
        }
    }

    /// No group denied, and not every group admitted: `overload` (a group
    /// not sent in time) or `failure_mode` (the first failure that may have
    /// run, else the first) decides; its records are kept only if admitted.
    fn undecided(&mut self, cx: &mut Cx<'_>, o: &mut Others<'_>, parent: u32, now_ms: u64) {
        let Some(c) = self.map.get_mut(&parent) else { return };
        let verdict = if c.shed {
            Err(c.checks.clone())
        } else {
            let chosen = c.slices.iter().position(|s| s.failure.as_ref().is_some_and(Failure::may_have_run));
            let chosen = chosen.or_else(|| c.slices.iter().position(|s| s.failure.is_some()));
            let failure = chosen.and_then(|i| c.slices.get_mut(i)).and_then(|s| s.failure.take());
            failure.map(|f| (f, c.checks.clone())).ok_or_else(|| c.checks.clone())
        };
        let verdict = match verdict {
            Err(checks) => fail::overloaded(cx, o.settlements, parent, &checks),
            Ok((failure, checks)) => {
                let Some(c) = self.map.get(&parent) else { return };
                let (at_ms, headers) = (c.arrival.at(now_ms), c.headers.clone());
                let request = Failing { id: parent, checks: &checks, at_ms, headers: &headers };
                fail::failure(cx, (&mut *o.settlements, &mut *o.synced), &failure, &request, now_ms)
            }
        };
        if matches!(verdict, Verdict::Admit(_)) {
            self.keep_records(cx, o, parent);
        }
        if let Some(c) = self.map.get_mut(&parent) {
            c.verdict = Some(verdict);
        }
    }

    /// Request `parent` is admitted with what its groups recorded kept:
    /// noted for its settlement, if it owes one.
    fn keep_records(&mut self, cx: &mut Cx<'_>, o: &mut Others<'_>, parent: u32) {
        if !o.settlements.active() {
            return;
        }
        let Some(c) = self.map.get(&parent) else { return };
        let kept: Vec<(Vec<usize>, u64)> = c
            .slices
            .iter()
            .filter_map(|s| match &s.step {
                Step::Decided(d) if d.allowed => Some((s.group.checks.clone(), turn_of(d))),
                _ => None,
            })
            .collect();
        for (indices, at_ms) in kept {
            o.settlements.stored((&mut *cx.host, cx.config), parent, &indices, at_ms);
        }
    }

    /// Answers request `id` now, past its deadline: its denial if a group
    /// denied (undone windows given back), else as overload. Its parts go on.
    pub(in crate::worker) fn answer_late(&mut self, cx: &mut Cx<'_>, o: &mut Others<'_>, id: u32) {
        let Some(c) = self.map.get(&id) else { return };
        let (verdict, keep) = if c.fate() == Some(Fate::Deny) {
            (self.ruled(cx, o, id), false)
        } else {
            let checks = c.checks.clone();
            let verdict = fail::overloaded(cx, o.settlements, id, &checks);
            let keep = matches!(verdict, Verdict::Admit(_));
            (Some(verdict), keep)
        };
        if keep {
            self.keep_records(cx, o, id);
        }
        if let Some(c) = self.map.get_mut(&id) {
            c.answered = Some(keep);
        }
        // Answered late, it is not held: its rounds stop.
        o.holding.leave(id);
        if let Some(verdict) = verdict {
            cx.deliveries.deliver(cx.host, id, verdict);
        }
    }

    /// The ruling on request `id` from its groups' decisions (an undone
    /// group as its undo's reply, or given back), as one decision.
    fn ruled(&mut self, cx: &mut Cx<'_>, o: &mut Others<'_>, id: u32) -> Option<Verdict> {
        let c = self.map.get(&id)?;
        if c.gave_up {
            return self.gave_up(cx, id);
        }
        let (indices, decision): (Vec<usize>, Decision) = c.answer();
        let checks: Vec<Check> = indices.iter().filter_map(|&i| c.checks.get(i)).cloned().collect();
        let (arrival_ms, headers) = (c.arrival.request_ms, c.headers.clone());
        // Several calls decided it: no one round trip.
        let verdict = rule::rule_decided(cx, o.settlements, id, &checks, &decision, arrival_ms, &headers, None);
        if o.leases.active() {
            o.leases.decided(cx, id, decision.allowed);
        }
        if decision.allowed {
            // Each group recorded at its own time.
            self.keep_records(cx, o, id);
        }
        Some(verdict)
    }

    /// Request `parent` is done: counts its groups' failures and answers it
    /// (unless it was answered already).
    fn close_crossing(&mut self, cx: &mut Cx<'_>, o: &mut Others<'_>, parent: u32, now_ms: u64) {
        let verdict = match self.map.get(&parent) {
            Some(c) if c.answered.is_none() => match c.fate() {
                Some(Fate::Undecided) => None,
                _ => self.ruled(cx, o, parent),
            },
            _ => None,
        };
        let Some(c) = self.map.remove(&parent) else { return };
        for failure in c.slices.iter().filter_map(|s| s.failure.as_ref()) {
            cx.host.count(Stat::StoreError(failure.kind()), 1);
            if failure.may_have_run() {
                cx.host.count(Stat::UnknownOutcome, 1);
            }
        }
        if c.answered.is_some() {
            return;
        }
        let verdict = verdict.or_else(|| c.verdict.clone());
        if let (Some(Verdict::Admit(shadow)), Some(release_ms)) = (&verdict, c.release_ms) {
            if release_ms > now_ms {
                return hold_crossing((cx, o.holding), parent, &c, shadow.clone(), (release_ms, now_ms));
            }
        }
        o.holding.leave(parent);
        if let Some(verdict) = verdict {
            cx.deliveries.deliver(cx.host, parent, verdict);
        }
    }
}
