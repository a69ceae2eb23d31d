//! The calls a worker holds, what every room speaks of: a request's
//! decision, a part of a request decided across cluster slots, a
//! settlement of a response ([`Call`], by [`CallId`]), each with its
//! request's clock ([`Arrival`]). Owns their table ([`table::Calls`]): each call
//! waits in the queue of its shard (the store stream it goes to, see
//! [`crate::worker::stream::shards`]) until it is sent, then until its
//! reply. In cluster mode a call waits in the [`PARKED`] queue until the
//! worker knows the slot map. Bounded by the worker (the queues by
//! `valkey.max_queue`, the sent ones by each stream's bounds).

pub(super) mod clock;
pub(super) mod table;

pub use clock::{epoch_ms, Arrival};

use crate::limiter::{Adjustment, Check};
use crate::worker::host::ResponseHeaders;

/// A held call, by what it is for; each kind counts its own ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallId {
    /// A request's decision, under its context id.
    Request(u32),
    /// A part of a request decided across slots (a step of one slot group).
    Part(u32),
    /// A settlement of a response.
    Settlement(u32),
    /// A held request's slot given back (shaping).
    GiveBack(u32),
    /// A flush of synced rules' buckets.
    Flush(u32),
}

/// A shard of the worker (one store stream), by a number never reused.
pub type ShardId = u32;
/// The queue of calls waiting for the slot map (cluster mode).
pub const PARKED: ShardId = ShardId::MAX;

/// One request waiting for its decision.
#[derive(Debug, Clone)]
pub struct Pending {
    pub checks: Vec<Check>,
    /// When its request arrived (or, for a call made later on its behalf,
    /// when the call was made), and the request's clock.
    pub arrival: Arrival,
    /// `NOSCRIPT` answers it got (its call is sent again after each: the
    /// script did not run).
    pub noscripts: u8,
    /// Where the admitted request's response headers go.
    pub headers: ResponseHeaders,
    /// On the stream, awaiting its reply (else queued).
    pub sent: bool,
    /// The shard whose queue it waits in, or whose stream it was sent on.
    pub shard: ShardId,
    /// The hash slot of its checks (cluster mode).
    pub slot: Option<u16>,
    /// `MOVED` and `ASK` redirections it followed.
    pub redirects: u8,
    /// Its call goes after `ASKING` (it follows an `ASK`).
    pub asking: bool,
    /// What the call is.
    pub call: Call,
}

/// What a held call is.
#[derive(Debug, Clone)]
pub enum Call {
    /// A request's decision (held under its context id).
    Decide,
    /// A step of one slot group of a request decided across cluster slots.
    Part(Part),
    /// A settlement (`adjust` of `checks`) of a response.
    Settle(SettleCall),
    /// A gone held request's record taken back from its slot (`adjust` of
    /// `checks` to 0, at this time on the store's clock; shaping).
    GiveBack(u64),
    /// What a worker admitted in synced rules' buckets (`checks`), sent to
    /// the store, which answers their windows.
    Flush(FlushCall),
}

impl Call {
    /// An `adjust` (an undo, a settlement) or a flush: its script has a
    /// SHA of its own, so after a `NOSCRIPT` it goes as `EVAL` itself.
    pub fn own_script(&self) -> bool {
        match self {
            Call::Decide => false,
            Call::Part(part) => part.undo_at().is_some(),
            Call::Settle(_) | Call::GiveBack(_) | Call::Flush(_) => true,
        }
    }

    /// Not a request of its own: no request deadline applies (the request
    /// it serves has its own, or a held response has).
    pub fn serves_another(&self) -> bool {
        !matches!(self, Call::Decide)
    }
}

/// What a part of a request decided across slots does (its `Pending`'s
/// `part`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// A decision of group `group` of request `parent`: shaped with
    /// `(max_delay, floor)` when `shape` says so (docs/shaping.md, "Across
    /// slots"), else unshaped.
    Decide { parent: u32, group: usize, shape: Option<(u64, u64)> },
    /// The undo of that group, which the store decided at `at_ms` (its clock).
    Undo { parent: u32, group: usize, at_ms: u64 },
}

impl Part {
    /// When the decision it undoes was made, for an undo.
    pub fn undo_at(self) -> Option<u64> {
        match self {
            Part::Undo { at_ms, .. } => Some(at_ms),
            Part::Decide { .. } => None,
        }
    }
}

/// A settlement on the store stream (the call of its [`Pending`]).
#[derive(Debug, Clone)]
pub struct SettleCall {
    /// The request's context, whose response may be held.
    pub context: u32,
    /// When the store decided the request, on its clock.
    pub at_ms: u64,
    /// `(from, to)` per check of the pending.
    pub units: Vec<(u64, u64)>,
    /// The local limiter already settled the request (it decided it).
    pub local: bool,
}

impl SettleCall {
    /// The adjustments of this settlement over `checks` (its pending's).
    pub fn adjustments(&self, checks: &[Check]) -> Vec<Adjustment> {
        checks
            .iter()
            .zip(&self.units)
            .map(|(check, &(from, to))| Adjustment { check: check.clone(), from, to })
            .collect()
    }
}

/// A flush on the store stream (the call of its [`Pending`], whose checks
/// are the flushed buckets').
#[derive(Debug, Clone)]
pub struct FlushCall {
    /// The synced rule whose buckets these are (`None`: units the local
    /// limiter admitted, owed to the store).
    pub rule: Option<usize>,
    /// Units admitted per check of the pending since its last flush.
    pub units: Vec<u64>,
    /// Unique per flush: the store applies a flush sent again only once.
    pub token: String,
    /// The worker's name among the buckets' syncers.
    pub syncer: String,
    /// The series of the flush's token key ([`crate::key::flush_token_key`]).
    pub series: String,
    pub horizon_ms: u64,
    /// When the flush was cut (proxy clock): it is dropped, not sent again,
    /// once its longest period has passed.
    pub cut_ms: u64,
    /// A join (nothing to record: the store only notes the syncer); its
    /// reply gives no view, and it is not sent again.
    pub join: bool,
}
