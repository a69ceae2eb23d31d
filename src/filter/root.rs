//! The root context of a worker VM, in one of two roles chosen by the
//! filter's `root_id`: the limiter (owns the worker's [`Worker`] and its
//! stats, and turns its callbacks into the worker's events), or the framing
//! shim of the store tunnel ([`super::shim`], `root_id: tollgate.framing`).

use super::cost;
use super::host::EnvoyHost;
use super::hostcalls;
use super::http::Http;
use super::metrics::{count_config_error, Metrics};
use super::shim::{Shim, SHIM_ROOT_ID};
use crate::config::Config;
use crate::plan;
use crate::worker::Worker;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{BufferType, ContextType};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::UNIX_EPOCH;

/// The proxy's clock in ms since the epoch.
pub fn now_ms() -> u64 {
    hostcalls::get_current_time()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What the limiter's contexts share.
pub struct Limiter {
    pub worker: RefCell<Worker>,
    pub metrics: Metrics,
    pub wake_queue: Option<u32>,
    /// The request headers the rules may read more than once per request
    /// (see [`plan::header_reads`]): a request context keeps their values.
    pub headers_kept: Vec<String>,
    /// Whether a request no rule matches is left alone without waking the
    /// worker: every rule has a `match` condition, and no header must be
    /// removed from every request (shadow mode, `testing.now_header`).
    pub prefilter: bool,
}

impl Limiter {
    fn new(config: Config) -> Limiter {
        let per_request_duty =
            config.shadow || config.rules.iter().any(|r| r.shadow) || config.testing.now_header.is_some();
        let prefilter = !per_request_duty && plan::can_match_none(&config);
        let reads = plan::header_reads(&config, prefilter);
        Limiter {
            headers_kept: reads.into_iter().filter(|(_, times)| *times > 1).map(|(name, _)| name).collect(),
            prefilter,
            metrics: Metrics::define(&config),
            wake_queue: wake_queue(),
            worker: RefCell::new(Worker::new(config)),
        }
    }

    /// Whether some rule matches `request` (true if the worker is busy: it
    /// then decides, as for any request).
    pub fn any_rule_matches(&self, request: &dyn plan::RequestView) -> bool {
        self.worker.try_borrow().map_or(true, |w| plan::any_rule_matches(w.config(), request))
    }

    /// Runs `f` on the worker with the host as seen from context `current`;
    /// None if the worker is busy (a re-entrant callback: never expected).
    pub fn with<T>(&self, current: u32, f: impl FnOnce(&mut Worker, &mut EnvoyHost<'_>) -> T) -> Option<T> {
        let Ok(mut worker) = self.worker.try_borrow_mut() else {
            log::warn!("tollgate: re-entrant callback ignored");
            return None;
        };
        let mut host = EnvoyHost { current, metrics: &self.metrics, wake_queue: self.wake_queue };
        Some(f(&mut worker, &mut host))
    }
}

enum Role {
    Unconfigured,
    Limiter(Rc<Limiter>),
    Shim,
}

pub struct Root {
    id: u32,
    role: Role,
}

impl Root {
    pub fn new(id: u32) -> Root {
        Root { id, role: Role::Unconfigured }
    }

    fn limiter(&self) -> Option<&Rc<Limiter>> {
        match &self.role {
            Role::Limiter(l) => Some(l),
            _ => None,
        }
    }
}

/// Registers this worker's wake-up queue under a name no other worker uses.
fn wake_queue() -> Option<u32> {
    use std::hash::{BuildHasher, Hasher};
    let unique = std::collections::hash_map::RandomState::new().build_hasher().finish();
    hostcalls::register_shared_queue(&format!("tollgate.wake.{unique:016x}")).ok()
}

impl Context for Root {
    fn on_grpc_stream_message(&mut self, token: u32, size: usize) {
        cost::callback(|| {
            let Some(l) = self.limiter() else { return };
            let bytes =
                hostcalls::get_buffer(BufferType::GrpcReceiveBuffer, 0, size).ok().flatten().unwrap_or_default();
            l.with(self.id, |w, host| w.on_stream_message(host, token, &bytes, now_ms()));
        })
    }

    fn on_grpc_stream_close(&mut self, token: u32, status: u32) {
        cost::callback(|| {
            let Some(l) = self.limiter() else { return };
            l.with(self.id, |w, host| w.on_stream_close(host, token, status, now_ms()));
        })
    }

    // Not used; implemented to be counted (the module does not export them,
    // see docs/performance.md).
    fn on_grpc_stream_initial_metadata(&mut self, _token: u32, _headers: u32) {
        cost::callback(|| ())
    }

    fn on_grpc_stream_trailing_metadata(&mut self, _token: u32, _trailers: u32) {
        cost::callback(|| ())
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        let root_id = hostcalls::get_property(vec!["plugin_root_id"]).ok().flatten().unwrap_or_default();
        if root_id == SHIM_ROOT_ID.as_bytes() {
            self.role = Role::Shim;
            return true;
        }
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
                self.role = Role::Limiter(Rc::new(Limiter::new(config)));
                // After the configuration's own host calls: only requests' are reported.
                if cost::asked() {
                    cost::enable();
                }
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
        cost::callback(|| {
            let Some(l) = self.limiter() else { return };
            while let Ok(Some(_)) = hostcalls::dequeue_shared_queue(queue_id) {}
            l.with(self.id, |w, host| w.on_wake(host, now_ms()));
        })
    }

    fn on_tick(&mut self) {
        cost::callback(|| {
            let Some(l) = self.limiter() else { return };
            l.with(self.id, |w, host| w.on_tick(host, now_ms()));
        })
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        cost::callback(|| {
            cost::count_request();
            let context: Box<dyn HttpContext> = match &self.role {
                Role::Limiter(l) => Box::new(Http::new(context_id, Some(l.clone()))),
                Role::Shim => Box::new(Shim::default()),
                Role::Unconfigured => Box::new(Http::new(context_id, None)),
            };
            Some(context)
        })
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
