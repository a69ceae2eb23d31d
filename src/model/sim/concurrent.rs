//! The concurrency bound (docs/concurrency.md, "The bound"), checked
//! against what the store held ([`super::leases::LeaseRecord`]), never
//! against the workers' own account of their leases. Per lease set:
//!
//! * **in flight ≤ N + excused** at every release: in flight are the
//!   requests released at or before `t`, not gone, on a live node; excused
//!   those whose lease was no longer live in the store at `t` for a reason
//!   the bound allows: a restart of the store without its state, or an
//!   expiry while the node was cut from the store for most of a third of
//!   the TTL before it (every renewal the worker could send in time lost);
//! * every loss of a lease while its request is in flight is such a one:
//!   an expiry without a cut that explains it, or a lease the store took
//!   out while its request went on, is a violation by itself;
//! * the store never held more than N live leases;
//! * a dead node's leases are not live one TTL after its death (plus the
//!   network's delay; plus `max_delay` for a shaped rule: a held request's
//!   lease is taken a TTL ahead of its turn);
//! * a request's lease is not live once its end could have landed (a
//!   round trip for the stream's message in flight, the network's delay
//!   and a tick after its request was gone), when the node was never cut
//!   from the store in between.

use super::leases::{first_loss, live_at, Loss};
use super::trace::{Mode, Trace, EPOCH_MS};
use super::world::Run;
use crate::key::bucket_key;
use crate::limiter::Algorithm;
use crate::worker::{Answer, Decider};
use std::collections::BTreeMap;

/// How long after a worker makes a call, on a node never cut from the
/// store, the call runs there at the latest: it waits for the stream's
/// one message in flight (`valkey.max_messages_in_flight` 1: sent before,
/// its reply at most two network delays later), then crosses the network
/// once (the network keeps each stream's order), and it may wait for the
/// next wake-up or fast tick to be written.
fn sent_within(run: &Run) -> u64 {
    3 * run.max_delay_ms + TICK_MS
}

/// The worker's fast tick (`crate::worker::host::TICK`): a call made in a
/// request's callback goes out in that entry, or at the latest at the next
/// wake-up or tick.
const TICK_MS: u64 = 5;

/// A request that reached the upstream, and its lease.
struct Held<'r> {
    id: u32,
    node: usize,
    key: String,
    lease: String,
    released: u64,
    /// When it stopped being in flight: gone, or its node died
    /// (`u64::MAX`: in flight when the run ended).
    end: u64,
    /// Gone while its node lived: when.
    gone: Option<u64>,
    history: &'r [(u64, Option<u64>)],
}

/// Milliseconds into the run, for messages.
fn ms(t: u64) -> u64 {
    t.saturating_sub(EPOCH_MS)
}

/// The concurrency bound's violations in `run` of `trace`.
pub fn check(trace: &Trace, run: &Run, out: &mut Vec<String>) {
    let Some((limit, ttl)) = trace.rule.concurrency else { return };
    let held = held(run, out);
    // Each lease lost while its request was in flight: from when it is
    // excused (explained), or a violation.
    let mut excused: BTreeMap<u32, u64> = BTreeMap::new();
    for h in &held {
        let Some(loss) = first_loss(h.history) else {
            out.push(format!(
                "admitted without a lease the store recorded: request {} released at {} (lease {})",
                h.id,
                ms(h.released),
                h.lease
            ));
            continue;
        };
        if loss.at() >= h.end {
            continue;
        }
        match explained(run, h, loss, ttl) {
            Ok(()) => {
                excused.insert(h.id, loss.at());
            }
            Err(why) => out.push(format!(
                "lease of a live request {why}: request {} on node {}, released at {}, in flight until {} (lease {})",
                h.id,
                h.node,
                ms(h.released),
                ms(h.end),
                h.lease
            )),
        }
    }
    // The key of an override: its raised limit bounds it (after an
    // override's end, admissions need fewer live leases still).
    let limit_of = |key: &str| match trace.rule.overrides {
        Some(o) if key == bucket_key("tollgate", "api", &[format!("u{}", o.key).as_bytes()], "lease") => {
            limit * o.times
        }
        _ => limit,
    };
    in_flight(&held, &limit_of, &excused, out);
    for (key, &(most, at)) in &run.leases.most_live {
        let limit = limit_of(key);
        if most as u64 > limit {
            out.push(format!("store held more live leases than the limit: {key} {most} at {} (limit {limit})", ms(at)));
        }
    }
    dead_nodes(trace, run, ttl, out);
    ended_promptly(run, &held, out);
}

/// The released requests, with their leases (a violation for one
/// admitted without a lease).
fn held<'r>(run: &'r Run, out: &mut Vec<String>) -> Vec<Held<'r>> {
    let mut decided = BTreeMap::new();
    for n in &run.nodes {
        for j in n.host.judged.iter().filter(|j| j.decider == Decider::Store && j.answer == Answer::Allowed) {
            decided.insert(j.id, j);
        }
    }
    let mut held = Vec::new();
    for (&id, r) in &run.requests {
        let Some(released) = r.released_ms else { continue };
        let lease = decided.get(&id).and_then(|j| j.checks.iter().find(|c| c.algorithm == Algorithm::Lease));
        let Some((key, lease)) = lease.and_then(|c| Some((c.key.clone(), c.lease.as_deref()?.to_string()))) else {
            out.push(format!("admitted without a lease: request {id} released at {}", ms(released)));
            continue;
        };
        let died = run.nodes.get(r.node).and_then(|n| n.died_at).unwrap_or(u64::MAX);
        let gone = r.gone_ms.filter(|&g| g < died);
        let end = gone.unwrap_or(u64::MAX).min(died);
        let history = run.leases.history.get(&(key.clone(), lease.clone())).map_or(&[][..], Vec::as_slice);
        held.push(Held { id, node: r.node, key, lease, released, end, gone, history });
    }
    held
}

/// Why a lease lost at `loss` while its request `h` was in flight is
/// allowed, or (`Err`) what happened.
fn explained(run: &Run, h: &Held<'_>, loss: Loss, ttl: u64) -> Result<(), String> {
    match loss {
        Loss::Removed(at) if run.wipes.contains(&at) => Ok(()),
        Loss::Removed(at) => Err(format!("ended while its request went on: taken out of the set at {}", ms(at))),
        Loss::Expired(at) => {
            // The worker renews a lease once it was held a sixth of the
            // TTL, at renewal steps a sixth apart (late by less than half
            // a step), and a renewal that fails at the next step: before
            // the expiry it made attempts spanning a third of the TTL, each
            // landing within `sent_within` unless the node was cut. All
            // fail only when the node was cut for that third, less that.
            let needed = (ttl / 3).saturating_sub(sent_within(run));
            let cut = run.leases.cut_within(h.node, at.saturating_sub(ttl), at);
            if cut >= needed {
                return Ok(());
            }
            Err(format!(
                "expired without a failure that explains it: at {}, its node cut from the store {cut} ms of the TTL \
                 before ({needed} ms would explain it)",
                ms(at)
            ))
        }
    }
}

/// Per lease set, at every release: the requests in flight, at most the
/// limit plus those excused then.
fn in_flight(held: &[Held<'_>], limit_of: &dyn Fn(&str) -> u64, excused: &BTreeMap<u32, u64>, out: &mut Vec<String>) {
    let mut by_key: BTreeMap<&str, Vec<&Held<'_>>> = BTreeMap::new();
    for h in held {
        by_key.entry(h.key.as_str()).or_default().push(h);
    }
    for (key, mut hs) in by_key {
        let limit = limit_of(key);
        hs.sort_by_key(|h| (h.released, h.id));
        let mut active: Vec<&Held<'_>> = Vec::new();
        let mut i = 0;
        while let Some(t) = hs.get(i).map(|h| h.released) {
            while let Some(&h) = hs.get(i).filter(|h| h.released == t) {
                active.push(h);
                i += 1;
            }
            active.retain(|h| h.end > t);
            let spared = active.iter().filter(|h| excused.get(&h.id).is_some_and(|&x| x <= t)).count() as u64;
            if active.len() as u64 > limit + spared {
                let ids: Vec<u32> = active.iter().map(|h| h.id).collect();
                out.push(format!(
                    "in flight over the concurrency limit: {key} {} at {} (limit {limit}, {spared} excused): {ids:?}",
                    active.len(),
                    ms(t)
                ));
                break;
            }
        }
    }
}

/// A dead node's leases are not live a TTL after its death, plus the
/// network's delay (a renewal on its way; the run drops them, a real
/// network may not), plus a shaped rule's `max_delay` (a lease taken for a
/// turn ahead expires a TTL after the turn).
fn dead_nodes(trace: &Trace, run: &Run, ttl: u64, out: &mut Vec<String>) {
    let ahead = match trace.rule.mode {
        Mode::Shaped { max_delay_ms, .. } => max_delay_ms,
        _ => 0,
    };
    for ((key, id), &node) in &run.leases.owner {
        let Some(died) = run.nodes.get(node).and_then(|n| n.died_at) else { continue };
        let bound = died + ttl + trace.net.max_ms + ahead;
        let history = run.leases.history.get(&(key.clone(), id.clone())).map_or(&[][..], Vec::as_slice);
        if live_at(history, bound) {
            out.push(format!(
                "lease of a dead worker outlived its TTL: {key} of node {node} (died at {}) live at {} (lease {id})",
                ms(died),
                ms(bound)
            ));
        }
    }
}

/// A request's lease is not live once its end could have landed: the
/// end is made in the entry that learns the request is gone, and runs in
/// the store [`sent_within`] that. Not checked when the node was cut from
/// the store in between, or died.
fn ended_promptly(run: &Run, held: &[Held<'_>], out: &mut Vec<String>) {
    let within = sent_within(run);
    for h in held {
        let Some(gone) = h.gone else { continue };
        let by = gone + within;
        let died = run.nodes.get(h.node).and_then(|n| n.died_at).unwrap_or(u64::MAX);
        if by > run.end_ms || died <= by || run.leases.cut_within(h.node, gone, by) > 0 {
            continue;
        }
        if live_at(h.history, by) {
            out.push(format!(
                "lease not ended promptly after its request was gone: request {} gone at {}, live at {} (lease {})",
                h.id,
                ms(gone),
                ms(by),
                h.lease
            ));
        }
    }
}

/// Released requests that held a lease (for the tally).
pub fn leased(run: &Run) -> u64 {
    let released = |id: &u32| run.requests.get(id).is_some_and(|r| r.released_ms.is_some());
    let judged = run.nodes.iter().flat_map(|n| &n.host.judged);
    let leased = judged.filter(|j| j.decider == Decider::Store && j.answer == Answer::Allowed && released(&j.id));
    leased.filter(|j| j.checks.iter().any(|c| c.algorithm == Algorithm::Lease && c.lease.is_some())).count() as u64
}
