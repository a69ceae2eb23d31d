//! The calls between Envoy and the module per request, counted for tests
//! and benchmarks: host calls (the module calling Envoy, see
//! [`super::hostcalls`]), callbacks (Envoy entering the module) and buffers
//! (Envoy allocating an answer in the module's memory, one more entry).
//!
//! Counting is a few integer additions and always on. Reporting is off
//! unless the limiter's VM has `TOLLGATE_COUNT_HOST_CALLS=1` in its
//! environment (`vm_config.environment_variables`): then every callback ends
//! by adding what it counted to the counters `tollgate.cost.requests`
//! (request contexts created), `.host_calls`, `.callbacks`, `.buffers` and
//! `.requests_done` (request contexts deleted, added last: once it equals
//! `.requests`, the others hold every request's whole count; the names
//! keep their `cost` prefix, an interface of the benchmarks). Those
//! reporting calls go to the host directly and are not counted themselves
//! (they exist only while counting).

use proxy_wasm::hostcalls;
use proxy_wasm::types::MetricType;
use std::cell::{Cell, RefCell};

/// The environment variable that turns reporting on (value `1`).
pub const ENV: &str = "TOLLGATE_COUNT_HOST_CALLS";

const REQUESTS: usize = 0;
const HOST_CALLS: usize = 1;
const CALLBACKS: usize = 2;
const BUFFERS: usize = 3;
const DONE: usize = 4;
/// In the order they are reported: `requests_done` last.
const NAMES: [&str; 5] = [
    "tollgate.cost.requests",
    "tollgate.cost.host_calls",
    "tollgate.cost.callbacks",
    "tollgate.cost.buffers",
    "tollgate.cost.requests_done",
];

/// The counters' handles and the totals they were last given.
struct Report {
    handles: [Option<u32>; 5],
    reported: [u64; 5],
}

thread_local! {
    static COUNTS: Cell<[u64; 5]> = const { Cell::new([0; 5]) };
    static REPORT: RefCell<Option<Report>> = const { RefCell::new(None) };
}

fn bump(which: usize) {
    COUNTS.with(|c| {
        let mut counts = c.get();
        if let Some(n) = counts.get_mut(which) {
            *n = n.wrapping_add(1);
        }
        c.set(counts);
    });
}

pub fn count_host_call() {
    bump(HOST_CALLS);
}

pub fn count_buffer() {
    bump(BUFFERS);
}

/// A request context was created.
pub fn count_request() {
    bump(REQUESTS);
}

/// A request context was deleted.
pub fn count_request_done() {
    bump(DONE);
}

/// Whether this VM's environment asks for the report.
pub fn asked() -> bool {
    std::env::var(ENV).is_ok_and(|v| v == "1")
}

/// Turns reporting on for this VM (from the limiter's `on_configure`).
pub fn enable() {
    let handles = NAMES.map(|name| hostcalls::define_metric(MetricType::Counter, name).ok());
    let reported = COUNTS.with(Cell::get);
    REPORT.with(|r| *r.borrow_mut() = Some(Report { handles, reported }));
    log::info!("tollgate: {ENV}=1: reporting host calls and VM entries (tollgate.cost.*), for tests and benchmarks");
}

/// Runs one callback: counts the entry, then reports if asked to.
pub fn callback<T>(f: impl FnOnce() -> T) -> T {
    bump(CALLBACKS);
    let out = f();
    report();
    out
}

fn report() {
    REPORT.with(|r| {
        let Ok(mut current) = r.try_borrow_mut() else { return };
        let Some(report) = current.as_mut() else { return };
        let counts = COUNTS.with(Cell::get);
        for ((handle, total), reported) in report.handles.iter().zip(counts).zip(report.reported.iter_mut()) {
            let delta = total.wrapping_sub(*reported);
            if let (Some(id), true) = (handle, delta > 0) {
                let _ = hostcalls::increment_metric(*id, i64::try_from(delta).unwrap_or(i64::MAX));
            }
            *reported = total;
        }
    });
}
