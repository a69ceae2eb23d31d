//! Requests whose keys hash to several Valkey Cluster slots: the pure
//! two-step protocol ([`protocol`]) and the rounds that hold a shaped one
//! ([`rounds`]); owns the requests decided that way
//! ([`crossings::Crossings`]); their start, undos and deadlines
//! ([`start`]), the replies to their parts and what follows ([`parts`]),
//! the rounds of a shaped one that waits ([`hold`]), one at a time per key
//! ([`park`]).

pub(super) mod crossings;
pub(super) mod hold;
pub(super) mod park;
pub(super) mod parts;
pub mod protocol;
pub mod rounds;
pub(super) mod start;
