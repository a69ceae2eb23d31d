//! The limiter's per-request context: hands the request to the worker, and
//! adds the headers of an admitted request to its response.

use super::root::{now_ms, Limiter};
use crate::plan::RequestView;
use crate::worker::{Flow, ResponseHeaders};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, MapType};
use std::rc::Rc;

pub struct Http {
    id: u32,
    limiter: Option<Rc<Limiter>>,
    /// Filled by the worker when it admits the request.
    headers: ResponseHeaders,
}

impl Http {
    pub fn new(id: u32, limiter: Option<Rc<Limiter>>) -> Self {
        Self { id, limiter, headers: ResponseHeaders::default() }
    }
}

impl Drop for Http {
    fn drop(&mut self) {
        if let Some(l) = &self.limiter {
            if let Ok(mut worker) = l.worker.try_borrow_mut() {
                worker.on_gone(self.id);
            }
        }
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
        let Some(l) = &self.limiter else { return Action::Continue };
        let (id, headers) = (self.id, self.headers.clone());
        match l.with(id, |w, host| w.on_request(host, id, &EnvoyRequest, now_ms(), headers)) {
            Some(Flow::Pause) => Action::Pause,
            Some(Flow::Continue) | None => Action::Continue,
        }
    }

    fn on_http_response_headers(&mut self, _headers: usize, _end_of_stream: bool) -> Action {
        let headers = std::mem::take(&mut *self.headers.borrow_mut());
        for (name, value) in headers {
            if let Err(status) = hostcalls::add_map_value(MapType::HttpResponseHeaders, &name, &value) {
                log::warn!("tollgate: could not add response header {name}: {status:?}");
            }
        }
        Action::Continue
    }
}
