//! What admitted requests owe their counting rules ([`Settlements`]): per
//! request ([`Owed`]) its checks, who admitted it and when the store
//! recorded each check, and where its response stands ([`Stage`]); the
//! requests whose reservation waits for their body; the held responses by
//! deadline. How the debts are settled: [`super::settle`].

use crate::answer::response::{allowed_headers, policy_names, Header, SERVER_TIMING};
use crate::config::Config;
use crate::limiter::{Check, Decision};
use crate::worker::calls::{Arrival, CallId, Pending};
use crate::worker::counting::body::BodyReader;
use crate::worker::host::ResponseHeaders;
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
    /// `valkey.timeout`, [`Settlements`]'s holds); `changes` per check;
    /// `waiting`: calls not answered yet; `now`: the admission's decision
    /// with the windows of the replies so far.
    Holding { changes: Vec<Option<(u64, u64)>>, waiting: usize, now: Decision },
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
    /// Held responses by deadline (all holds last `valkey.timeout`, so
    /// they expire in the order they began).
    pub(super) holds: VecDeque<(u64, u32)>,
    next: u32,
}

impl Settlements {
    pub fn new(config: &Config) -> Settlements {
        Settlements { active: config.rules.iter().any(|r| r.count.is_some()), ..Settlements::default() }
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

    /// Whether request `id` waits for its body (its reservation).
    pub fn awaits_body(&self, id: u32) -> bool {
        self.awaiting_body.contains_key(&id)
    }

    /// Forgets request `id`'s context (gone).
    pub fn gone(&mut self, id: u32) {
        self.owed.remove(&id);
        self.awaiting_body.remove(&id);
    }
}

/// Whether `check`'s rule counts on the response.
pub(in crate::worker) fn counts(config: &Config, check: &Check) -> bool {
    config.rules.get(check.rule).is_some_and(|r| r.count.is_some())
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
