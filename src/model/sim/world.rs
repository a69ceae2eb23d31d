//! The run: every worker is the real [`Worker`] with a [`RecordingHost`],
//! the store is the [`ModelStore`] (the pure models the differential tests
//! keep equal to the Lua), and a virtual clock drives both through a
//! virtual network. Events happen in time order (ties in the order they
//! were scheduled): the trace's inputs, each worker's tick and wake-ups as
//! its host asks, messages reaching the store (held while it is paused,
//! refused while it is down), replies reaching the workers (dropped on a
//! silent stream), responses from the upstream, and contexts deleted
//! when a client leaves or its request is done.

use super::node::{flushes_in, Asked, Node};
pub use super::outcome::{Request, Run};
use super::random::Rng;
use super::trace::{Input, Leave, Override, Trace, EPOCH_MS};
use crate::config::Config;
use crate::key::{bucket_key, override_key};
use crate::limiter::model::Model;
use crate::model::host::{FakeRequest, FakeResponse, RecordingHost};
use crate::resp::encode_command;
use crate::worker::{Flow, ResponseFlow, ResponseHeaders, Worker};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// What happens at a time.
#[derive(Debug, Clone)]
enum Ev {
    Input(usize),
    Tick {
        node: usize,
        generation: u64,
    },
    Wake(usize),
    AtStore {
        node: usize,
        token: u32,
        bytes: Vec<u8>,
    },
    Reply {
        node: usize,
        token: u32,
        bytes: Vec<u8>,
    },
    /// The stream closes with gRPC `status`: 14 (`UNAVAILABLE`) when its
    /// tunnel never connected to the store, 2 when an open connection
    /// broke (what ran on it is unknown).
    Close {
        node: usize,
        token: u32,
        status: u32,
    },
    Response(u32),
    Gone(u32),
    Start {
        proxy: usize,
        worker: usize,
    },
}

/// One store stream of a worker.
#[derive(Debug, Default)]
struct Stream {
    dead: bool,
    silent: bool,
    /// When its last message reaches the store, and its last reply the
    /// worker: the network keeps each stream's order.
    up_ms: u64,
    down_ms: u64,
}

/// Runs `trace` to its end; an error if a proxy's configuration is
/// refused.
pub fn run(trace: &Trace) -> Result<Run, String> {
    let mut w = World::new(trace)?;
    w.go();
    Ok(w.run)
}

struct World<'t> {
    trace: &'t Trace,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: HashMap<u64, Ev>,
    configs: Vec<Config>,
    /// The live node of each `(proxy, worker)`.
    at: HashMap<(usize, usize), usize>,
    streams: HashMap<(usize, u32), Stream>,
    down_until: u64,
    paused_until: u64,
    rng: Rng,
    next_id: u32,
    run: Run,
}

impl<'t> World<'t> {
    fn new(trace: &'t Trace) -> Result<World<'t>, String> {
        let configs = (0..trace.proxies.len())
            .map(|p| Config::from_json(trace.config_json(p).as_bytes()).map_err(|e| format!("proxy {p}: {e}")))
            .collect::<Result<Vec<Config>, String>>()?;
        let run = Run::new(trace.net.max_ms);
        let mut w = World {
            trace,
            now: EPOCH_MS,
            seq: 0,
            queue: BinaryHeap::new(),
            events: HashMap::new(),
            configs,
            at: HashMap::new(),
            streams: HashMap::new(),
            down_until: 0,
            paused_until: 0,
            rng: Rng::new(trace.seed ^ 0x5eed),
            next_id: 0,
            run,
        };
        if let Some(o) = trace.rule.overrides {
            w.write_override(o);
        }
        for (proxy, worker) in trace.workers() {
            w.start(proxy, worker);
        }
        for (i, (at, _)) in trace.inputs.iter().enumerate() {
            w.at_time(EPOCH_MS + at, Ev::Input(i));
        }
        Ok(w)
    }

    /// Writes override `o` into the store, as `tollgate override set` does
    /// (before the run: its `HSET` of the limits in force and `until`).
    fn write_override(&mut self, o: Override) {
        let user = format!("u{}", o.key);
        let key = override_key(&bucket_key("tollgate", "api", &[user.as_bytes()], "log"));
        let rule = &self.trace.rule;
        let mut fields: Vec<(String, u64)> = rule.windows.iter().map(|(l, p)| (format!("w{p}"), l * o.times)).collect();
        fields.extend(rule.concurrency.map(|(c, _)| ("c".to_string(), c * o.times)));
        fields.extend(o.until_ms.map(|u| ("until".to_string(), EPOCH_MS + u)));
        let mut args: Vec<Vec<u8>> = vec![b"HSET".to_vec(), key.into_bytes()];
        for (f, v) in fields {
            args.extend([f.into_bytes(), v.to_string().into_bytes()]);
        }
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let mut bytes = Vec::new();
        encode_command(&mut bytes, &args);
        self.run.store.answer(&bytes, self.now);
    }

    fn at_time(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((t, self.seq)));
        self.events.insert(self.seq, ev);
    }

    fn delay(&mut self) -> u64 {
        self.rng.within(self.trace.net.min_ms, self.trace.net.max_ms)
    }

    fn go(&mut self) {
        let rule = &self.trace.rule;
        let end =
            EPOCH_MS + self.trace.until_ms + 4 * rule.longest_ms() + 2 * self.trace.timeout_ms + 6 * rule.ttl_ms();
        while let Some(Reverse((t, seq))) = self.queue.pop() {
            if t > end {
                break;
            }
            self.now = t;
            if let Some(ev) = self.events.remove(&seq) {
                self.happen(ev);
            }
        }
        self.run.end_ms = self.now;
        self.run.leases.close(self.now);
    }

    fn happen(&mut self, ev: Ev) {
        match ev {
            Ev::Input(i) => {
                if let Some(&(_, input)) = self.trace.inputs.get(i) {
                    self.input(input);
                }
            }
            Ev::Tick { node, generation } => self.tick(node, generation),
            Ev::Wake(node) => self.on(node, |w, h, now| {
                h.wakes = 0;
                w.on_wake(h, now);
            }),
            Ev::AtStore { node, token, bytes } => self.at_store(node, token, bytes),
            Ev::Reply { node, token, bytes } => {
                if self.streams.get(&(node, token)).is_some_and(|s| !s.dead) {
                    self.on(node, |w, h, now| w.on_stream_message(h, token, &bytes, now));
                }
            }
            Ev::Close { node, token, status } => {
                if let Some(s) = self.streams.get_mut(&(node, token)).filter(|s| !s.dead) {
                    s.dead = true;
                    self.lost_stream(node);
                    self.on(node, |w, h, now| w.on_stream_close(h, token, status, now));
                }
            }
            Ev::Response(id) => self.response(id),
            Ev::Gone(id) => self.gone(id),
            Ev::Start { proxy, worker } => self.start(proxy, worker),
        }
    }

    fn input(&mut self, input: Input) {
        match input {
            Input::Request { proxy, worker, key, leave, used, upstream_ms } => {
                self.request((proxy, worker), key, leave, used, upstream_ms)
            }
            Input::Pause { ms } => {
                self.paused_until = self.paused_until.max(self.now + ms);
                self.run.troubles.push((self.now, self.now + ms, None));
                self.run.leases.store_cut(self.now, self.paused_until);
            }
            Input::Restart { ms, keep } => {
                self.down_until = self.now + ms;
                self.run.troubles.push((self.now, self.now + ms, None));
                self.run.leases.store_cut(self.now, self.down_until);
                let open: Vec<(usize, u32)> = self.streams.iter().filter(|(_, s)| !s.dead).map(|(k, _)| *k).collect();
                for (node, token) in open {
                    let d = self.delay();
                    self.at_time(self.now + d, Ev::Close { node, token, status: 2 });
                }
                if !keep {
                    self.run.store.model = Model::new();
                    self.run.store.script_loaded = false;
                    self.run.wipes.push(self.now);
                    self.run.leases.wiped(self.now);
                }
            }
            Input::Silence { proxy, worker } => {
                let Some(&node) = self.at.get(&(proxy, worker)) else { return };
                for ((n, _), s) in self.streams.iter_mut() {
                    s.silent |= *n == node;
                }
                // Until the worker gives up on its stream (its timeout,
                // checked over ten ticks at least).
                let until = self.now + 4 * self.trace.timeout_ms;
                self.run.troubles.push((self.now, until, Some(node)));
                self.run.leases.lost(node, self.now);
            }
            Input::Kill { proxy, worker, ms } => {
                let Some(&node) = self.at.get(&(proxy, worker)) else { return };
                // (A proxy already dead, not yet started again, stays so.)
                let Some(n) = self.run.nodes.get_mut(node).filter(|n| n.alive) else { return };
                n.alive = false;
                n.died_at = Some(self.now);
                for ((n, _), s) in self.streams.iter_mut() {
                    s.dead |= *n == node;
                }
                self.at_time(self.now + ms, Ev::Start { proxy, worker });
            }
        }
    }

    fn start(&mut self, proxy: usize, worker: usize) {
        let Some(config) = self.configs.get(proxy).cloned() else { return };
        self.run.nodes.push(Node::new(proxy, config));
        self.at.insert((proxy, worker), self.run.nodes.len() - 1);
    }

    fn request(&mut self, at: (usize, usize), key: u8, leave: Leave, used: u64, upstream_ms: Option<u64>) {
        let Some(&node) = self.at.get(&at) else { return };
        if !self.run.nodes.get(node).is_some_and(|n| n.alive) {
            return;
        }
        self.next_id += 1;
        let id = self.next_id;
        let request = Request {
            node,
            key,
            sent_ms: self.now,
            used,
            upstream_ms,
            released_ms: None,
            refused: None,
            gone: false,
            gone_ms: None,
        };
        self.run.requests.insert(id, request);
        let user = format!("u{key}");
        let mut flow = Flow::Pause;
        self.on(node, |w, h, now| {
            h.request_entry = Some(id);
            let req = FakeRequest::new(&[("x-user-id", user.as_str())]);
            flow = w.on_request_headers(h, id, &req, (ResponseHeaders::default(), true), now);
            h.request_entry = None;
        });
        // Admitted in its own callback: it goes on (no rule of the
        // simulator reads a body, so `ReadBody` never comes).
        if flow == Flow::Continue {
            self.released(id);
        }
        if let Leave::After(ms) = leave {
            self.at_time(self.now + ms, Ev::Gone(id));
        }
    }

    fn response(&mut self, id: u32) {
        let Some(r) = self.run.requests.get(&id).filter(|r| !r.gone).cloned() else { return };
        let owes = self.run.nodes.get(r.node).is_some_and(|n| n.alive && n.worker.owes(id));
        let mut held = false;
        if owes {
            let used = r.used.to_string();
            self.on(r.node, |w, h, now| {
                let response = FakeResponse::new(200, &[("x-used", used.as_str())]);
                held = w.on_response_headers(h, id, (&response, true), now) == ResponseFlow::Pause;
            });
        }
        if !held {
            self.at_time(self.now + 1, Ev::Gone(id));
        }
    }

    fn gone(&mut self, id: u32) {
        let Some(r) = self.run.requests.get_mut(&id).filter(|r| !r.gone) else { return };
        r.gone = true;
        r.gone_ms = Some(self.now);
        let node = r.node;
        if let Some(n) = self.run.nodes.get_mut(node).filter(|n| n.alive) {
            n.worker.on_gone(&mut n.host, id, self.now);
        }
        self.after(node);
    }

    /// Node `node` lost a store stream (it gave up on it, or it closed):
    /// the store could not answer it since the stream went quiet (at most
    /// its timeout before), nor until it reconnects (the worker's backoff
    /// reaches 800 ms).
    fn lost_stream(&mut self, node: usize) {
        let from = self.now.saturating_sub(4 * self.trace.timeout_ms);
        self.run.troubles.push((from, self.now + 800, Some(node)));
        self.run.leases.lost(node, self.now);
    }

    /// Request `id` goes on to the upstream, which answers it soon.
    fn released(&mut self, id: u32) {
        let Some(r) = self.run.requests.get_mut(&id) else { return };
        r.released_ms = Some(self.now);
        let upstream = match r.upstream_ms {
            Some(ms) => ms.max(1),
            None => self.rng.within(1, 5),
        };
        self.at_time(self.now + upstream, Ev::Response(id));
    }

    fn tick(&mut self, node: usize, generation: u64) {
        if !self.run.nodes.get(node).is_some_and(|n| n.alive && n.generation == generation) {
            return;
        }
        self.on(node, |w, h, now| w.on_tick(h, now));
        if let Some(n) = self.run.nodes.get(node).filter(|n| n.generation == generation && n.tick_ms > 0) {
            let next = self.now + n.tick_ms;
            self.at_time(next, Ev::Tick { node, generation });
        }
    }

    fn at_store(&mut self, node: usize, token: u32, bytes: Vec<u8>) {
        if self.streams.get(&(node, token)).is_none_or(|s| s.dead) {
            return;
        }
        if self.now < self.down_until {
            // Opened while the store was down: its tunnel never connected.
            if let Some(s) = self.streams.get_mut(&(node, token)) {
                s.dead = true;
            }
            self.run.leases.lost(node, self.now);
            return self.on(node, |w, h, now| w.on_stream_close(h, token, 14, now));
        }
        if self.now < self.paused_until {
            return self.at_time(self.paused_until, Ev::AtStore { node, token, bytes });
        }
        let before = self.run.store.ran.len();
        let reply = self.run.store.answer(&bytes, self.now);
        let ran = self.run.store.ran.len() - before;
        self.run.ran_by.extend(std::iter::repeat_n(node, ran));
        self.run.leases.ran(&self.run.store, before, node, self.now);
        let d = self.delay();
        let Some(s) = self.streams.get_mut(&(node, token)).filter(|s| !s.silent) else { return };
        s.down_ms = s.down_ms.max(self.now + d);
        let at = s.down_ms;
        self.at_time(at, Ev::Reply { node, token, bytes: reply });
    }

    /// Runs `f` as one VM entry of live node `node`, then carries out
    /// what it asked of its host.
    fn on(&mut self, node: usize, f: impl FnOnce(&mut Worker, &mut RecordingHost, u64)) {
        let now = self.now;
        let Some(n) = self.run.nodes.get_mut(node).filter(|n| n.alive) else { return };
        n.host.settled_this_entry = 0;
        f(&mut n.worker, &mut n.host, now);
        n.host.entry_ends();
        self.after(node);
    }

    /// What node `node`'s host was asked since the last look, carried out.
    fn after(&mut self, node: usize) {
        let Some(asked) = self.run.nodes.get_mut(node).map(Node::asked) else { return };
        let Asked { opened, outbox, cancelled, wake, retick, released, refused, resumed } = asked;
        for token in opened {
            self.run.leases.opened(node, self.now);
            self.streams.insert((node, token), Stream::default());
            if self.now < self.down_until {
                self.at_time(self.now + 1, Ev::Close { node, token, status: 14 });
            }
        }
        for token in cancelled {
            if let Some(s) = self.streams.get_mut(&(node, token)) {
                s.dead = true;
            }
            self.lost_stream(node);
        }
        for (token, bytes) in outbox {
            for (flush, keys) in flushes_in(&bytes) {
                self.run.flushes_sent.push((node, self.now, flush, keys));
            }
            let d = self.delay();
            let Some(s) = self.streams.get_mut(&(node, token)).filter(|s| !s.dead) else { continue };
            s.up_ms = s.up_ms.max(self.now + d);
            let at = s.up_ms;
            self.at_time(at, Ev::AtStore { node, token, bytes });
        }
        if wake {
            self.at_time(self.now, Ev::Wake(node));
        }
        if let Some((tick, generation)) = retick.filter(|(tick, _)| *tick > 0) {
            self.at_time(self.now + tick, Ev::Tick { node, generation });
        }
        for id in released {
            self.released(id);
        }
        for (id, status) in refused {
            if let Some(r) = self.run.requests.get_mut(&id) {
                r.refused = Some(status);
            }
            self.at_time(self.now + 1, Ev::Gone(id));
        }
        for id in resumed {
            self.at_time(self.now + 1, Ev::Gone(id));
        }
    }
}
