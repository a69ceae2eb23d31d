//! The store and the ways to reach it: AUTH, TLS and Redis 7, error replies, failures under load, Sentinel, ACLs, Valkey commands per decision (and per lease call), synced rules on each topology.

mod auth;
mod errors;
mod failures;
mod lease_cost;
mod script_acl;
mod script_cost;
mod sentinel;
mod sync_topologies;
mod tls_redis7;
