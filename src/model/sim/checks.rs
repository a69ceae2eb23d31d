//! The checks of a finished run, each a sentence when it fails:
//!
//! * every request was answered, or its client left, or its proxy died;
//! * the admissions of every bucket keep every window within what its
//!   algorithm allows ([`super::bounds`]): exactly for rules the store
//!   decides (not counted on the response: a settlement below the
//!   reservation frees room), within the synced bound
//!   ([`super::synced::Excess`]) for synced ones;
//! * the store never admits beyond its own records (a decision's windows,
//!   at its turn, with what was recorded before it: the log and fixed
//!   windows, including rules counted on the response);
//! * shaping: a held request is never released before its turn; every
//!   recorded turn belongs to a request released or given back (beyond
//!   those whose reply or give-back was lost, or whose proxy died); and a
//!   worker never has more than `max_waiting` turns recorded ahead;
//! * per-key overrides: the key's admissions by its raised limits while the
//!   override lasts the run, else each held to the limits it was decided
//!   by (the store's records, for the log and fixed windows);
//! * concurrency limits: in flight at most N per bucket but for the
//!   leases the bound excuses, and leases gone when they should be
//!   ([`super::concurrent`]).

use super::bounds::first_over;
use super::ledger::{admissions, records_ledger, Records};
use super::synced::Excess;
use super::trace::{Mode, Trace};
use super::world::Run;
use crate::key::bucket_key;
use crate::limiter::Algorithm;
use crate::model::store::Ran;
use crate::worker::{Decider, ShapeStat, Stat};
use std::collections::BTreeMap;

/// Everything that went wrong in `run` of `trace` (empty: nothing).
pub fn check(trace: &Trace, run: &Run) -> Vec<String> {
    let mut out = Vec::new();
    answered(run, &mut out);
    let rule = &trace.rule;
    if rule.count.is_none() {
        let admitted = admissions(run);
        for (key, ledger) in &admitted {
            let excess = match rule.mode {
                Mode::Synced => Excess::new(trace, run, key, &admitted),
                _ => Excess::exact(trace, run, key),
            };
            // An override's key: by its limits while it holds the whole run;
            // one that ends mid-run changes the limits, and each admission
            // is held to the limits it was decided by (within_records).
            let Some(windows) = windows_of(trace, key) else { continue };
            for w in windows {
                if let Some(over) = first_over(rule.algorithm, w, ledger, &|from, to| excess.of(from, to, w.0)) {
                    out.push(format!("{key} {}/{}ms: {over:?} {}", w.0, w.1, excess.describe()));
                }
            }
        }
    }
    if rule.mode == Mode::Synced {
        super::views::counted(trace, run, &mut out);
    }
    if rule.mode != Mode::Synced && matches!(rule.algorithm, Algorithm::SlidingLog | Algorithm::FixedWindow) {
        within_records(trace, run, &mut out);
    }
    super::concurrent::check(trace, run, &mut out);
    if let Mode::Shaped { max_waiting, .. } = rule.mode {
        released_at_turns(run, &mut out);
        if rule.count.is_none() {
            turns_accounted(run, &mut out);
        }
        waiting_bounded(run, max_waiting, &mut out);
    }
    out
}

/// The windows bucket `key` is held to: the rule's, or for the key of an
/// override that lasts the whole run, its raised limits; `None` for the
/// key of an override that ends within the run.
fn windows_of(trace: &Trace, key: &str) -> Option<Vec<(u64, u64)>> {
    let rule = &trace.rule;
    let Some(o) = rule.overrides else { return Some(rule.windows.clone()) };
    let user = format!("u{}", o.key);
    if key != bucket_key("tollgate", "api", &[user.as_bytes()], rule.algorithm.id()) {
        return Some(rule.windows.clone());
    }
    o.until_ms.is_none().then(|| rule.windows.iter().map(|&(l, p)| (l * o.times, p)).collect())
}

fn answered(run: &Run, out: &mut Vec<String>) {
    for (id, r) in &run.requests {
        let alive = run.nodes.get(r.node).is_some_and(|n| n.alive);
        if alive && !r.gone && r.released_ms.is_none() && r.refused.is_none() {
            out.push(format!("request {id} (sent at {}) never answered", r.sent_ms));
        }
    }
}

/// The store's decisions, replayed over its records, until the store
/// restarts without its state (then a refund of a record it forgot can
/// free another's units: no bound holds, docs/reliability.md).
fn within_records(trace: &Trace, run: &Run, out: &mut Vec<String>) {
    let mut records = Records::default();
    let wiped = run.wipes.first().copied().unwrap_or(u64::MAX);
    let algorithm = trace.rule.algorithm;
    for ran in &run.store.ran {
        let now = match ran {
            Ran::Decide { now_ms, .. }
            | Ran::Adjust { now_ms, .. }
            | Ran::Flush { now_ms, .. }
            | Ran::Lease { now_ms, .. } => *now_ms,
        };
        if now >= wiped {
            return;
        }
        records.apply(ran, |r, turn, checks| {
            for c in checks.iter().filter(|c| c.algorithm != Algorithm::Lease) {
                for w in c.windows.iter() {
                    let (limit, period) = (w.limit.get(), w.period_ms.get());
                    let (from, to) = match algorithm {
                        Algorithm::FixedWindow => (turn / period * period, turn / period * period + period - 1),
                        _ => ((turn + 1).saturating_sub(period), turn),
                    };
                    let there = r.units(&c.key, from, to);
                    if there + c.cost.get() > limit {
                        out.push(format!(
                            "{} {limit}/{period}ms: admitted {} at {turn} over {there} recorded in [{from}, {to}]",
                            c.key,
                            c.cost.get()
                        ));
                    }
                }
            }
        });
    }
}

fn released_at_turns(run: &Run, out: &mut Vec<String>) {
    for n in &run.nodes {
        for j in n.host.judged.iter().filter(|j| j.decider == Decider::Store && j.delay_ms > 0) {
            let released = run.requests.get(&j.id).and_then(|r| r.released_ms);
            if released.is_some_and(|at| at < j.now_ms + j.delay_ms) {
                out.push(format!(
                    "request {} released at {released:?} before its turn {}",
                    j.id,
                    j.now_ms + j.delay_ms
                ));
            }
        }
    }
}

/// What calls may have left a turn recorded that nobody uses: replies
/// lost (the outcome unknown), give-backs lost, and requests held by a
/// proxy that died.
fn unaccounted(run: &Run) -> u64 {
    let lost: u64 = run
        .nodes
        .iter()
        .map(|n| n.host.count(Stat::UnknownOutcome) + n.host.count(Stat::Shape(ShapeStat::GiveBackFailed)))
        .sum();
    // Requests of a proxy that died before they were released or
    // refused: their call, or their give-back, may have run.
    let dead = run
        .requests
        .values()
        .filter(|r| r.released_ms.is_none() && r.refused.is_none())
        .filter(|r| run.nodes.get(r.node).is_some_and(|n| !n.alive))
        .count() as u64;
    lost + dead
}

fn turns_accounted(run: &Run, out: &mut Vec<String>) {
    let mut records = Records::default();
    for ran in &run.store.ran {
        records.apply(ran, |_, _, _| {});
    }
    let recorded = records_ledger(&records);
    let admitted = admissions(run);
    let mut extra = 0;
    for (key, rec) in &recorded {
        let adm: BTreeMap<u64, u64> =
            admitted.get(key).into_iter().flatten().fold(BTreeMap::new(), |mut m, &(t, u)| {
                *m.entry(t).or_default() += u;
                m
            });
        let rec: BTreeMap<u64, u64> = rec.iter().copied().collect();
        for (t, u) in &adm {
            let there = rec.get(t).copied().unwrap_or(0);
            if *u > there {
                out.push(format!("{key}: {u} released at {t}, {there} recorded there"));
            }
        }
        extra += rec.values().sum::<u64>().saturating_sub(adm.values().sum());
    }
    let allowed = unaccounted(run);
    if extra > allowed {
        out.push(format!("{extra} recorded for requests neither released nor given back (at most {allowed} unknown)"));
    }
}

/// Per worker, the turns of its decisions recorded ahead of each decision
/// that gives one (a gone request's give-back removes its turn).
fn waiting_bounded(run: &Run, max_waiting: u64, out: &mut Vec<String>) {
    let mut ahead: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for (ran, &node) in run.store.ran.iter().zip(&run.ran_by) {
        let turns = ahead.entry(node).or_default();
        match ran {
            Ran::Decide { now_ms, allowed: true, delay_ms, .. } if *delay_ms > 0 => {
                turns.push(now_ms + delay_ms);
                let n = turns.iter().filter(|&&s| s > *now_ms).count() as u64;
                // Turns whose reply or give-back was lost stay, uncounted.
                let lost = run.nodes.get(node).map_or(0, |n| {
                    n.host.count(Stat::UnknownOutcome) + n.host.count(Stat::Shape(ShapeStat::GiveBackFailed))
                });
                if n > max_waiting + lost {
                    out.push(format!("worker {node}: {n} turns ahead at {now_ms}, max_waiting {max_waiting}"));
                }
            }
            Ran::Adjust { at_ms, adjustments, .. } if adjustments.iter().all(|a| a.to == 0) => {
                if let Some(i) = turns.iter().position(|s| s == at_ms) {
                    turns.swap_remove(i);
                }
            }
            _ => {}
        }
    }
}
