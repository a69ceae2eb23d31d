//! The reference of the decision across slots ([`crate::worker::cross::protocol`]):
//! several requests' steps interleaved in any order over several shards'
//! stores. A schedule picks, step after step, one of the actions possible
//! then ([`Run::available`]): a group's decision (`decide`), a group never
//! sent because another group denied first, an undo (`adjust` to 0, at the
//! turn the group's reply gave), or a give-back before a move. A request
//! whose proxy crashed between the steps never undoes. The stores are
//! [`Shard`]s: the pure models here (`cross/tests.rs` checks the guarantees
//! on them), or real Valkey servers in `tests/live/differential/cross.rs`,
//! which must give the same reply at every step.
//!
//! A shaping run ([`Run::shaping`]) sends each group's first step as a
//! shaped call that may not wait (`max_delay` 0); a holding run
//! ([`Run::holding`]) lets it wait, and carries out the rounds of
//! [`crate::worker::cross::rounds`]: groups below the target give their
//! record back and decide again with a floor, until every group's turn is
//! at the target (released) or the rounds run out (denied, every record
//! undone) (docs/shaping.md, "Across slots"). On the model's one clock a
//! call is queued at the instant its round starts: the request's first
//! step, or the reply that ended the previous round.

use crate::limiter::model::Model;
use crate::limiter::{Adjustment, Check, Decision};
use crate::worker::cross::protocol::{answer, fate, groups, turn_of, undo, Fate, Group, Step};
use crate::worker::cross::rounds::{Next, Placed, Rounds};

/// One shard's store: the limiter's calls.
pub trait Shard {
    fn decide(&mut self, checks: &[Check], now_ms: u64) -> Decision;
    /// A shaped call with a floor (`~max_delay:floor`).
    fn decide_floored(&mut self, checks: &[Check], max_delay_ms: u64, floor_ms: u64, now_ms: u64) -> Decision;
    fn adjust(&mut self, adjustments: &[Adjustment], at_ms: u64, now_ms: u64) -> Decision;
}

impl Shard for Model {
    fn decide(&mut self, checks: &[Check], now_ms: u64) -> Decision {
        Model::decide(self, checks, now_ms)
    }

    fn decide_floored(&mut self, checks: &[Check], max_delay_ms: u64, floor_ms: u64, now_ms: u64) -> Decision {
        Model::decide_floored(self, checks, max_delay_ms, floor_ms, now_ms)
    }

    fn adjust(&mut self, adjustments: &[Adjustment], at_ms: u64, now_ms: u64) -> Decision {
        Model::adjust(self, adjustments, at_ms, now_ms)
    }
}

/// One request of a run.
#[derive(Debug, Clone)]
pub struct Request {
    pub checks: Vec<Check>,
    pub groups: Vec<Group>,
    /// Each group's decision (a moving group waits again).
    pub steps: Vec<Step>,
    /// Each group's undo, once its reply came.
    pub undos: Vec<Option<Decision>>,
    /// Its proxy crashed between the steps: it never undoes.
    pub crashed: bool,
    /// A holding run: its rounds, from its first step.
    pub rounds: Option<Rounds>,
    /// Per group: its next call's queue time and `(max_delay, floor)`.
    pub calls: Vec<(u64, (u64, u64))>,
    /// Per group: the turn of a record to give back before it moves.
    pub give_back: Vec<Option<u64>>,
    /// Released at this time (every group's turn at its target).
    pub released: Option<u64>,
    /// Gave up after the last round: denied, every record undone.
    pub gave_up: bool,
}

impl Request {
    pub fn fate(&self) -> Option<Fate> {
        if self.gave_up {
            return Some(Fate::Deny);
        }
        let f = fate(&self.steps);
        if f == Some(Fate::Admit) && self.rounds.is_some() && self.released.is_none() {
            return None;
        }
        f
    }

    /// Answered: no group waits, and every undo and give-back it owes has
    /// run (or never will: crashed).
    pub fn done(&self) -> bool {
        !self.steps.contains(&Step::Waiting)
            && (self.crashed
                || self.fate() == Some(Fate::Admit)
                || (self.give_back.iter().all(Option::is_none)
                    && self.steps.iter().zip(&self.undos).all(|(s, u)| !s.recorded() || u.is_some())))
    }

    /// What the request is answered with, once done: its fate, the
    /// indices of the checks the decision covers, and the decision.
    pub fn answer(&self) -> Option<(Fate, Vec<usize>, Decision)> {
        let fate = self.fate().filter(|_| self.done())?;
        let (indices, mut decision) = answer(&self.checks, &self.groups, &self.steps, &self.undos);
        decision.allowed &= !self.gave_up;
        Some((fate, indices, decision))
    }
}

/// A step of the protocol: `(request, group)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Decide(usize, usize),
    /// The group is not sent (another group denied before it left).
    Cancel(usize, usize),
    Undo(usize, usize),
    /// A moving group gives its record back (before it decides again).
    GiveBack(usize, usize),
}

/// What happened, in order: the action, when, and the store's reply.
#[derive(Debug, Clone)]
pub struct Event {
    pub now_ms: u64,
    pub action: Action,
    pub reply: Option<Decision>,
}

/// Requests over shards; slot `s` lives on shard `s % shards`.
#[derive(Debug)]
pub struct Run<S> {
    pub shards: Vec<S>,
    pub requests: Vec<Request>,
    pub events: Vec<Event>,
    /// Every first step is a shaped call with this `max_delay`.
    pub shaped: Option<u64>,
}

impl<S: Shard> Run<S> {
    /// `requests`: each one's checks, and whether its proxy crashes
    /// between the steps.
    pub fn new(shards: Vec<S>, requests: Vec<(Vec<Check>, bool)>) -> Run<S> {
        let requests = requests
            .into_iter()
            .map(|(checks, crashed)| {
                let groups = groups(&checks);
                let n = groups.len();
                Request {
                    checks,
                    groups,
                    steps: vec![Step::Waiting; n],
                    undos: vec![None; n],
                    crashed,
                    rounds: None,
                    calls: vec![(0, (0, 0)); n],
                    give_back: vec![None; n],
                    released: None,
                    gave_up: false,
                }
            })
            .collect();
        Run { shards, requests, events: Vec::new(), shaped: None }
    }

    /// The same run with shaped first steps that may not wait.
    pub fn shaping(self) -> Run<S> {
        Run { shaped: Some(0), ..self }
    }

    /// The same run holding requests up to `max_delay_ms` (the rounds).
    pub fn holding(self, max_delay_ms: u64) -> Run<S> {
        Run { shaped: Some(max_delay_ms), ..self }
    }

    /// The shard of request `r`'s group `g`.
    pub fn shard_of(&self, r: usize, g: usize) -> usize {
        let slot = self.requests.get(r).and_then(|q| q.groups.get(g)).map_or(0, |g| usize::from(g.slot));
        slot % self.shards.len().max(1)
    }

    /// Every action possible now.
    pub fn available(&self) -> Vec<Action> {
        let mut out = Vec::new();
        for (r, q) in self.requests.iter().enumerate() {
            let denied = q.fate() == Some(Fate::Deny);
            for (g, step) in q.steps.iter().enumerate() {
                let owed = q.give_back.get(g).is_some_and(Option::is_some);
                if owed && !q.crashed {
                    out.push(Action::GiveBack(r, g));
                }
                if *step == Step::Waiting {
                    if !owed {
                        out.push(Action::Decide(r, g));
                    }
                    if denied {
                        out.push(Action::Cancel(r, g));
                    }
                } else if denied && !q.crashed && step.recorded() && q.undos.get(g) == Some(&None) {
                    out.push(Action::Undo(r, g));
                }
            }
        }
        out
    }

    /// Carries out `action` at `now_ms`.
    pub fn act(&mut self, action: Action, now_ms: u64) {
        let (Action::Decide(r, g) | Action::Cancel(r, g) | Action::Undo(r, g) | Action::GiveBack(r, g)) = action;
        let shard = self.shard_of(r, g);
        let shaped = self.shaped;
        let (Some(q), Some(store)) = (self.requests.get_mut(r), self.shards.get_mut(shard)) else { return };
        let Some(checks) = q.groups.get(g).map(|group| group.of(&q.checks)) else { return };
        if let (Some(max_delay), None) = (shaped, &q.rounds) {
            // The request's first step: every group's call is queued now.
            q.rounds = Some(Rounds::new(q.groups.len(), now_ms, max_delay));
            q.calls.iter_mut().for_each(|c| *c = (now_ms, (max_delay, 0)));
        }
        let (Some(step), Some(undone)) = (q.steps.get_mut(g), q.undos.get_mut(g)) else { return };
        let reply = match action {
            Action::Decide(..) => {
                let (queued, (max_delay, floor)) = q.calls.get(g).copied().unwrap_or_default();
                let d = match shaped {
                    Some(_) => store.decide_floored(&checks, max_delay, floor, now_ms),
                    None => store.decide(&checks, now_ms),
                };
                *step = Step::Decided(d.clone());
                if let (Some(rounds), true) = (&mut q.rounds, d.allowed) {
                    rounds.place(g, Placed::new(queued, now_ms, d.delay_ms));
                }
                Some(d)
            }
            Action::Cancel(..) => {
                *step = Step::NotSent;
                None
            }
            Action::Undo(..) => {
                let Step::Decided(d) = step else { return };
                let u = store.adjust(&undo(&checks), turn_of(d), now_ms);
                *undone = Some(u.clone());
                Some(u)
            }
            Action::GiveBack(..) => {
                let Some(at) = q.give_back.get_mut(g).and_then(Option::take) else { return };
                Some(store.adjust(&undo(&checks), at, now_ms))
            }
        };
        self.events.push(Event { now_ms, action, reply });
        if matches!(action, Action::Decide(..)) {
            self.round_ends(r, now_ms);
        }
    }

    /// Request `r` after a reply at `now_ms`: once every group admitted and
    /// none waits, its rounds say what follows (a crashed proxy never
    /// moves: it is lost, its records stay).
    fn round_ends(&mut self, r: usize, now_ms: u64) {
        let Some(q) = self.requests.get_mut(r) else { return };
        if fate(&q.steps) != Some(Fate::Admit) || q.released.is_some() {
            return;
        }
        let Some(rounds) = &mut q.rounds else { return };
        match rounds.round_ended() {
            Next::Release(at) => q.released = Some(at),
            // A crashed proxy moves nothing: its records stay.
            Next::GiveUp | Next::Move(_) if q.crashed => q.gave_up = true,
            Next::GiveUp => q.gave_up = true,
            Next::Move(groups) => {
                let shape = rounds.shape(now_ms);
                for g in groups {
                    let (Some(step), Some(owed), Some(call)) =
                        (q.steps.get_mut(g), q.give_back.get_mut(g), q.calls.get_mut(g))
                    else {
                        continue;
                    };
                    if let Step::Decided(d) = step {
                        *owed = Some(turn_of(d));
                    }
                    *step = Step::Waiting;
                    *call = (now_ms, shape);
                }
            }
        }
    }

    /// Runs `schedule` from `start_ms`: each `(gap, choice)` lets `gap` ms
    /// pass and carries out action `choice` (modulo those possible); then
    /// the first possible action, 1 ms apart, until none is left.
    pub fn run(&mut self, start_ms: u64, schedule: &[(u64, u32)]) -> u64 {
        self.run_gaps(start_ms, schedule, 1)
    }

    /// [`Run::run`], the actions after the schedule `tail_gap` ms apart.
    pub fn run_gaps(&mut self, start_ms: u64, schedule: &[(u64, u32)], tail_gap: u64) -> u64 {
        let mut now = start_ms;
        let tail = std::iter::repeat((tail_gap, 0));
        let steps = schedule.iter().map(|&(gap, choice)| (gap, choice as usize)).chain(tail);
        for (gap, choice) in steps {
            let available = self.available();
            let Some(&action) = available.get(choice % available.len().max(1)) else { break };
            now += gap;
            self.act(action, now);
        }
        now
    }
}

#[cfg(test)]
mod tests;
