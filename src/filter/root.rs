//! The per-worker root context: owns the validated configuration.

use super::http::Http;
use super::metrics::{count_config_error, Metrics};
use crate::config::Config;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{BufferType, ContextType};
use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

/// State shared by the worker's HTTP contexts.
pub struct Shared {
    pub config: Config,
    pub metrics: Metrics,
    /// When a store failure was last logged (failures are logged at most
    /// once per [`FAILURE_LOG_INTERVAL`], not once per request).
    last_failure_log: Cell<Option<SystemTime>>,
}

pub const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(10);

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
}

#[derive(Default)]
pub struct Root {
    shared: Option<Rc<Shared>>,
}

impl Context for Root {}

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
                self.shared = Some(Rc::new(Shared { config, metrics, last_failure_log: Cell::new(None) }));
                true
            }
            Err(e) => {
                log::error!("tollgate: invalid plugin configuration: {e}");
                count_config_error();
                false
            }
        }
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Http::new(self.shared.clone())))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
