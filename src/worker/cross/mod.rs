//! Requests whose keys hash to several Valkey Cluster slots: the pure
//! two-step protocol ([`protocol`]); owns the requests decided that way
//! ([`crossings::Crossings`]); their start, undos and deadlines
//! ([`start`]), and the replies to their parts and what follows
//! ([`parts`]).

pub(super) mod crossings;
pub(super) mod parts;
pub mod protocol;
pub(super) mod start;
