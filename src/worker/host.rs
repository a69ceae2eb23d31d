//! The worker's view of its host (Envoy through proxy-wasm in the filter, a
//! recording fake in the tests): everything the worker does to the world
//! goes through [`Host`].
//!
//! A trait rather than a list of effects returned by each event, because
//! the host's answers are synchronous and decide what happens next: opening
//! a stream gives its token (or fails, and the requests waiting for it fail
//! at once), a send can fail (and the requests in it go back to the queue),
//! and a request the worker resumes may already be gone.

use crate::answer::response::{Header, LocalReply};
use crate::store::FailureKind;
use crate::worker::decision::record::Record;
use crate::worker::decision::ruling::RuleOutcome;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// How often the worker looks at deadlines while it holds requests.
pub const TICK: Duration = Duration::from_millis(5);
/// The tick with nothing held, when Sentinel lookups may fall due.
pub const IDLE_TICK: Duration = Duration::from_millis(100);
/// The tick while verdicts wait for the next VM entry.
pub const DEFERRED_TICK: Duration = Duration::from_millis(1);

/// What the request's own callback does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Let the request go on now (nothing to decide, or decided at once).
    Continue,
    /// Hold the request: it waits for the store, or was answered locally.
    Pause,
    /// Let its headers go on (Envoy buffers the body meanwhile: the body
    /// comes only to headers that go on) and ask
    /// `Worker::request_body_step` of each body chunk: a reservation is
    /// read from it.
    ReadBody,
}

/// What the request's own callback does with a chunk of its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyStep {
    /// Let it go on: the worker does not read it, nor holds the request.
    Pass,
    /// Hold it (Envoy buffers it): the body is still short, or the request
    /// waits for its decision.
    Wait,
    /// Hand the first this many bytes to `Worker::on_request_body`.
    Read(usize),
}

/// Headers the upstream's response gets when the request is admitted. The
/// request's context holds one and hands it to the worker with the request,
/// so the headers travel with the request instead of waiting in a map.
pub type ResponseHeaders = Rc<RefCell<Vec<Header>>>;

/// Why the worker gave up a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reset {
    /// The store could not be reached (connection refused, no route).
    Refused,
    /// The stream closed after it was established (store killed or restarted,
    /// connection reset).
    Closed,
    /// Commands were outstanding and no reply came within `valkey.timeout`
    /// (a store that hangs, a silent network).
    Stalled,
    /// The store sent something that is not the reply expected next.
    Protocol,
    /// `AUTH` was refused.
    Auth,
    /// The Sentinels reported another master, or the node is no longer a
    /// master of the cluster's slot map.
    Switched,
}

impl Reset {
    pub const ALL: [Reset; 6] =
        [Reset::Refused, Reset::Closed, Reset::Stalled, Reset::Protocol, Reset::Auth, Reset::Switched];

    /// The stat name suffix: `tollgate.stream.resets.<name>`.
    pub fn name(self) -> &'static str {
        match self {
            Reset::Refused => "refused",
            Reset::Closed => "closed",
            Reset::Stalled => "stalled",
            Reset::Protocol => "protocol",
            Reset::Auth => "auth",
            Reset::Switched => "switched",
        }
    }
}

/// A counter the worker increments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stat {
    Rule(usize, RuleOutcome),
    RuleSkipped(usize),
    StoreError(FailureKind),
    /// A failed request whose call may have run (see
    /// [`crate::store::Failure::may_have_run`]).
    UnknownOutcome,
    FailureMode {
        allowed: bool,
    },
    /// Decided by the local limiter (`failure_mode: local`).
    Local {
        allowed: bool,
    },
    /// Messages sent on the store stream.
    StoreMessages,
    /// Calls sent on the store stream (decisions, undos, settlements,
    /// give-backs, flushes).
    StoreRequests,
    CacheHit,
    /// Requests refused because the worker's bounds were exceeded.
    Overloaded,
    /// A rule counted on the response (`count`).
    Count(usize, CountStat),
    /// A request or response body past `max_body_bytes`: its number was
    /// not read (the reservation's default, or the reservation, stands in).
    BodyTooLarge,
    /// A paused response went on before its settlement's reply.
    PauseExpired,
    SentinelLookup,
    SentinelFailure,
    SentinelSwitch,
    /// A slot map read from the cluster's seeds.
    ClusterRefresh,
    /// A read of the slot map that failed.
    ClusterRefreshFailure,
    /// A call answered `MOVED` and sent to the new master.
    ClusterMoved,
    /// A call answered `ASK` and sent once more after `ASKING`.
    ClusterAsk,
    /// A request whose checks hash to several cluster slots (decided in
    /// two steps).
    ClusterCrossShard,
    /// An undo sent for a slot group of a request that was not admitted.
    ClusterUndo,
    /// An undo that failed (or could not be sent): its record stays.
    ClusterUndoFailed,
    /// A cluster master's stream failed (refused, closed, stalled).
    ClusterShardFailure,
    StreamOpen,
    StreamReset(Reset),
    /// Shaping (`rules[].shape`).
    Shape(ShapeStat),
    /// Decided on the worker by a synced rule's view (`rules[].sync`).
    Synced {
        allowed: bool,
    },
    /// A flush the store answered, and the buckets it carried.
    SyncFlush,
    SyncKeys,
    /// A flush that failed (sent again with the same token).
    SyncFailure,
    /// A flush dropped: too old to count in any window.
    SyncDropped,
    /// A flush sent again that the store had applied already (its token
    /// known): recorded once.
    SyncDuplicate,
    /// Concurrency limits' leases (`tollgate.lease.<name>`).
    Lease(LeaseStat),
}

/// The counters of concurrency limits' leases (`tollgate.lease.<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseStat {
    /// Leases the store recorded for admitted requests.
    Taken,
    /// Leases ended when their request was gone.
    Released,
    /// Leases renewed while their request went on.
    Renewed,
    /// Leases found expired when they were to end or be renewed.
    Expired,
    /// Ends and renewals the store did not apply (ends are sent again).
    Failed,
}

impl LeaseStat {
    pub const ALL: [LeaseStat; 5] =
        [LeaseStat::Taken, LeaseStat::Released, LeaseStat::Renewed, LeaseStat::Expired, LeaseStat::Failed];

    pub fn name(self) -> &'static str {
        match self {
            LeaseStat::Taken => "taken",
            LeaseStat::Released => "released",
            LeaseStat::Renewed => "renewed",
            LeaseStat::Expired => "expired",
            LeaseStat::Failed => "failed",
        }
    }
}

/// The counters of shaping (`tollgate.shape.<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShapeStat {
    /// Requests admitted at a later turn and held until then.
    Delayed,
    /// Requests refused without a store call: a rule had `max_waiting`
    /// requests held or being decided.
    Full,
    /// Turns of held requests that went away, given back in the store.
    GivenBack,
    /// Give-backs the store did not apply (or that could not be sent).
    GiveBackFailed,
    /// Slot groups of a request across slots moved to its target (a
    /// give-back, then a decision with a floor).
    Moved,
    /// Requests across slots denied because their rounds ran out.
    GaveUp,
}

impl ShapeStat {
    pub const ALL: [ShapeStat; 6] = [
        ShapeStat::Delayed,
        ShapeStat::Full,
        ShapeStat::GivenBack,
        ShapeStat::GiveBackFailed,
        ShapeStat::Moved,
        ShapeStat::GaveUp,
    ];

    /// The stat name suffix: `tollgate.shape.<name>`.
    pub fn name(self) -> &'static str {
        match self {
            ShapeStat::Delayed => "delayed",
            ShapeStat::Full => "full",
            ShapeStat::GivenBack => "given_back",
            ShapeStat::GiveBackFailed => "give_back_failed",
            ShapeStat::Moved => "moved",
            ShapeStat::GaveUp => "gave_up",
        }
    }
}

/// The counters of a rule with `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CountStat {
    /// Units recorded on admission (reservations).
    Reserved,
    /// Units the settled requests cost in the end.
    Settled,
    /// Units given back (reservation beyond the cost).
    Refunded,
    /// Settlements the store did not apply.
    Failed,
    /// Responses that did not say their cost (missing or not an integer,
    /// or a body past `max_body_bytes`): the reservation stood in.
    CostFallback,
}

impl CountStat {
    pub const ALL: [CountStat; 5] =
        [CountStat::Reserved, CountStat::Settled, CountStat::Refunded, CountStat::Failed, CountStat::CostFallback];

    /// The stat name suffix: `tollgate.rule.<rule>.<name>`.
    pub fn name(self) -> &'static str {
        match self {
            CountStat::Reserved => "reserved",
            CountStat::Settled => "settled",
            CountStat::Refunded => "refunded",
            CountStat::Failed => "settle_failed",
            CountStat::CostFallback => "cost_fallback",
        }
    }
}

/// A gauge the worker sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gauge {
    /// Commands sent on the store stream and not yet answered.
    InFlight,
    /// Requests the worker holds: waiting for the store, or answered and
    /// waiting for a VM entry's budget to resume them ([`super::verdict`]).
    Held,
    /// Requests admitted at a later turn, held until then (shaping).
    Waiting,
}

impl Gauge {
    pub const ALL: [Gauge; 3] = [Gauge::InFlight, Gauge::Held, Gauge::Waiting];
}

/// How loud a log line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
}

/// Logs a kind of event (through [`Host::log`]) at most once per [`Throttle::INTERVAL_MS`].
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

/// The host the worker runs in.
pub trait Host {
    /// Opens a stream to `cluster` with `metadata` (e.g. the master's
    /// address); its events arrive with the returned token. Only from the
    /// worker's own callbacks (never a request's).
    fn open_stream(&mut self, cluster: &str, metadata: &[(&str, &str)]) -> Result<u32, String>;
    /// Sends bytes on an open stream.
    fn send(&mut self, stream: u32, bytes: &[u8]) -> Result<(), String>;
    /// Resets a stream; no more events arrive for it.
    fn cancel(&mut self, stream: u32);
    /// Lets paused request `id` go on (with the shadow-mode report for the
    /// upstream, if any). A request that is gone is ignored.
    fn admit(&mut self, id: u32, shadow_denied: Option<&str>);
    /// [`Host::admit`] for a request held `delay_ms` for its turn
    /// (shaping): the upstream is told the delay.
    fn admit_delayed(&mut self, id: u32, shadow_denied: Option<&str>, delay_ms: u64);
    /// Answers request `id` with a local reply.
    fn reply(&mut self, id: u32, reply: &LocalReply);
    /// Records what was decided about request `id` (for the access log),
    /// before its verdict is carried out. A request that is gone is ignored.
    fn decided(&mut self, id: u32, record: &Record<'_>);
    /// Lets the paused response of request `id` go on, with `headers` added.
    /// A request that is gone is ignored.
    fn resume_response(&mut self, id: u32, headers: &[Header]);
    /// Removes a header from the request being started (`on_request`).
    fn remove_request_header(&mut self, name: &str);
    /// Adds `by` to a counter: gathered, and reported to the proxy when
    /// the VM entry ends (or later, see [`Host::report_stats_later`]).
    fn count(&mut self, stat: Stat, by: u64);
    /// Whether counts or gauge moves are gathered and not yet reported
    /// (never, for a host that reports each at once).
    fn unreported_stats(&self) -> bool {
        false
    }
    /// What is gathered waits for a later entry instead of being reported
    /// when this one ends (the worker's tick reports it within a tick).
    fn report_stats_later(&mut self) {}
    /// Moves a gauge by `delta` (the gauge is shared by every worker, so
    /// each adds its own change).
    fn gauge(&mut self, gauge: Gauge, delta: i64);
    /// Records one store round trip, in ms.
    fn record_store_time(&mut self, ms: u64);
    /// Records the delay of one request held for its turn, in ms.
    fn record_shape_delay(&mut self, ms: u64);
    /// Calls `on_tick` every `period` (zero: never).
    fn set_tick(&mut self, period: Duration);
    /// Calls `on_wake` soon, from the worker's own context; false if it
    /// cannot (the tick then does the same within a tick).
    fn wake(&mut self) -> bool;
    fn log(&mut self, level: Level, message: &str);
}

/// The response of a request, as the worker reads it.
pub trait ResponseView {
    /// A response header by lowercase name.
    fn header(&self, name: &str) -> Option<Vec<u8>>;
    /// `:status`.
    fn status(&self) -> Option<u16> {
        std::str::from_utf8(&self.header(":status")?).ok()?.parse().ok()
    }
}

/// What the response's own callback does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFlow {
    /// Add the request's headers (`ResponseHeaders`) and go on.
    Continue,
    /// Pause the response (and buffer its body) until its settlement
    /// replies: the worker resumes it with its headers
    /// ([`Host::resume_response`]).
    Pause,
    /// Go on: the worker added the headers already, in this callback (a
    /// pause released within it).
    Released,
    /// Add the request's headers, go on, and hand every body chunk to
    /// `Worker::on_response_body`.
    ReadBody,
}
