//! The per-request context: plan the checks, call the store, apply the answer.

use super::root::Shared;
use crate::config::FailureMode;
use crate::limiter::script::{sliding_log, Invocation};
use crate::limiter::{Check, Decision};
use crate::plan::{plan, RequestView};
use crate::response::{self, LocalReply, SHADOW_HEADER};
use crate::store::{self, Failure, Outcome};
use crate::verdict::{rule_outcomes, verdict, Verdict};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, BufferType, MapType};
use std::rc::Rc;
use std::time::SystemTime;

/// Largest store reply read back (a script reply is a few hundred bytes).
const MAX_REPLY_BYTES: usize = 1 << 20;

pub struct Http {
    shared: Option<Rc<Shared>>,
    checks: Vec<Check>,
    now_ms: Option<u64>,
    /// The invocation of the store call in flight, if any, and when it left.
    in_flight: Option<(Invocation, Option<SystemTime>)>,
    /// Headers to add to the upstream's response (admitted requests).
    response_headers: Vec<(String, String)>,
}

impl Http {
    pub fn new(shared: Option<Rc<Shared>>) -> Self {
        Self { shared, checks: Vec::new(), now_ms: None, in_flight: None, response_headers: Vec::new() }
    }

    /// Sends the store call; `Pause` while it is in flight.
    fn call_store(&mut self, shared: &Shared, how: Invocation) -> Action {
        let valkey = &shared.config.valkey;
        let body = store::pipeline(sliding_log(), how, &self.checks, self.now_ms);
        let headers = vec![
            (":method", "POST"),
            (":path", "/tollgate"),
            (":authority", "tollgate-store"),
            ("content-type", "application/octet-stream"),
        ];
        match hostcalls::dispatch_http_call(&valkey.cluster, headers, Some(&body), vec![], valkey.timeout) {
            Ok(_token) => {
                self.in_flight = Some((how, hostcalls::get_current_time().ok()));
                Action::Pause
            }
            Err(status) => {
                let failure =
                    Failure::Unavailable(format!("dispatch to cluster {} failed: {status:?}", valkey.cluster));
                self.fail(shared, &failure)
            }
        }
    }

    /// Applies `failure_mode`: `Continue` to let the request through.
    fn fail(&mut self, shared: &Shared, failure: &Failure) -> Action {
        shared.log_failure(failure);
        shared.metrics.store_error(failure.kind());
        match shared.config.failure_mode {
            FailureMode::Allow => {
                shared.metrics.failure_mode(true);
                Action::Continue
            }
            FailureMode::Deny => {
                shared.metrics.failure_mode(false);
                send(&response::store_unavailable());
                Action::Pause
            }
        }
    }

    fn on_store_reply(&mut self, shared: &Shared, num_headers: usize, body_size: usize) -> Action {
        let (how, sent) = self.in_flight.take().unwrap_or((Invocation::Eval, None));
        if let (Some(sent), Ok(now)) = (sent, hostcalls::get_current_time()) {
            let ms = now.duration_since(sent).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            shared.metrics.store_time(ms);
        }
        // A timed-out or failed call has no response at all: the host then has
        // no header map and no body, and proxy-wasm's accessors would panic.
        let status = (num_headers > 0)
            .then(|| hostcalls::get_map_value_bytes(MapType::HttpCallResponseHeaders, ":status").ok().flatten())
            .flatten()
            .map(|s| String::from_utf8_lossy(&s).into_owned());
        let body = (body_size > 0)
            .then(|| {
                hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size.min(MAX_REPLY_BYTES))
                    .ok()
                    .flatten()
            })
            .flatten()
            .unwrap_or_default();
        match store::interpret(status.as_deref(), &body, &self.checks) {
            Outcome::Decided(decision) => self.apply(shared, &decision),
            Outcome::NoScript if how == Invocation::EvalSha => self.call_store(shared, Invocation::Eval),
            Outcome::NoScript => self.fail(shared, &Failure::NoScriptAfterEval),
            Outcome::Failed(failure) => self.fail(shared, &failure),
        }
    }

    /// Counts the decision per rule and admits or denies the request.
    fn apply(&mut self, shared: &Shared, decision: &Decision) -> Action {
        let config = &shared.config;
        for (rule, outcome) in rule_outcomes(config, &self.checks, decision) {
            shared.metrics.rule(rule, outcome);
        }
        let names = response::policy_names(config, &self.checks, decision);
        match verdict(config, &self.checks, decision, &names) {
            Verdict::Admit { shadow_denied } => {
                if !shadow_denied.is_empty() {
                    let value = shadow_denied.join(", ");
                    let _ = hostcalls::set_map_value(MapType::HttpRequestHeaders, SHADOW_HEADER, Some(&value));
                }
                self.response_headers = response::allowed_headers(config, &self.checks, decision);
                Action::Continue
            }
            Verdict::Deny => {
                send(&response::denied(config, &self.checks, decision));
                Action::Pause
            }
        }
    }
}

fn send(reply: &LocalReply) {
    let headers: Vec<(&str, &str)> = reply.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    if let Err(status) = hostcalls::send_http_response(reply.status, headers, Some(&reply.body)) {
        log::warn!("tollgate: could not send local reply: {status:?}");
    }
}

/// Envoy's request headers and attributes seen through the pure core's
/// [`RequestView`].
struct EnvoyRequest;

impl RequestView for EnvoyRequest {
    fn header(&self, name: &str) -> Option<Vec<u8>> {
        hostcalls::get_map_value_bytes(MapType::HttpRequestHeaders, name).ok().flatten()
    }

    fn property(&self, path: &[String]) -> Option<Vec<u8>> {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        hostcalls::get_property(path).ok().flatten()
    }
}

impl Context for Http {
    fn on_http_call_response(&mut self, _token: u32, num_headers: usize, body_size: usize, _trailers: usize) {
        let Some(shared) = self.shared.clone() else { return };
        if self.on_store_reply(&shared, num_headers, body_size) == Action::Continue {
            if let Err(status) = hostcalls::resume_http_request() {
                log::warn!("tollgate: could not resume request: {status:?}");
            }
        }
    }
}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _headers: usize, _end_of_stream: bool) -> Action {
        let Some(shared) = self.shared.clone() else { return Action::Continue };
        if let Some(name) = &shared.config.testing.now_header {
            let value = EnvoyRequest.header(name);
            self.now_ms = value.and_then(|v| std::str::from_utf8(&v).ok()?.trim().parse().ok());
            // The test clock never reaches the upstream.
            let _ = hostcalls::remove_map_value(MapType::HttpRequestHeaders, name);
        }
        // A client must not be able to forge the shadow-mode report.
        let _ = hostcalls::remove_map_value(MapType::HttpRequestHeaders, SHADOW_HEADER);
        let planned = plan(&shared.config, &EnvoyRequest);
        for rule in &planned.skipped {
            shared.metrics.skipped(*rule);
        }
        self.checks = planned.checks;
        if self.checks.is_empty() {
            return Action::Continue;
        }
        self.call_store(&shared, Invocation::EvalSha)
    }

    fn on_http_response_headers(&mut self, _headers: usize, _end_of_stream: bool) -> Action {
        for (name, value) in std::mem::take(&mut self.response_headers) {
            if let Err(status) = hostcalls::add_map_value(MapType::HttpResponseHeaders, &name, &value) {
                log::warn!("tollgate: could not add response header {name}: {status:?}");
            }
        }
        Action::Continue
    }
}
