//! The worker's steps of shaping (the room's doc: [`super`]): counting a
//! request at its arrival, holding an admission with a delay, releasing
//! held requests at their time, and giving back the turns of those gone.

use crate::answer::response::{denied, policy_names, SERVER_TIMING};
use crate::config::Config;
use crate::limiter::{Adjustment, Check, Decision, WindowOutcome};
use crate::resp::Value;
use crate::store::{interpret_reply, Outcome};
use crate::worker::calls::{Arrival, Call, CallId, Command, Pending};
use crate::worker::cx::Cx;
use crate::worker::decision::ruling::{Action, RuleOutcome, Ruling};
use crate::worker::host::{Host, ShapeStat, Stat};
use crate::worker::shaping::{Held, Holding};
use crate::worker::streams::discovery::Route;
use crate::worker::verdict::Verdict;

impl Holding {
    /// Request `id` of `checks` arrives: counted against its shaping rules,
    /// or refused if one is full (the ruling: a 429 of that rule, retry
    /// after its `max_delay`). `live`: whether a request counted is still
    /// waiting (a stale entry is dropped).
    pub(in crate::worker) fn arrive(
        &mut self,
        (host, config): (&mut dyn Host, &Config),
        id: u32,
        checks: &[Check],
        live: impl Fn(u32) -> bool,
    ) -> Option<Ruling> {
        let rule = self.enter(id, checks, live).err()?;
        host.count(Stat::Shape(ShapeStat::Full), 1);
        refusal(config, checks, rule)
    }

    /// The store decided request `id` (`p`), and `verdict` follows: an
    /// admission with a delay is held (`None`: nothing to deliver now); any
    /// other verdict goes now, and the request is no longer counted.
    pub(in crate::worker) fn shaped(
        &mut self,
        cx: &mut Cx<'_>,
        id: u32,
        p: &Pending,
        decision: &Decision,
        verdict: Verdict,
        now_ms: u64,
    ) -> Option<Verdict> {
        let Verdict::Admit(shadow_denied) = verdict else {
            self.leave(id);
            return Some(verdict);
        };
        let delay_ms = decision.delay_ms;
        if delay_ms == 0 {
            self.leave(id);
            return Some(Verdict::Admit(shadow_denied));
        }
        cx.host.count(Stat::Shape(ShapeStat::Delayed), 1);
        cx.host.record_shape_delay(delay_ms);
        if let Ok(mut headers) = p.headers.try_borrow_mut() {
            headers.push((std::borrow::Cow::Borrowed(SERVER_TIMING), format!("tollgate-delay;dur={delay_ms}")));
        }
        let held = Held {
            release_ms: now_ms.saturating_add(delay_ms),
            delay_ms,
            shadow_denied,
            records: vec![(p.checks.clone(), decision.now_ms.saturating_add(delay_ms))],
            arrival: p.arrival,
        };
        self.hold(id, held);
        None
    }

    /// Every VM entry: held requests whose time has come go on, and the
    /// turns of gone ones are given back.
    pub(in crate::worker) fn shape_step(&mut self, cx: &mut Cx<'_>, now_ms: u64) {
        for (id, held) in self.take_due(now_ms) {
            cx.deliveries.deliver(cx.host, id, Verdict::AdmitDelayed(held.shadow_denied, held.delay_ms));
        }
        for (id, held) in self.take_given() {
            for (checks, turn_ms) in held.records {
                self.give_back(cx, checks, turn_ms, (held.arrival, Some(id)), now_ms);
            }
            self.settle_gone(id);
        }
    }

    /// The reply to gone request `id`'s call came: if the request was an
    /// orphan (gone while its shaped call was with the store) and the store
    /// admitted it, its turn is given back. `value`: the reply, `None` when
    /// it never comes (the stream was lost: its outcome is unknown, so
    /// nothing is given back, which could free another request's record).
    pub(in crate::worker) fn orphan_answered(
        &mut self,
        cx: &mut Cx<'_>,
        id: CallId,
        value: Option<&Value>,
        now_ms: u64,
    ) {
        let CallId::Request(id) = id else { return };
        let Some((checks, arrival)) = self.take_orphan(id) else { return };
        match value.map(|v| interpret_reply(v, &checks)) {
            Some(Outcome::Decided(d)) if d.allowed => {
                let turn_ms = d.now_ms.saturating_add(d.delay_ms);
                self.give_back(cx, checks, turn_ms, (arrival, Some(id)), now_ms);
            }
            Some(_) => {}
            None => cx.host.count(Stat::Shape(ShapeStat::GiveBackFailed), 1),
        }
        self.settle_gone(id);
    }

    /// Queues the `adjust` that takes a record of `checks` (one slot's)
    /// back from its turn `turn_ms`: a gone request's (`owner`, counted
    /// until it is answered), or a group's that moves across slots.
    pub(in crate::worker) fn give_back(
        &mut self,
        cx: &mut Cx<'_>,
        checks: Vec<Check>,
        turn_ms: u64,
        (arrival, owner): (Arrival, Option<u32>),
        now_ms: u64,
    ) {
        let (route, slot) = cx.streams.route(&checks);
        let Route::Shard(shard) = route else {
            cx.host.count(Stat::Shape(ShapeStat::GiveBackFailed), 1);
            return;
        };
        if cx.streams.down(shard, now_ms).is_some() {
            cx.host.count(Stat::Shape(ShapeStat::GiveBackFailed), 1);
            return;
        }
        let command = Command::Adjust { adjustments: give_back(&checks), at_ms: turn_ms };
        let pending = Pending::made(checks, arrival.on_behalf(now_ms), (shard, slot), command, Call::GiveBack);
        let id = self.next_id(owner);
        cx.streams.push(id, pending);
    }

    /// The store answered (or failed) give-back `id`: counted, and its
    /// gone request no longer is once its last is.
    pub(in crate::worker) fn given_back(&mut self, cx: &mut Cx<'_>, id: CallId, outcome: &Outcome) {
        self.returned(id);
        match outcome {
            Outcome::Decided(_) => cx.host.count(Stat::Shape(ShapeStat::GivenBack), 1),
            Outcome::Failed(failure) => {
                cx.host.count(Stat::StoreError(failure.kind()), 1);
                cx.host.count(Stat::Shape(ShapeStat::GiveBackFailed), 1);
            }
            Outcome::NoScript => cx.host.count(Stat::Shape(ShapeStat::GiveBackFailed), 1),
        }
    }
}

/// The adjustments that give back everything `checks` recorded.
pub fn give_back(checks: &[Check]) -> Vec<Adjustment> {
    checks.iter().map(|c| Adjustment { check: c.clone(), from: c.recorded(), to: 0 }).collect()
}

/// A `429` of shaping rule `rule` (one of `checks`'), retry after its
/// `max_delay`, decided without the store.
pub(in crate::worker) fn refusal(config: &Config, checks: &[Check], rule: usize) -> Option<Ruling> {
    let check = checks.iter().find(|c| c.rule == rule)?;
    let max_delay = config.rules.get(rule).and_then(|r| r.shaping).map_or(0, |s| s.max_delay_ms);
    let windows = check
        .windows
        .iter()
        .enumerate()
        .map(|(window, w)| WindowOutcome {
            overridden: false,
            check: 0,
            window,
            limit: w.limit.get(),
            period_ms: w.period_ms.get(),
            remaining: 0,
            reset_ms: max_delay,
            retry_ms: max_delay.max(1),
        })
        .collect();
    let decision = Decision { allowed: false, now_ms: 0, windows, delay_ms: 0 };
    let single = std::slice::from_ref(check);
    let names = policy_names(config, single, &decision);
    Some(Ruling {
        rules: vec![(rule, RuleOutcome::Denied)],
        denials: Vec::new(),
        action: Action::Deny(denied(config, &names, &decision)),
    })
}
