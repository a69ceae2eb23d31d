//! Counting on the response: reservations, settlements, bodies read for their cost.

mod bodies;
mod leases;
mod settle;
