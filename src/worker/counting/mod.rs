//! Counting on the response (`rules[].count`): what a request reserves on
//! admission ([`reserve`]), what its response says it cost ([`cost`],
//! [`body`]), and the settlement that corrects the store's record
//! ([`settle`]: its call and its reply). Owns what admitted requests owe
//! ([`owed::Settlements`]).

pub(super) mod body;
pub(super) mod cost;
pub(super) mod owed;
pub(super) mod reserve;
pub(super) mod settle;
