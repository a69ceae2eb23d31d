//! What the limiter's contexts of one worker VM share: the worker, its
//! stats, its wake-up queue and what configuration time decided about
//! requests; and the proxy's clock.

use super::host::{EnvoyHost, Scratch};
use super::hostcalls;
use super::metrics::Metrics;
use crate::config::Config;
use crate::plan;
use crate::worker::{epoch_ms, Worker};
use std::cell::RefCell;
use std::time::UNIX_EPOCH;

/// The proxy's clock in ms since the epoch.
pub fn now_ms() -> u64 {
    hostcalls::get_current_time().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, epoch_ms)
}

/// What the limiter's contexts share.
pub struct Limiter {
    pub worker: RefCell<Worker>,
    pub metrics: Metrics,
    pub wake_queue: Option<u32>,
    /// Lent to each VM entry's host.
    scratch: RefCell<Scratch>,
    /// What every request's callbacks read ([`plan::Reads`]).
    pub reads: plan::Reads,
}

impl Limiter {
    pub fn new(config: Config) -> Limiter {
        Limiter {
            reads: plan::Reads::of(&config),
            metrics: Metrics::define(&config),
            wake_queue: wake_queue(),
            scratch: RefCell::default(),
            worker: RefCell::new(Worker::new(config)),
        }
    }

    /// Whether some rule matches `request` (true if the worker is busy: it
    /// then decides, as for any request).
    pub fn any_rule_matches(&self, request: &dyn plan::RequestView) -> bool {
        self.worker.try_borrow().map_or(true, |w| plan::any_rule_matches(w.config(), request))
    }

    /// Runs `f` on the worker with the host as seen from request context
    /// `current`; None if the worker is busy (a re-entrant callback: never
    /// expected).
    pub fn with<T>(&self, current: u32, f: impl FnOnce(&mut Worker, &mut EnvoyHost<'_>) -> T) -> Option<T> {
        self.run(current, false, f)
    }

    /// [`Limiter::with`] in one of the worker's own callbacks (root context
    /// `current`), which read no request.
    pub fn with_own<T>(&self, current: u32, f: impl FnOnce(&mut Worker, &mut EnvoyHost<'_>) -> T) -> Option<T> {
        self.run(current, true, f)
    }

    fn run<T>(&self, current: u32, own: bool, f: impl FnOnce(&mut Worker, &mut EnvoyHost<'_>) -> T) -> Option<T> {
        let Ok(mut worker) = self.worker.try_borrow_mut() else {
            log::warn!("tollgate: re-entrant callback ignored");
            return None;
        };
        let Ok(mut scratch) = self.scratch.try_borrow_mut() else { return None };
        let mut host = EnvoyHost::new(current, (&self.metrics, &mut scratch), self.wake_queue, own);
        let out = f(&mut worker, &mut host);
        host.finish();
        Some(out)
    }
}

/// Registers this worker's wake-up queue under a name no other worker uses.
fn wake_queue() -> Option<u32> {
    use std::hash::{BuildHasher, Hasher};
    let unique = std::collections::hash_map::RandomState::new().build_hasher().finish();
    hostcalls::register_shared_queue(&format!("tollgate.wake.{unique:016x}")).ok()
}
