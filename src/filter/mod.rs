//! The thin proxy-wasm glue: the only module (with the entry point in
//! `lib.rs`) that touches `proxy_wasm`. It turns callbacks into the
//! [`crate::worker::Worker`]'s events and carries out what the worker asks
//! of its host ([`host`]); as the store tunnel's framing shim ([`shim`]) it
//! moves body chunks through [`crate::framing`]. No decision is made here.
//! Every host call goes through [`hostcalls`], which counts it ([`tally`]);
//! two of them reach the ABI through [`abi`] instead of the SDK.

mod abi;
mod host;
mod hostcalls;
mod http;
mod limiter;
mod metrics;
mod root;
mod shim;
mod tally;

use proxy_wasm::traits::RootContext;
use proxy_wasm::types::LogLevel;

/// Registers the root context factory (called from `_initialize`).
pub fn register() {
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|id| -> Box<dyn RootContext> { Box::new(root::Root::new(id)) });
}
