//! The heavy loads through a real Envoy and Valkey: floods of 2,048 clients,
//! a steady load across a veth link, the soak. A binary of their own: a load
//! takes both cores, so it runs with nothing else of the suite beside it
//! (`make integration` runs this binary after `tests/live`, one test at a
//! time, and each load holds [`support::alone`] besides). `make flood`,
//! `make netns-load` and `make soak` run them longer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

#[path = "../support/mod.rs"]
mod support;

mod bounds_sync;
mod flood;
mod netns;
mod overrides;
mod reload;
mod shaping;
mod soak;
mod sync;
