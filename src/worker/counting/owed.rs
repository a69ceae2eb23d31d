//! What admitted requests owe their counting rules ([`Settlements`]): per
//! request ([`Owed`]) its checks, who admitted it and when the store
//! recorded each check, and where its response stands ([`Stage`]); the
//! requests whose reservation waits for their body; the paused responses by
//! deadline. How the debts are settled: [`super::settle`].

use crate::answer::response::{allowed_headers, policy_names, Header, SERVER_TIMING};
use crate::config::Config;
use crate::limiter::{Algorithm, Check, Decision};
use crate::worker::calls::{Arrival, CallId, Pending};
use crate::worker::counting::body::BodyReader;
use crate::worker::host::{CountStat, Host, ResponseHeaders, Stat};
use std::collections::{HashMap, VecDeque};

/// Who admitted a request, and so what the store recorded for it.
#[derive(Debug)]
pub(in crate::worker) enum Decided {
    /// Not admitted (yet).
    Not,
    /// The store, recording every reservation (for a request decided across
    /// slots: its slots' decisions merged).
    Store(Decision),
    /// The local limiter (`failure_mode: local`), recording them locally.
    Local(Decision),
    /// Nobody: let through unchecked.
    Unchecked,
}

#[derive(Debug)]
pub(in crate::worker) enum Stage {
    /// Waiting for the response.
    Waiting,
    /// Reading the body for the costs still unknown (`None`).
    Body { reader: BodyReader, costs: Vec<Option<u64>> },
    /// The response waits for the settlements' replies (at most
    /// `valkey.timeout`, [`Settlements`]'s pauses); `changes` per check;
    /// `waiting`: calls not answered yet; `now`: the admission's decision
    /// with the windows of the replies so far.
    Paused { changes: Vec<Option<(u64, u64)>>, waiting: usize, now: Decision },
}

/// An admitted request's debt to its counting rules.
#[derive(Debug)]
pub(in crate::worker) struct Owed {
    pub(super) checks: Vec<Check>,
    /// Per check: when the store recorded it, on its clock (`None`: the
    /// store recorded nothing for it).
    pub(super) stored: Vec<Option<u64>>,
    pub(super) arrival: Arrival,
    pub(super) headers: ResponseHeaders,
    pub(super) decided: Decided,
    pub(super) stage: Stage,
}

/// One worker's settlements.
#[derive(Debug, Default)]
pub(in crate::worker) struct Settlements {
    /// Some rule counts on the response.
    pub(super) active: bool,
    pub(super) owed: HashMap<u32, Owed>,
    /// Requests whose reservation waits for their body.
    pub(super) awaiting_body: HashMap<u32, Pending>,
    /// Paused responses by deadline (all pauses last `valkey.timeout`, so
    /// they expire in the order they began).
    pub(super) pauses: VecDeque<(u64, u32)>,
    /// How long a response is paused at most (`valkey.timeout`).
    pub(super) timeout_ms: u64,
    next: u32,
}

impl Settlements {
    pub fn new(config: &Config) -> Settlements {
        Settlements {
            active: config.rules.iter().any(|r| r.count.is_some()),
            timeout_ms: u64::try_from(config.valkey.timeout.as_millis()).unwrap_or(u64::MAX),
            ..Settlements::default()
        }
    }

    /// A fresh id for a settlement on the stream.
    pub fn next_id(&mut self) -> CallId {
        self.next = self.next.wrapping_add(1);
        CallId::Settlement(self.next)
    }

    /// Whether some rule counts on the response.
    pub fn active(&self) -> bool {
        self.active
    }

    /// Request `id` (`p`) waits for its body, which holds its reservation.
    pub fn await_body(&mut self, id: u32, p: Pending) {
        self.awaiting_body.insert(id, p);
    }

    /// Request `id`'s body arrived: the request, if it waited for it.
    pub fn body_arrived(&mut self, id: u32) -> Option<Pending> {
        self.awaiting_body.remove(&id)
    }

    /// Whether request `id` waits for its body (its reservation).
    pub fn awaits_body(&self, id: u32) -> bool {
        self.awaiting_body.contains_key(&id)
    }

    /// Request `id` (`p`) is about to be decided: remember what it will owe
    /// if admitted.
    pub(in crate::worker) fn owe(&mut self, config: &Config, id: u32, p: &Pending) {
        if !p.checks.iter().any(|c| counts(config, c)) {
            return;
        }
        let owed = Owed {
            checks: p.checks.clone(),
            stored: vec![None; p.checks.len()],
            arrival: p.arrival,
            headers: p.headers.clone(),
            decided: Decided::Not,
            stage: Stage::Waiting,
        };
        self.owed.insert(id, owed);
    }

    /// Request `id` was admitted by the store (`decision.allowed`, which
    /// recorded every check at its turn: `now_ms + delay_ms`, `now_ms` when
    /// not shaped), the local limiter or nobody
    /// (`None`, `local`: whether the local limiter).
    pub(in crate::worker) fn admitted(
        &mut self,
        host: &mut dyn Host,
        config: &Config,
        id: u32,
        decision: Option<&Decision>,
        local: bool,
    ) {
        let Some(owed) = self.owed.get_mut(&id) else { return };
        owed.decided = match (decision, local) {
            (Some(d), false) if d.allowed => Decided::Store(d.clone()),
            (Some(d), true) if d.allowed => Decided::Local(d.clone()),
            (None, _) => Decided::Unchecked,
            _ => {
                // A denial (a shadow rule's lets it pass, recording nothing).
                self.owed.remove(&id);
                return;
            }
        };
        match &owed.decided {
            Decided::Store(d) => owed.stored.fill(Some(d.now_ms.saturating_add(d.delay_ms))),
            Decided::Local(_) => {}
            _ => return,
        }
        for c in owed.checks.iter().filter(|c| counts(config, c)) {
            host.count(Stat::Count(c.rule, CountStat::Reserved), c.recorded());
        }
    }

    /// The store recorded checks `indices` of admitted request `id` at
    /// `at_ms` (its clock): one slot of a request decided across slots (see
    /// [`crate::worker::cross::protocol`]), whose record is kept.
    pub(in crate::worker) fn stored(
        &mut self,
        (host, config): (&mut dyn Host, &Config),
        id: u32,
        indices: &[usize],
        at_ms: u64,
    ) {
        let Some(owed) = self.owed.get_mut(&id) else { return };
        for &i in indices {
            let (Some(at), Some(check)) = (owed.stored.get_mut(i), owed.checks.get(i)) else { continue };
            // Reserved once: by the store's admission or the local limiter's.
            if at.is_none() && matches!(owed.decided, Decided::Unchecked) && counts(config, check) {
                host.count(Stat::Count(check.rule, CountStat::Reserved), check.recorded());
            }
            *at = Some(at_ms);
        }
    }

    /// Forgets request `id`'s context (gone).
    pub fn gone(&mut self, id: u32) {
        self.owed.remove(&id);
        self.awaiting_body.remove(&id);
    }
}

/// Whether `check`'s rule counts on the response.
/// (A lease set never does: a request holds one lease, whatever it costs.)
pub(in crate::worker) fn counts(config: &Config, check: &Check) -> bool {
    check.algorithm != Algorithm::Lease && config.rules.get(check.rule).is_some_and(|r| r.count.is_some())
}

/// The admission's headers, each window's remaining corrected by the
/// request's own change (`from` → `to`; a window empty until a charge now
/// resets within its period): what the response says when the store's
/// reply is not there.
pub(in crate::worker) fn corrected(config: &Config, owed: &Owed, changes: &[Option<(u64, u64)>]) -> Vec<Header> {
    let (Decided::Store(decision) | Decided::Local(decision)) = &owed.decided else { return Vec::new() };
    let mut now = decision.clone();
    for w in &mut now.windows {
        if let Some(Some((from, to))) = changes.get(w.check) {
            w.remaining = w.remaining.saturating_add(*from).saturating_sub(*to).min(w.limit);
            if to > from && w.reset_ms == 0 {
                w.reset_ms = w.period_ms;
            }
        }
    }
    let names = policy_names(config, &owed.checks, &now);
    with_delay(allowed_headers(config, &names, &now), owed)
}

/// `headers` for `owed`'s response, with the report of its delay
/// (`Server-Timing`, shaping) if it was held: the settlement replaces the
/// rate-limit headers only.
pub(in crate::worker) fn with_delay(mut headers: Vec<Header>, owed: &Owed) -> Vec<Header> {
    if let Ok(admitted) = owed.headers.try_borrow() {
        headers.extend(admitted.iter().filter(|(k, _)| k == SERVER_TIMING).cloned());
    }
    headers
}
