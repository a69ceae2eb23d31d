//! A recording host, the store that decides with the pure models (the
//! executable spec, [`ModelStore`]), and a rig that drives a [`Worker`] with
//! a fake clock.

use super::fake_cluster::FakeCluster;
use crate::model::store::ModelStore;
use crate::plan::RequestView;
use crate::response::LocalReply;
use crate::testing::Plugin;
use crate::worker::{Flow, Gauge, Host, Level, ResponseFlow, ResponseHeaders, ResponseView, Stat, Worker};
use std::collections::HashMap;
use std::time::Duration;

/// A stream opened: its token, cluster and metadata.
pub type Opened = (u32, String, Vec<(String, String)>);

/// Everything the worker asked of its host.
#[derive(Debug, Default)]
pub struct FakeHost {
    next_token: u32,
    /// Streams opened: token, cluster, metadata.
    pub opened: Vec<Opened>,
    /// Bytes sent, per stream, not yet answered by the test.
    pub outbox: HashMap<u32, Vec<u8>>,
    pub messages: usize,
    pub cancelled: Vec<u32>,
    pub admitted: Vec<(u32, Option<String>)>,
    pub replies: Vec<(u32, LocalReply)>,
    /// Held responses resumed, with the headers added.
    pub resumed: Vec<(u32, Vec<(String, String)>)>,
    pub removed_headers: Vec<String>,
    pub counts: HashMap<Stat, u64>,
    pub in_flight: i64,
    pub held: i64,
    pub tick: Duration,
    pub wakes: usize,
    pub logs: Vec<(Level, String)>,
    pub store_times: Vec<u64>,
    /// Settlements in the current VM entry (reset by the rig per event).
    pub settled_this_entry: usize,
    /// The request whose own callback is running, if one is.
    pub request_entry: Option<u32>,
    /// Local replies sent for request `.1` in request `.0`'s own callback,
    /// which Envoy would turn into a pause of request `.0` for good.
    pub foreign_replies: Vec<(u32, u32)>,
    /// Make `open_stream` fail with this.
    pub refuse_open: Option<String>,
    /// Make `send` fail.
    pub refuse_send: bool,
}

impl FakeHost {
    pub fn count(&self, stat: Stat) -> u64 {
        self.counts.get(&stat).copied().unwrap_or(0)
    }

    /// The status the request got: 200 if admitted, the local reply's
    /// status otherwise, `None` while it waits.
    pub fn status(&self, id: u32) -> Option<u32> {
        if self.admitted.iter().any(|(a, _)| *a == id) {
            return Some(200);
        }
        self.replies.iter().find(|(r, _)| *r == id).map(|(_, reply)| reply.status)
    }

    pub fn reply(&self, id: u32) -> Option<&LocalReply> {
        self.replies.iter().find(|(r, _)| *r == id).map(|(_, reply)| reply)
    }

    pub fn take_outbox(&mut self, token: u32) -> Vec<u8> {
        self.outbox.remove(&token).unwrap_or_default()
    }
}

impl Host for FakeHost {
    fn open_stream(&mut self, cluster: &str, metadata: &[(&str, &str)]) -> Result<u32, String> {
        if let Some(e) = &self.refuse_open {
            return Err(e.clone());
        }
        self.next_token += 1;
        let md = metadata.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.opened.push((self.next_token, cluster.to_string(), md));
        Ok(self.next_token)
    }

    fn send(&mut self, stream: u32, bytes: &[u8]) -> Result<(), String> {
        if self.refuse_send {
            return Err("NotFound".into());
        }
        self.messages += 1;
        self.outbox.entry(stream).or_default().extend_from_slice(bytes);
        Ok(())
    }

    fn cancel(&mut self, stream: u32) {
        self.cancelled.push(stream);
        self.outbox.remove(&stream);
    }

    fn admit(&mut self, id: u32, shadow_denied: Option<&str>) {
        self.settled_this_entry += 1;
        self.admitted.push((id, shadow_denied.map(str::to_owned)));
    }

    fn reply(&mut self, id: u32, reply: &LocalReply) {
        self.settled_this_entry += 1;
        if let Some(current) = self.request_entry.filter(|c| *c != id) {
            self.foreign_replies.push((current, id));
        }
        self.replies.push((id, reply.clone()));
    }

    fn resume_response(&mut self, id: u32, headers: &[(String, String)]) {
        self.settled_this_entry += 1;
        self.resumed.push((id, headers.to_vec()));
    }

    fn remove_request_header(&mut self, name: &str) {
        self.removed_headers.push(name.to_string());
    }

    fn count(&mut self, stat: Stat, by: u64) {
        *self.counts.entry(stat).or_default() += by;
    }

    fn gauge(&mut self, gauge: Gauge, delta: i64) {
        match gauge {
            Gauge::InFlight => self.in_flight += delta,
            Gauge::Held => self.held += delta,
        }
    }

    fn record_store_time(&mut self, ms: u64) {
        self.store_times.push(ms);
    }

    fn set_tick(&mut self, period: Duration) {
        self.tick = period;
    }

    fn wake(&mut self) -> bool {
        self.wakes += 1;
        true
    }

    fn log(&mut self, level: Level, message: &str) {
        self.logs.push((level, message.to_string()));
    }
}

/// The store of the tests: the pure models.
pub type FakeStore = ModelStore;

/// A request seen through [`RequestView`]: `GET /` plus the given headers.
pub struct Req(pub Vec<(String, String)>);

impl RequestView for Req {
    fn header(&self, name: &str) -> Option<Vec<u8>> {
        match name {
            ":method" => Some(b"GET".to_vec()),
            ":path" => Some(b"/".to_vec()),
            _ => self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_bytes().to_vec()),
        }
    }

    fn property(&self, _path: &[String]) -> Option<Vec<u8>> {
        None
    }
}

/// A response seen through [`ResponseView`].
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl ResponseView for Resp {
    fn status(&self) -> Option<u16> {
        Some(self.status)
    }

    fn header(&self, name: &str) -> Option<Vec<u8>> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_bytes().to_vec())
    }
}

/// A worker, its host, its store and a clock, driven by the tests.
pub struct Rig {
    pub worker: Worker,
    pub host: FakeHost,
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
            host: FakeHost::default(),
            store: FakeStore::default(),
            cluster: None,
            now: 1_000_000,
            next_id: 100,
            headers: HashMap::new(),
        }
    }

    /// A request for user `user` (header `x-user-id`): its id and what its
    /// own callback returned.
    pub fn request(&mut self, user: &str) -> (u32, Flow) {
        self.request_with(&[("x-user-id", user)])
    }

    pub fn request_with(&mut self, headers: &[(&str, &str)]) -> (u32, Flow) {
        self.next_id += 1;
        let id = self.next_id;
        let slot = ResponseHeaders::default();
        self.headers.insert(id, slot.clone());
        let req = Req(headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        self.host.settled_this_entry = 0;
        self.host.request_entry = Some(id);
        let flow = self.worker.on_request(&mut self.host, id, &req, self.now, slot);
        self.host.request_entry = None;
        (id, flow)
    }

    /// Calls `on_wake` if the worker asked to be woken.
    pub fn wake(&mut self) {
        if self.host.wakes > 0 {
            self.host.wakes = 0;
            self.host.settled_this_entry = 0;
            self.worker.on_wake(&mut self.host, self.now);
        }
    }

    /// Advances the clock by `ms` and ticks.
    pub fn tick(&mut self, ms: u64) {
        self.now += ms;
        self.host.settled_this_entry = 0;
        self.worker.on_tick(&mut self.host, self.now);
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
        self.host.opened.last().map(|(t, _, _)| *t).expect("a stream was opened")
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
    }

    /// Stream `token` closes with gRPC `status`.
    pub fn close(&mut self, token: u32, status: u32) {
        self.host.settled_this_entry = 0;
        self.worker.on_stream_close(&mut self.host, token, status, self.now);
    }

    /// Wakes the worker and answers on its stream until nothing moves.
    pub fn settle(&mut self) {
        for _ in 0..100 {
            self.wake();
            let pending: Vec<u32> = self.host.outbox.iter().filter(|(_, b)| !b.is_empty()).map(|(t, _)| *t).collect();
            if pending.is_empty() && self.host.wakes == 0 {
                if self.host.tick == super::super::DEFERRED_TICK {
                    self.tick(1);
                    continue;
                }
                return;
            }
            for token in pending {
                self.answer(token);
            }
        }
        panic!("the worker never settled: {:?} wakes {} tick {:?}", self.host.outbox, self.host.wakes, self.host.tick);
    }

    /// The response of request `id` arrives: `status` and `headers`.
    pub fn response(&mut self, id: u32, status: u16, headers: &[(&str, &str)]) -> ResponseFlow {
        let response = Resp { status, headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() };
        self.host.settled_this_entry = 0;
        self.host.request_entry = Some(id);
        let flow = self.worker.on_response(&mut self.host, id, &response, self.now);
        self.host.request_entry = None;
        flow
    }

    /// A chunk of request `id`'s response body; `end`: the last.
    pub fn response_body(&mut self, id: u32, chunk: &[u8], end: bool) {
        self.host.settled_this_entry = 0;
        self.host.request_entry = Some(id);
        self.worker.on_response_body(&mut self.host, id, chunk, end, self.now);
        self.host.request_entry = None;
    }

    /// Request `id`'s body (all of it, or the first `max_body_bytes`).
    pub fn request_body(&mut self, id: u32, body: &[u8], complete: bool) -> Flow {
        self.host.settled_this_entry = 0;
        self.host.request_entry = Some(id);
        let flow = self.worker.on_request_body(&mut self.host, id, body, complete, self.now);
        self.host.request_entry = None;
        flow
    }

    /// The headers a held response was resumed with, if it was.
    pub fn resumed(&self, id: u32) -> Option<&[(String, String)]> {
        self.host.resumed.iter().find(|(r, _)| *r == id).map(|(_, h)| h.as_slice())
    }

    pub fn response_headers(&self, id: u32) -> Vec<(String, String)> {
        self.headers.get(&id).map(|h| h.borrow().clone()).unwrap_or_default()
    }
}
