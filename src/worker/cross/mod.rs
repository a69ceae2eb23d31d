//! Requests whose keys hash to several Valkey Cluster slots: the pure
//! two-step protocol ([`protocol`]), the requests decided that way
//! ([`crossings::Crossings`]), and the replies to their parts ([`parts`]).

pub(super) mod crossings;
pub(super) mod parts;
pub mod protocol;
pub(super) mod start;
