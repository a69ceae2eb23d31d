//! The calls a worker holds, what every room speaks of: a request's
//! decision, a part of a request decided across cluster slots, a
//! settlement of a response, a turn given back, a flush ([`Call`], by
//! [`CallId`], whose kind names the room that owns it), each with what it
//! runs on the store ([`Command`]) and its request's clock ([`Arrival`]).
//! Their table ([`table::Calls`], owned by the streams): each call waits in
//! the queue of its shard (the store stream it goes to) until it is sent,
//! then until its reply. In cluster mode a call waits in the [`PARKED`] queue until the
//! worker knows the slot map. Bounded by the worker (the queues by
//! `valkey.max_queue`, the sent ones by each stream's bounds).

pub(super) mod clock;
pub(super) mod table;

pub use clock::{epoch_ms, Arrival};

use crate::limiter::script::{
    encode_adjust, encode_call, encode_floored_call, encode_flush, encode_lease, encode_shaped_call, Invocation, Script,
};
use crate::limiter::{Adjustment, Check, Flush, LeaseOp};
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
    /// A held request's turn given back (shaping).
    GiveBack(u32),
    /// A flush of synced rules' buckets.
    Flush(u32),
    /// Leases ended or renewed (concurrency limits).
    Lease(u32),
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
    /// What the call runs on the store, as the room that made it chose.
    pub command: Command,
    /// What the call is, for its owner.
    pub call: Call,
}

impl Pending {
    /// A call a room makes (no response headers of its own), not sent yet,
    /// for `shard` (and `slot`, in cluster mode).
    pub fn made(
        checks: Vec<Check>,
        arrival: Arrival,
        (shard, slot): (ShardId, Option<u16>),
        command: Command,
        call: Call,
    ) -> Pending {
        Pending {
            checks,
            arrival,
            noscripts: 0,
            headers: ResponseHeaders::default(),
            sent: false,
            shard,
            slot,
            redirects: 0,
            asking: false,
            command,
            call,
        }
    }
}

/// What a call runs on the store: the room that makes a call chooses it
/// (how a decision is shaped, what an adjust changes, what a flush
/// carries); the streams write it over the call's checks.
#[derive(Debug, Clone)]
pub enum Command {
    /// `decide` over the checks: unshaped, shaped (the request may wait
    /// up to `max_delay` ms for its turn), or floored across slots
    /// (`(max_delay, floor)`, docs/shaping.md "Across slots").
    Decide(Shape),
    /// `adjust` of these records, decided at `at_ms` on the store's clock.
    Adjust { adjustments: Vec<Adjustment>, at_ms: u64 },
    /// `flush` of synced buckets.
    Flush(Flush),
    /// `lease`: leases ended or renewed.
    Lease(Vec<LeaseOp>),
}

/// How a decision is shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Unshaped,
    Shaped(u64),
    Floored(u64, u64),
}

impl Command {
    /// Writes the command over `checks` into `out`, invoked `how`
    /// (`now_override`: the request's test clock).
    pub fn write(&self, out: &mut Vec<u8>, script: &Script, how: Invocation, checks: &[Check], now: Option<u64>) {
        match self {
            Command::Decide(Shape::Unshaped) => encode_call(out, script, how, checks, now),
            Command::Decide(Shape::Shaped(delay)) => encode_shaped_call(out, script, how, checks, *delay, now),
            Command::Decide(Shape::Floored(delay, floor)) => {
                encode_floored_call(out, script, how, checks, (*delay, *floor), now);
            }
            Command::Adjust { adjustments, at_ms } => encode_adjust(out, script, how, adjustments, *at_ms, now),
            Command::Flush(flush) => encode_flush(out, script, how, flush, None),
            Command::Lease(ops) => encode_lease(out, script, how, ops, now),
        }
    }

    /// An `adjust` or a flush: its script has a SHA of its own, so after a
    /// `NOSCRIPT` it goes as `EVAL` itself.
    pub fn own_script(&self) -> bool {
        !matches!(self, Command::Decide(_))
    }

    /// Its owner reads the reply itself (a flush's, a lease call's),
    /// unless it is an error.
    pub fn raw_reply(&self) -> bool {
        matches!(self, Command::Flush(_) | Command::Lease(_))
    }
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
    /// A gone held request's record taken back from its turn (`adjust` of
    /// `checks` to 0; shaping).
    GiveBack,
    /// What a worker admitted in synced rules' buckets (`checks`), sent to
    /// the store, which answers their windows.
    Flush(FlushCall),
    /// Leases of `checks` ended or renewed (its command says which).
    Lease,
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
    /// limiter admitted, carried to the store).
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
