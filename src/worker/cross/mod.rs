//! Requests whose keys hash to several Valkey Cluster slots: the pure
//! two-step protocol ([`protocol`]) and the rounds that hold a shaped one
//! ([`rounds`]); owns the requests decided that way
//! ([`crossings::Crossings`]); their start, undos, deadlines and parking,
//! one at a time per key ([`start`]), the replies to their parts and what
//! follows ([`parts`]), the rounds of a shaped one that waits ([`hold`]).
//! Given the worker's services ([`Cx`]) and the rooms a crossing informs
//! ([`Others`]) for each step.

pub(super) mod crossings;
pub(super) mod hold;
pub(super) mod parts;
pub mod protocol;
pub mod rounds;
pub(super) mod start;

use crate::worker::counting::owed::Settlements;
#[cfg(doc)]
use crate::worker::cx::Cx;
use crate::worker::leases::Leases;
use crate::worker::shaping::Holding;
use crate::worker::synced::Syncing;

/// The rooms a request across slots informs, lent for one step: what its
/// admission owes (its counting rules; under `failure_mode: local`, the
/// synced buckets the store learns of), its shaping, and its leases.
pub(in crate::worker) struct Others<'a> {
    pub settlements: &'a mut Settlements,
    pub synced: &'a mut Syncing,
    pub holding: &'a mut Holding,
    pub leases: &'a mut Leases,
}

/// The [`Others`] of worker `$w`: its rooms a crossing informs, borrowed
/// field by field.
macro_rules! others {
    ($w:ident) => {
        &mut $crate::worker::cross::Others {
            settlements: &mut $w.settlements,
            synced: &mut $w.synced,
            holding: &mut $w.holding,
            leases: &mut $w.leases,
        }
    };
}
pub(in crate::worker) use others;
