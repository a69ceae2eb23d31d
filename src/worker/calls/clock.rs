//! A request's clock: the proxy's, or under `testing.now_header` the one
//! the request brought, running on from its arrival at the proxy's pace;
//! and the proxy's clock read as ms since the epoch ([`epoch_ms`]).

use std::time::Duration;

/// `since_epoch` in whole ms. Not `Duration::as_millis`: its u128 multiply
/// is a call (`__multi3`) in wasm32, on every request. Seconds since the
/// epoch times 1,000 stay within u64 for 584 million years.
pub fn epoch_ms(since_epoch: Duration) -> u64 {
    since_epoch.as_secs().wrapping_mul(1_000).wrapping_add(u64::from(since_epoch.subsec_millis()))
}

/// When a request arrived, on its own clock and on the proxy's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// The injected clock (`testing.now_header`), if any.
    pub now_override: Option<u64>,
    /// On the request's clock (the injected one if any): denials are
    /// remembered from here.
    pub request_ms: u64,
    /// On the proxy's clock: deadlines count from here.
    pub local_ms: u64,
}

impl Arrival {
    /// A request arriving at `now_ms` (proxy clock), with the injected
    /// clock `now_override`, if any.
    pub fn new(now_override: Option<u64>, now_ms: u64) -> Arrival {
        Arrival { now_override, request_ms: now_override.unwrap_or(now_ms), local_ms: now_ms }
    }

    /// `now_ms` (proxy clock) on the request's clock.
    pub fn at(&self, now_ms: u64) -> u64 {
        self.now_override.map_or(now_ms, |o| o.saturating_add(now_ms.saturating_sub(self.local_ms)))
    }

    /// A call made at `now_ms` on the request's behalf: it arrives now, on
    /// the request's clock as it reads now.
    pub fn on_behalf(&self, now_ms: u64) -> Arrival {
        let at = self.at(now_ms);
        Arrival { now_override: self.now_override.map(|_| at), request_ms: at, local_ms: now_ms }
    }

    /// The same request's clock, with deadlines counting from `now_ms`.
    pub fn restarted(&self, now_ms: u64) -> Arrival {
        Arrival { local_ms: now_ms, ..*self }
    }
}

#[cfg(test)]
mod tests {
    use super::epoch_ms;
    use std::time::Duration;

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn epoch_ms_reads_as_as_millis_does() {
        for (secs, nanos) in
            [(0, 0), (0, 999_999), (1, 1_000_000), (1_764_230_400, 123_456_789), (u64::MAX / 1_000 - 1, 999_999_999)]
        {
            let d = Duration::new(secs, nanos);
            assert_eq!(u128::from(epoch_ms(d)), d.as_millis(), "{d:?}");
        }
    }
}
