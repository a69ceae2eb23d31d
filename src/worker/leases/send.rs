//! The `lease` calls: ends and renewals, one call per shard and slot, and
//! what their replies say.

use super::{is_lost, Carried, Leases, Retry};
use crate::limiter::reply::parse_lease;
use crate::limiter::{Check, LeaseChange, LeaseOp};
use crate::resp::Value;
use crate::worker::calls::{Arrival, Call, CallId, Command, Pending, ShardId, PARKED};
use crate::worker::cx::Cx;
use crate::worker::host::{LeaseStat, Stat};
use crate::worker::streams::discovery::Route as Routed;

/// Where a call goes: its shard and, in cluster mode, its slot.
type Route = (ShardId, Option<u16>);

/// One lease's op: its check, what happens to it, whether the store said
/// it took it.
type Op = (Check, LeaseChange, bool);

impl Leases {
    /// Ends the leases of `checks` (one request's) in the store;
    /// `confirmed`: the store said it took them.
    pub(super) fn end(&mut self, cx: &mut Cx<'_>, checks: Vec<Check>, confirmed: bool, now_ms: u64) {
        let ops = checks.into_iter().map(|c| (c, LeaseChange::End, confirmed)).collect();
        self.send(cx, ops, now_ms);
    }

    /// Renews the leases due (held a sixth of their TTL since they were
    /// taken or renewed), and sends failed ends again: at most once per
    /// interval, one call per shard and slot for all of them.
    pub fn renew_step(&mut self, cx: &mut Cx<'_>, now_ms: u64) {
        if now_ms < self.next_renewal_ms {
            return;
        }
        self.next_renewal_ms = now_ms.saturating_add(self.interval_ms);
        let mut renewals = Vec::new();
        for lease in self.by_request.values_mut().filter(|l| l.to_store) {
            let ttl = lease.checks.iter().map(ttl_ms).min().unwrap_or(0);
            if now_ms.saturating_sub(lease.renewed_ms) >= ttl / 6 {
                lease.renewed_ms = now_ms;
                let confirmed = lease.confirmed;
                let renew = |c: &Check| (c.clone(), LeaseChange::Renew { ttl_ms: ttl_ms(c) }, confirmed);
                let held = lease.checks.iter().enumerate().filter(|(i, _)| !is_lost(lease.lost, *i));
                renewals.extend(held.map(|(_, c)| renew(c)));
            }
        }
        if !renewals.is_empty() {
            self.send(cx, renewals, now_ms);
        }
        let retries = std::mem::take(&mut self.retries);
        let ends: Vec<_> = retries
            .into_iter()
            .filter(|r| now_ms < r.until_ms)
            .map(|r| (r.check, LeaseChange::End, r.confirmed))
            .collect();
        if !ends.is_empty() {
            self.send(cx, ends, now_ms);
        }
    }

    /// Queues `ops` (each with whether its lease is confirmed), one call
    /// per shard and slot.
    fn send(&mut self, cx: &mut Cx<'_>, ops: Vec<Op>, now_ms: u64) {
        let mut groups: Vec<(Route, Vec<Op>)> = Vec::new();
        for (check, change, confirmed) in ops {
            let (route, slot) = cx.streams.route(std::slice::from_ref(&check));
            let shard = match route {
                Routed::Shard(shard) if cx.streams.down(shard, now_ms).is_none() => shard,
                Routed::Parked => PARKED,
                Routed::Shard(_) | Routed::Unserved(_) | Routed::CrossSlot => {
                    self.unsent(cx, (check, change, confirmed), now_ms);
                    continue;
                }
            };
            match groups.iter_mut().find(|(to, _)| *to == (shard, slot)) {
                Some((_, group)) => group.push((check, change, confirmed)),
                None => groups.push(((shard, slot), vec![(check, change, confirmed)])),
            }
        }
        for ((shard, slot), group) in groups {
            let ops = group.iter().map(|(c, change, _)| op(c, *change)).collect();
            let confirmed = group.iter().map(|o| o.2).collect();
            let carried = match group.first() {
                Some((_, LeaseChange::End, _)) => Carried::Ends { confirmed },
                _ => Carried::Renewals { confirmed },
            };
            let checks = group.into_iter().map(|(c, _, _)| c).collect();
            let pending =
                Pending::made(checks, Arrival::new(None, now_ms), (shard, slot), Command::Lease(ops), Call::Lease);
            self.next_call = self.next_call.wrapping_add(1);
            self.calls.insert(self.next_call, carried);
            cx.streams.push(CallId::Lease(self.next_call), pending);
        }
    }

    /// An op that could not be sent (no store): an end is sent again later,
    /// a renewal is due again at the next step.
    fn unsent(&mut self, cx: &mut Cx<'_>, (check, change, confirmed): Op, now_ms: u64) {
        cx.host.count(Stat::Lease(LeaseStat::Failed), 1);
        if change == LeaseChange::End {
            let until_ms = now_ms.saturating_add(ttl_ms(&check));
            self.retry(Retry { check, until_ms, confirmed });
        } else {
            self.due_again(std::slice::from_ref(&check));
        }
    }

    /// Keeps a failed end to send again, at most `valkey.max_queue` of
    /// them (a store away for long under a flood): past that the end is
    /// dropped, and its lease expires in the store by its TTL.
    fn retry(&mut self, retry: Retry) {
        if self.retries.len() < self.max_retries {
            self.retries.push(retry);
        }
    }

    /// The leases of `checks` are gone from the store: neither renewed nor
    /// ended any more.
    fn lost(&mut self, checks: &[&Check]) {
        if checks.is_empty() {
            return;
        }
        for lease in self.by_request.values_mut() {
            for (i, c) in lease.checks.iter().enumerate() {
                if checks.iter().any(|f| f.lease == c.lease && f.key == c.key) {
                    lease.lost |= u32::try_from(i).ok().and_then(|i| 1u64.checked_shl(i)).unwrap_or(0);
                }
            }
        }
    }

    /// The leases of `checks` are due at the next renewal step.
    fn due_again(&mut self, checks: &[Check]) {
        for lease in self.by_request.values_mut() {
            if lease.checks.iter().any(|c| checks.iter().any(|f| f.lease == c.lease && f.key == c.key)) {
                lease.renewed_ms = 0;
            }
        }
    }

    /// The store answered `lease` call `id` (`p`): each op's lease was live
    /// (released, renewed) or had expired.
    pub fn replied(&mut self, cx: &mut Cx<'_>, id: CallId, p: Pending, value: &Value, now_ms: u64) {
        let Command::Lease(ops) = &p.command else { return };
        match parse_lease(value, ops) {
            Ok(reply) => {
                let CallId::Lease(n) = id else { return };
                let (stat, confirmed) = match self.calls.remove(&n) {
                    Some(Carried::Ends { confirmed }) => (LeaseStat::Released, confirmed),
                    Some(Carried::Renewals { confirmed }) => {
                        // A lease the store no longer has is renewed no more.
                        let gone = p.checks.iter().zip(&reply.live).filter(|(_, live)| !**live);
                        self.lost(&gone.map(|(c, _)| c).collect::<Vec<_>>());
                        (LeaseStat::Renewed, confirmed)
                    }
                    None => return,
                };
                let (mut live, mut expired) = (0, 0);
                for (&was, confirmed) in reply.live.iter().zip(confirmed) {
                    live += u64::from(was);
                    // (One the store never said it took did not expire.)
                    expired += u64::from(!was && confirmed);
                }
                cx.host.count(Stat::Lease(stat), live);
                cx.host.count(Stat::Lease(LeaseStat::Expired), expired);
            }
            Err(_) => self.failed(cx, id, p, now_ms),
        }
    }

    /// `lease` call `id` failed (or waited too long): its ends are sent
    /// again at the next renewal; its renewals are due again then.
    pub fn failed(&mut self, cx: &mut Cx<'_>, id: CallId, p: Pending, now_ms: u64) {
        let CallId::Lease(n) = id else { return };
        let carried = self.calls.remove(&n);
        cx.host.count(Stat::Lease(LeaseStat::Failed), p.checks.len() as u64);
        if let Some(Carried::Ends { confirmed }) = carried {
            for (check, confirmed) in p.checks.into_iter().zip(confirmed) {
                let until_ms = now_ms.saturating_add(ttl_ms(&check));
                self.retry(Retry { check, until_ms, confirmed });
            }
        } else {
            self.due_again(&p.checks);
        }
    }
}

/// A lease check's TTL: its one window's period.
fn ttl_ms(check: &Check) -> u64 {
    check.windows.first().map_or(1, |w| w.period_ms.get())
}

/// The op over lease check `check`.
fn op(check: &Check, change: LeaseChange) -> LeaseOp {
    LeaseOp { key: check.key.clone(), id: check.lease.clone().unwrap_or_else(|| "".into()), change }
}
