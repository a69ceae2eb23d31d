//! Flushes: cut from each synced rule's table every interval, one call per
//! slot (at most [`MAX_FLUSH_KEYS`] buckets), answered into the table or
//! kept to be sent again with the same token.

use super::{HORIZON_INTERVALS, MAX_FLUSH_KEYS};
use crate::key::flush_token_key;
use crate::limiter::reply::parse_flush;
use crate::limiter::{Check, Flush, FlushEntry};
use crate::resp::Value;
use crate::store::Failure;
use crate::worker::calls::{Arrival, Call, CallId, Command, FlushCall, Pending, PARKED};
use crate::worker::cx::Cx;
use crate::worker::host::Stat;
use crate::worker::streams::discovery::Route;
use crate::worker::synced::Syncing;
use std::collections::BTreeMap;

/// A cut's buckets by hash slot (`None`: a single store).
type Groups = BTreeMap<Option<u16>, Vec<(Check, u64)>>;

/// The store call of flush `call` over `checks` (its pending's).
pub fn of(call: &FlushCall, checks: &[Check]) -> Flush {
    let entries = checks.iter().zip(&call.units).map(|(c, &units)| FlushEntry { check: c.clone(), units }).collect();
    let token_key = checks.first().map(|c| flush_token_key(&c.key, &call.series)).unwrap_or_default();
    Flush { entries, token: call.token.clone(), syncer: call.syncer.clone(), horizon_ms: call.horizon_ms, token_key }
}

/// The longest period among `checks`' windows.
fn longest(checks: &[Check]) -> u64 {
    checks.iter().flat_map(|c| c.windows.iter()).map(|w| w.period_ms.get()).max().unwrap_or(0)
}

impl Syncing {
    /// Cuts the flushes due at `now_ms` and queues them, with those to
    /// send again whose time has come.
    pub(in crate::worker) fn sync_step(&mut self, cx: &mut Cx<'_>, now_ms: u64) {
        let again = std::mem::take(&mut self.again);
        for (at_ms, id, p) in again {
            let Call::Flush(call) = &p.call else { continue };
            if now_ms >= call.cut_ms.saturating_add(longest(&p.checks)) {
                // Too old to count in any window: dropped, not sent.
                cx.host.count(Stat::SyncDropped, 1);
                match call.rule.and_then(|r| self.table(r)) {
                    Some(t) => p.checks.iter().for_each(|c| t.lost(&c.key)),
                    None => self.carried_landed(&p.checks),
                }
            } else if now_ms >= at_ms {
                self.queue_flush(cx, id, p, now_ms);
            } else {
                self.again.push((at_ms, id, p));
            }
        }
        let carried = self.take_carried(now_ms);
        if !carried.is_empty() {
            self.queue_flushes(cx, None, carried, (super::CARRY_INTERVAL_MS, false), now_ms);
        }
        for rule in 0..cx.config.rules.len() {
            let Some(table) = self.table(rule) else { continue };
            let interval_ms = table.interval_ms();
            let joins: Vec<(Check, u64)> = table.joins().into_iter().map(|c| (c, 0)).collect();
            let cut = if table.due(now_ms) { table.cut(now_ms) } else { Vec::new() };
            if !joins.is_empty() {
                self.queue_flushes(cx, Some(rule), joins, (interval_ms, true), now_ms);
            }
            if !cut.is_empty() {
                self.queue_flushes(cx, Some(rule), cut, (interval_ms, false), now_ms);
            }
        }
    }

    /// Queues the flushes of `cut` (of synced rule `rule`, or carried for the
    /// local limiter; `join`: buckets joined, nothing to record): one call
    /// per slot (one for a single store).
    fn queue_flushes(
        &mut self,
        cx: &mut Cx<'_>,
        rule: Option<usize>,
        cut: Vec<(Check, u64)>,
        (interval_ms, join): (u64, bool),
        now_ms: u64,
    ) {
        let mut groups: Groups = BTreeMap::new();
        for (check, units) in cut {
            let slot = cx.streams.route(std::slice::from_ref(&check)).1;
            groups.entry(slot).or_default().push((check, units));
        }
        for entries in groups.into_values() {
            for chunk in entries.chunks(MAX_FLUSH_KEYS) {
                let (checks, units): (Vec<Check>, Vec<u64>) = chunk.iter().cloned().unzip();
                self.seq = self.seq.wrapping_add(1);
                let seq = self.seq;
                let call = FlushCall {
                    rule,
                    units,
                    token: format!("{}-{}-{seq}", self.syncer, now_ms),
                    syncer: self.syncer.clone(),
                    series: self.series(rule),
                    horizon_ms: interval_ms.saturating_mul(HORIZON_INTERVALS),
                    cut_ms: now_ms,
                    join,
                };
                let command = Command::Flush(of(&call, &checks));
                let pending =
                    Pending::made(checks, Arrival::new(None, now_ms), (PARKED, None), command, Call::Flush(call));
                self.queue_flush(cx, CallId::Flush(seq), pending, now_ms);
            }
        }
    }

    /// Queues flush `id` for its shard (while the store is down, it fails
    /// and is kept for the next interval: its queueing is what reconnects).
    fn queue_flush(&mut self, cx: &mut Cx<'_>, id: CallId, mut pending: Pending, now_ms: u64) {
        // Routed now (again, for one sent again: the slot map may have
        // changed); a flush's buckets share a slot.
        let (route, slot) = cx.streams.route(&pending.checks);
        pending.shard = match route {
            Route::Shard(shard) => shard,
            Route::Parked | Route::Unserved(_) | Route::CrossSlot => PARKED,
        };
        pending.slot = slot;
        pending.arrival = Arrival::new(None, now_ms);
        pending.sent = false;
        cx.streams.push(id, pending);
    }

    fn flush_retry_at(&self, p: &Pending, now_ms: u64) -> u64 {
        let interval = match &p.call {
            Call::Flush(call) => call.horizon_ms / HORIZON_INTERVALS,
            _ => 0,
        };
        now_ms.saturating_add(interval.max(1))
    }

    /// The store answered flush `p` (not an error): its buckets' views.
    pub(in crate::worker) fn flush_replied(
        &mut self,
        cx: &mut Cx<'_>,
        id: CallId,
        p: Pending,
        value: &Value,
        now_ms: u64,
    ) {
        let Call::Flush(call) = &p.call else { return };
        let flush = of(call, &p.checks);
        let reply = match parse_flush(value, &flush.entries) {
            Ok(reply) => reply,
            Err(e) => return self.flush_failed(cx, id, p, &Failure::BadReply(e), now_ms),
        };
        cx.host.count(Stat::SyncFlush, 1);
        if !reply.applied {
            cx.host.count(Stat::SyncDuplicate, 1);
        }
        cx.host.count(Stat::SyncKeys, p.checks.len() as u64);
        if call.join {
            // The store counts this worker now; the bucket's read gives
            // its share.
            return;
        }
        let Some(table) = call.rule.and_then(|r| self.table(r)) else {
            return self.carried_landed(&p.checks);
        };
        for (i, check) in p.checks.iter().enumerate() {
            let windows: Vec<(u64, u64)> =
                reply.state.windows.iter().filter(|w| w.check == i).map(|w| (w.remaining, w.reset_ms)).collect();
            let (syncers, rank) = reply.syncers.get(i).copied().unwrap_or((1, 0));
            table.synced_since(&check.key, (&windows, syncers, rank), p.arrival.local_ms, now_ms);
        }
    }

    /// Flush `p` failed (its reply lost, an error, the stream down): kept,
    /// and sent again with the same token an interval later.
    pub(in crate::worker) fn flush_failed(
        &mut self,
        cx: &mut Cx<'_>,
        id: CallId,
        p: Pending,
        failure: &Failure,
        now_ms: u64,
    ) {
        cx.host.count(Stat::SyncFailure, 1);
        cx.host.count(Stat::StoreError(failure.kind()), 1);
        if matches!(&p.call, Call::Flush(call) if call.join) {
            // The bucket's read notes this worker too.
            return;
        }
        let retry = self.flush_retry_at(&p, now_ms);
        self.again.push((retry, id, p));
    }
}
