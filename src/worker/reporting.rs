//! When the worker's stats reach the proxy's metrics, one host call per
//! metric changed (docs/configuration.md, "Stats"):
//!
//! * counters counted in the worker's own callbacks (a store reply, a
//!   wake-up, the tick) go when that callback ends, summed by metric;
//! * counters counted in a request's own callback go when it ends too,
//!   unless the tick runs at least every [`TICK`]: they then wait for the
//!   next tick's report, so that a busy worker reports each counter once
//!   per tick instead of once per request. Two requests counted less than
//!   a tick apart keep the tick at [`TICK`] until a tick finds nothing
//!   waiting. A counter is therefore at most a tick late;
//! * gauges go from the tick only, which runs while one is not 0, so they
//!   are at most a tick late as well, and the tick that stops reports them
//!   last.

use super::host::{Gauge, Host, TICK};
use std::time::Duration;

#[derive(Debug, Default)]
pub struct Reporting {
    /// The gauges' values last reported, in [`Gauge::ALL`] order.
    gauges: [i64; 3],
    /// Whether requests' counters wait for the tick: it then runs at
    /// least every [`TICK`].
    busy: bool,
    /// When a request's callback last counted something.
    counted_ms: Option<u64>,
}

impl Reporting {
    /// A request's own callback ends, with the tick running every `tick`
    /// (zero: not at all).
    pub fn request_ends(&mut self, host: &mut dyn Host, tick: Duration, now_ms: u64) {
        if !host.unreported_stats() {
            return;
        }
        if !tick.is_zero() && tick <= TICK {
            host.report_stats_later();
        }
        if self.counted_ms.is_some_and(|at| Duration::from_millis(now_ms.saturating_sub(at)) < TICK) {
            self.busy = true;
        }
        self.counted_ms = Some(now_ms);
    }

    /// The tick begins (and reports what waits): it stays at [`TICK`] for
    /// requests' counters while some came since the last one.
    pub fn tick_begins(&mut self, host: &dyn Host) {
        self.busy &= host.unreported_stats();
    }

    /// The tick ends: the gauges' changes since the last report, from
    /// their values `now` in [`Gauge::ALL`] order.
    pub fn tick_ends(&mut self, host: &mut dyn Host, now: [usize; 3]) {
        for ((gauge, value), reported) in Gauge::ALL.into_iter().zip(now).zip(&mut self.gauges) {
            let value = i64::try_from(value).unwrap_or(i64::MAX);
            if value != *reported {
                host.gauge(gauge, value - *reported);
                *reported = value;
            }
        }
    }

    /// Whether the tick must run at least every [`TICK`] for the counters
    /// that wait for it.
    pub fn busy(&self) -> bool {
        self.busy
    }
}
