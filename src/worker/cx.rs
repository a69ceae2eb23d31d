//! What a room is given of the worker for one step ([`Cx`]): the host it
//! works through, the configuration, and the worker's services — the store
//! streams, the verdicts waiting for delivery, the denial cache, the local
//! limiter of `failure_mode: local`. The rooms own their state; what they
//! share is here, handed over explicitly, so the compiler says what each
//! room may touch.

use crate::cache::DenialCache;
use crate::config::Config;
use crate::worker::host::{Host, Throttle};
use crate::worker::local::LocalLimiter;
use crate::worker::streams::Streams;
use crate::worker::verdict::Deliveries;

/// The worker's services, lent to a room for one step.
pub(in crate::worker) struct Cx<'a> {
    pub host: &'a mut dyn Host,
    pub config: &'a Config,
    /// The store streams and the calls on them.
    pub streams: &'a mut Streams,
    /// Verdicts handed to requests within each VM entry's budget.
    pub deliveries: &'a mut Deliveries,
    /// Denials remembered, to deny without a call.
    pub cache: &'a mut DenialCache,
    /// Stands in for the store under `failure_mode: local`.
    pub local: &'a mut LocalLimiter,
    /// The store's failures, logged at most every few seconds.
    pub log: &'a mut Throttle,
}

/// The [`Cx`] of worker `$w` with host `$host`: its services, borrowed
/// field by field so the worker's rooms stay free to borrow.
macro_rules! cx {
    ($w:ident, $host:expr) => {
        &mut $crate::worker::cx::Cx {
            host: $host,
            config: &$w.config,
            streams: &mut $w.streams,
            deliveries: &mut $w.deliveries,
            cache: &mut $w.cache,
            local: &mut $w.local,
            log: &mut $w.log,
        }
    };
}
pub(in crate::worker) use cx;
