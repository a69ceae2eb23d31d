//! `tollgate simulate FILE TRACE`: every request of the trace through the
//! filter's own steps, with the pure model standing in for the store: plan
//! the checks, answer from the denial cache when a bucket is known to deny,
//! else decide, remember denials, apply shadow mode, and build the response
//! a client sees. Time is the trace's, as `testing.now_header` makes it in
//! Envoy, so a replay through a real Envoy and Valkey gives the same table
//! (`tests/cli_simulate_envoy.rs`).
//!
//! The per-request steps mirror the filter's (`src/filter/http.rs` and
//! `apply.rs`: `deny_from_cache`, `decided`, `remember_denials`); once the
//! worker's policy is a pure core, this should drive that core instead.

use std::io::Write;
use std::path::Path;

use super::table::{self, Row};
use super::trace::{self, Request};
use crate::cache::DenialCache;
use crate::config::Config;
use crate::limiter::model::Model;
use crate::limiter::{Check, Decision, WindowOutcome};
use crate::plan::plan;
use crate::response::{self, LocalReply};
use crate::verdict::{is_shadow, verdict, Verdict};

/// What the client got for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u32,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Policies that would have denied an admitted request (shadow mode).
    pub shadow_denied: Vec<String>,
}

/// The filter's state across requests, with the model as the store.
pub struct Simulator<'a> {
    config: &'a Config,
    model: Model,
    cache: DenialCache,
}

impl<'a> Simulator<'a> {
    pub fn new(config: &'a Config) -> Simulator<'a> {
        Simulator { config, model: Model::new(), cache: DenialCache::new(config.denial_cache_keys) }
    }

    /// One request at its trace time.
    pub fn request(&mut self, request: &Request) -> Response {
        let config = self.config;
        let planned = plan(config, request);
        if planned.checks.is_empty() {
            return Response { status: 200, headers: Vec::new(), body: Vec::new(), shadow_denied: Vec::new() };
        }
        let now = request.time_ms;
        if let Some(reply) = self.deny_from_cache(&planned.checks, now) {
            return local(reply);
        }
        let decision = self.model.decide(&planned.checks, now);
        self.remember_denials(&planned.checks, &decision, now);
        let names = response::policy_names(config, &planned.checks, &decision);
        match verdict(config, &planned.checks, &decision, &names) {
            Verdict::Admit { shadow_denied } => Response {
                status: 200,
                headers: response::allowed_headers(config, &planned.checks, &decision),
                body: Vec::new(),
                shadow_denied,
            },
            Verdict::Deny => local(response::denied(config, &planned.checks, &decision)),
        }
    }

    fn deny_from_cache(&mut self, checks: &[Check], now: u64) -> Option<LocalReply> {
        let (check, windows) = checks.iter().find_map(|check| {
            if is_shadow(self.config, check) {
                return None;
            }
            Some((check.clone(), self.cache.lookup(&check.key, now)?))
        })?;
        let decision = Decision { allowed: false, now_ms: now, windows };
        Some(response::denied(self.config, &[check], &decision))
    }

    fn remember_denials(&mut self, checks: &[Check], decision: &Decision, arrival: u64) {
        for (i, check) in checks.iter().enumerate() {
            if is_shadow(self.config, check) {
                continue;
            }
            let windows: Vec<WindowOutcome> =
                decision.windows.iter().filter(|w| w.check == i).map(|w| WindowOutcome { check: 0, ..*w }).collect();
            let retry = windows.iter().map(|w| w.retry_ms).max().unwrap_or(0);
            if retry > 0 {
                self.cache.insert(&check.key, arrival.saturating_add(retry), arrival, windows);
            }
        }
    }
}

fn local(reply: LocalReply) -> Response {
    Response { status: reply.status, headers: reply.headers, body: reply.body, shadow_denied: Vec::new() }
}

/// The policy names of every rule some request of the trace matches, in
/// configuration order: the table's columns.
pub fn columns(config: &Config, requests: &[Request]) -> Vec<String> {
    let mut used = vec![false; config.rules.len()];
    for request in requests {
        let planned = plan(config, request);
        for check in &planned.checks {
            if let Some(u) = used.get_mut(check.rule) {
                *u = true;
            }
        }
    }
    config.rules.iter().zip(used).filter(|(_, u)| *u).flat_map(|(r, _)| r.policy_names.iter().cloned()).collect()
}

/// The whole trace: its columns and one row per request.
pub fn simulate(config: &Config, requests: &[Request]) -> (Vec<String>, Vec<Row>) {
    let columns = columns(config, requests);
    let start = requests.first().map_or(0, |r| r.time_ms);
    let mut simulator = Simulator::new(config);
    let rows = requests
        .iter()
        .map(|request| {
            let response = simulator.request(request);
            let offset = request.time_ms.saturating_sub(start);
            let mut row = Row::from_response(offset, response.status, &response.headers, &response.body, &columns);
            if !response.shadow_denied.is_empty() {
                row.denied_by = format!("shadow: {}", response.shadow_denied.join(", "));
            }
            row
        })
        .collect();
    (columns, rows)
}

pub fn run(file: &Path, trace_path: &Path, out: &mut dyn Write) -> Result<i32, String> {
    let found = super::load(file)?;
    let Some(embedded) = found.configs.first() else { return Ok(1) };
    let mut text = String::new();
    if found.configs.len() > 1 {
        text.push_str(&format!(
            "{} holds {} configurations; simulating the first\n",
            file.display(),
            found.configs.len()
        ));
    }
    let config = match super::parse(embedded) {
        Ok(config) => config,
        Err(errors) => {
            text.push_str(&format!("{}\n", embedded.origin));
            for e in errors {
                text.push_str(&format!("  {}{e}\n", super::LOG_PREFIX));
            }
            out.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
            return Ok(1);
        }
    };
    let trace_text = std::fs::read_to_string(trace_path).map_err(|e| format!("{}: {e}", trace_path.display()))?;
    let requests = trace::parse(&trace_text).map_err(|e| format!("{}: {e}", trace_path.display()))?;
    let (columns, rows) = simulate(&config, &requests);
    text.push_str(&format!(
        "{} requests from {} through {} (the pure model as the store; time from the trace)\n\n",
        requests.len(),
        trace_path.display(),
        embedded.origin
    ));
    text.push_str(&table::render(&columns, &rows));
    out.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    Ok(0)
}
