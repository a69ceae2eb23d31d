//! The worker's boundary, faked: [`RecordingHost`], a [`Host`] that records
//! everything the worker asks of it (streams opened, bytes sent per stream,
//! answers, stats, logs) and can refuse to open or send; [`FakeRequest`] and
//! [`FakeResponse`], a request and a response as the worker reads them.
//! The worker's unit tests drive a worker with it and a fake clock,
//! `tollgate simulate` answers its outbox with the model store, and the
//! fuzz target checks that every request was answered.

use crate::answer::response::{Header, LocalReply};
use crate::limiter::Check;
use crate::plan::RequestView;
use crate::worker::{Answer, Decider, DecisionRecord, Gauge, Host, Level, Record, ResponseView, Stat};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// A stream opened: its token, cluster and metadata.
pub type Opened = (u32, String, Vec<(String, String)>);

/// A request decided over its checks, as the worker recorded it.
#[derive(Debug, Clone)]
pub struct Judged {
    pub id: u32,
    pub decider: Decider,
    pub answer: Answer,
    pub checks: Vec<Check>,
    /// The decision's time: the store's clock, or the proxy's for a
    /// decision on the worker.
    pub now_ms: u64,
    /// A shaped admission's delay: its turn is `now_ms + delay_ms`.
    pub delay_ms: u64,
}

/// Everything the worker asked of its host. Tokens count from 1.
#[derive(Debug, Default)]
pub struct RecordingHost {
    next_token: u32,
    /// Streams opened: token, cluster, metadata.
    pub opened: Vec<Opened>,
    /// Bytes sent, per stream (in token order), not yet taken.
    pub outbox: BTreeMap<u32, Vec<u8>>,
    pub messages: usize,
    pub cancelled: Vec<u32>,
    pub admitted: Vec<(u32, Option<String>)>,
    /// Admissions held for their turn (shaping): id, delay in ms (each is
    /// in `admitted` too).
    pub delayed: Vec<(u32, u64)>,
    pub replies: Vec<(u32, LocalReply)>,
    /// What was decided about each request, in order.
    pub decisions: Vec<(u32, DecisionRecord)>,
    /// Of those decided over checks (by the store, the cache, the local
    /// limiter or a synced rule): the checks and the decision's time and
    /// delay, in order.
    pub judged: Vec<Judged>,
    /// Paused responses resumed, with the headers added.
    pub resumed: Vec<(u32, Vec<(String, String)>)>,
    pub removed_headers: Vec<String>,
    /// Counts, as the proxy shows them once reported.
    pub counts: HashMap<Stat, u64>,
    /// Whether counts or gauge moves are not reported yet: set by each,
    /// cleared when an entry ends that did not leave them for later.
    pub unreported: bool,
    /// Entries whose stats were left for later, and whether the current
    /// one's are.
    pub reported_later: usize,
    later: bool,
    pub in_flight: i64,
    pub held: i64,
    /// Requests held for their turn (the shaping gauge).
    pub waiting: i64,
    pub tick: Duration,
    /// `wake`s asked for and not yet carried out (the driver resets it).
    pub wakes: usize,
    pub logs: Vec<(Level, String)>,
    pub store_times: Vec<u64>,
    pub shape_delays: Vec<u64>,
    /// Requests let go or answered in the current VM entry (the driver
    /// resets it per event).
    pub settled_this_entry: usize,
    /// The request whose own callback is running, if the driver says one is.
    pub request_entry: Option<u32>,
    /// Local replies sent for request `.1` in request `.0`'s own callback,
    /// which Envoy would turn into a pause of request `.0` for good.
    pub foreign_replies: Vec<(u32, u32)>,
    /// Make `open_stream` fail with this.
    pub refuse_open: Option<String>,
    /// Make `send` fail.
    pub refuse_send: bool,
}

impl RecordingHost {
    /// A VM entry ends: what it gathered is reported, unless the worker
    /// left it for later. The driver calls it after each event.
    pub fn entry_ends(&mut self) {
        if !std::mem::take(&mut self.later) {
            self.unreported = false;
        }
    }

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

    /// The last decision recorded for request `id`.
    pub fn decision(&self, id: u32) -> Option<&DecisionRecord> {
        self.decisions.iter().rev().find(|(d, _)| *d == id).map(|(_, record)| record)
    }

    pub fn reply(&self, id: u32) -> Option<&LocalReply> {
        self.replies.iter().find(|(r, _)| *r == id).map(|(_, reply)| reply)
    }

    /// The last stream opened, if any.
    pub fn last_stream(&self) -> Option<u32> {
        self.opened.last().map(|(t, _, _)| *t)
    }

    pub fn take_outbox(&mut self, token: u32) -> Vec<u8> {
        self.outbox.remove(&token).unwrap_or_default()
    }
}

impl Host for RecordingHost {
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

    fn admit_delayed(&mut self, id: u32, shadow_denied: Option<&str>, delay_ms: u64) {
        self.admit(id, shadow_denied);
        self.delayed.push((id, delay_ms));
    }

    fn reply(&mut self, id: u32, reply: &LocalReply) {
        self.settled_this_entry += 1;
        if let Some(current) = self.request_entry.filter(|c| *c != id) {
            self.foreign_replies.push((current, id));
        }
        self.replies.push((id, reply.clone()));
    }

    fn decided(&mut self, id: u32, record: &Record<'_>) {
        self.decisions.push((id, record.to_record()));
        if let Record::Decided { checks, decision, decider, answer, .. } = record {
            let (now_ms, delay_ms) = (decision.now_ms, decision.delay_ms);
            let judged = Judged { id, decider: *decider, answer: *answer, checks: checks.to_vec(), now_ms, delay_ms };
            self.judged.push(judged);
        }
    }

    fn resume_response(&mut self, id: u32, headers: &[Header]) {
        self.settled_this_entry += 1;
        self.resumed.push((id, headers.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()));
    }

    fn remove_request_header(&mut self, name: &str) {
        self.removed_headers.push(name.to_string());
    }

    fn count(&mut self, stat: Stat, by: u64) {
        *self.counts.entry(stat).or_default() += by;
        self.unreported = true;
    }

    fn unreported_stats(&self) -> bool {
        self.unreported
    }

    fn report_stats_later(&mut self) {
        if !self.later {
            self.reported_later += 1;
        }
        self.later = true;
    }

    fn gauge(&mut self, gauge: Gauge, delta: i64) {
        self.unreported = true;
        match gauge {
            Gauge::InFlight => self.in_flight += delta,
            Gauge::Held => self.held += delta,
            Gauge::Waiting => self.waiting += delta,
        }
    }

    fn record_store_time(&mut self, ms: u64) {
        self.store_times.push(ms);
    }

    fn record_shape_delay(&mut self, ms: u64) {
        self.shape_delays.push(ms);
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

/// A request as the worker reads it: `GET /` plus these headers.
pub struct FakeRequest(pub Vec<(String, String)>);

impl FakeRequest {
    pub fn new(headers: &[(&str, &str)]) -> FakeRequest {
        FakeRequest(headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }
}

impl RequestView for FakeRequest {
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

/// A response as the worker reads it.
pub struct FakeResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl FakeResponse {
    pub fn new(status: u16, headers: &[(&str, &str)]) -> FakeResponse {
        FakeResponse { status, headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() }
    }
}

impl ResponseView for FakeResponse {
    /// `:status` too, as Envoy's response headers have it.
    fn header(&self, name: &str) -> Option<Vec<u8>> {
        if name == ":status" {
            return Some(self.status.to_string().into_bytes());
        }
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_bytes().to_vec())
    }
}
