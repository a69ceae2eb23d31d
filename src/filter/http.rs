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
use crate::plan::RequestView;
use crate::worker::{Flow, ResponseFlow, ResponseHeaders, ResponseView};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, BufferType, MapType};
use std::cell::RefCell;
use std::rc::Rc;

pub struct Http {
    id: u32,
    limiter: Option<Rc<Limiter>>,
    /// Given to the worker with the request (None: the worker never saw
    /// it), filled by the worker when it admits the request.
    headers: Option<ResponseHeaders>,
    /// The request waits for its body (the worker reads a reservation).
    reading_request_body: bool,
    /// The worker decides the request on its body: later chunks wait too.
    deciding: bool,
    /// The response's body goes to the worker (it reads a cost).
    reading_response_body: bool,
}

impl Http {
    pub fn new(id: u32, limiter: Option<Rc<Limiter>>) -> Self {
        Self { id, limiter, headers: None, reading_request_body: false, deciding: false, reading_response_body: false }
    }

    /// The limiter, if the worker saw this request.
    fn seen(&self) -> Option<&Rc<Limiter>> {
        self.headers.as_ref().and(self.limiter.as_ref())
    }

    fn action(flow: Option<Flow>) -> Action {
        match flow {
            Some(Flow::Pause | Flow::ReadBody) => Action::Pause,
            Some(Flow::Continue) | None => Action::Continue,
        }
    }

    /// The request body buffered so far (`body_size` bytes, or unknown) to
    /// the worker, as much of it as it asks for (`Worker::request_body_take`).
    fn request_body(&mut self, body_size: Option<usize>, end_of_stream: bool) -> Action {
        let Some(l) = self.seen() else { return Action::Continue };
        let take = l.worker.try_borrow().map_or(Some(0), |w| w.request_body_take(body_size, end_of_stream));
        let Some(take) = take else { return Action::Pause }; // Envoy buffers it.
        let bytes = hostcalls::get_buffer(BufferType::HttpRequestBody, 0, take).ok().flatten().unwrap_or_default();
        let id = self.id;
        let flow = l.with(id, |w, host| w.on_request_body(host, id, &bytes, end_of_stream, now_ms()));
        self.reading_request_body = false;
        self.deciding = flow == Some(Flow::Pause);
        Self::action(flow)
    }

    /// A chunk of the response body to the worker.
    fn response_body(&mut self, chunk: &[u8], end: bool) {
        if end {
            self.reading_response_body = false;
        }
        let Some(l) = self.seen() else { return };
        let id = self.id;
        l.with(id, |w, host| w.on_response_body(host, id, chunk, end, now_ms()));
    }
}

impl Drop for Http {
    // The context's deletion (`proxy_on_delete`).
    fn drop(&mut self) {
        tally::callback(|| {
            tally::count_request_done();
            let Some(l) = self.seen() else { return };
            if let Ok(mut worker) = l.worker.try_borrow_mut() {
                worker.on_gone(self.id);
            }
        })
    }
}

/// Headers kept per request, at most: one slot per name of
/// [`plan::Reads::headers_kept`](crate::plan::Reads) (names beyond are read each time).
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

/// Envoy's response headers seen through the worker's [`ResponseView`].
struct EnvoyResponse;

impl ResponseView for EnvoyResponse {
    fn status(&self) -> Option<u16> {
        std::str::from_utf8(&self.header(":status")?).ok()?.parse().ok()
    }

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
            let request = EnvoyRequest::new(&l.reads.headers_kept);
            if l.reads.prefilter && !l.any_rule_matches(&request) {
                return Action::Continue;
            }
            let id = self.id;
            let headers = ResponseHeaders::default();
            self.headers = Some(headers.clone());
            let flow = l.with(id, |w, host| w.on_request(host, id, &request, now_ms(), headers));
            match flow {
                Some(Flow::ReadBody) if end_of_stream => {
                    Self::action(l.with(id, |w, host| w.on_request_body(host, id, &[], true, now_ms())))
                }
                Some(Flow::ReadBody) => {
                    // The body comes only to headers that go on.
                    self.reading_request_body = true;
                    Action::Continue
                }
                flow => Self::action(flow),
            }
        })
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        tally::callback(|| {
            if self.reading_request_body {
                return self.request_body(Some(body_size), end_of_stream);
            }
            if self.deciding {
                // Decided on its first max_body_bytes: the rest waits with it.
                let id = self.id;
                if self.seen().is_some_and(|l| l.worker.try_borrow().is_ok_and(|w| w.waiting(id))) {
                    return Action::Pause;
                }
                self.deciding = false;
            }
            Action::Continue
        })
    }

    fn on_http_request_trailers(&mut self, _trailers: usize) -> Action {
        tally::callback(|| if self.reading_request_body { self.request_body(None, true) } else { Action::Continue })
    }

    fn on_http_response_headers(&mut self, _headers: usize, end_of_stream: bool) -> Action {
        tally::callback(|| {
            let Some(l) = self.seen() else { return Action::Continue };
            let id = self.id;
            let owed = l.worker.try_borrow().is_ok_and(|w| w.owes(id));
            let flow =
                if owed { l.with(id, |w, host| w.on_response(host, id, &EnvoyResponse, now_ms())) } else { None };
            match flow {
                // Its body waits with it.
                Some(ResponseFlow::Hold) => return Action::Pause,
                Some(ResponseFlow::Released) => return Action::Continue,
                Some(ResponseFlow::ReadBody) => self.reading_response_body = true,
                Some(ResponseFlow::Continue) | None => {}
            }
            if let Some(headers) = &self.headers {
                add_response_headers(&std::mem::take(&mut *headers.borrow_mut()));
            }
            if self.reading_response_body && end_of_stream {
                self.response_body(&[], true);
            }
            Action::Continue
        })
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        tally::callback(|| {
            if self.reading_response_body {
                let chunk = hostcalls::get_buffer(BufferType::HttpResponseBody, 0, body_size)
                    .ok()
                    .flatten()
                    .unwrap_or_default();
                self.response_body(&chunk, end_of_stream);
            }
            Action::Continue
        })
    }

    fn on_http_response_trailers(&mut self, _trailers: usize) -> Action {
        tally::callback(|| {
            if self.reading_response_body {
                self.response_body(&[], true);
            }
            Action::Continue
        })
    }

    fn on_log(&mut self) {
        tally::callback(|| ())
    }
}
