//! A rig that drives a [`Worker`] with a fake clock, the recording host
//! ([`RecordingHost`]) and the store that decides with the pure models (the
//! executable spec, [`ModelStore`]).

use crate::model::host::{FakeRequest, FakeResponse, RecordingHost};
use crate::model::store::ModelStore;
use crate::testing::Plugin;
use crate::worker::tests::rig::fake_cluster::FakeCluster;
use crate::worker::{Flow, ResponseFlow, ResponseHeaders, Worker};
use std::collections::HashMap;

/// The store of the tests: the pure models.
pub type FakeStore = ModelStore;

/// A worker, its host, its store and a clock, driven by the tests.
pub struct Rig {
    pub worker: Worker,
    pub host: RecordingHost,
    pub store: FakeStore,
    /// A Valkey Cluster answering instead of `store` (cluster mode).
    pub cluster: Option<FakeCluster>,
    pub now: u64,
    next_id: u32,
    pub headers: HashMap<u32, ResponseHeaders>,
}

impl Rig {
    pub fn new(plugin: Plugin) -> Rig {
        Rig::with_config(plugin.build())
    }

    pub fn with_config(config: crate::config::Config) -> Rig {
        Rig {
            worker: Worker::new(config),
            host: RecordingHost::default(),
            store: FakeStore::default(),
            cluster: None,
            now: 1_000_000,
            next_id: 100,
            headers: HashMap::new(),
        }
    }

    /// A request for user `user` (header `x-user-id`): its id and what its
    /// own callback returned.
    /// Request `id`'s context is gone (its response ended, or its client left).
    pub fn gone(&mut self, id: u32) {
        self.worker.on_gone(&mut self.host, id, self.now);
    }

    pub fn request(&mut self, user: &str) -> (u32, Flow) {
        self.request_with(&[("x-user-id", user)])
    }

    pub fn request_with(&mut self, headers: &[(&str, &str)]) -> (u32, Flow) {
        self.request_ending(headers, false)
    }

    /// A request with `headers`; `end_of_stream`: it has no body.
    pub fn request_ending(&mut self, headers: &[(&str, &str)], end_of_stream: bool) -> (u32, Flow) {
        self.next_id += 1;
        let id = self.next_id;
        let slot = ResponseHeaders::default();
        self.headers.insert(id, slot.clone());
        let req = FakeRequest::new(headers);
        self.host.settled_this_entry = 0;
        self.host.request_entry = Some(id);
        let flow = self.worker.on_request_headers(&mut self.host, id, &req, (slot, end_of_stream), self.now);
        self.host.entry_ends();
        self.host.request_entry = None;
        (id, flow)
    }

    /// Calls `on_wake` if the worker asked to be woken.
    pub fn wake(&mut self) {
        if self.host.wakes > 0 {
            self.host.wakes = 0;
            self.host.settled_this_entry = 0;
            self.worker.on_wake(&mut self.host, self.now);
            self.host.entry_ends();
        }
    }

    /// The gauges as Envoy shows them once a tick has reported them (the
    /// worker reports gauges from its tick only): a tick now, then
    /// (in flight, held, waiting).
    pub fn gauges(&mut self) -> (i64, i64, i64) {
        self.tick(0);
        (self.host.in_flight, self.host.held, self.host.waiting)
    }

    /// Advances the clock by `ms` and ticks.
    pub fn tick(&mut self, ms: u64) {
        self.now += ms;
        self.host.settled_this_entry = 0;
        self.worker.on_tick(&mut self.host, self.now);
        self.host.entry_ends();
    }

    /// Lets `ms` pass on the clock, ticking every 5 ms as the worker asks
    /// while it holds requests.
    pub fn run_for(&mut self, ms: u64) {
        for _ in 0..ms / 5 {
            self.tick(5);
        }
        if !ms.is_multiple_of(5) {
            self.tick(ms % 5);
        }
    }

    /// The last stream opened.
    pub fn stream(&self) -> u32 {
        self.host.last_stream().expect("a stream was opened")
    }

    /// The store answers everything sent on `token` so far, in one message.
    /// In cluster mode the node the stream goes to answers: a seed stream
    /// reaches the first node that is up, a store stream the node of its
    /// `x-envoy-original-dst-host`; a node that is down refuses the stream.
    pub fn answer(&mut self, token: u32) {
        let sent = self.host.take_outbox(token);
        let Some(cluster) = &mut self.cluster else {
            let reply = self.store.answer(&sent, self.now);
            return self.message(token, &reply);
        };
        let opened = self.host.opened.iter().find(|(t, _, _)| *t == token);
        let target = opened.and_then(|(_, _, md)| md.iter().find(|(k, _)| k == "x-envoy-original-dst-host"));
        let node = match target {
            Some((_, addr)) => cluster.node(addr).filter(|n| !cluster.nodes[*n].down),
            None => cluster.nodes.iter().position(|n| !n.down),
        };
        match node {
            Some(node) => {
                let reply = cluster.answer(node, token, &sent, self.now);
                self.message(token, &reply);
            }
            None => self.close(token, 14),
        }
    }

    /// Delivers `bytes` as one message on stream `token`.
    pub fn message(&mut self, token: u32, bytes: &[u8]) {
        self.host.settled_this_entry = 0;
        self.worker.on_stream_message(&mut self.host, token, bytes, self.now);
        self.host.entry_ends();
    }

    /// Stream `token` closes with gRPC `status`.
    pub fn close(&mut self, token: u32, status: u32) {
        self.host.settled_this_entry = 0;
        self.worker.on_stream_close(&mut self.host, token, status, self.now);
        self.host.entry_ends();
    }

    /// Wakes the worker and answers on its stream until nothing moves.
    pub fn run_until_quiet(&mut self) {
        for _ in 0..100 {
            self.wake();
            let pending: Vec<u32> = self.host.outbox.iter().filter(|(_, b)| !b.is_empty()).map(|(t, _)| *t).collect();
            if pending.is_empty() && self.host.wakes == 0 {
                if self.host.tick == crate::worker::DEFERRED_TICK {
                    self.tick(1);
                    continue;
                }
                return;
            }
            for token in pending {
                self.answer(token);
            }
        }
        panic!(
            "the worker never went quiet: {:?} wakes {} tick {:?}",
            self.host.outbox, self.host.wakes, self.host.tick
        );
    }

    /// The response of request `id` arrives: `status` and `headers`.
    pub fn response(&mut self, id: u32, status: u16, headers: &[(&str, &str)]) -> ResponseFlow {
        self.response_ending(id, (status, headers), false)
    }

    /// [`Rig::response`]; `end_of_stream`: it has no body.
    pub fn response_ending(&mut self, id: u32, (status, headers): (u16, &[(&str, &str)]), end: bool) -> ResponseFlow {
        let response = FakeResponse::new(status, headers);
        self.host.settled_this_entry = 0;
        self.host.request_entry = Some(id);
        let flow = self.worker.on_response_headers(&mut self.host, id, (&response, end), self.now);
        self.host.entry_ends();
        self.host.request_entry = None;
        flow
    }

    /// A chunk of request `id`'s response body; `end`: the last.
    pub fn response_body(&mut self, id: u32, chunk: &[u8], end: bool) {
        self.host.settled_this_entry = 0;
        self.host.request_entry = Some(id);
        self.worker.on_response_body(&mut self.host, id, chunk, end, self.now);
        self.host.entry_ends();
        self.host.request_entry = None;
    }

    /// Request `id`'s body (all of it, or the first `max_body_bytes`).
    pub fn request_body(&mut self, id: u32, body: &[u8], complete: bool) -> Flow {
        self.host.settled_this_entry = 0;
        self.host.request_entry = Some(id);
        let flow = self.worker.on_request_body(&mut self.host, id, body, complete, self.now);
        self.host.entry_ends();
        self.host.request_entry = None;
        flow
    }

    /// The headers a held response was resumed with, if it was.
    pub fn resumed(&self, id: u32) -> Option<&[(String, String)]> {
        self.host.resumed.iter().find(|(r, _)| *r == id).map(|(_, h)| h.as_slice())
    }

    pub fn response_headers(&self, id: u32) -> Vec<(String, String)> {
        self.headers
            .get(&id)
            .map(|h| h.borrow().iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
            .unwrap_or_default()
    }
}
