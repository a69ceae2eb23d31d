//! The floor: a proxy-wasm HTTP filter that makes the host calls one of
//! tollgate's paths makes per request, and computes nothing else. Measured
//! beside tollgate in one run (scripts/bench/floor.py), it prices what
//! Envoy itself charges for a path, which no module can go below
//! (docs/performance.md, "The floor"). Its plugin configuration names the
//! path:
//!
//! - `pass`: reads `:path` and continues (a request no rule matches).
//! - `local`: reads the key's header and the clock and continues; on the
//!   response adds the two `RateLimit` headers, sets the decision's filter
//!   state and counts two counters (a synced rule's admitted request).
//! - `hold`: as `store` below, without the store: the requests held are
//!   resumed by the next tick (every 1 ms), which prices the hold alone.
//! - `store`: as `local`, but holds the request until the store answers:
//!   the requests that arrive while a message is in flight leave together
//!   in the next one (one `PING` per message, through tollgate's stream and
//!   its framing shim to Valkey), and each gets its filter state and is
//!   resumed when its reply comes; the counters count once per reply.
//! - `sized`: as `store`, but the message carries, for each request it
//!   answers, an `ECHO` of 100 bytes instead of one `PING` for all: about
//!   the bytes tollgate's `FCALL` and its reply carry per decision, out and
//!   back, so that the stream, the internal listener and the shim move
//!   what they move for tollgate (`store` against `sized` prices them).
//!
//! A bench instrument: errors are ignored, nothing is decided.

use proxy_wasm::hostcalls as host;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, BufferType, ContextType, MapType, MetricType};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(proxy_wasm::types::LogLevel::Warn);
    proxy_wasm::set_root_context(|id| -> Box<dyn RootContext> {
        Box::new(Root { id, shared: Rc::new(RefCell::new(Shared::default())) })
    });
}}

#[derive(Clone, Copy, Default, PartialEq)]
enum Path {
    #[default]
    Pass,
    Local,
    Hold,
    Store,
    Sized,
}

#[derive(Default)]
struct Shared {
    path: Path,
    root: u32,
    counters: [u32; 2],
    messages: u32,
    stream: Option<u32>,
    /// Requests held for the next message, and those the message in
    /// flight answers.
    waiting: Vec<u32>,
    in_flight: Vec<u32>,
}

/// What tollgate answers for the bench's rule (one window of 10⁹ per hour).
const POLICY: &str = "\"bench/1h\";q=1000000000;w=3600";
const RATELIMIT: &str = "\"bench/1h\";r=999999999;t=1792";
const RECORD: &[u8] = b"decider=local answer=allowed rules=bench denied_by=- remaining=bench/1h:999999999 store_ms=-";

/// A `PING` (Envoy's gRPC client adds the message prefix the shim strips).
const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
/// `sized`'s command per request: 122 bytes out, 107 back.
const ECHO: &[u8] = b"*2\r\n$4\r\nECHO\r\n$100\r\n\
0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789\r\n";

impl Shared {
    /// Sends the waiting requests' message, if none is in flight.
    fn pump(&mut self, effective: u32) {
        let Some(stream) = self.stream else { return };
        if !self.in_flight.is_empty() || self.waiting.is_empty() {
            return;
        }
        if effective != self.root {
            let _ = host::set_effective_context(self.root);
        }
        let sized = (self.path == Path::Sized).then(|| ECHO.repeat(self.waiting.len()));
        if host::send_grpc_stream_message(stream, Some(sized.as_deref().unwrap_or(PING)), false).is_ok() {
            std::mem::swap(&mut self.in_flight, &mut self.waiting);
        }
    }

    /// Resumes every request of `ids`, each with its decision's filter
    /// state, and counts them once (as tollgate sums a message's counts).
    fn resume(&self, ids: &mut Vec<u32>) {
        let n = ids.len() as i64;
        for id in ids.drain(..) {
            // A request whose client left is gone (BadArgument).
            if host::set_effective_context(id).is_ok() {
                set_decision();
                let _ = host::resume_http_request();
            }
        }
        if n > 0 {
            for id in self.counters {
                let _ = host::increment_metric(id, n);
            }
        }
    }
}

extern "C" {
    fn proxy_set_property(path: *const u8, path_size: usize, value: *const u8, value_size: usize) -> u32;
}

/// The decision's filter state, as tollgate sets it: through the ABI,
/// since the SDK's call panics when the request is gone (a client that
/// left while its request was held).
fn set_decision() {
    const NAME: &[u8] = b"tollgate.decision";
    // SAFETY: both pointers and lengths come from live slices.
    unsafe { proxy_set_property(NAME.as_ptr(), NAME.len(), RECORD.as_ptr(), RECORD.len()) };
}

struct Root {
    id: u32,
    shared: Rc<RefCell<Shared>>,
}

impl Context for Root {
    fn on_grpc_stream_message(&mut self, _token: u32, size: usize) {
        let _ = host::get_buffer(BufferType::GrpcReceiveBuffer, 0, size);
        let mut s = self.shared.borrow_mut();
        let _ = host::increment_metric(s.messages, 1);
        let mut ids = std::mem::take(&mut s.in_flight);
        s.resume(&mut ids);
        s.pump(0);
    }

    fn on_grpc_stream_close(&mut self, _token: u32, status: u32) {
        log::warn!("floor: stream closed: {status}");
        let mut s = self.shared.borrow_mut();
        s.stream = None;
        let mut ids = std::mem::take(&mut s.in_flight);
        ids.append(&mut s.waiting);
        s.resume(&mut ids);
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, _: usize) -> bool {
        let text = self.get_plugin_configuration().unwrap_or_default();
        let mut s = self.shared.borrow_mut();
        s.root = self.id;
        s.path = match String::from_utf8_lossy(&text).trim() {
            "local" => Path::Local,
            "hold" => Path::Hold,
            "store" => Path::Store,
            "sized" => Path::Sized,
            _ => Path::Pass,
        };
        for (i, name) in ["floor.rule.allowed", "floor.sync.allowed"].iter().enumerate() {
            if let (Ok(id), Some(slot)) = (host::define_metric(MetricType::Counter, name), s.counters.get_mut(i)) {
                *slot = id;
            }
        }
        if let Ok(id) = host::define_metric(MetricType::Counter, "floor.messages") {
            s.messages = id;
        }
        match s.path {
            Path::Store | Path::Sized => drop(host::set_tick_period(Duration::from_millis(50))),
            Path::Hold => drop(host::set_tick_period(Duration::from_millis(1))),
            _ => {}
        }
        true
    }

    fn on_tick(&mut self) {
        let mut s = self.shared.borrow_mut();
        if s.path == Path::Hold {
            let mut ids = std::mem::take(&mut s.waiting);
            s.resume(&mut ids);
            return;
        }
        // Only a worker's VM gets requests (the main thread's could not
        // reach the internal listener).
        if s.stream.is_none() && !s.waiting.is_empty() {
            s.stream = host::open_grpc_stream("tollgate_valkey", "tollgate.Store", "Pipe", vec![])
                .map_err(|e| log::warn!("floor: open: {e:?}"))
                .ok();
            s.pump(self.id);
        }
    }

    fn create_http_context(&self, id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Http { id, shared: self.shared.clone() }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Http {
    id: u32,
    shared: Rc<RefCell<Shared>>,
}

impl Context for Http {}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _: usize, _: bool) -> Action {
        let mut s = self.shared.borrow_mut();
        if s.path == Path::Pass {
            let _ = host::get_map_value_bytes(MapType::HttpRequestHeaders, ":path");
            return Action::Continue;
        }
        let _ = host::get_map_value_bytes(MapType::HttpRequestHeaders, "x-user-id");
        let _ = host::get_current_time();
        if s.path == Path::Local {
            return Action::Continue;
        }
        s.waiting.push(self.id);
        if matches!(s.path, Path::Store | Path::Sized) {
            s.pump(self.id);
        }
        Action::Pause
    }

    fn on_http_response_headers(&mut self, _: usize, _: bool) -> Action {
        let s = self.shared.borrow();
        if s.path == Path::Pass {
            return Action::Continue;
        }
        let _ = host::add_map_value(MapType::HttpResponseHeaders, "ratelimit-policy", POLICY);
        let _ = host::add_map_value(MapType::HttpResponseHeaders, "ratelimit", RATELIMIT);
        if s.path == Path::Local {
            set_decision();
            for id in s.counters {
                let _ = host::increment_metric(id, 1);
            }
        }
        Action::Continue
    }
}
