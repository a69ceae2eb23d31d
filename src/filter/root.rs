//! The per-worker root context: owns the validated configuration and the
//! state shared by the worker's requests (coalescing batcher, denial cache,
//! stats). Every store call is dispatched by the root, so it outlives any
//! one request; its reply comes back here and is applied to each waiting
//! request. A request that finds a free call slot wakes the root through a
//! per-worker shared queue (one event-loop turn, no timer); a tick runs
//! while requests wait, to expire them at their deadline, and, with
//! Sentinel discovery, every [`IDLE_TICK`] to send the lookups that are due
//! (see [`super::discovery`]). Discovery starts with a worker's first
//! request, which wakes the root to send the first lookup.

use super::apply::{apply_answer, apply_failure, set_context};
use super::http::Http;
use super::metrics::{count_config_error, Metrics};
use crate::batch::{Batcher, Limits};
use crate::cache::DenialCache;
use crate::config::Config;
use crate::limiter::script::limiter;
use crate::store::sentinel::Discovery;
use crate::store::{Failure, Preamble};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{BufferType, ContextType};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often queued requests are checked while any are waiting.
const TICK: Duration = Duration::from_millis(5);
/// The tick while no request waits, when Sentinel lookups may fall due.
pub const IDLE_TICK: Duration = Duration::from_millis(100);
/// The header that makes the tunnel's `ORIGINAL_DST` cluster connect to the
/// master learned from the Sentinels.
pub const ORIGINAL_DST_HEADER: &str = "x-envoy-original-dst-host";

/// State shared by the worker's HTTP contexts.
pub struct Shared {
    pub config: Config,
    pub metrics: Metrics,
    /// Whether any rule (or the whole filter) is in shadow mode.
    pub any_shadow: bool,
    pub root_id: u32,
    pub batcher: RefCell<Batcher>,
    pub cache: RefCell<DenialCache>,
    /// Headers for the upstream response of admitted requests, by context.
    pub response_headers: RefCell<HashMap<u32, Vec<(String, String)>>>,
    /// Arrival time (ms, the request's clock) of pending requests, by context.
    pub arrivals: RefCell<HashMap<u32, u64>>,
    /// The tick period currently set (zero: no tick).
    tick: Cell<Duration>,
    /// Sentinel discovery of the master, when configured.
    pub discovery: Option<RefCell<Discovery>>,
    /// This root serves requests (a worker's root; Envoy's main-thread root
    /// never does, and cannot reach the internal listeners, so it never
    /// asks the Sentinels).
    serving: Cell<bool>,
    /// The worker's own shared queue that wakes the root (`on_queue_ready`).
    wake_queue: Option<u32>,
    /// A wake-up is pending in the queue.
    woken: Cell<bool>,
    /// When a store failure was last logged (failures are logged at most
    /// once per [`FAILURE_LOG_INTERVAL`], not once per request).
    last_failure_log: Cell<Option<SystemTime>>,
}

pub const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The proxy's clock in ms since the epoch.
pub fn now_ms() -> u64 {
    hostcalls::get_current_time()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Shared {
    /// Logs a store failure unless one was logged within the interval.
    pub fn log_failure(&self, what: &dyn std::fmt::Display) {
        let now = hostcalls::get_current_time().ok();
        let due = match (self.last_failure_log.get(), now) {
            (Some(last), Some(now)) => now.duration_since(last).map_or(true, |d| d >= FAILURE_LOG_INTERVAL),
            _ => true,
        };
        if due {
            self.last_failure_log.set(now);
            log::warn!("tollgate: {what} (failure_mode applies; repeats are not logged for {FAILURE_LOG_INTERVAL:?})");
        }
    }

    /// Records how long call `token` took (before its reply is consumed).
    pub fn record_call_time(&self, token: u32) {
        if let Some(sent) = self.batcher.borrow().sent_at(token) {
            self.metrics.store_time(now_ms().saturating_sub(sent));
        }
    }

    /// Makes sure queued requests get dispatched (or expired) by the root:
    /// wakes it at once when a call slot is free, and keeps the tick on while
    /// requests wait.
    pub fn kick(&self) {
        let (ready, waiting) = {
            let b = self.batcher.borrow();
            (b.ready(), b.queued() > 0)
        };
        // Without a known master nothing can be sent: the tick expires the
        // queue (or a lookup's reply pumps it), no wake-up loop. The first
        // request of a worker wakes the root once to start discovery.
        let first = self.discovery.is_some() && !self.serving.replace(true);
        let ready = first || (ready && self.destination().is_ok());
        if ready && !self.woken.get() {
            if let Some(queue) = self.wake_queue {
                self.woken.set(hostcalls::enqueue_shared_queue(queue, Some(b"w")).is_ok());
            }
        }
        if waiting && self.tick.get() != TICK {
            self.set_tick(TICK);
        }
    }

    fn set_tick(&self, period: Duration) {
        if hostcalls::set_tick_period(period).is_ok() {
            self.tick.set(period);
        }
    }

    /// The tick this worker needs now: fast while requests wait, slow for
    /// Sentinel lookups, none otherwise.
    fn retick(&self) {
        let want = if self.batcher.borrow().queued() > 0 {
            TICK
        } else if self.discovery.is_some() && self.serving.get() {
            IDLE_TICK
        } else {
            Duration::ZERO
        };
        if self.tick.get() != want {
            self.set_tick(want);
        }
    }

    /// Where store calls go: `Ok(None)` straight to `valkey.cluster`,
    /// `Ok(Some(addr))` to the master the Sentinels reported, `Err(())` when
    /// Sentinel is configured but no master is known yet (calls wait).
    fn destination(&self) -> Result<Option<String>, ()> {
        match &self.discovery {
            None => Ok(None),
            Some(d) => d.borrow().master().map(|m| Some(m.to_string())).ok_or(()),
        }
    }

    /// Dispatches queued requests as root-owned calls while slots are free.
    /// Must run with the root as the effective context.
    pub fn pump(&self) {
        while let Ok(master) = self.destination() {
            let call = self.batcher.borrow_mut().next_call(limiter(), now_ms());
            let Some(call) = call else { break };
            let valkey = &self.config.valkey;
            let mut headers = super::http::store_call_headers();
            if let Some(master) = &master {
                headers.push((ORIGINAL_DST_HEADER, master.as_str()));
            }
            let timeout = Duration::from_millis(call.timeout_ms);
            match hostcalls::dispatch_http_call(&valkey.cluster, headers, Some(&call.body), vec![], timeout) {
                Ok(token) => {
                    self.metrics.store_call(call.requests.len());
                    self.batcher.borrow_mut().dispatched(token, call, now_ms());
                }
                Err(status) => {
                    let failed = self.batcher.borrow_mut().dispatch_failed(&call);
                    let failure =
                        Failure::Unavailable(format!("dispatch to cluster {} failed: {status:?}", valkey.cluster));
                    for id in failed {
                        if set_context(id) {
                            apply_failure(self, id, &failure, true);
                        }
                    }
                    set_context(self.root_id);
                }
            }
        }
        self.retick();
    }
}

/// Registers this worker's wake-up queue under a name no other worker uses.
fn wake_queue() -> Option<u32> {
    use std::hash::{BuildHasher, Hasher};
    let unique = std::collections::hash_map::RandomState::new().build_hasher().finish();
    hostcalls::register_shared_queue(&format!("tollgate.wake.{unique:016x}")).ok()
}

#[derive(Default)]
pub struct Root {
    id: u32,
    shared: Option<Rc<Shared>>,
}

impl Root {
    pub fn new(id: u32) -> Root {
        Root { id, shared: None }
    }
}

impl Context for Root {
    fn on_http_call_response(&mut self, token: u32, num_headers: usize, body_size: usize, _trailers: usize) {
        let Some(shared) = self.shared.clone() else { return };
        let (status, body) = super::http::call_response(num_headers, body_size);
        if shared.on_lookup_reply(token, status.as_deref(), &body) {
            shared.pump();
            shared.kick();
            return;
        }
        shared.record_call_time(token);
        let answers = shared.batcher.borrow_mut().on_reply(token, status.as_deref(), &body);
        shared.suspect_master(&answers);
        for answer in answers {
            if set_context(answer.request) {
                apply_answer(&shared, answer, true);
            }
        }
        set_context(self.id);
        shared.lookup();
        shared.pump();
        shared.kick();
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        let bytes =
            hostcalls::get_buffer(BufferType::PluginConfiguration, 0, usize::MAX).ok().flatten().unwrap_or_default();
        match Config::from_json(&bytes) {
            Ok(config) => {
                if let Some(header) = &config.testing.now_header {
                    log::warn!(
                        "tollgate: testing.now_header is set ({header}): clients choose the limiter's clock; never use this in production"
                    );
                }
                log::info!("tollgate: configured {} rule(s)", config.rules.len());
                let metrics = Metrics::define(&config);
                let valkey = &config.valkey;
                let limits = Limits {
                    max_in_flight: valkey.max_in_flight,
                    max_batch: valkey.max_batch,
                    max_queue: valkey.max_queue,
                };
                let preamble = Preamble::auth(valkey.auth.as_ref());
                let discovery = valkey.sentinel.as_ref().map(|s| {
                    let refresh = u64::try_from(s.refresh.as_millis()).unwrap_or(u64::MAX);
                    RefCell::new(Discovery::new(refresh))
                });
                let any_shadow = config.shadow || config.rules.iter().any(|r| r.shadow);
                let shared = Rc::new(Shared {
                    any_shadow,
                    batcher: RefCell::new(Batcher::with_preamble(limits, preamble)),
                    discovery,
                    cache: RefCell::new(DenialCache::new(config.denial_cache_keys)),
                    config,
                    metrics,
                    root_id: self.id,
                    response_headers: RefCell::new(HashMap::new()),
                    arrivals: RefCell::new(HashMap::new()),
                    tick: Cell::new(Duration::ZERO),
                    serving: Cell::new(false),
                    wake_queue: wake_queue(),
                    woken: Cell::new(false),
                    last_failure_log: Cell::new(None),
                });
                self.shared = Some(shared);
                true
            }
            Err(e) => {
                log::error!("tollgate: invalid plugin configuration: {e}");
                count_config_error();
                false
            }
        }
    }

    fn on_queue_ready(&mut self, queue_id: u32) {
        let Some(shared) = self.shared.clone() else { return };
        while let Ok(Some(_)) = hostcalls::dequeue_shared_queue(queue_id) {}
        shared.woken.set(false);
        shared.lookup();
        shared.pump();
        shared.kick();
    }

    fn on_tick(&mut self) {
        let Some(shared) = self.shared.clone() else { return };
        let expired = shared.batcher.borrow_mut().expire(now_ms());
        let failure = match shared.destination() {
            Err(()) => Failure::Unavailable("no master known from the Sentinels yet".into()),
            Ok(_) => Failure::Unavailable("timed out waiting for a store call".into()),
        };
        for id in expired {
            if set_context(id) {
                apply_failure(&shared, id, &failure, true);
            }
        }
        set_context(self.id);
        shared.lookup();
        shared.pump();
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Http::new(context_id, self.shared.clone())))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
