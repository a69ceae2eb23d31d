//! The root context of a worker VM, in one of two roles chosen by the
//! filter's `root_id`: the limiter (owns the worker's [`Worker`] and its
//! stats, and turns its callbacks into the worker's events), or the framing
//! shim of the store tunnel ([`super::shim`], `root_id: tollgate.framing`).

use super::hostcalls;
use super::http::Http;
use super::limiter::{now_ms, Limiter};
use super::metrics::count_config_error;
use super::shim::{Shim, SHIM_ROOT_ID};
use super::tally;
use crate::config::Config;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{BufferType, ContextType};
use std::rc::Rc;

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

impl Context for Root {
    fn on_grpc_stream_message(&mut self, token: u32, size: usize) {
        tally::callback(|| {
            let Some(l) = self.limiter() else { return };
            let bytes =
                hostcalls::get_buffer(BufferType::GrpcReceiveBuffer, 0, size).ok().flatten().unwrap_or_default();
            l.with_own(self.id, |w, host| w.on_stream_message(host, token, &bytes, now_ms()));
        })
    }

    fn on_grpc_stream_close(&mut self, token: u32, status: u32) {
        tally::callback(|| {
            let Some(l) = self.limiter() else { return };
            l.with_own(self.id, |w, host| w.on_stream_close(host, token, status, now_ms()));
        })
    }

    // Not used; implemented to be counted (the module does not export them,
    // see docs/performance.md).
    fn on_grpc_stream_initial_metadata(&mut self, _token: u32, _headers: u32) {
        tally::callback(|| ())
    }

    fn on_grpc_stream_trailing_metadata(&mut self, _token: u32, _trailers: u32) {
        tally::callback(|| ())
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
                if tally::asked() {
                    tally::enable();
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
        tally::callback(|| {
            let Some(l) = self.limiter() else { return };
            while let Ok(Some(_)) = hostcalls::dequeue_shared_queue(queue_id) {}
            l.with_own(self.id, |w, host| w.on_wake(host, now_ms()));
        })
    }

    fn on_tick(&mut self) {
        tally::callback(|| {
            let Some(l) = self.limiter() else { return };
            l.with_own(self.id, |w, host| w.on_tick(host, now_ms()));
        })
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        tally::callback(|| {
            tally::count_request();
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
