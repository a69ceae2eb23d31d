//! `tollgate simulate FILE TRACE`: every request of the trace through the
//! filter's own worker ([`crate::worker::Worker`], the same code Envoy runs),
//! with the pure models answering its store stream instead of Valkey
//! ([`ModelStore`]): plan, the denial cache, the decision, shadow mode,
//! shaping (a held request goes on at its turn: the row says `held <ms>
//! ms`) and the response a client sees. Time is the trace's, as `testing.now_header` makes
//! it in Envoy, so a replay through a real Envoy and Valkey gives the same
//! table (`tests/live/operations/cli_simulate.rs`).

use std::io::Write;
use std::path::Path;

use super::table::{self, delay_of, Row};
use super::trace::{self, Request};
use crate::answer::response::Header;
use crate::config::Config;
use crate::model::host::RecordingHost;
use crate::model::store::ModelStore;
use crate::plan::plan;
use crate::worker::{Flow, ResponseHeaders, Worker};

/// What the client got for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u32,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Policies that would have denied an admitted request (shadow mode).
    pub shadow_denied: Vec<String>,
}

/// A worker with the models as its store, across a trace's requests. Its
/// host records the streams the worker opens (one, or a seed stream and
/// one per master in cluster mode), whose bytes the one model store
/// answers, and the answers of the requests.
pub struct Simulator {
    worker: Worker,
    host: RecordingHost,
    store: ModelStore,
    next_id: u32,
}

impl Simulator {
    pub fn new(config: &Config) -> Simulator {
        Simulator {
            worker: Worker::new(config.clone()),
            host: RecordingHost::default(),
            store: ModelStore::default(),
            next_id: 0,
        }
    }

    /// One request at its trace time, until the worker answered it.
    pub fn request(&mut self, request: &Request) -> Response {
        self.next_id += 1;
        let id = self.next_id;
        let now = request.time_ms;
        let headers = ResponseHeaders::default();
        // Traces carry no bodies: a body reservation takes its default.
        let flow = self.worker.on_request_headers(&mut self.host, id, request, (headers.clone(), true), now);
        let response = self.decided(id, flow, now, &headers);
        // Responses are not simulated: what a request reserved stands.
        self.worker.on_gone(&mut self.host, id, now);
        response
    }

    fn decided(&mut self, id: u32, flow: Flow, now: u64, headers: &ResponseHeaders) -> Response {
        if flow == Flow::Continue {
            return Response {
                status: 200,
                headers: owned(headers.take()),
                body: Vec::new(),
                shadow_denied: Vec::new(),
            };
        }
        // The store answers at once, as far as the simulation's clock goes.
        for _ in 0..16 {
            if std::mem::take(&mut self.host.wakes) > 0 {
                self.worker.on_wake(&mut self.host, now);
            }
            for (stream, sent) in std::mem::take(&mut self.host.outbox) {
                let reply = self.store.answer(&sent, now);
                self.worker.on_stream_message(&mut self.host, stream, &reply, now);
            }
            if let Some(response) = self.answer(id, headers) {
                return response;
            }
            // Held for its turn (shaping): the trace's clock moves on to it.
            let held = headers.borrow().iter().find(|(k, _)| k == "server-timing").and_then(|(_, v)| delay_of(v));
            if let Some(delay) = held {
                self.worker.on_tick(&mut self.host, now.saturating_add(delay));
            }
        }
        let reply = crate::answer::response::store_unavailable();
        Response { status: reply.status, headers: owned(reply.headers), body: reply.body, shadow_denied: Vec::new() }
    }

    fn answer(&mut self, id: u32, headers: &ResponseHeaders) -> Option<Response> {
        if let Some(i) = self.host.admitted.iter().position(|(a, _)| *a == id) {
            let (_, shadow) = self.host.admitted.swap_remove(i);
            let shadow_denied = shadow.map(|s| s.split(", ").map(str::to_owned).collect()).unwrap_or_default();
            return Some(Response { status: 200, headers: owned(headers.take()), body: Vec::new(), shadow_denied });
        }
        let i = self.host.replies.iter().position(|(r, _)| *r == id)?;
        let (_, reply) = self.host.replies.swap_remove(i);
        Some(Response {
            status: reply.status,
            headers: owned(reply.headers),
            body: reply.body,
            shadow_denied: Vec::new(),
        })
    }
}

fn owned(headers: Vec<Header>) -> Vec<(String, String)> {
    headers.into_iter().map(|(k, v)| (k.into_owned(), v)).collect()
}

/// The policy names of every rule some request of the trace matches, in
/// configuration order, a rule's windows then its concurrency limit: the
/// table's columns.
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
    let policies = |r: &crate::config::Rule| {
        r.policy_names.iter().cloned().chain(r.concurrency.as_ref().map(|c| c.policy_name.clone())).collect::<Vec<_>>()
    };
    config.rules.iter().zip(used).filter(|(_, u)| *u).flat_map(|(r, _)| policies(r)).collect()
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
