//! A Valkey Cluster: routing by slot, redirections, requests across slots and their failures, settlements on each slot's master.

pub mod basics;
pub mod cross;
pub mod cross_failures;
pub mod failures;
pub mod settle;
