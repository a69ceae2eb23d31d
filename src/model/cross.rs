//! The reference of the decision across slots ([`crate::worker::cross::protocol`]):
//! several requests' steps interleaved in any order over several shards'
//! stores. A schedule picks, step after step, one of the actions possible
//! then ([`Run::available`]): a group's first step (`decide`), a group
//! never sent because another group denied first, or an undo (`adjust` to
//! 0, at the time the group's reply gave). A request whose proxy crashed
//! between the steps never undoes. The stores are [`Shard`]s: the pure
//! models here (`cross/tests.rs` checks the guarantees on them), or real
//! Valkey servers in `tests/live/differential_cross.rs`, which must give the
//! same reply at every step. A shaping run ([`Run::shaping`]) sends each
//! group's first step as a shaped call that may not wait (`max_delay` 0),
//! as the worker does for a request of a shaping rule across slots
//! (docs/shaping.md, "Across slots").

use crate::limiter::model::Model;
use crate::limiter::{Adjustment, Check, Decision};
use crate::worker::cross::protocol::{answer, fate, groups, undo, Fate, Group, Step};

/// One shard's store: the limiter's calls.
pub trait Shard {
    fn decide(&mut self, checks: &[Check], now_ms: u64) -> Decision;
    fn decide_shaped(&mut self, checks: &[Check], max_delay_ms: u64, now_ms: u64) -> Decision;
    fn adjust(&mut self, adjustments: &[Adjustment], at_ms: u64, now_ms: u64) -> Decision;
}

impl Shard for Model {
    fn decide(&mut self, checks: &[Check], now_ms: u64) -> Decision {
        Model::decide(self, checks, now_ms)
    }

    fn decide_shaped(&mut self, checks: &[Check], max_delay_ms: u64, now_ms: u64) -> Decision {
        Model::decide_shaped(self, checks, max_delay_ms, now_ms)
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
    /// Each group's first step.
    pub steps: Vec<Step>,
    /// Each group's undo, once its reply came.
    pub undos: Vec<Option<Decision>>,
    /// Its proxy crashed between the steps: it never undoes.
    pub crashed: bool,
}

impl Request {
    pub fn fate(&self) -> Option<Fate> {
        fate(&self.steps)
    }

    /// Answered: no group waits, and every undo it owes has run (or never
    /// will: crashed).
    pub fn done(&self) -> bool {
        !self.steps.contains(&Step::Waiting)
            && (self.crashed
                || self.fate() == Some(Fate::Admit)
                || self.steps.iter().zip(&self.undos).all(|(s, u)| !s.recorded() || u.is_some()))
    }

    /// What the request is answered with, once done: its fate, the
    /// indices of the checks the decision covers, and the decision.
    pub fn answer(&self) -> Option<(Fate, Vec<usize>, Decision)> {
        let fate = self.fate().filter(|_| self.done())?;
        let (indices, decision) = answer(&self.checks, &self.groups, &self.steps, &self.undos);
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
    /// Every first step is a shaped call with `max_delay` 0.
    pub shaped: bool,
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
                Request { checks, groups, steps: vec![Step::Waiting; n], undos: vec![None; n], crashed }
            })
            .collect();
        Run { shards, requests, events: Vec::new(), shaped: false }
    }

    /// The same run with shaped first steps (`max_delay` 0).
    pub fn shaping(self) -> Run<S> {
        Run { shaped: true, ..self }
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
                if *step == Step::Waiting {
                    out.push(Action::Decide(r, g));
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
        let (Action::Decide(r, g) | Action::Cancel(r, g) | Action::Undo(r, g)) = action;
        let shard = self.shard_of(r, g);
        let (Some(q), Some(store)) = (self.requests.get_mut(r), self.shards.get_mut(shard)) else { return };
        let Some(checks) = q.groups.get(g).map(|group| group.of(&q.checks)) else { return };
        let (Some(step), Some(undone)) = (q.steps.get_mut(g), q.undos.get_mut(g)) else { return };
        let shaped = self.shaped;
        let reply = match action {
            Action::Decide(..) => {
                let d = if shaped { store.decide_shaped(&checks, 0, now_ms) } else { store.decide(&checks, now_ms) };
                *step = Step::Decided(d.clone());
                Some(d)
            }
            Action::Cancel(..) => {
                *step = Step::NotSent;
                None
            }
            Action::Undo(..) => {
                let Step::Decided(d) = step else { return };
                let u = store.adjust(&undo(&checks), d.now_ms, now_ms);
                *undone = Some(u.clone());
                Some(u)
            }
        };
        self.events.push(Event { now_ms, action, reply });
    }

    /// Runs `schedule` from `start_ms`: each `(gap, choice)` lets `gap` ms
    /// pass and carries out action `choice` (modulo those possible); then
    /// the first possible action, 1 ms apart, until none is left.
    pub fn run(&mut self, start_ms: u64, schedule: &[(u64, u32)]) -> u64 {
        let mut now = start_ms;
        let steps = schedule.iter().map(|&(gap, choice)| (gap, choice as usize)).chain(std::iter::repeat((1, 0)));
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
