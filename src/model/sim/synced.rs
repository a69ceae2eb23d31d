//! The synced bound (docs/sync.md, "The bound"), as the checks apply it
//! to one bucket: in any span, a window admits at most its limit plus
//!
//! * `A`: the most units admitted (by every proxy, synced or exact) in
//!   any stretch of `I + d` that ends in the span or less than `I + d`
//!   before it, where `I` is the longest sync interval and `d` the longest
//!   a flush took from its cut until its reply (resends, a paused or
//!   restarted store included);
//! * `N`: the workers that synced the bucket (each share rounds up once);
//! * the units admitted on the worker by proxies that died before they
//!   flushed them (never counted by the store);
//! * for each restart of the store without its state in the span or
//!   shortly before it, the limit again and the turns it had given ahead
//!   (requests decided before it, released after it).

use super::ledger::{cut_of, flushed_by_node, Ledger};
use super::trace::Mode;
use super::trace::Trace;
use super::world::Run;
use crate::model::store::Ran;
use crate::worker::{Answer, Decider};
use std::collections::BTreeSet;

/// The synced bound's excess for one bucket of a run.
#[derive(Debug)]
pub struct Excess {
    /// `(time, units admitted in [time, time + I + d))` per admission.
    stretches: Vec<(u64, u64)>,
    reach_ms: u64,
    workers: u64,
    lost: u64,
    /// Restarts without state: when, and the units of requests decided
    /// before it and released after it (the turns it forgot).
    wipes: Vec<(u64, u64)>,
    /// How long after a restart without state its effect lasts.
    wiped_ms: u64,
}

impl Excess {
    pub fn new(trace: &Trace, run: &Run, key: &str, admitted: &Ledger) -> Excess {
        let interval = trace.proxies.iter().filter_map(|p| p.interval_ms).max().unwrap_or(0);
        let flushes = run.store.ran.iter().filter_map(|r| match r {
            Ran::Flush { now_ms, token, .. } => cut_of(token).map(|cut| now_ms.saturating_sub(cut)),
            _ => None,
        });
        let d = flushes.max().unwrap_or(0) + run.max_delay_ms;
        let reach_ms = interval + d;
        let ledger = admitted.get(key).map(Vec::as_slice).unwrap_or_default();
        let stretches = ledger
            .iter()
            .enumerate()
            .map(|(i, &(t, _))| {
                let units = ledger.iter().skip(i).take_while(|e| e.0 < t + reach_ms).map(|e| e.1).sum();
                (t, units)
            })
            .collect();
        let mut syncers = BTreeSet::new();
        for (ran, node) in run.store.ran.iter().zip(&run.ran_by) {
            if let Ran::Flush { entries, .. } = ran {
                if entries.iter().any(|e| e.check.key == key) {
                    syncers.insert(*node);
                }
            }
        }
        let flushed = flushed_by_node(run);
        let mut lost = 0;
        for (i, n) in run.nodes.iter().enumerate().filter(|(_, n)| !n.alive) {
            let synced: u64 = n
                .host
                .judged
                .iter()
                .filter(|j| j.decider == Decider::Sync && j.answer == Answer::Allowed)
                .flat_map(|j| j.checks.iter().filter(|c| c.key == key).map(|c| c.cost.get()))
                .sum();
            lost += synced.saturating_sub(flushed.get(&(i, key.to_string())).copied().unwrap_or(0));
        }
        Excess {
            stretches,
            reach_ms,
            workers: syncers.len().max(1) as u64,
            lost,
            wipes: wipes(run, key),
            wiped_ms: wiped_ms(trace),
        }
    }

    /// The excess a rule the store decides may show: none, but for the
    /// restarts of the store without its state.
    pub fn exact(trace: &Trace, run: &Run, key: &str) -> Excess {
        Excess {
            stretches: Vec::new(),
            reach_ms: 0,
            workers: 0,
            lost: 0,
            wipes: wipes(run, key),
            wiped_ms: wiped_ms(trace),
        }
    }

    /// What a window of `limit` may admit beyond it in `[from, to]`.
    pub fn of(&self, from: u64, to: u64, limit: u64) -> u64 {
        let start = from.saturating_sub(self.reach_ms);
        let a = self.stretches.iter().filter(|(t, _)| *t > start && *t <= to).map(|s| s.1).max().unwrap_or(0);
        let wiped = self.wipes.iter().filter(|&&(w, _)| w + self.wiped_ms > from && w <= to);
        let forgot: u64 = wiped.map(|&(_, ahead)| limit + ahead).sum();
        a + self.workers + self.lost + forgot
    }

    /// The terms, for a failure's report.
    pub fn describe(&self) -> String {
        format!("I + d = {} ms, N = {}, lost = {}, wipes = {:?}", self.reach_ms, self.workers, self.lost, self.wipes)
    }
}

/// How long a restart of the store without its state shows in the
/// windows: a period, and a rule that shapes releases turns given before
/// it for `max_delay` more (gcra's checked spans reach two periods).
fn wiped_ms(trace: &Trace) -> u64 {
    let delay = match trace.rule.mode {
        Mode::Shaped { max_delay_ms, .. } => max_delay_ms,
        _ => 0,
    };
    2 * trace.rule.longest_ms() + delay
}

/// The restarts without state, each with the units of `key` it had
/// recorded at turns after it for requests that were then released.
fn wipes(run: &Run, key: &str) -> Vec<(u64, u64)> {
    let judged = run.nodes.iter().flat_map(|n| n.host.judged.iter());
    let released: Vec<(u64, u64, u64)> = judged
        .filter(|j| j.answer == Answer::Allowed && run.requests.get(&j.id).is_some_and(|r| r.released_ms.is_some()))
        .flat_map(|j| j.checks.iter().filter(|c| c.key == key).map(move |c| (j.now_ms, j.delay_ms, c.cost.get())))
        .collect();
    run.wipes
        .iter()
        .map(|&w| (w, released.iter().filter(|(at, delay, _)| *at < w && w <= at + delay).map(|e| e.2).sum()))
        .collect()
}
