//! # tollgate
//!
//! Transactional, multi-window rate limiting for Envoy, compiled to a proxy-wasm
//! filter, with its state in Valkey (or Redis).
//!
//! A request may match several rules, and every rule may have several windows
//! (for example *20 per 60 s* **and** *5 per 3 s*). One atomic Lua script decides
//! for every window of every matching rule at once: the request is admitted only
//! if all of them have room, and a rejected request consumes nothing anywhere.
//!
//! The crate is a *pure core with thin glue*: only `filter` (and the wasm
//! entry point below) touches `proxy_wasm`, and it only turns callbacks into
//! the [`worker::Worker`]'s events and the worker's [`worker::Host`] calls
//! into host calls. Everything else — configuration, rule matching, key
//! building, the RESP codec, the script contract, the header formatting and
//! the worker itself (requests from arrival to answer over one store stream,
//! deadlines, bounds, the denial cache, Sentinel discovery) — is plain Rust
//! that runs and is tested on the host with time passed in. [`cli`]
//! (host-only, never in the module) runs the same parser and models on an
//! operator's machine: the `tollgate` command. `model` (host-only too) holds
//! what the worker is run against outside Envoy: a store that answers with
//! the pure models, the reference of the decision across slots, and a
//! recording host.
//!
//! ```
//! use tollgate::config::Config;
//! use tollgate::plan::{plan, RequestView};
//!
//! let config = Config::from_json(br#"{
//!   "valkey": { "cluster": "tollgate_valkey" },
//!   "rules": [{
//!     "name": "auth.createToken",
//!     "match": { "path_prefix": "/auth/token", "methods": ["POST"] },
//!     "key": [ { "header": "x-user-id" } ],
//!     "limits": [ { "limit": 20, "period": "60s" }, { "limit": 5, "period": "3s" } ]
//!   }]
//! }"#).unwrap();
//!
//! struct Req;
//! impl RequestView for Req {
//!     fn header(&self, name: &str) -> Option<Vec<u8>> {
//!         match name {
//!             ":method" => Some(b"POST".to_vec()),
//!             ":path" => Some(b"/auth/token".to_vec()),
//!             "x-user-id" => Some(b"alice".to_vec()),
//!             _ => None,
//!         }
//!     }
//!     fn property(&self, _path: &[String]) -> Option<Vec<u8>> { None }
//! }
//!
//! let checks = plan(&config, &Req).checks;
//! assert_eq!(checks.len(), 1);
//! assert_eq!(checks[0].key, "tollgate:{auth.createToken:alice}:log");
//! assert_eq!(checks[0].windows.len(), 2);
//! ```
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

pub mod answer;
pub mod blocks;
pub mod cache;
#[cfg(not(target_family = "wasm"))]
pub mod cli;
pub mod config;
pub mod framing;
pub mod idhash;
pub mod key;
pub mod limiter;
#[cfg(any(test, not(target_family = "wasm"), feature = "v8-profile"))]
pub mod model;
pub mod plan;
pub mod resp;
pub mod store;
pub mod worker;

#[cfg(test)]
mod testing;

#[cfg(all(target_arch = "wasm32", target_os = "wasi"))]
pub mod filter;

/// The module's allocator: small blocks from free lists ([`blocks`]). One
/// thread only, hence not with wasm32's atomics.
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
#[global_allocator]
static ALLOCATOR: blocks::Blocks<std::alloc::System> = blocks::Blocks::new(std::alloc::System);

/// The module's entry point: Envoy calls `_initialize`, which registers the
/// root context factory. The macro's generated code needs `unsafe`.
#[cfg(all(target_arch = "wasm32", target_os = "wasi"))]
#[allow(unsafe_code)]
mod entry {
    proxy_wasm::main! {{
        super::filter::register();
    }}
}
