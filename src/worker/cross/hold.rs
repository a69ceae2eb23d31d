//! Holding a shaped request across slots (docs/shaping.md, "Across slots";
//! the pure rule: [`crate::worker::cross::rounds`]): each group's first
//! call shaped with the request's `max_delay`; once every group admitted,
//! the groups below the target give their record back and decide again
//! with a floor, until every group's turn is at the target (the request is
//! then held until its release) or the rounds run out (every record undone,
//! a `429` of its shaping rule, `shape.gave_up`).

use crate::answer::response::SERVER_TIMING;
use crate::config::Config;
use crate::limiter::Decision;
use crate::worker::calls::{Part, PARKED};
use crate::worker::cross::crossings::{Crossing, Crossings};
use crate::worker::cross::protocol::{fate, turn_of, Fate, Step};
use crate::worker::cross::rounds::{Next, Placed, Rounds};
use crate::worker::cross::Others;
use crate::worker::cx::Cx;
use crate::worker::host::{ShapeStat, Stat};
use crate::worker::request::rule;
use crate::worker::shaping::hold::refusal;
use crate::worker::shaping::{max_delay, Held, Holding};
use crate::worker::verdict::Verdict;

impl Crossing {
    /// Group `g`'s decision came at `now_ms`: placed in the rounds if it
    /// admitted.
    pub(super) fn placed(&mut self, g: usize, decision: &Decision, now_ms: u64) {
        let queued_ms = self.slices.get(g).map_or(now_ms, |s| s.queued_ms);
        if let (Some(rounds), true) = (&mut self.rounds, decision.allowed) {
            rounds.place(g, Placed::new(queued_ms, now_ms, decision.delay_ms));
        }
    }
}

impl Crossings {
    /// Request `parent` in rounds, every group admitted and none waiting:
    /// released, moved, or given up.
    pub(super) fn cross_round(&mut self, cx: &mut Cx<'_>, o: &mut Others<'_>, parent: u32, now_ms: u64) {
        let Some(c) = self.map.get_mut(&parent) else { return };
        if c.answered.is_some() || c.release_ms.is_some() || c.gave_up || fate(&c.steps()) != Some(Fate::Admit) {
            return;
        }
        let Some(rounds) = &mut c.rounds else { return };
        match rounds.round_ended() {
            Next::Release(at) => c.release_ms = Some(at),
            Next::GiveUp => {
                c.gave_up = true;
                cx.host.count(Stat::Shape(ShapeStat::GaveUp), 1);
            }
            Next::Move(groups) => {
                let shape = rounds.shape(now_ms);
                for g in groups {
                    self.move_group(cx, o, parent, g, shape, now_ms);
                }
            }
        }
    }

    /// Group `g` of request `parent` gives its record back and decides
    /// again with `shape` (`(max_delay, floor)`), both queued to where its
    /// call ran, in that order.
    fn move_group(
        &mut self,
        cx: &mut Cx<'_>,
        o: &mut Others<'_>,
        parent: u32,
        g: usize,
        shape: (u64, u64),
        now_ms: u64,
    ) {
        let Some(c) = self.map.get(&parent) else { return };
        let Some(s) = c.slices.get(g) else { return };
        let Step::Decided(d) = &s.step else { return };
        let (checks, at_ms, arrival, slot) = (s.group.of(&c.checks), turn_of(d), c.arrival, s.group.slot);
        let ran = s.ran.filter(|(shard, _)| cx.streams.has_shard(*shard));
        let (shard, asking) = match ran {
            Some(ran) => ran,
            None => (cx.streams.route_slot(slot, now_ms).unwrap_or(PARKED), false),
        };
        cx.host.count(Stat::Shape(ShapeStat::Moved), 1);
        o.holding.give_back(cx, checks, at_ms, (arrival, None), now_ms);
        let part = self.part_id(cx.streams);
        let Some(c) = self.map.get_mut(&parent) else { return };
        let pending = c.pending(g, shard, asking, Part::Decide { parent, group: g, shape: Some(shape) });
        // On the request's clock now, its deadlines counting from now.
        let pending = crate::worker::calls::Pending { arrival: pending.arrival.on_behalf(now_ms), ..pending };
        if let Some(s) = c.slices.get_mut(g) {
            s.step = Step::Waiting;
            s.part = Some(part);
            s.queued_ms = now_ms;
        }
        cx.streams.push(part, pending);
    }

    /// Request `id` gave up: a `429` of its first shaping rule.
    pub(super) fn gave_up(&mut self, cx: &mut Cx<'_>, id: u32) -> Option<Verdict> {
        let c = self.map.get(&id)?;
        let shaping = |r: usize| cx.config.rules.get(r).is_some_and(|r| r.shaping.is_some());
        let rule = c.checks.iter().map(|c| c.rule).find(|&r| shaping(r))?;
        let ruling = refusal(cx.config, &c.checks, rule)?;
        let (arrival_ms, headers) = (c.arrival.request_ms, c.headers.clone());
        Some(rule::rule(cx, ruling, arrival_ms, &headers))
    }
}

/// The shape of each group's first call of request `c` (`None`:
/// unshaped), and its rounds when it may wait. A request that may not
/// wait (a rule without `shape`, `max_delay` 0) is placed now or
/// denied on every slot that shapes, as before the rounds.
pub(super) fn cross_shapes(
    config: &Config,
    holding: &Holding,
    c: &mut Crossing,
    now_ms: u64,
) -> Vec<Option<(u64, u64)>> {
    let config = holding.active().then_some(config);
    let Some(delay) = config.and_then(|config| max_delay(config, &c.checks)) else {
        return vec![None; c.slices.len()];
    };
    if delay > 0 {
        c.rounds = Some(Rounds::new(c.slices.len(), now_ms, delay));
    }
    c.slices
        .iter()
        .map(|s| config.and_then(|config| max_delay(config, &s.group.of(&c.checks))).map(|_| (delay, 0)))
        .collect()
}

/// Request `parent` (`c`, done) is admitted with every group's turn at
/// `release_ms`, later than now: held until then, every group's record
/// given back if it goes away.
pub(super) fn hold_crossing(
    (cx, holding): (&mut Cx<'_>, &mut Holding),
    parent: u32,
    c: &Crossing,
    shadow_denied: Option<String>,
    (release_ms, now_ms): (u64, u64),
) {
    let delay_ms = release_ms - now_ms;
    cx.host.count(Stat::Shape(ShapeStat::Delayed), 1);
    cx.host.record_shape_delay(delay_ms);
    if let Ok(mut headers) = c.headers.try_borrow_mut() {
        headers.push((std::borrow::Cow::Borrowed(SERVER_TIMING), format!("tollgate-delay;dur={delay_ms}")));
    }
    let records = c
        .slices
        .iter()
        .filter_map(|s| match &s.step {
            Step::Decided(d) if d.allowed => Some((s.group.of(&c.checks), turn_of(d))),
            _ => None,
        })
        .collect();
    let held = Held { release_ms, delay_ms, shadow_denied, records, arrival: c.arrival };
    holding.hold(parent, held);
}
