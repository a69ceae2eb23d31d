//! Host-only stand-ins for what surrounds the worker, shared by the unit
//! tests, `tollgate simulate` and the fuzz target; never in the wasm module
//! (its tests aside). [`store::ModelStore`] answers a worker's store stream
//! with the pure models of the algorithms ([`crate::limiter::model`]);
//! [`cross`] is the reference of the decision across slots, run over those
//! models or over real Valkey servers (`tests/live/differential/cross.rs`);
//! [`host::RecordingHost`] is the worker's [`crate::worker::Host`] recording
//! what it was asked, with a request and a response to hand the worker.
//!
//! Beside the algorithms' model rather than inside it: these build on the
//! worker and the RESP codec, which build on `limiter`, so under `limiter`
//! they would make it import a module that imports it. Nothing but tests
//! and the CLI imports this one.

pub mod cross;
pub mod host;
pub mod sim;
pub mod store;
