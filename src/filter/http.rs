//! The per-request context: plan the checks, answer from the denial cache or
//! hand them to the worker's batcher (the root sends the store calls), and
//! add headers to the response. The store's answer is applied by
//! [`super::apply`].

use super::apply::{apply_failure, deny_from_cache};
use super::root::{now_ms, Shared};
use crate::batch::Submit;
use crate::plan::{plan, RequestView};
use crate::response::SHADOW_HEADER;
use crate::store::Failure;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, BufferType, MapType};
use std::rc::Rc;

/// Largest store reply read back (a batch of script replies).
const MAX_REPLY_BYTES: usize = 4 << 20;

/// Headers of a store call through the tunnel.
pub fn store_call_headers() -> Vec<(&'static str, &'static str)> {
    vec![
        (":method", "POST"),
        (":path", "/tollgate"),
        (":authority", "tollgate-store"),
        ("content-type", "application/octet-stream"),
    ]
}

/// The `:status` and body of the store call being answered. A timed-out or
/// failed call has no response at all: the host then has no header map and
/// no body, and proxy-wasm's accessors would panic, so they are not asked.
pub fn call_response(num_headers: usize, body_size: usize) -> (Option<String>, Vec<u8>) {
    let status = (num_headers > 0)
        .then(|| hostcalls::get_map_value_bytes(MapType::HttpCallResponseHeaders, ":status").ok().flatten())
        .flatten()
        .map(|s| String::from_utf8_lossy(&s).into_owned());
    let body = (body_size > 0)
        .then(|| {
            hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size.min(MAX_REPLY_BYTES)).ok().flatten()
        })
        .flatten()
        .unwrap_or_default();
    (status, body)
}

pub struct Http {
    id: u32,
    shared: Option<Rc<Shared>>,
}

impl Http {
    pub fn new(id: u32, shared: Option<Rc<Shared>>) -> Self {
        Self { id, shared }
    }
}

impl Drop for Http {
    fn drop(&mut self) {
        let Some(shared) = &self.shared else { return };
        shared.batcher.borrow_mut().cancel(self.id);
        shared.response_headers.borrow_mut().remove(&self.id);
        shared.arrivals.borrow_mut().remove(&self.id);
    }
}

/// Envoy's request headers and attributes seen through the pure core's
/// [`RequestView`].
struct EnvoyRequest;

impl RequestView for EnvoyRequest {
    fn header(&self, name: &str) -> Option<Vec<u8>> {
        hostcalls::get_map_value_bytes(MapType::HttpRequestHeaders, name).ok().flatten()
    }

    fn property(&self, path: &[String]) -> Option<Vec<u8>> {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        hostcalls::get_property(path).ok().flatten()
    }
}

impl Context for Http {}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _headers: usize, _end_of_stream: bool) -> Action {
        let Some(shared) = self.shared.clone() else { return Action::Continue };
        let mut now_override = None;
        if let Some(name) = &shared.config.testing.now_header {
            let value = EnvoyRequest.header(name);
            now_override = value.and_then(|v| std::str::from_utf8(&v).ok()?.trim().parse().ok());
            // The test clock never reaches the upstream.
            let _ = hostcalls::remove_map_value(MapType::HttpRequestHeaders, name);
        }
        // A client must not be able to forge the shadow-mode report (only
        // meaningful, and so only removed, where shadow mode is configured).
        if shared.any_shadow {
            let _ = hostcalls::remove_map_value(MapType::HttpRequestHeaders, SHADOW_HEADER);
        }
        let planned = plan(&shared.config, &EnvoyRequest);
        for rule in &planned.skipped {
            shared.metrics.skipped(*rule);
        }
        if planned.checks.is_empty() {
            return Action::Continue;
        }
        let local_ms = now_ms();
        let now = now_override.unwrap_or(local_ms);
        if let Some(action) = deny_from_cache(&shared, &planned.checks, now) {
            return action;
        }
        shared.arrivals.borrow_mut().insert(self.id, now);
        let timeout_ms = u64::try_from(shared.config.valkey.timeout.as_millis()).unwrap_or(u64::MAX);
        match shared.batcher.borrow_mut().submit(self.id, planned.checks, now_override, local_ms, timeout_ms) {
            Submit::Queued => {}
            Submit::Overflow => {
                shared.metrics.queue_overflow();
                let failure = Failure::Unavailable("store call queue full".into());
                return apply_failure(&shared, self.id, &failure, false);
            }
        }
        shared.kick();
        Action::Pause
    }

    fn on_http_response_headers(&mut self, _headers: usize, _end_of_stream: bool) -> Action {
        let Some(shared) = &self.shared else { return Action::Continue };
        let headers = shared.response_headers.borrow_mut().remove(&self.id).unwrap_or_default();
        for (name, value) in headers {
            if let Err(status) = hostcalls::add_map_value(MapType::HttpResponseHeaders, &name, &value) {
                log::warn!("tollgate: could not add response header {name}: {status:?}");
            }
        }
        Action::Continue
    }
}
