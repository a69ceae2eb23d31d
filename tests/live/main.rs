//! The tests that run real processes: Envoy with the built module, Valkey
//! (standalone, Sentinel, cluster; Redis 7 with TLS), Docker Compose stacks.
//! `make integration` runs them, two at a time, after `make build`. One
//! module per topic; what they share (the processes, clients, builders) is
//! `tests/support`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

#[path = "../support/mod.rs"]
mod support;

mod access_log;
mod auth;
mod charges;
mod cli_simulate_envoy;
mod cluster;
mod cluster_changes;
mod cluster_count;
mod cluster_cross;
mod cluster_shaping;
mod compose;
mod compose_cluster;
mod config_limits_envoy;
mod differential;
mod differential_adjust;
mod differential_cross;
mod differential_flush;
mod differential_props;
mod differential_shape;
mod e2e;
mod e2e_algorithms;
mod e2e_fast;
mod e2e_logins;
mod e2e_rules;
mod e2e_shaping;
mod e2e_shaping_count;
mod e2e_tokens;
mod envoy_gateway;
mod failures;
mod hostile_requests;
mod istio;
mod monitoring;
mod packaging;
mod packaging_compose;
mod packaging_ecds;
mod request_cost;
mod script_acl;
mod script_cost;
mod sentinel;
mod shaping_bounds;
mod store_errors;
mod sync_topologies;
mod tls_redis7;
