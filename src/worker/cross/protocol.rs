//! A request whose checks hash to several Valkey Cluster slots, the pure
//! part: no call can touch keys of two slots, so it is decided in two steps
//! (docs/reliability.md, "Across slots").
//!
//! 1. **Record if it fits**, per slot group ([`groups`]): one call per slot,
//!    on its master's stream, all sent at once, each deciding its checks all
//!    or nothing as for any request (a group that admits records its cost).
//! 2. **Keep or undo.** The request is admitted only if every group
//!    admitted ([`fate`]). Otherwise every group that recorded gets an
//!    `adjust` that undoes it ([`undo`]: `to = 0`, at the time its reply
//!    gave), and the denial is answered from the windows of every group
//!    ([`merge`]), the undone ones as their undo's reply reports them: what
//!    one decision of all the checks would have said.
//!
//! The worker (`crate::worker::cross`) carries this out; the reference
//! (`crate::model::cross`) interleaves requests' steps over models of
//! several shards and checks the guarantees.

use crate::limiter::{Adjustment, Check, Decision, WindowOutcome};
use crate::store::cluster::key_slot;

/// The checks of one request that share a slot (indices into its checks,
/// in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub slot: u16,
    pub checks: Vec<usize>,
}

impl Group {
    /// This group's checks, cloned out of the request's.
    pub fn of(&self, checks: &[Check]) -> Vec<Check> {
        self.checks.iter().filter_map(|&i| checks.get(i)).cloned().collect()
    }
}

/// `checks` by slot, in the order each slot first appears.
pub fn groups(checks: &[Check]) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    for (i, c) in checks.iter().enumerate() {
        let slot = key_slot(c.key.as_bytes());
        match out.iter_mut().find(|g| g.slot == slot) {
            Some(g) => g.checks.push(i),
            None => out.push(Group { slot, checks: vec![i] }),
        }
    }
    out
}

/// Where one group's first step stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Not answered yet.
    Waiting,
    /// The store decided (and recorded, if it admitted).
    Decided(Decision),
    /// No decision; `may_have_run`: the call was sent and its reply never
    /// came whole, so it may have recorded (its time is unknown: it cannot
    /// be undone).
    Failed { may_have_run: bool },
    /// Never sent: refused as overload (queued too long), or no longer
    /// needed (another group denied first).
    NotSent,
}

impl Step {
    /// Recorded the request's cost: admitted by the store.
    pub fn recorded(&self) -> bool {
        matches!(self, Step::Decided(d) if d.allowed)
    }
}

/// What becomes of the request once no group waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Every group admitted: admitted, every record kept.
    Admit,
    /// A group denied: denied (a shadow rule's denial still lets it pass),
    /// every record undone. A known denial wins over any failure.
    Deny,
    /// A group could not be decided (failed, or not sent): `failure_mode`
    /// (or `overload`) decides; records are kept only if it admits.
    Undecided,
}

/// The request's fate from its groups' first steps; `None` while one waits.
pub fn fate(steps: &[Step]) -> Option<Fate> {
    if steps.iter().any(|s| matches!(s, Step::Decided(d) if !d.allowed)) {
        return Some(Fate::Deny);
    }
    if steps.contains(&Step::Waiting) {
        return None;
    }
    if steps.iter().all(Step::recorded) {
        Some(Fate::Admit)
    } else {
        Some(Fate::Undecided)
    }
}

/// Where a decision's record is, on its store's clock: its turn (its
/// `now` when it was not delayed).
pub fn turn_of(d: &Decision) -> u64 {
    d.now_ms.saturating_add(d.delay_ms)
}

/// The adjustments that undo what `checks` recorded (their cost each; a
/// check that only checks recorded nothing, and its adjustment changes
/// nothing: it is there for its windows in the reply).
pub fn undo(checks: &[Check]) -> Vec<Adjustment> {
    checks.iter().map(|c| Adjustment { check: c.clone(), from: c.recorded(), to: 0 }).collect()
}

/// A group's decision as it reads once its record is given back, when the
/// undo's own reply is missing: each window has its cost back (at most its
/// limit); resets stay as the decision reported them.
pub fn given_back(decision: &Decision, checks: &[Check]) -> Decision {
    let windows = decision
        .windows
        .iter()
        .map(|w| {
            let cost = checks.get(w.check).map_or(0, Check::recorded);
            WindowOutcome { remaining: w.remaining.saturating_add(cost).min(w.limit), ..*w }
        })
        .collect();
    Decision { windows, ..decision.clone() }
}

/// One decision over the groups that have one (`(group, its decision)`):
/// the indices of their checks in the request, in order, and a decision
/// over those checks (windows in check order then window order, `check`
/// counting within them), admitted only if every group admitted, at the
/// latest of their times.
pub fn merge(parts: &[(&Group, &Decision)]) -> (Vec<usize>, Decision) {
    let mut indices: Vec<usize> = parts.iter().flat_map(|(g, _)| g.checks.iter().copied()).collect();
    indices.sort_unstable();
    let mut windows = Vec::new();
    for (position, index) in indices.iter().enumerate() {
        for (group, decision) in parts {
            let Some(within) = group.checks.iter().position(|i| i == index) else { continue };
            windows.extend(
                decision.windows.iter().filter(|w| w.check == within).map(|w| WindowOutcome { check: position, ..*w }),
            );
        }
    }
    let decision = Decision {
        allowed: parts.iter().all(|(_, d)| d.allowed),
        now_ms: parts.iter().map(|(_, d)| d.now_ms).max().unwrap_or(0),
        windows,
        delay_ms: 0,
    };
    (indices, decision)
}

/// The decision a request is answered with, over the groups that have one
/// ([`merge`]): each group's first step, except that a group whose record
/// was undone (`undos`: the undo's reply) reads as its undo left it, or
/// [`given_back`] when that reply is missing.
pub fn answer(
    checks: &[Check],
    groups: &[Group],
    steps: &[Step],
    undos: &[Option<Decision>],
) -> (Vec<usize>, Decision) {
    let admitted = fate(steps) == Some(Fate::Admit);
    let mut parts: Vec<(&Group, Decision)> = Vec::new();
    for (i, (group, step)) in groups.iter().zip(steps).enumerate() {
        let Step::Decided(d) = step else { continue };
        let read = if admitted || !d.allowed {
            d.clone()
        } else {
            match undos.get(i).and_then(Option::as_ref) {
                Some(u) => Decision { allowed: true, now_ms: u.now_ms, windows: u.windows.clone(), delay_ms: 0 },
                None => given_back(d, &group.of(checks)),
            }
        };
        parts.push((group, read));
    }
    let refs: Vec<(&Group, &Decision)> = parts.iter().map(|(g, d)| (*g, d)).collect();
    merge(&refs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::model::Model;
    use crate::limiter::Algorithm;
    use crate::testing::check;

    fn checks() -> Vec<Check> {
        vec![
            check(Algorithm::SlidingLog, 0, "t:{a}:log", &[(3, 60_000), (2, 1_000)], 1),
            check(Algorithm::Gcra, 1, "t:{b}:gcra", &[(10, 60_000)], 2),
            check(Algorithm::FixedWindow, 2, "t:{a}:x:fw", &[(4, 60_000)], 1),
        ]
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn checks_are_grouped_by_slot_in_order_of_first_appearance() {
        let g = groups(&checks());
        assert_eq!(g.len(), 2);
        assert_eq!((g[0].slot, g[0].checks.clone()), (key_slot(b"a"), vec![0, 2]));
        assert_eq!((g[1].slot, g[1].checks.clone()), (key_slot(b"b"), vec![1]));
        assert_eq!(g[1].of(&checks())[0].key, "t:{b}:gcra");
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn a_known_denial_wins_and_any_group_still_waiting_delays_the_rest() {
        let yes = Step::Decided(Decision { allowed: true, now_ms: 1, windows: vec![], delay_ms: 0 });
        let no = Step::Decided(Decision { allowed: false, now_ms: 1, windows: vec![], delay_ms: 0 });
        let lost = Step::Failed { may_have_run: true };
        assert_eq!(fate(&[yes.clone(), Step::Waiting]), None);
        assert_eq!(fate(&[Step::Waiting, no.clone()]), Some(Fate::Deny));
        assert_eq!(fate(&[lost.clone(), no]), Some(Fate::Deny));
        assert_eq!(fate(&[yes.clone(), lost]), Some(Fate::Undecided));
        assert_eq!(fate(&[yes.clone(), Step::NotSent]), Some(Fate::Undecided));
        assert_eq!(fate(&[yes.clone(), yes]), Some(Fate::Admit));
    }

    /// Merged, the groups' decisions read as one decision of every check on
    /// one store holding the same buckets, admitted or denied; a denial's
    /// admitting group, given back, reads as before it.
    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn merged_groups_read_as_one_decision() {
        let all = checks();
        let g = groups(&all);
        let (mut one, mut a, mut b) = (Model::new(), Model::new(), Model::new());
        for (t, expect) in [(1_000, true), (1_001, true), (1_002, false)] {
            let whole = one.decide(&all, t);
            let da = a.decide(&g[0].of(&all), t);
            let db = b.decide(&g[1].of(&all), t);
            let (indices, merged) = merge(&[(&g[0], &da), (&g[1], &db)]);
            assert_eq!(indices, [0, 1, 2]);
            assert_eq!(merged.allowed, expect);
            if expect {
                assert_eq!(merged, whole, "at {t}");
                continue;
            }
            // The 1 s window of the log denies; gcra admitted and gives it back.
            assert!(da.denied_by().next().is_some() && db.allowed);
            let undone = b.adjust(&undo(&g[1].of(&all)), db.now_ms, t);
            let (_, merged) = merge(&[(&g[0], &da), (&g[1], &undone)]);
            let retried = Decision { windows: merged.windows.clone(), ..whole.clone() };
            assert_eq!(retried, whole, "the undo's reply is the state without the record");
            let (_, estimate) = merge(&[(&g[0], &da), (&g[1], &given_back(&db, &g[1].of(&all)))]);
            let remaining = |d: &Decision| d.windows.iter().map(|w| w.remaining).collect::<Vec<_>>();
            assert_eq!(remaining(&estimate), remaining(&whole));
        }
        // Only some groups decided: their checks alone.
        let da = a.decide(&g[0].of(&all), 2_000);
        let (indices, merged) = merge(&[(&g[0], &da)]);
        assert_eq!(indices, [0, 2]);
        assert_eq!(merged.windows.iter().map(|w| w.check).collect::<Vec<_>>(), [0, 0, 1]);
    }
}
