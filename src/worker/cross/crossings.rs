//! The requests a worker decides across cluster slots ([`Crossings`]), by
//! context id: each request's checks, one [`Slice`] per slot group (its
//! first step, the part that carries it, its undo), and what it comes to.
//! Carried out by [`super::start`] and [`super::parts`].

use crate::idhash::IdMap;
use crate::limiter::{Check, Decision};
use crate::store::Failure;
use crate::worker::calls::{Arrival, Call, CallId, Command, Part, Pending, Shape, ShardId};
use crate::worker::cross::protocol::{answer, fate, groups, undo, Fate, Group, Step};
use crate::worker::cross::rounds::Rounds;
use crate::worker::host::{ResponseHeaders, Throttle};
use crate::worker::verdict::Verdict;

/// One slot group of a request decided across slots, and where it stands.
#[derive(Debug)]
pub struct Slice {
    pub(super) group: Group,
    /// Its first step.
    pub(super) step: Step,
    /// Its first step's part while held.
    pub(super) part: Option<CallId>,
    /// Why it failed, counted when the request is done.
    pub(super) failure: Option<Failure>,
    /// Where its call ran (shard, after `ASKING`).
    pub(super) ran: Option<(ShardId, bool)>,
    /// Its undo was sent.
    pub(super) undo_sent: bool,
    /// Its undo's reply.
    pub(super) undo: Option<Decision>,
    /// When its decision was queued (proxy clock), for the rounds.
    pub(super) queued_ms: u64,
}

impl Slice {
    fn new(group: Group) -> Slice {
        Slice {
            group,
            step: Step::Waiting,
            part: None,
            failure: None,
            ran: None,
            undo_sent: false,
            undo: None,
            queued_ms: 0,
        }
    }
}

/// One request decided across slots.
#[derive(Debug)]
pub struct Crossing {
    pub(super) checks: Vec<Check>,
    /// Per slot group, in the order of [`groups`].
    pub(super) slices: Vec<Slice>,
    /// Undos awaiting their replies.
    pub(super) undoing: usize,
    /// A group was refused as overload (not sent in time).
    pub(super) shed: bool,
    /// What a request that could not be decided gets (`failure_mode`,
    /// `overload`), carried out once its undos replied.
    pub(super) verdict: Option<Verdict>,
    /// Answered before its parts were done (past its deadline, or gone):
    /// whether it was admitted.
    pub(super) answered: Option<bool>,
    pub(super) arrival: Arrival,
    pub(super) headers: ResponseHeaders,
    /// A shaped request that may wait: its rounds ([`Rounds`]).
    pub(super) rounds: Option<Rounds>,
    /// Every group's turn at the target: released at this time (proxy clock).
    pub(super) release_ms: Option<u64>,
    /// The rounds ran out: denied, every record undone.
    pub(super) gave_up: bool,
}

impl Crossing {
    /// Request `p`, its checks by slot group, none decided yet.
    pub fn new(p: Pending) -> Crossing {
        let slices = groups(&p.checks).into_iter().map(Slice::new).collect();
        Crossing {
            checks: p.checks,
            slices,
            undoing: 0,
            shed: false,
            verdict: None,
            answered: None,
            arrival: p.arrival,
            headers: p.headers,
            rounds: None,
            release_ms: None,
            gave_up: false,
        }
    }

    /// Each group's first step, in group order.
    pub fn steps(&self) -> Vec<Step> {
        self.slices.iter().map(|s| s.step.clone()).collect()
    }

    /// The request's fate from its groups' decisions ([`fate`]); a request
    /// in rounds is admitted once released, denied once it gave up.
    pub fn fate(&self) -> Option<Fate> {
        if self.gave_up {
            return Some(Fate::Deny);
        }
        let f = fate(&self.steps());
        if f == Some(Fate::Admit) && self.rounds.is_some() && self.release_ms.is_none() {
            return None;
        }
        f
    }

    /// The decision the request is answered with, over the groups that
    /// have one ([`answer`]).
    pub fn answer(&self) -> (Vec<usize>, Decision) {
        let groups: Vec<Group> = self.slices.iter().map(|s| s.group.clone()).collect();
        let undos: Vec<Option<Decision>> = self.slices.iter().map(|s| s.undo.clone()).collect();
        answer(&self.checks, &groups, &self.steps(), &undos)
    }

    /// A part's `Pending`: the checks of group `group`, for `shard`.
    pub fn pending(&self, group: usize, shard: ShardId, asking: bool, part: Part) -> Pending {
        let g = self.slices.get(group).map(|s| &s.group);
        let checks = g.map(|g| g.of(&self.checks)).unwrap_or_default();
        let command = match part {
            Part::Decide { shape: Some((max_delay, floor)), .. } => Command::Decide(Shape::Floored(max_delay, floor)),
            Part::Decide { shape: None, .. } => Command::Decide(Shape::Unshaped),
            Part::Undo { at_ms, .. } => Command::Adjust { adjustments: undo(&checks), at_ms },
        };
        Pending {
            checks,
            arrival: self.arrival,
            noscripts: 0,
            headers: self.headers.clone(),
            sent: false,
            shard,
            slot: g.map(|g| g.slot),
            redirects: 0,
            asking,
            command,
            call: Call::Part(part),
        }
    }
}

/// The worker's requests decided across slots, by context id.
#[derive(Debug)]
pub struct Crossings {
    pub(super) map: IdMap<u32, Crossing>,
    pub(super) next: u32,
    /// Logs of undos that failed.
    pub(super) undo_log: Throttle,
    /// Requests that may wait, parked behind one in rounds on a key of
    /// theirs, in arrival order ([`super::start`]).
    pub(super) parked: Vec<(u32, Pending)>,
    /// How long a request waits at most (`MAX_WAIT_MS`, or twice
    /// `valkey.timeout`).
    pub(super) max_wait_ms: u64,
}
