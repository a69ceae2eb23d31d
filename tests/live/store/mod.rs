//! The store and the ways to reach it: AUTH, TLS and Redis 7, error replies, failures under load, Sentinel, ACLs, Valkey commands per decision, synced rules on each topology.

mod auth;
mod errors;
mod failures;
mod script_acl;
mod script_cost;
mod sentinel;
mod sync_topologies;
mod tls_redis7;
