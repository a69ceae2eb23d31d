//! The thin proxy-wasm glue: the only module (with the entry point in
//! `lib.rs`) that touches `proxy_wasm`. It reads the plugin configuration,
//! turns request headers into a [`crate::plan::RequestView`], sends the
//! store call through the Envoy cluster, and copies the pure core's answer
//! back into Envoy. Host calls are made through `proxy_wasm::hostcalls`,
//! whose results are handled instead of unwrapped.

mod apply;
mod discovery;
mod http;
mod metrics;
mod root;

use proxy_wasm::traits::RootContext;
use proxy_wasm::types::LogLevel;

/// Registers the root context factory (called from `_initialize`).
pub fn register() {
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|id| -> Box<dyn RootContext> { Box::new(root::Root::new(id)) });
}
