//! A synced worker decides a bucket on its own only while the store counts
//! it among the bucket's syncers (the store noted one of its flushes of the
//! bucket less than its horizon ago), or while a flush of the bucket is on
//! its way (sent, not yet noted: the worker keeps deciding from its view
//! while the store cannot answer it, docs/sync.md "Store down"). Otherwise
//! the store has shared the bucket among the others, and the worker would
//! spend a share they were given. Not checked while the store could not
//! answer the worker (paused, down, its stream silent) or shortly after.

use super::ledger::cut_of;
use super::trace::Trace;
use super::world::Run;
use crate::model::store::Ran;
use crate::worker::Decider;
use std::collections::BTreeMap;

/// A syncer counts as active for this many of its intervals after its
/// last flush (`crate::worker`'s synced room says the same).
const HORIZON_INTERVALS: u64 = 3;

pub fn counted(trace: &Trace, run: &Run, out: &mut Vec<String>) {
    // When the store noted each flush, by token (a flush sent again is
    // noted again), and per node and bucket every time it noted one.
    let mut by_token: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let mut noted: BTreeMap<(usize, &str), Vec<u64>> = BTreeMap::new();
    for (ran, &node) in run.store.ran.iter().zip(&run.ran_by) {
        if let Ran::Flush { now_ms, token, entries, .. } = ran {
            by_token.entry(token.as_str()).or_default().push(*now_ms);
            for e in entries {
                noted.entry((node, e.check.key.as_str())).or_default().push(*now_ms);
            }
        }
    }
    // Per node and bucket, each flush sent (sent again too): when, and its
    // token.
    let mut sent: BTreeMap<(usize, &str), Vec<(u64, &str)>> = BTreeMap::new();
    for (node, at, token, keys) in &run.flushes_sent {
        for k in keys {
            sent.entry((*node, k.as_str())).or_default().push((*at, token.as_str()));
        }
    }
    for (i, n) in run.nodes.iter().enumerate() {
        let Some(interval) = trace.proxies.get(n.proxy).and_then(|p| p.interval_ms) else { continue };
        let horizon = interval * HORIZON_INTERVALS;
        let troubled = |t: u64| {
            let hit = |&&(from, _, who): &&(u64, u64, Option<usize>)| who.is_none_or(|w| w == i) && from <= t;
            run.troubles.iter().filter(hit).any(|&(_, to, _)| t < to + horizon + interval)
        };
        for j in n.host.judged.iter().filter(|j| j.decider == Decider::Sync && !troubled(j.now_ms)) {
            let t = j.now_ms;
            for c in &j.checks {
                let key = c.key.as_str();
                let by_store = noted.get(&(i, key)).is_some_and(|v| v.iter().any(|&a| a <= t && t < a + horizon));
                // The last flush cut by then (sent at once, or queued behind
                // others), or the last sent by then (perhaps again, after a
                // lost reply), had not reached the store.
                let reached =
                    |at: u64, token: &str| by_token.get(token).is_some_and(|v| v.iter().any(|&a| a >= at && a <= t));
                let flushes = sent.get(&(i, key)).map(Vec::as_slice).unwrap_or_default();
                let cuts = flushes.iter().map(|&(_, token)| (cut_of(token).unwrap_or(0), token));
                let last_cut = cuts.filter(|c| c.0 <= t).max();
                let last_sent = flushes.iter().filter(|(at, _)| *at <= t).max();
                let on_the_way = last_cut.is_some_and(|(cut, token)| !reached(cut, token))
                    || last_sent.is_some_and(|&(at, token)| !reached(at, token));
                if !by_store && !on_the_way {
                    out.push(format!("worker {i} decided {key} at {t} on a view the store no longer counts"));
                    return;
                }
            }
        }
    }
}
