//! [`Host`] over proxy-wasm: each of the worker's requests is one host call
//! (or a few), whose failures are handled, never unwrapped. Effects on
//! another request than the one whose callback runs make it the effective
//! context first and give the callback's own context back after (the
//! filter's reads of the request, through `plan::RequestView`, go to the
//! effective context). In the worker's own callbacks (a stream's message or
//! close, a wake-up, the tick), which read no request, the callback's
//! context comes back only before a call that acts on it (the store
//! stream, the tick) and when the entry ends: the requests one reply
//! admits switch from one to the next, one host call each instead of two.
//! Stat increments are gathered ([`Sums`]) and added to Envoy's metrics
//! when the VM entry ends, or at a later one when the worker says so
//! (`crate::worker::reporting`).

use super::hostcalls;
use super::metrics::{self, Metrics};
use crate::answer::response::{Header, LocalReply, DELAY_HEADER, SHADOW_HEADER};
use crate::worker::stats::Sums;
use crate::worker::{Gauge, Host, Level, Record, Stat, DECISION_PROPERTY};
use proxy_wasm::types::MapType;
use std::time::Duration;

/// The gRPC service and method of the store stream: the tunnel's route
/// matches any path, the names only show up in Envoy's logs.
pub const STREAM_SERVICE: &str = "tollgate.Store";
pub const STREAM_METHOD: &str = "Pipe";

/// What a worker's VM entries reuse instead of allocating anew: the stat
/// increments of an entry (drained when it ends) and a decision's text.
#[derive(Debug, Default)]
pub struct Scratch {
    sums: Sums,
    text: String,
}

/// The host as seen from one callback (one VM entry) of context `current`.
pub struct EnvoyHost<'a> {
    ctx: Effective,
    metrics: &'a Metrics,
    wake_queue: Option<u32>,
    /// The request other than `current` whose decision is set as its
    /// property with its verdict (the worker carries it out next): one
    /// host call instead of three. Its text waits in the scratch buffer.
    decision: Option<u32>,
    /// The stat increments gathered (this VM entry's, and those earlier
    /// entries left for later), and a buffer for a decision's text: the
    /// worker's, lent for the entry.
    scratch: &'a mut Scratch,
    /// Whether the stats gathered wait for a later entry.
    later: bool,
}

/// Which context the host calls of an entry act on: the callback's own
/// (`current`), or a request the worker answers (set as effective).
struct Effective {
    current: u32,
    /// As last set (`current` at the entry's start).
    effective: u32,
    /// Whether `current` comes back only when needed (the worker's own
    /// callbacks) rather than after each request's effects.
    lazy: bool,
}

impl Effective {
    /// Runs `f` with request `id` as the effective context; false if it is
    /// gone.
    fn on(&mut self, id: u32, f: impl FnOnce()) -> bool {
        if id != self.effective {
            if hostcalls::set_effective_context(id).is_err() {
                return false;
            }
            self.effective = id;
        }
        f();
        if !self.lazy {
            self.back();
        }
        true
    }

    /// Makes the callback's own context the effective one again.
    fn back(&mut self) {
        if self.effective != self.current {
            let _ = hostcalls::set_effective_context(self.current);
            self.effective = self.current;
        }
    }
}

impl<'a> EnvoyHost<'a> {
    /// The host of a request's callback (`lazy` false) or of the worker's
    /// own (`lazy` true: see the module's text).
    pub fn new(
        current: u32,
        shared: (&'a Metrics, &'a mut Scratch),
        wake_queue: Option<u32>,
        lazy: bool,
    ) -> EnvoyHost<'a> {
        let (metrics, scratch) = shared;
        let ctx = Effective { current, effective: current, lazy };
        EnvoyHost { ctx, metrics, wake_queue, decision: None, scratch, later: false }
    }

    /// Sets the decision still pending, if any (its verdict was deferred).
    fn emit_decision(&mut self) {
        if let Some(id) = self.decision {
            self.verdict(id, || {});
        }
    }

    /// Carries out request `id`'s verdict (`f`) with it as the effective
    /// context, its decision first if it is the one pending.
    fn verdict(&mut self, id: u32, f: impl FnOnce()) {
        let pending = self.decision.take_if(|d| *d == id).is_some();
        let text = &self.scratch.text;
        self.ctx.on(id, || {
            if pending {
                set_decision(text);
            }
            f();
        });
    }

    /// The VM entry ends: a decision still pending is set, and the stats
    /// gathered go to Envoy unless the worker left them for later. The
    /// effective context is left as
    /// it is: the host resets it when the entry returns (proxy-wasm's
    /// `SaveRestoreContext`), and metrics belong to the VM, not a context.
    pub fn finish(&mut self) {
        self.emit_decision();
        if !self.later {
            metrics::emit(&mut self.scratch.sums);
        }
    }
}

impl Host for EnvoyHost<'_> {
    fn open_stream(&mut self, cluster: &str, metadata: &[(&str, &str)]) -> Result<u32, String> {
        self.ctx.back();
        let metadata: Vec<(&str, &[u8])> = metadata.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
        hostcalls::open_grpc_stream(cluster, STREAM_SERVICE, STREAM_METHOD, metadata).map_err(|s| format!("{s:?}"))
    }

    fn send(&mut self, stream: u32, bytes: &[u8]) -> Result<(), String> {
        self.ctx.back();
        hostcalls::send_grpc_stream_message(stream, Some(bytes), false).map_err(|s| format!("{s:?}"))
    }

    fn cancel(&mut self, stream: u32) {
        self.ctx.back();
        let _ = hostcalls::cancel_grpc_stream(stream);
    }

    fn admit(&mut self, id: u32, shadow_denied: Option<&str>) {
        let current = self.ctx.current;
        self.verdict(id, || {
            if let Some(value) = shadow_denied {
                let _ = hostcalls::set_map_value(MapType::HttpRequestHeaders, SHADOW_HEADER, Some(value));
            }
            // The request being started goes on by returning Continue.
            if id != current {
                if let Err(status) = hostcalls::resume_http_request() {
                    log::warn!("tollgate: could not resume request: {status:?}");
                }
            }
        });
    }

    fn admit_delayed(&mut self, id: u32, shadow_denied: Option<&str>, delay_ms: u64) {
        self.ctx.on(id, || {
            let value = delay_ms.to_string();
            let _ = hostcalls::set_map_value(MapType::HttpRequestHeaders, DELAY_HEADER, Some(value.as_str()));
        });
        self.admit(id, shadow_denied);
    }

    fn reply(&mut self, id: u32, reply: &LocalReply) {
        self.verdict(id, || {
            let headers: Vec<(&str, &str)> = reply.headers.iter().map(|(k, v)| (&**k, v.as_str())).collect();
            if let Err(status) = hostcalls::send_local_response(reply.status, reply.details, &headers, &reply.body) {
                log::warn!("tollgate: could not send local reply: {status:?}");
            }
        });
    }

    fn decided(&mut self, id: u32, record: &Record<'_>) {
        self.emit_decision();
        let text = &mut self.scratch.text;
        text.clear();
        record.push_plain(text);
        if id == self.ctx.current {
            set_decision(text);
        } else {
            // Set with its verdict, which comes next.
            self.decision = Some(id);
        }
    }

    fn resume_response(&mut self, id: u32, headers: &[Header]) {
        let current = self.ctx.current;
        self.ctx.on(id, || {
            add_response_headers(headers);
            // A response released in its own callback goes on by returning
            // Continue.
            if id != current {
                if let Err(status) = hostcalls::resume_http_response() {
                    log::warn!("tollgate: could not resume response: {status:?}");
                }
            }
        });
    }

    fn remove_request_header(&mut self, name: &str) {
        self.ctx.back();
        let _ = hostcalls::remove_map_value(MapType::HttpRequestHeaders, name);
    }

    fn count(&mut self, stat: Stat, by: u64) {
        self.metrics.count(&mut self.scratch.sums, stat, by);
    }

    fn unreported_stats(&self) -> bool {
        !self.scratch.sums.is_empty()
    }

    fn report_stats_later(&mut self) {
        self.later = true;
    }

    fn gauge(&mut self, gauge: Gauge, delta: i64) {
        self.metrics.gauge(&mut self.scratch.sums, gauge, delta);
    }

    fn record_store_time(&mut self, ms: u64) {
        self.metrics.store_time(ms);
    }

    fn record_shape_delay(&mut self, ms: u64) {
        self.metrics.shape_delay(ms);
    }

    fn set_tick(&mut self, period: Duration) {
        self.ctx.back();
        let _ = hostcalls::set_tick_period(period);
    }

    fn wake(&mut self) -> bool {
        self.wake_queue.is_some_and(|queue| hostcalls::enqueue_shared_queue(queue, Some(b"w")).is_ok())
    }

    fn log(&mut self, level: Level, message: &str) {
        match level {
            Level::Info => log::info!("{message}"),
            Level::Warn => log::warn!("{message}"),
        }
    }
}

/// Adds `headers` to the effective context's response.
pub fn add_response_headers(headers: &[Header]) {
    for (name, value) in headers {
        if let Err(status) = hostcalls::add_map_value(MapType::HttpResponseHeaders, name, value) {
            log::warn!("tollgate: could not add response header {name}: {status:?}");
        }
    }
}

/// Sets the effective context's decision (filter state `wasm.tollgate.decision`).
fn set_decision(text: &str) {
    if let Err(status) = hostcalls::set_property(DECISION_PROPERTY, text.as_bytes()) {
        log::warn!("tollgate: could not record the decision: {status:?}");
    }
}
