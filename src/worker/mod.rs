//! The per-worker state machine: every decision of a worker, with no
//! proxy-wasm in it. The filter turns callbacks into the events below (time
//! passed in, in ms of the proxy's clock) and carries out what the worker
//! asks of its [`Host`].
//!
//! [`Worker`] composes rooms, each owning its state behind methods:
//!
//! * [`calls`]: the calls the worker holds (a request's decision, a part
//!   across cluster slots, a settlement), their queues and a request's
//!   clock ([`calls::Arrival`]); what every other room speaks of.
//! * [`request`]: a request's lifecycle: planned, denied from the cache or
//!   queued ([`request::arrival`]), ruled on ([`request::ruling`], pure),
//!   `failure_mode` and `overload` ([`request::fail`]), deadlines, and its
//!   verdict handed over within each VM entry's budget
//!   ([`request::verdict`]).
//! * [`stream`]: the store streams, one per shard (one per master of a
//!   Valkey Cluster): calls written into pipelined messages
//!   ([`stream::send`]), replies paired with them in order
//!   ([`stream::replies`], [`stream::link`]).
//! * [`discovery`]: the Sentinels' master, the cluster's slot map, and
//!   routing a call by the slot of its keys.
//! * [`cross`]: a request whose keys hash to several cluster slots, decided
//!   in two steps, one call per slot.
//! * [`counting`]: counting on the response (`count`): a reservation on
//!   admission, the cost the response says, and the settlement that
//!   corrects the store's record.
//! * [`shaping`]: requests of rules that shape, counted against
//!   `max_waiting`, admissions held until their slot, slots given back.
//! * [`synced`]: rules decided on the worker from its view of each window,
//!   and the flushes that sync that view with the store every interval.
//!
//! Rooms import one another in one direction only: `calls` ← `stream` ←
//! `discovery` ← `request` ← `cross`, `counting`, `shaping`, `synced`. A step that needs several
//! rooms is a method of [`Worker`] in the room of its concern, and reaches
//! another room's state only through that room's methods. The events are
//! here, except those of counting on the response: `on_request_body`
//! ([`counting::reserve`]), `owes`, `on_response` and `on_response_body`
//! ([`counting::cost`]), `holding` ([`counting::settle_reply`]).
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
mod discovery;
pub mod host;
mod reporting;
mod request;
mod shaping;
pub mod stats;
mod stream;
mod synced;

#[cfg(test)]
mod tests;

pub use calls::epoch_ms;
use host::Throttle;
pub use host::{
    BodyStep, CountStat, Flow, Gauge, Host, Level, Reset, ResponseFlow, ResponseHeaders, ResponseView, ShapeStat, Stat,
};
pub use request::record::{Answer, Decider, DecisionRecord, Record, DECISION_PROPERTY};
pub use request::ruling::{RuleOutcome, CROSS_CACHE_MS};

use crate::cache::DenialCache;
use crate::config::{Config, Invoke};
use crate::limiter::script::{
    encode_adjust, encode_call, encode_floored_call, encode_flush, encode_shaped_call, limiter, Invocation, Script,
};
use crate::plan::RequestView;
use crate::store::Preamble;
use calls::table::Calls;
use calls::{Call, CallId, Part, Pending, ShardId};
use counting::owed::Settlements;
use cross::crossings::Crossings;
use cross::protocol::undo;
use discovery::cluster_lookup::ClusterLookup;
use discovery::sentinel_lookup::SentinelLookup;
use reporting::Reporting;
use request::local::LocalLimiter;
use request::verdict::Deliveries;
use shaping::hold::give_back;
use shaping::{max_delay, Holding};
use std::time::Duration;
use stream::shards::Shards;
use synced::Syncing;

/// How often the worker looks at deadlines while it holds requests.
pub const TICK: Duration = Duration::from_millis(5);
/// The tick with nothing held, when Sentinel lookups may fall due.
pub const IDLE_TICK: Duration = Duration::from_millis(100);
/// The tick while verdicts wait for the next VM entry.
pub const DEFERRED_TICK: Duration = Duration::from_millis(1);
/// Bytes of commands awaiting replies on the stream, at most.
pub const MAX_IN_FLIGHT_BYTES: usize = 256 << 10;
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
    timeout_ms: u64,
    max_wait_ms: u64,
    script: &'static Script,
    preamble: Preamble,
    /// The calls held: requests' decisions, parts across slots, settlements.
    calls: Calls,
    /// The store streams: one, or one per cluster master.
    shards: Shards,
    /// The one shard of a single store or a Sentinel master (not in cluster
    /// mode).
    home: Option<ShardId>,
    sentinels: Option<SentinelLookup>,
    /// The slot map of a Valkey Cluster (`valkey.cluster_mode`).
    cluster: Option<ClusterLookup>,
    cache: DenialCache,
    /// Stands in for the store under `failure_mode: local`.
    local: LocalLimiter,
    /// Rules counted on the response: what admitted requests owe.
    settlements: Settlements,
    /// Verdicts beyond a VM entry's budget, and that budget.
    deliveries: Deliveries,
    /// How the limiter is called: `valkey.invoke`, until the store refuses
    /// `FUNCTION LOAD` (then the script, for good).
    invoke: Invoke,
    tick: Duration,
    /// Whether this worker has served a request (Envoy's main thread never
    /// does, and cannot open streams to internal listeners).
    serving: bool,
    woken: bool,
    /// When stats reach the proxy.
    reporting: Reporting,
    log: Throttle,
    /// Requests decided across cluster slots, by context id.
    crossings: Crossings,
    /// Shaping: requests counted against `max_waiting`, and those held.
    holding: Holding,
    /// Synced rules: this worker's view of their buckets, and its flushes.
    synced: Syncing,
}

impl Worker {
    pub fn new(config: Config) -> Worker {
        let any_shadow = config.shadow || config.rules.iter().any(|r| r.shadow);
        let timeout_ms = u64::try_from(config.valkey.timeout.as_millis()).unwrap_or(u64::MAX);
        let preamble = Preamble::auth(config.valkey.auth.as_ref());
        let cluster = config.valkey.cluster_mode.as_ref().map(|c| ClusterLookup::new(c, preamble.clone()));
        let mut shards = Shards::default();
        let home = cluster.is_none().then(|| shards.add(None));
        Worker {
            any_shadow,
            timeout_ms,
            max_wait_ms: MAX_WAIT_MS.max(timeout_ms.saturating_mul(2)),
            script: limiter(),
            preamble,
            calls: Calls::default(),
            shards,
            home,
            sentinels: config.valkey.sentinel.as_ref().map(SentinelLookup::new),
            cluster,
            cache: DenialCache::new(config.denial_cache_keys),
            local: LocalLimiter::new(&config.local_limiter),
            settlements: Settlements::new(&config),
            deliveries: Deliveries::default(),
            invoke: config.valkey.invoke,
            tick: Duration::ZERO,
            serving: false,
            woken: false,
            reporting: Reporting::default(),
            log: Throttle::default(),
            crossings: Crossings::default(),
            holding: Holding::new(&config),
            synced: Syncing::new(&config),
            config,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A request's headers arrived (its own callback): plan it, and decide
    /// it from the cache, queue it, or refuse it.
    pub fn on_request(
        &mut self,
        host: &mut dyn Host,
        id: u32,
        request: &dyn RequestView,
        now_ms: u64,
        headers: ResponseHeaders,
    ) -> Flow {
        self.begin(host, true);
        let flow = self.start(host, id, request, now_ms, headers);
        self.finish(host, Entry::Request, now_ms);
        flow
    }

    /// A request's headers (its own callback); `end_of_stream`: no body
    /// follows. A request whose reservation is in its body and that has
    /// none is decided at once, on the empty body.
    pub fn on_request_headers(
        &mut self,
        host: &mut dyn Host,
        id: u32,
        request: &dyn RequestView,
        (headers, end_of_stream): (ResponseHeaders, bool),
        now_ms: u64,
    ) -> Flow {
        let flow = self.on_request(host, id, request, now_ms, headers);
        if flow == Flow::ReadBody && end_of_stream {
            return self.on_request_body(host, id, &[], true, now_ms);
        }
        flow
    }

    /// Whether request `id` is held for its decision (a request decided on
    /// the first `max_body_bytes` of its body: the rest waits with it).
    pub fn waiting(&self, id: u32) -> bool {
        self.calls.get(CallId::Request(id)).is_some()
            || self.crossings.waits(id)
            || self.settlements.awaits_body(id)
            || self.deliveries.waits(id)
            || self.holding.holds(id)
    }

    /// The request's context is gone (client reset, or done).
    pub fn on_gone(&mut self, id: u32) {
        self.cross_gone(id);
        let mut sent = None;
        if let Some(p) = self.calls.remove(CallId::Request(id)) {
            if p.sent {
                self.shards.abandon(p.shard, CallId::Request(id));
                sent = Some(p);
            }
        }
        if self.holding.active() {
            match sent.filter(|p| max_delay(&self.config, &p.checks).is_some()) {
                // Its call may give it a slot: given back when the reply
                // comes (it stays counted until then).
                Some(p) => self.holding.orphan(id, p.checks, p.arrival),
                // A held request's slot is given back at the next entry.
                None => self.holding.gone(id),
            }
        }
        if self.settlements.active() {
            // A reservation whose response never came stands.
            self.settlements.gone(id);
        }
    }

    /// The worker was woken (its own callback).
    pub fn on_wake(&mut self, host: &mut dyn Host, now_ms: u64) {
        self.woken = false;
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
        if let Some(shard) = self.shards.by_token(token) {
            self.on_store_bytes(host, shard, bytes, now_ms);
        } else if let Some(s) = self.sentinels.as_mut().filter(|s| s.token() == Some(token)) {
            let change = s.on_message(host, bytes, now_ms);
            self.on_master(host, change, now_ms);
        } else if let Some(c) = self.cluster.as_mut().filter(|c| c.token() == Some(token)) {
            if c.on_message(host, bytes, now_ms) {
                self.on_slot_map(host);
            }
        }
        self.finish(host, Entry::Own, now_ms);
    }

    /// Stream `token` closed with gRPC `status`.
    pub fn on_stream_close(&mut self, host: &mut dyn Host, token: u32, status: u32, now_ms: u64) {
        self.begin(host, false);
        if let Some(shard) = self.shards.by_token(token) {
            self.on_store_close(host, shard, status, now_ms);
        } else if let Some(s) = self.sentinels.as_mut().filter(|s| s.token() == Some(token)) {
            s.on_close(host, status, now_ms);
        } else if let Some(c) = self.cluster.as_mut().filter(|c| c.token() == Some(token)) {
            c.on_close(host, status, now_ms);
        }
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
        if own {
            self.lookup(host, now_ms);
        }
        if self.holding.active() {
            self.shape_step(host, now_ms);
        }
        if entry == Entry::Tick && self.synced.active() {
            self.sync_step(host, now_ms);
        }
        self.pump(host, own, now_ms);
        match entry {
            Entry::Request => self.reporting.request_ends(host, self.tick, now_ms),
            Entry::Tick => {
                let now = [self.shards.in_flight(), self.calls.len() + self.deliveries.len(), self.holding.len()];
                self.reporting.tick_ends(host, now);
            }
            Entry::Own => {}
        }
        let want = if !self.deliveries.is_empty() {
            DEFERRED_TICK
        } else if !self.calls.is_empty()
            || self.shards.in_flight() > 0
            || self.discovery_busy()
            || !self.holding.is_empty()
            || self.reporting.busy()
        {
            TICK
        } else if let Some(interval) = self.synced.tick() {
            interval
        } else if (self.sentinels.is_some() || self.cluster.is_some()) && self.serving {
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

/// Writes held call `p` into `out`, invoked `how` (a decision shaped as
/// `shaping`'s rules say, when some rule shapes). The composition's: the
/// kinds of call come from five rooms (a decision, a step across slots, a
/// settlement, a slot given back, a flush), and all go on the same streams.
fn write_call(out: &mut Vec<u8>, script: &Script, how: Invocation, p: &Pending, shaping: Option<&Config>) {
    let now_override = p.arrival.now_override;
    match &p.call {
        Call::Decide => match shaping.and_then(|config| max_delay(config, &p.checks)) {
            Some(delay) => encode_shaped_call(out, script, how, &p.checks, delay, now_override),
            None => encode_call(out, script, how, &p.checks, now_override),
        },
        // Across slots the shape is chosen when the part is queued
        // (docs/shaping.md, "Across slots").
        Call::Part(Part::Decide { shape: Some(shape), .. }) => {
            encode_floored_call(out, script, how, &p.checks, *shape, now_override);
        }
        Call::Part(Part::Decide { shape: None, .. }) => encode_call(out, script, how, &p.checks, now_override),
        Call::GiveBack(at_ms) => encode_adjust(out, script, how, &give_back(&p.checks), *at_ms, now_override),
        Call::Part(Part::Undo { at_ms, .. }) => {
            encode_adjust(out, script, how, &undo(&p.checks), *at_ms, now_override);
        }
        Call::Settle(call) => {
            encode_adjust(out, script, how, &call.adjustments(&p.checks), call.at_ms, now_override);
        }
        Call::Flush(call) => encode_flush(out, script, how, &synced::flush::of(call, &p.checks), None),
    }
}
