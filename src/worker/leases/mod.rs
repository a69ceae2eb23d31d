//! Concurrency limits (`rules[].concurrency`, docs/concurrency.md): the
//! leases this worker's requests hold. A request of a rule with a
//! concurrency limit is given a lease id when its call is made; the store
//! records the lease in the same atomic call as the windows. The lease
//! ends when the request is gone (its response ended, its client left,
//! its stream reset, it failed): one `lease` call per request and slot,
//! queued at once and sent with the worker's next entry, batched on the
//! stream with the other calls. While the request goes on, its lease is
//! renewed once held a sixth of its TTL, at renewal steps a sixth of the
//! TTL apart, one call per slot for all the worker's leases due
//! ([`Leases::renew_step`]); a renewal that fails is due again at the
//! next step, so only a third of a TTL without the store expires a lease
//! whose request goes on (docs/concurrency.md, "The bound"). A lease the
//! store denied is never ended; any other is (its call may have run, or be
//! on its way: ending is idempotent, and goes after the decision on the
//! same stream).
//!
//! Under `failure_mode: local` a lease admitted by the local limiter is a
//! count of this worker's ([`crate::worker::local`]), given back there
//! too when the request is gone. Pure, time passed in.

mod send;

use crate::config::Config;
use crate::limiter::{Algorithm, Check};
use crate::worker::cx::Cx;
use crate::worker::host::{LeaseStat, Stat};
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::rc::Rc;
use std::time::Duration;

/// One request's leases.
#[derive(Debug)]
struct Lease {
    /// Its lease checks, each carrying the lease id.
    checks: Vec<Check>,
    /// When it was asked for or last renewed (proxy clock).
    renewed_ms: u64,
    /// The store said it admitted the request (else its call failed: the
    /// lease may or may not be there).
    confirmed: bool,
    /// Its call went to the store (else only the local limiter may hold
    /// it: nothing to end or renew there).
    to_store: bool,
    /// Bit i: a renewal found the lease of check i gone from the store;
    /// it is neither renewed nor ended any more (checks past the 64th are
    /// never marked).
    lost: u64,
}

/// What a `lease` call carries: renewals, or ends, `confirmed` per op
/// (an end of a lease the store never said it took is not counted as
/// expired when the store finds none).
#[derive(Debug)]
enum Carried {
    Renewals { confirmed: Vec<bool> },
    Ends { confirmed: Vec<bool> },
}

/// An end that failed, sent again at the next renewal until its lease
/// would have expired anyway (proxy clock).
#[derive(Debug)]
struct Retry {
    check: Check,
    until_ms: u64,
    confirmed: bool,
}

/// The leases of one worker's requests.
#[derive(Debug)]
pub(in crate::worker) struct Leases {
    /// Any rule has a concurrency limit.
    active: bool,
    /// This worker's part of every lease id: unique per worker and start.
    prefix: String,
    seq: u64,
    /// By request context id.
    by_request: HashMap<u32, Lease>,
    /// Ends to send again, at most `max_retries` (`valkey.max_queue`).
    retries: Vec<Retry>,
    max_retries: usize,
    /// `lease` calls on their way: what each carries.
    calls: BTreeMap<u32, Carried>,
    next_call: u32,
    /// How often leases are looked at for renewal: a sixth of the shortest
    /// lease TTL. The tick is half that while leases are held, so a step
    /// is late by less than half an interval whatever the tick's phase
    /// (Envoy re-arms it whenever its period changes).
    interval_ms: u64,
    next_renewal_ms: u64,
}

impl Leases {
    pub fn new(config: &Config) -> Leases {
        let ttl = config.rules.iter().filter_map(|r| r.concurrency.as_ref()).map(|c| c.lease_ttl_ms.get()).min();
        let hash = std::collections::hash_map::RandomState::new().build_hasher().finish();
        Leases {
            active: ttl.is_some(),
            prefix: format!("{hash:016x}"),
            seq: 0,
            by_request: HashMap::new(),
            retries: Vec::new(),
            max_retries: config.valkey.max_queue,
            calls: BTreeMap::new(),
            next_call: 0,
            interval_ms: ttl.map_or(u64::MAX, |t| (t / 6).max(1)),
            next_renewal_ms: 0,
        }
    }

    pub fn active(&self) -> bool {
        self.active
    }

    /// Whether request `id` holds leases (it was given a lease id and the
    /// store did not deny it).
    pub fn holds(&self, id: u32) -> bool {
        self.active && self.by_request.contains_key(&id)
    }

    #[cfg(test)]
    pub fn retries(&self) -> usize {
        self.retries.len()
    }

    /// The tick the renewals need, while any lease is held.
    pub fn tick(&self) -> Option<Duration> {
        let tick = (self.interval_ms / 2).max(1);
        (!self.by_request.is_empty() || !self.retries.is_empty()).then(|| Duration::from_millis(tick))
    }

    /// Request `id`'s call over `checks` is being made (`to_store`: sent
    /// to the store, else decided by `failure_mode` at once): its lease
    /// checks get a lease id, the same in each (none when it has none). A
    /// request refused as overload is never stamped.
    pub fn stamp(&mut self, id: u32, checks: &mut [Check], now_ms: u64, to_store: bool) {
        if !self.active || !checks.iter().any(|c| c.algorithm == Algorithm::Lease) {
            return;
        }
        self.seq += 1;
        let lease: Rc<str> = format!("{}:{:x}", self.prefix, self.seq).into();
        let mut held = Vec::new();
        for check in checks.iter_mut().filter(|c| c.algorithm == Algorithm::Lease) {
            check.lease = Some(Rc::clone(&lease));
            held.push(check.clone());
        }
        let lease = Lease { checks: held, renewed_ms: now_ms, confirmed: false, lost: 0, to_store };
        self.by_request.insert(id, lease);
    }

    /// The store decided request `id`: admitted, its lease is held (and
    /// counted); denied, the store recorded none.
    pub fn decided(&mut self, cx: &mut Cx<'_>, id: u32, allowed: bool) {
        if allowed {
            if let Some(lease) = self.by_request.get_mut(&id) {
                lease.confirmed = true;
                cx.host.count(Stat::Lease(LeaseStat::Taken), 1);
            }
        } else {
            self.by_request.remove(&id);
        }
    }

    /// Request `id` is gone: its leases end, in the store, and in the local
    /// limiter if it admitted the request (`failure_mode: local`).
    pub fn gone(&mut self, cx: &mut Cx<'_>, id: u32, now_ms: u64) {
        let Some(lease) = self.by_request.remove(&id) else { return };
        let local = lease.checks.iter().filter(|c| cx.local.release(c)).count() as u64;
        cx.host.count(Stat::Lease(LeaseStat::Released), local);
        if !lease.to_store {
            return;
        }
        let (lost, mut checks) = (lease.lost, lease.checks);
        if lost != 0 {
            checks = checks.into_iter().enumerate().filter(|(i, _)| !is_lost(lost, *i)).map(|(_, c)| c).collect();
        }
        self.end(cx, checks, lease.confirmed, now_ms);
    }
}

/// Whether bit `i` of `lost` is set.
fn is_lost(lost: u64, i: usize) -> bool {
    u32::try_from(i).ok().and_then(|i| lost.checked_shr(i)).is_some_and(|b| b & 1 == 1)
}
