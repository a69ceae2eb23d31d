//! The tests that need only the host: no Envoy, no Valkey, no built module,
//! nothing from `.tools/` (the `tollgate` command is built by cargo for
//! them). `make unit` runs them beside the unit and doc tests. They must not
//! use `tests/support`, which starts processes: the plugin configuration
//! builder they share is `src/testing/plugin.rs`, included here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

#[path = "../../src/testing/plugin.rs"]
mod plugin;

mod bench_charts;
mod cli;
mod cli_ops;
mod config_fixtures;
mod config_limits;
mod docs_examples;
mod docs_links;
mod resp_properties;
mod schema;
