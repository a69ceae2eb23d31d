//! The limiter's per-request context: hands the request to the worker, and
//! adds the headers of an admitted request to its response. A request that
//! no rule can match (see [`Limiter::prefilter`]) is let go at once: no
//! clock read, no allocation, no worker.

use super::cost;
use super::hostcalls;
use super::root::{now_ms, Limiter};
use crate::plan::RequestView;
use crate::worker::{Flow, ResponseHeaders};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, MapType};
use std::cell::RefCell;
use std::rc::Rc;

pub struct Http {
    id: u32,
    limiter: Option<Rc<Limiter>>,
    /// Given to the worker with the request (None: the worker never saw
    /// it), filled by the worker when it admits the request.
    headers: Option<ResponseHeaders>,
}

impl Http {
    pub fn new(id: u32, limiter: Option<Rc<Limiter>>) -> Self {
        Self { id, limiter, headers: None }
    }
}

impl Drop for Http {
    // The context's deletion (`proxy_on_delete`).
    fn drop(&mut self) {
        cost::callback(|| {
            cost::count_request_done();
            let (Some(l), Some(_)) = (&self.limiter, &self.headers) else { return };
            if let Ok(mut worker) = l.worker.try_borrow_mut() {
                worker.on_gone(self.id);
            }
        })
    }
}

/// Headers kept per request, at most: one slot per name of
/// [`Limiter::headers_kept`] (names beyond are read each time).
const KEPT: usize = 8;

/// Envoy's request headers and attributes seen through the pure core's
/// [`RequestView`]. A header the rules may read more than once is asked of
/// Envoy once per request, however many rules (and the prefilter) read it.
struct EnvoyRequest<'a> {
    names: &'a [String],
    kept: RefCell<[Option<Option<Vec<u8>>>; KEPT]>,
}

impl<'a> EnvoyRequest<'a> {
    fn new(names: &'a [String]) -> Self {
        EnvoyRequest { names, kept: RefCell::new(Default::default()) }
    }
}

fn read_header(name: &str) -> Option<Vec<u8>> {
    hostcalls::get_map_value_bytes(MapType::HttpRequestHeaders, name).ok().flatten()
}

impl RequestView for EnvoyRequest<'_> {
    fn header(&self, name: &str) -> Option<Vec<u8>> {
        let Some(slot) = self.names.iter().take(KEPT).position(|n| n == name) else {
            return read_header(name);
        };
        let Ok(mut kept) = self.kept.try_borrow_mut() else { return read_header(name) };
        let Some(entry) = kept.get_mut(slot) else { return read_header(name) };
        entry.get_or_insert_with(|| read_header(name)).clone()
    }

    fn property(&self, path: &[String]) -> Option<Vec<u8>> {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        hostcalls::get_property(path).ok().flatten()
    }
}

impl Context for Http {
    fn on_done(&mut self) -> bool {
        cost::callback(|| true)
    }
}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _headers: usize, _end_of_stream: bool) -> Action {
        cost::callback(|| {
            let Some(l) = &self.limiter else { return Action::Continue };
            let request = EnvoyRequest::new(&l.headers_kept);
            if l.prefilter && !l.any_rule_matches(&request) {
                return Action::Continue;
            }
            let id = self.id;
            let headers = ResponseHeaders::default();
            self.headers = Some(headers.clone());
            match l.with(id, |w, host| w.on_request(host, id, &request, now_ms(), headers)) {
                Some(Flow::Pause) => Action::Pause,
                Some(Flow::Continue) | None => Action::Continue,
            }
        })
    }

    fn on_http_response_headers(&mut self, _headers: usize, _end_of_stream: bool) -> Action {
        cost::callback(|| {
            let Some(headers) = &self.headers else { return Action::Continue };
            let headers = std::mem::take(&mut *headers.borrow_mut());
            for (name, value) in headers {
                if let Err(status) = hostcalls::add_map_value(MapType::HttpResponseHeaders, &name, &value) {
                    log::warn!("tollgate: could not add response header {name}: {status:?}");
                }
            }
            Action::Continue
        })
    }

    // The callbacks below do nothing for the limiter. The framing shim needs
    // the body callbacks, so the module exports them and Envoy enters them
    // for every body chunk; `on_log` and `on_done` are not exported (see
    // docs/performance.md). They are implemented only to be counted.
    fn on_http_request_body(&mut self, _size: usize, _end_of_stream: bool) -> Action {
        cost::callback(|| Action::Continue)
    }

    fn on_http_response_body(&mut self, _size: usize, _end_of_stream: bool) -> Action {
        cost::callback(|| Action::Continue)
    }

    fn on_log(&mut self) {
        cost::callback(|| ())
    }
}
