//! The per-worker state machine: every decision of a worker, with no
//! proxy-wasm in it. The filter turns callbacks into the events below (time
//! passed in, in ms of the proxy's clock) and carries out what the worker
//! asks of its [`Host`].
//!
//! A request is planned, denied from the cache or queued ([`arrival`]); queued requests
//! are sent on the worker's long-lived stream to the store (one per master
//! of a Valkey Cluster, [`shards`], routed by the slot of the request's
//! keys, [`cluster_routing`]), one `FCALL` each (or `EVALSHA`,
//! `valkey.invoke`), pipelined; replies come back in order and are paired
//! with the requests in order ([`link`], [`answer`]); each reply is ruled on
//! ([`respond`]) and the request admitted or answered. A request whose keys
//! hash to several cluster slots is decided in two steps, one call per slot
//! ([`cross_slot`], [`cluster_cross`]). Deadlines (see
//! docs/reliability.md):
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
//!
//! Rules counted on the response (`count`) add a request body to read
//! ([`reserve`]), a response to read ([`cost`]) and a settlement on the same
//! stream, one per slot in cluster mode ([`settle`], [`settle_reply`]).

mod answer;
mod arrival;
mod body;
mod cluster;
mod cluster_cross;
mod cluster_parts;
mod cluster_routing;
mod cost;
pub mod cross_slot;
mod deadlines;
mod entry;
mod fail;
pub mod host;
mod link;
mod local;
mod requests;
mod reserve;
pub mod respond;
mod sentinels;
pub mod settle;
mod settle_reply;
mod shards;
pub mod stats;
mod store;

#[cfg(test)]
mod tests;

pub use cluster_cross::CROSS_CACHE_MS;
pub use host::{CountStat, Flow, Gauge, Host, Level, Reset, ResponseFlow, ResponseHeaders, ResponseView, Stat};

use crate::cache::DenialCache;
use crate::config::{Config, Invoke};
use crate::limiter::script::{limiter, Script};
use crate::plan::RequestView;
use crate::response::LocalReply;
use crate::store::Preamble;
use cluster::Cluster;
use cluster_cross::Crossings;
use local::LocalLimiter;
use requests::{Requests, ShardId};
use respond::{remember, Action, Ruling};
use sentinels::Sentinels;
use settle::Settlements;
use shards::Shards;
use std::collections::VecDeque;
use std::time::Duration;

/// How often the worker looks at deadlines while it holds requests.
pub const TICK: Duration = Duration::from_millis(5);
/// The tick with nothing held, when Sentinel lookups may fall due.
pub const IDLE_TICK: Duration = Duration::from_millis(100);
/// The tick while settlements wait for the next VM entry.
pub const DEFERRED_TICK: Duration = Duration::from_millis(1);
/// At most this many requests are resumed or answered per VM entry: Envoy
/// runs the resumes of one entry nested in one another after it returns,
/// and V8's stack overflowed at ~384. The rest wait for the next entry.
pub const MAX_SETTLED_PER_ENTRY: usize = 128;
/// Bytes of commands awaiting replies on the stream, at most.
pub const MAX_IN_FLIGHT_BYTES: usize = 256 << 10;
/// The longest a request waits for a busy store that keeps answering (or
/// twice `valkey.timeout`, if longer: a store that stops answering is
/// caught by the timeout first).
pub const MAX_WAIT_MS: u64 = 1_000;

/// Logs a kind of event at most once per [`Throttle::INTERVAL_MS`].
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    last_ms: Option<u64>,
}

impl Throttle {
    pub const INTERVAL_MS: u64 = 10_000;

    /// Whether to log now (and remember that it was).
    pub fn due(&mut self, now_ms: u64) -> bool {
        let due = self.last_ms.is_none_or(|last| now_ms.saturating_sub(last) >= Self::INTERVAL_MS);
        if due {
            self.last_ms = Some(now_ms);
        }
        due
    }
}

/// What happens to a request that is leaving the worker.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Settle {
    Admit(Option<String>),
    Reply(LocalReply),
    /// A held response goes on, with these headers.
    Resume(Vec<(String, String)>),
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
    requests: Requests,
    /// The store streams: one, or one per cluster master.
    shards: Shards,
    /// The one shard of a single store or a Sentinel master (not in cluster
    /// mode).
    home: Option<ShardId>,
    sentinels: Option<Sentinels>,
    /// The slot map of a Valkey Cluster (`valkey.cluster_mode`).
    cluster: Option<Cluster>,
    cache: DenialCache,
    /// Stands in for the store under `failure_mode: local`.
    local: LocalLimiter,
    /// Rules counted on the response: what admitted requests owe.
    settlements: Settlements,
    /// Settlements beyond this VM entry's budget, for the next entries.
    deferred: VecDeque<(u32, Settle)>,
    settled: usize,
    /// The current VM entry is a request's own callback: no local reply may
    /// be sent for another request in it (Envoy would also stop the current
    /// request, whose `Continue` it turns into a pause, for good).
    in_request: bool,
    /// How the limiter is called: `valkey.invoke`, until the store refuses
    /// `FUNCTION LOAD` (then the script, for good).
    invoke: Invoke,
    tick: Duration,
    /// Whether this worker has served a request (Envoy's main thread never
    /// does, and cannot open streams to internal listeners).
    serving: bool,
    woken: bool,
    /// The gauges' values last reported, in [`Gauge::ALL`] order.
    reported: [i64; 2],
    log: Throttle,
    /// Requests decided across cluster slots, by context id.
    crossings: Crossings,
    /// Logs of undos across cluster slots that failed.
    undo_log: Throttle,
}

impl Worker {
    pub fn new(config: Config) -> Worker {
        let any_shadow = config.shadow || config.rules.iter().any(|r| r.shadow);
        let timeout_ms = u64::try_from(config.valkey.timeout.as_millis()).unwrap_or(u64::MAX);
        let preamble = Preamble::auth(config.valkey.auth.as_ref());
        let cluster = config.valkey.cluster_mode.as_ref().map(|c| Cluster::new(c, preamble.clone()));
        let mut shards = Shards::default();
        let home = cluster.is_none().then(|| shards.add(None));
        Worker {
            any_shadow,
            timeout_ms,
            max_wait_ms: MAX_WAIT_MS.max(timeout_ms.saturating_mul(2)),
            script: limiter(),
            preamble,
            requests: Requests::default(),
            shards,
            home,
            sentinels: config.valkey.sentinel.as_ref().map(Sentinels::new),
            cluster,
            cache: DenialCache::new(config.denial_cache_keys),
            local: LocalLimiter::new(&config.local_limiter),
            settlements: Settlements::new(&config),
            deferred: VecDeque::new(),
            settled: 0,
            in_request: false,
            invoke: config.valkey.invoke,
            tick: Duration::ZERO,
            serving: false,
            woken: false,
            reported: [0; 2],
            log: Throttle::default(),
            crossings: Crossings::default(),
            undo_log: Throttle::default(),
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
        self.finish(host, false, now_ms);
        flow
    }

    /// Whether request `id` is held for its decision (a request decided on
    /// the first `max_body_bytes` of its body: the rest waits with it).
    pub fn waiting(&self, id: u32) -> bool {
        self.requests.get(id).is_some()
            || self.crossings.map.get(&id).is_some_and(|c| c.answered.is_none())
            || self.settlements.awaiting_body.contains_key(&id)
            || self.deferred.iter().any(|(d, _)| *d == id)
    }

    /// The request's context is gone (client reset, or done).
    pub fn on_gone(&mut self, id: u32) {
        self.cross_gone(id);
        if let Some(p) = self.requests.remove(id) {
            if let Some(s) = self.shards.get_mut(p.shard).filter(|_| p.sent) {
                s.link.abandon(id);
            }
        }
        if self.settlements.active {
            // A reservation whose response never came stands.
            self.settlements.gone(id);
        }
    }

    /// The worker was woken (its own callback).
    pub fn on_wake(&mut self, host: &mut dyn Host, now_ms: u64) {
        self.woken = false;
        self.begin(host, false);
        self.finish(host, true, now_ms);
    }

    /// The tick (its own callback): deadlines.
    pub fn on_tick(&mut self, host: &mut dyn Host, now_ms: u64) {
        self.begin(host, false);
        self.expire(host, now_ms);
        self.finish(host, true, now_ms);
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
        self.finish(host, true, now_ms);
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
        self.finish(host, true, now_ms);
    }

    /// Counts a ruling's rules, remembers its denials, and gives its action.
    fn rule(&mut self, host: &mut dyn Host, mut ruling: Ruling, arrival_ms: u64, headers: &ResponseHeaders) -> Settle {
        for (rule, outcome) in &ruling.rules {
            host.count(Stat::Rule(*rule, *outcome), 1);
        }
        self.cap_denials(&mut ruling.denials, arrival_ms);
        remember(&mut self.cache, ruling.denials, arrival_ms);
        match ruling.action {
            Action::Admit { shadow_denied, headers: extra } => {
                if let Ok(mut h) = headers.try_borrow_mut() {
                    *h = extra;
                }
                Settle::Admit(shadow_denied)
            }
            Action::Deny(reply) => Settle::Reply(reply),
        }
    }

    /// A ruling for the request being started, in its own callback.
    fn rule_now(&mut self, host: &mut dyn Host, id: u32, ruling: Ruling, headers: &ResponseHeaders) -> Flow {
        // Only cache denials are ruled on at once: nothing to remember.
        match self.rule(host, ruling, 0, headers) {
            Settle::Admit(_) | Settle::Resume(_) => Flow::Continue,
            Settle::Reply(reply) => {
                host.reply(id, &reply);
                Flow::Pause
            }
        }
    }
}
