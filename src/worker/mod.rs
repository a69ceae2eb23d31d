//! The per-worker state machine: every decision of a worker, with no
//! proxy-wasm in it. The filter turns callbacks into the events below (time
//! passed in, in ms of the proxy's clock) and carries out what the worker
//! asks of its [`Host`].
//!
//! [`Worker`] is the composition root: it turns host events into calls on
//! rooms, each a type that owns its state and is lent what it may touch
//! for one step ([`cx::Cx`], the worker's services; other rooms as
//! parameters). Here: the worker's own events and each VM entry's begin and
//! finish; [`lifecycle`]: a request's states, top to bottom, with what ends
//! each early; [`landed`]: each call the streams hand back, to the owner of
//! its kind. The rooms, from the top (docs/architecture.md draws them):
//!
//! * [`cross`]: a request whose keys hash to several cluster slots, decided
//!   in two steps, one call per slot (`Part` calls).
//! * [`request`]: ruling on a request (rules counted, denials remembered,
//!   its record), `failure_mode` and `overload`.
//! * [`counting`]: counting on the response (`count`): a reservation on
//!   admission, the cost the response says, and the settlement that
//!   corrects the store's record (`Settlement` calls).
//! * [`shaping`]: requests of rules that shape, counted against
//!   `max_waiting`, admissions held until their turn, turns given back
//!   (`GiveBack` calls).
//! * [`synced`]: rules decided on the worker from its view of each window,
//!   and the flushes that sync that view with the store (`Flush` calls).
//! * [`leases`]: concurrency limits: the leases of this worker's requests,
//!   ended when each is gone and renewed while it goes on (`Lease` calls).
//! * [`streams`]: the calls' table, the store streams (one per shard: one
//!   per master of a Valkey Cluster), where the store is, and what landed.
//! * [`calls`]: a held call, its kind ([`calls::CallId`]) and what it runs
//!   on the store ([`calls::Command`]).
//! * [`verdict`], [`local`], [`decision`], [`host`]: verdicts delivered
//!   within each VM entry's budget; the local limiter; the pure ruling and
//!   record; the boundary to the host.
//!
//! Deadlines (see docs/reliability.md):
//!
//! * `valkey.timeout`: the stream is stalled when commands are outstanding
//!   and no reply came for this long; it is reset, and its requests get
//!   `failure_mode`. A queued request also gets `failure_mode` after this
//!   long when the store is not reachable (no stream, stream stalled).
//! * [`MAX_WAIT_MS`] (or twice the timeout, if longer): a request waiting for
//!   a busy store that keeps answering is refused after this long (overload),
//!   never admitted unchecked.
//! * the queue bound (`valkey.max_queue`): a request that finds it full is
//!   refused at once (overload).

mod calls;
mod counting;
pub mod cross;
mod cx;
mod decision;
pub mod host;
mod landed;
mod leases;
mod lifecycle;
mod local;
mod reporting;
mod request;
mod shaping;
pub mod stats;
mod streams;
mod synced;
mod verdict;

#[cfg(test)]
mod tests;

pub use calls::epoch_ms;
pub use decision::record::{Answer, Decider, DecisionRecord, Record, DECISION_PROPERTY};
pub use decision::ruling::{RuleOutcome, CROSS_CACHE_MS};
use host::Throttle;
pub use host::{
    BodyStep, CountStat, Flow, Gauge, Host, LeaseStat, Level, Reset, ResponseFlow, ResponseHeaders, ResponseView,
    ShapeStat, Stat, DEFERRED_TICK, IDLE_TICK, TICK,
};

use crate::cache::DenialCache;
use crate::config::Config;
use counting::owed::Settlements;
use cross::crossings::Crossings;
use cx::cx;
use leases::Leases;
use local::LocalLimiter;
use reporting::Reporting;
use shaping::Holding;
use std::time::Duration;
use streams::Streams;
use synced::Syncing;
use verdict::Deliveries;

/// The longest a request waits for a busy store that keeps answering (or
/// twice `valkey.timeout`, if longer: a store that stops answering is
/// caught by the timeout first).
pub const MAX_WAIT_MS: u64 = 1_000;

/// Which callback a VM entry of the worker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// A request's own callback (headers, body, response).
    Request,
    /// The worker's own: a wake-up, a stream's message or close.
    Own,
    /// The worker's tick.
    Tick,
}

/// One worker's state.
#[derive(Debug)]
pub struct Worker {
    config: Config,
    any_shadow: bool,
    /// The store streams and the calls on them.
    streams: Streams,
    cache: DenialCache,
    /// Stands in for the store under `failure_mode: local`.
    local: LocalLimiter,
    /// Rules counted on the response: what admitted requests owe.
    settlements: Settlements,
    /// Verdicts beyond a VM entry's budget, and that budget.
    deliveries: Deliveries,
    tick: Duration,
    /// When stats reach the proxy.
    reporting: Reporting,
    log: Throttle,
    /// Requests decided across cluster slots, by context id.
    crossings: Crossings,
    /// Shaping: requests counted against `max_waiting`, and those held.
    holding: Holding,
    /// Synced rules: this worker's view of their buckets, and its flushes.
    synced: Syncing,
    /// Concurrency limits: the leases of this worker's requests.
    leases: Leases,
}

impl Worker {
    pub fn new(config: Config) -> Worker {
        let any_shadow = config.shadow || config.rules.iter().any(|r| r.shadow);
        let timeout_ms = u64::try_from(config.valkey.timeout.as_millis()).unwrap_or(u64::MAX);
        let max_wait_ms = MAX_WAIT_MS.max(timeout_ms.saturating_mul(2));
        Worker {
            any_shadow,
            streams: Streams::new(&config, max_wait_ms),
            cache: DenialCache::new(config.denial_cache_keys),
            local: LocalLimiter::new(&config.local_limiter),
            settlements: Settlements::new(&config),
            deliveries: Deliveries::default(),
            tick: Duration::ZERO,
            reporting: Reporting::default(),
            log: Throttle::default(),
            crossings: Crossings::new(max_wait_ms),
            holding: Holding::new(&config),
            synced: Syncing::new(&config),
            leases: Leases::new(&config),
            config,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The worker was woken (its own callback).
    pub fn on_wake(&mut self, host: &mut dyn Host, now_ms: u64) {
        self.streams.woke();
        self.begin(host, false);
        self.finish(host, Entry::Own, now_ms);
    }

    /// The tick (its own callback): deadlines.
    pub fn on_tick(&mut self, host: &mut dyn Host, now_ms: u64) {
        self.reporting.tick_begins(host);
        self.begin(host, false);
        self.expire(host, now_ms);
        self.finish(host, Entry::Tick, now_ms);
    }

    /// Bytes arrived on stream `token`.
    pub fn on_stream_message(&mut self, host: &mut dyn Host, token: u32, bytes: &[u8], now_ms: u64) {
        self.begin(host, false);
        self.streams.on_message(host, token, bytes, now_ms);
        self.finish(host, Entry::Own, now_ms);
    }

    /// Stream `token` closed with gRPC `status`.
    pub fn on_stream_close(&mut self, host: &mut dyn Host, token: u32, status: u32, now_ms: u64) {
        self.begin(host, false);
        self.streams.on_close(host, token, status, now_ms);
        self.finish(host, Entry::Own, now_ms);
    }

    /// Every VM entry starts here: verdicts left over from the last one
    /// go first, within this entry's budget.
    fn begin(&mut self, host: &mut dyn Host, in_request: bool) {
        self.deliveries.begin(host, in_request);
    }

    /// Every VM entry ends here: send what can be sent, look up the master
    /// or the slot map when due (from the worker's own callbacks), report
    /// the stats as [`reporting`] says, and set the tick.
    /// The tick is sped up at once but slowed or stopped only by its own
    /// callback: between requests that arrive close together it stays on,
    /// instead of being turned on and off for each.
    fn finish(&mut self, host: &mut dyn Host, entry: Entry, now_ms: u64) {
        let own = entry != Entry::Request;
        self.land(host, now_ms);
        if own {
            self.streams.lookup(host, now_ms);
        }
        if self.holding.active() {
            self.holding.shape_step(cx!(self, host), now_ms);
        }
        if entry == Entry::Tick && self.synced.active() {
            self.synced.sync_step(cx!(self, host), now_ms);
        }
        if entry == Entry::Tick && self.leases.active() {
            self.leases.renew_step(cx!(self, host), now_ms);
        }
        self.pump(host, own, now_ms);
        match entry {
            Entry::Request => self.reporting.request_ends(host, self.tick, now_ms),
            Entry::Tick => {
                let (held, in_flight) = self.streams.load();
                let now = [in_flight, held + self.deliveries.len(), self.holding.len()];
                self.reporting.tick_ends(host, now);
            }
            Entry::Own => {}
        }
        let want = if !self.deliveries.is_empty() {
            DEFERRED_TICK
        } else if self.streams.busy() || !self.holding.is_empty() || self.reporting.busy() {
            TICK
        } else if let Some(interval) = self.synced.tick() {
            self.leases.tick().map_or(interval, |renew| renew.min(interval))
        } else if let Some(interval) = self.leases.tick() {
            interval
        } else if self.streams.looks_up() {
            IDLE_TICK
        } else {
            Duration::ZERO
        };
        let slower = want.is_zero() || (!self.tick.is_zero() && want > self.tick);
        if want != self.tick && (entry == Entry::Tick || !slower) {
            host.set_tick(want);
            self.tick = want;
        }
    }
}
