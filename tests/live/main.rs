//! The tests that run real processes: Envoy with the built module, Valkey
//! (standalone, Sentinel, cluster; Redis 7 with TLS), Docker Compose stacks.
//! `make integration` runs them, two at a time, after `make build`. One
//! module per topic; what they share (the processes, clients, builders) is
//! `tests/support`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

#[path = "../support/mod.rs"]
mod support;

mod cluster;
mod differential;
mod e2e;
mod operations;
mod packaging;
mod shaping;
mod store;
