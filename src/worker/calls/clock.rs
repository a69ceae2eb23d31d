//! A request's clock: the proxy's, or under `testing.now_header` the one
//! the request brought, running on from its arrival at the proxy's pace.

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
