//! The limiter's request/reply model: what one atomic store call is asked
//! ([`Check`]s, one per matching rule) and what it answers ([`Decision`]).
//!
//! Each [`Algorithm`] is specified twice: by the pure reference model in
//! [`model`] (time passed in, no I/O) and by its Lua file in `src/limiter/`
//! (`sliding_log.lua`, `gcra.lua`, `sliding_window.lua`, `fixed_window.lua`,
//! and `lease.lua` for [`Algorithm::Lease`]), which only makes the same
//! algorithm atomic inside Valkey. One script (`prelude.lua` + the algorithm
//! files + `decide.lua`, see [`script`]) dispatches per key on the
//! algorithm, so checks of different algorithms, lease sets included, are
//! still decided in one call, all or nothing. The differential tests run one
//! behaviour suite against the model and the script.

pub mod model;
pub mod reply;
pub mod script;

use std::num::NonZeroU64;
use std::rc::Rc;

/// How a rule's bucket counts (configuration field `algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Algorithm {
    /// The exact sliding log: one sorted-set entry per admitted unit.
    #[default]
    SlidingLog,
    /// The generic cell rate algorithm: one theoretical arrival time per window.
    Gcra,
    /// The sliding-window counter: current and previous fixed-window counts.
    SlidingWindow,
    /// Counters aligned to multiples of the period.
    FixedWindow,
    /// Not a rule's `algorithm`: a rule's `concurrency` limit, one lease per
    /// admitted request in a sorted set (`lease.lua`), its one window being
    /// (the limit, the lease TTL in ms). Never in [`Algorithm::ALL`].
    Lease,
}

impl Algorithm {
    /// Every algorithm, in documentation order.
    pub const ALL: [Algorithm; 4] =
        [Algorithm::SlidingLog, Algorithm::Gcra, Algorithm::SlidingWindow, Algorithm::FixedWindow];

    /// The configuration spelling.
    pub fn name(self) -> &'static str {
        match self {
            Self::SlidingLog => "sliding_log",
            Self::Gcra => "gcra",
            Self::SlidingWindow => "sliding_window",
            Self::FixedWindow => "fixed_window",
            Self::Lease => "concurrency",
        }
    }

    /// The algorithm named `name` in a configuration.
    pub fn from_name(name: &str) -> Option<Algorithm> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// Ms from a reply until every record a window counted then has left it:
    /// the window's `reset_ms`, but for the log, whose `reset_ms` is when
    /// only its oldest entry leaves, its period (0 when it counted none).
    pub fn empty_ms(self, reset_ms: u64, period_ms: u64) -> u64 {
        match (self, reset_ms) {
            (_, 0) => 0,
            (Self::SlidingLog, _) => period_ms,
            _ => reset_ms,
        }
    }

    /// The script's algorithm id and the suffix of the bucket's key, so that
    /// switching a rule's algorithm never reads another algorithm's data.
    pub fn id(self) -> &'static str {
        match self {
            Self::SlidingLog => "log",
            Self::Gcra => "gcra",
            Self::SlidingWindow => "sw",
            Self::FixedWindow => "fw",
            Self::Lease => "lease",
        }
    }

    /// Whether the algorithm computes with `limit × period_ms` and so needs it
    /// to stay within [`EXACT_PRODUCT_MAX`] (exact in Lua's doubles).
    pub fn needs_exact_product(self) -> bool {
        matches!(self, Self::Gcra | Self::SlidingWindow)
    }
}

/// 2^53: every integer up to this is exact in an IEEE double (Lua 5.1's only
/// number type). `gcra` and `sliding_window` compute with products no larger
/// than `limit × period_ms`, which the configuration keeps at or below this.
pub const EXACT_PRODUCT_MAX: u64 = 1 << 53;

/// One window of one rule: at most `limit` units per `period_ms` milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub limit: NonZeroU64,
    pub period_ms: NonZeroU64,
}

/// Everything the store must decide for one matching rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Index of the rule in the configuration.
    pub rule: usize,
    /// The Valkey key of the rule's bucket (see [`crate::key`]).
    pub key: String,
    /// The rule's windows, in configuration order (the rule's own, shared).
    pub windows: Rc<[Window]>,
    /// Units the request consumes in every window (1 unless configured).
    pub cost: NonZeroU64,
    /// How the bucket counts.
    pub algorithm: Algorithm,
    /// Only check that `cost` fits every window, and record nothing: a rule
    /// that counts on the response still denies on the request when its
    /// windows are full, and is charged afterwards (`adjust`).
    pub check_only: bool,
    /// A [`Algorithm::Lease`] check's lease id (1..64 bytes of
    /// `[0-9A-Za-z:._-]`, unique per request and worker): the member its
    /// admission records, and what ends or renews it ([`LeaseOp`]). `None`
    /// for every other algorithm.
    pub lease: Option<Rc<str>>,
    /// The key of the bucket's per-key override (a hash an operator writes
    /// with `tollgate override set`, read in the same call: limits in force
    /// instead of `windows`' until it expires), for a rule with
    /// `"overrides": true` ([`crate::key::override_key`]); `None` otherwise.
    /// The window check and the lease check of one rule share it.
    pub override_key: Option<Rc<str>>,
}

/// What happens to one lease (`lease.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseChange {
    /// The request ended: the lease is removed.
    End,
    /// The request goes on: a live lease expires `ttl_ms` after now.
    Renew { ttl_ms: u64 },
}

/// One lease's part of a `lease` call: its set's key (a lease check's
/// [`Check::key`]), its id ([`Check::lease`]) and what happens to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseOp {
    pub key: String,
    pub id: Rc<str>,
    pub change: LeaseChange,
}

/// The store's answer to a `lease` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseReply {
    /// The store's clock.
    pub now_ms: u64,
    /// Per op: the lease was live (ended or renewed by this call); false:
    /// it had expired or was never recorded, and stays gone.
    pub live: Vec<bool>,
}

/// A change to what one admitted request recorded in a bucket (`adjust`):
/// the request was decided at `at_ms` on the store's clock (a shaped
/// admission: at its turn), recording `from` units; it should have
/// recorded `to` (0 undoes it). More than `from` is
/// an extra charge, recorded now; less is a refund, taken from what the
/// request recorded where that can still be told apart (see each
/// algorithm's model).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adjustment {
    pub check: Check,
    pub from: u64,
    pub to: u64,
}

/// One bucket's part of a flush: `units` admitted locally in `check`'s
/// bucket since the worker's last flush (0 = only read the state). Units
/// beyond [`ADJUST_MAX`] are sent as [`ADJUST_MAX`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushEntry {
    pub check: Check,
    pub units: u64,
}

/// A flush (`flush.lua`): what a worker admitted locally per bucket since
/// its last flush, recorded once per `token`. Every entry's key must be in
/// the hash slot of `token_key` ([`crate::key::flush_token_key`]); at least
/// one entry, distinct keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flush {
    pub entries: Vec<FlushEntry>,
    /// 1..64 bytes, unique per flush; the same when a flush is sent again.
    pub token: String,
    /// 1..64 bytes naming the worker, the same for all its flushes.
    pub syncer: String,
    /// How long a syncer counts as active after its last flush (>= 1).
    pub horizon_ms: u64,
    /// Where the store remembers the last token applied.
    pub token_key: String,
}

/// The store's answer to a flush.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushReply {
    /// The units were recorded by this call (false: the token had been
    /// applied already, nothing was recorded).
    pub applied: bool,
    /// The buckets' state after the flush, as an admitting decision
    /// (`allowed` true, every `retry_ms` 0).
    pub state: Decision,
    /// Per entry: (active syncers of its bucket, this syncer included; this
    /// syncer's 0-based rank among them by name, bytewise).
    pub syncers: Vec<(u64, u64)>,
}

/// The most units one adjustment may charge or refund: far beyond any limit.
pub const ADJUST_MAX: u64 = 1 << 32;
/// The largest count a window counter keeps (extra charges, `adjust`, can
/// go past the limit): every sum stays exact in Lua's doubles.
pub const STATE_MAX: u64 = 1 << 52;

impl Check {
    /// The units a decision that admits records in this check's bucket
    /// (none for a check that only checks).
    pub fn recorded(&self) -> u64 {
        if self.check_only {
            0
        } else {
            self.cost.get()
        }
    }
}

#[cfg(test)]
impl Check {
    /// A sliding-log check for unit tests: `windows` as `(limit, period_ms)`.
    pub(crate) fn for_test(rule: usize, key: &str, windows: &[(u64, u64)], cost: u64) -> Check {
        crate::testing::check(Algorithm::SlidingLog, rule, key, windows, cost)
    }
}

/// The state of one window after the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowOutcome {
    /// Index of the check (and so of the rule, via [`Check::rule`]).
    pub check: usize,
    /// Index of the window within its rule.
    pub window: usize,
    /// The limit in force: the configured one, or an override's.
    pub limit: u64,
    pub period_ms: u64,
    /// An override of the bucket's limits applied to this decision (its
    /// check has an override key and the key held a live override).
    pub overridden: bool,
    /// Units still available in the window after this decision.
    pub remaining: u64,
    /// Milliseconds until the window is empty again (0 if it is): for the log,
    /// until the oldest counted entry leaves; see each algorithm's model.
    pub reset_ms: u64,
    /// Milliseconds until this request would fit this window; 0 if it fits now.
    /// A window with `retry_ms > 0` is one that denied the request.
    pub retry_ms: u64,
}

impl WindowOutcome {
    pub fn denied(&self) -> bool {
        self.retry_ms > 0
    }
}

/// The store's answer for one request: admitted in every window, or in none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// The store's clock (milliseconds since the Unix epoch) used for the decision.
    pub now_ms: u64,
    /// Every window of every check, in check order then window order.
    pub windows: Vec<WindowOutcome>,
    /// How long an admitted request of a shaped call waits for its turn (ms
    /// after `now_ms`; 0 = now, and always 0 unshaped): see docs/shaping.md.
    pub delay_ms: u64,
}

impl Decision {
    /// The windows that denied the request (empty when allowed).
    pub fn denied_by(&self) -> impl Iterator<Item = &WindowOutcome> {
        self.windows.iter().filter(|w| w.denied())
    }

    /// Milliseconds until the request would fit in every window at once.
    pub fn retry_after_ms(&self) -> u64 {
        self.windows.iter().map(|w| w.retry_ms).max().unwrap_or(0)
    }

    /// The window with the fewest remaining units (ties: the longest reset).
    pub fn most_constrained(&self) -> Option<&WindowOutcome> {
        self.windows.iter().min_by(|a, b| a.remaining.cmp(&b.remaining).then(b.reset_ms.cmp(&a.reset_ms)))
    }
}
