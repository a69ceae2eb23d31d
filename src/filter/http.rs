//! The limiter's per-request context: hands the request to the worker, and
//! adds the headers of an admitted request to its response. A request that
//! no rule can match (see [`crate::plan::Reads::prefilter`]) is let go at
//! once: no clock read, no allocation, no worker. For rules that count on the
//! response it also hands the worker the request's body (a reservation read
//! from it), the response's status and headers, and its body (a cost read
//! from it), and holds the response while the worker settles.
//!
//! Envoy's proxy-wasm host turns a `Pause` of the headers into "stop all
//! iteration": no body callback comes until they are resumed. So a request
//! whose reservation is in its body lets its headers go on and pauses its
//! body (Envoy buffers it) until the worker decided; Envoy's buffer filter
//! right after tollgate keeps the request from the router until then
//! (docs/configuration.md).

use super::host::add_response_headers;
use super::hostcalls;
use super::limiter::{now_ms, Limiter};
use super::tally;
use crate::plan::kept::{Kept, Source};
use crate::worker::{BodyStep, Flow, ResponseFlow, ResponseHeaders, ResponseView};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, BufferType, MapType};
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

    /// The limiter, if the worker saw this request.
    fn seen(&self) -> Option<&Rc<Limiter>> {
        self.headers.as_ref().and(self.limiter.as_ref())
    }

    fn action(flow: Option<Flow>) -> Action {
        match flow {
            Some(Flow::Pause) => Action::Pause,
            // A body the worker reads comes only to headers that go on.
            Some(Flow::Continue | Flow::ReadBody) | None => Action::Continue,
        }
    }

    /// The request body buffered so far (`body_size` bytes, or unknown at
    /// the trailers), as the worker says ([`Worker::request_body_step`]).
    fn request_body(&mut self, body_size: Option<usize>, end_of_stream: bool) -> BodyStep {
        let Some(l) = self.seen() else { return BodyStep::Pass };
        let id = self.id;
        l.worker.try_borrow().map_or(BodyStep::Pass, |w| w.request_body_step(id, body_size, end_of_stream))
    }

    /// The first `take` bytes of the request body to the worker.
    fn read_request_body(&self, take: usize, end_of_stream: bool) -> Action {
        let Some(l) = self.seen() else { return Action::Continue };
        let bytes = hostcalls::get_buffer(BufferType::HttpRequestBody, 0, take).ok().flatten().unwrap_or_default();
        let id = self.id;
        Self::action(l.with(id, |w, host| w.on_request_body(host, id, &bytes, end_of_stream, now_ms())))
    }

    /// The limiter, if the worker reads this request's response body.
    fn reading_response_body(&self) -> Option<&Rc<Limiter>> {
        let id = self.id;
        self.seen().filter(|l| l.worker.try_borrow().is_ok_and(|w| w.reads_response_body(id)))
    }

    /// A chunk of the response body to the worker.
    fn response_body(l: &Limiter, id: u32, chunk: &[u8], end: bool) {
        l.with(id, |w, host| w.on_response_body(host, id, chunk, end, now_ms()));
    }
}

impl Drop for Http {
    // The context's deletion (`proxy_on_delete`).
    fn drop(&mut self) {
        tally::callback(|| {
            tally::count_request_done();
            let Some(l) = self.seen() else { return };
            let id = self.id;
            // Ending leases takes a VM entry (its calls go out in it);
            // any other request's end touches no host.
            if l.worker.try_borrow().is_ok_and(|w| w.holds_leases(id)) {
                l.with(id, |w, host| w.on_gone(host, id, now_ms()));
            } else if let Ok(mut worker) = l.worker.try_borrow_mut() {
                worker.on_gone_unleased(id);
            }
        })
    }
}

/// Envoy's request headers and attributes, one host call each; seen by the
/// pure core through [`Kept`], which asks for each header once per request.
struct EnvoyRequest;

impl Source for EnvoyRequest {
    fn read_header(&self, name: &str) -> Option<Vec<u8>> {
        hostcalls::get_map_value_bytes(MapType::HttpRequestHeaders, name).ok().flatten()
    }

    fn read_property(&self, path: &[String]) -> Option<Vec<u8>> {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        hostcalls::get_property(path).ok().flatten()
    }
}

/// Envoy's response headers seen through the worker's [`ResponseView`].
struct EnvoyResponse;

impl ResponseView for EnvoyResponse {
    fn header(&self, name: &str) -> Option<Vec<u8>> {
        hostcalls::get_map_value_bytes(MapType::HttpResponseHeaders, name).ok().flatten()
    }
}

impl Context for Http {
    fn on_done(&mut self) -> bool {
        tally::callback(|| true)
    }
}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _headers: usize, end_of_stream: bool) -> Action {
        tally::callback(|| {
            let Some(l) = &self.limiter else { return Action::Continue };
            let request = Kept::new(EnvoyRequest, &l.reads.headers_kept);
            if l.reads.prefilter && !l.any_rule_matches(&request) {
                return Action::Continue;
            }
            let id = self.id;
            let headers = ResponseHeaders::default();
            self.headers = Some(headers.clone());
            let entry = (headers, end_of_stream);
            Self::action(l.with(id, |w, host| w.on_request_headers(host, id, &request, entry, now_ms())))
        })
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        tally::callback(|| match self.request_body(Some(body_size), end_of_stream) {
            BodyStep::Read(take) => self.read_request_body(take, end_of_stream),
            BodyStep::Wait => Action::Pause,
            BodyStep::Pass => Action::Continue,
        })
    }

    fn on_http_request_trailers(&mut self, _trailers: usize) -> Action {
        tally::callback(|| match self.request_body(None, true) {
            BodyStep::Read(take) => self.read_request_body(take, true),
            BodyStep::Wait | BodyStep::Pass => Action::Continue,
        })
    }

    fn on_http_response_headers(&mut self, _headers: usize, end_of_stream: bool) -> Action {
        tally::callback(|| {
            let Some(l) = self.seen() else { return Action::Continue };
            let id = self.id;
            // Asked without entering the worker: a local reply's headers
            // come while the worker that sent it is busy.
            let owed = l.worker.try_borrow().is_ok_and(|w| w.owes(id));
            let entry = (&EnvoyResponse as &dyn ResponseView, end_of_stream);
            let flow = if owed { l.with(id, |w, host| w.on_response_headers(host, id, entry, now_ms())) } else { None };
            match flow {
                // Its body waits with it.
                Some(ResponseFlow::Pause) => return Action::Pause,
                Some(ResponseFlow::Released) => return Action::Continue,
                Some(ResponseFlow::ReadBody | ResponseFlow::Continue) | None => {}
            }
            if let Some(headers) = &self.headers {
                add_response_headers(&std::mem::take(&mut *headers.borrow_mut()));
            }
            Action::Continue
        })
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        tally::callback(|| {
            if let Some(l) = self.reading_response_body() {
                let chunk = hostcalls::get_buffer(BufferType::HttpResponseBody, 0, body_size)
                    .ok()
                    .flatten()
                    .unwrap_or_default();
                Self::response_body(l, self.id, &chunk, end_of_stream);
            }
            Action::Continue
        })
    }

    fn on_http_response_trailers(&mut self, _trailers: usize) -> Action {
        tally::callback(|| {
            if let Some(l) = self.reading_response_body() {
                Self::response_body(l, self.id, &[], true);
            }
            Action::Continue
        })
    }

    fn on_log(&mut self) {
        tally::callback(|| ())
    }
}
