//! A request's lifecycle, one state machine read top to bottom, each state
//! with what ends it early:
//!
//! 1. **Arrival** ([`Worker::on_request`]): planned; no rule matches → it
//!    goes on. Denied from the cache, decided from a synced view, or
//!    refused by a full shaping rule → answered now. A reservation in its
//!    body → *awaiting its body* ([`Worker::on_request_body`]).
//! 2. **Routed** ([`Worker::proceed`]): the store known down or no master
//!    for its slot → `failure_mode` now; the queues full → `overload` now;
//!    keys on several slots → decided across slots ([`super::cross`]);
//!    else its call is queued on its shard's stream.
//! 3. **With the store**: its call lands ([`super::landed`]): decided →
//!    [`Worker::decided`]; failed → `failure_mode`; waited too long →
//!    `overload`.
//! 4. **Verdict**: admitted (its headers set, what it owes noted), held for
//!    its turn by shaping, or answered; handed over within each VM
//!    entry's budget ([`super::verdict`]).
//! 5. **Response** ([`Worker::on_response`]): a counting rule's cost read
//!    from its status, headers or body, and settled.
//!
//! **Gone** ([`Worker::on_gone`]) at any state: a queued call is dropped; a
//! sent one's reply still lands (a shaped admission's turn is given back);
//! a held request's turn is given back; parts across slots are undone;
//! a reservation whose response never came stands; its leases end.

use crate::answer::response::{DELAY_HEADER, SHADOW_HEADER};
use crate::limiter::Decision;
use crate::plan::{plan, RequestView};
use crate::worker::calls::{Arrival, Call, CallId, Command, Pending, Shape, PARKED};
use crate::worker::counting::reserve;
use crate::worker::cross::others;
use crate::worker::cx::cx;
use crate::worker::decision::record::{Decider, Record};
use crate::worker::decision::ruling::deny_from_cache;
use crate::worker::host::{BodyStep, Flow, Host, ResponseFlow, ResponseHeaders, ResponseView, Stat};
use crate::worker::request::fail::{self, Failing};
use crate::worker::request::rule::{self, answer_now};
use crate::worker::shaping;
use crate::worker::streams::discovery::Route;
use crate::worker::{Entry, Worker, TICK};

impl Worker {
    /// A request's headers arrived (its own callback): plan it, and decide
    /// it from the cache, queue it, or refuse it.
    pub fn on_request(
        &mut self,
        host: &mut dyn Host,
        id: u32,
        request: &dyn RequestView,
        now_ms: u64,
        headers: ResponseHeaders,
    ) -> Flow {
        self.begin(host, true);
        let flow = self.arrive(host, id, request, now_ms, headers);
        self.finish(host, Entry::Request, now_ms);
        flow
    }

    /// A request's headers (its own callback); `end_of_stream`: no body
    /// follows. A request whose reservation is in its body and that has
    /// none is decided at once, on the empty body.
    pub fn on_request_headers(
        &mut self,
        host: &mut dyn Host,
        id: u32,
        request: &dyn RequestView,
        (headers, end_of_stream): (ResponseHeaders, bool),
        now_ms: u64,
    ) -> Flow {
        let flow = self.on_request(host, id, request, now_ms, headers);
        if flow == Flow::ReadBody && end_of_stream {
            return self.on_request_body(host, id, &[], true, now_ms);
        }
        flow
    }

    /// Arrival.
    fn arrive(
        &mut self,
        host: &mut dyn Host,
        id: u32,
        request: &dyn RequestView,
        now_ms: u64,
        headers: ResponseHeaders,
    ) -> Flow {
        let mut now_override = None;
        if let Some(name) = &self.config.testing.now_header {
            now_override = request.header(name).and_then(|v| std::str::from_utf8(&v).ok()?.trim().parse().ok());
            // The test clock never reaches the upstream.
            host.remove_request_header(name);
        }
        // A client must not be able to forge the shadow-mode report (only
        // meaningful, and so only removed, where shadow mode is configured).
        if self.any_shadow {
            host.remove_request_header(SHADOW_HEADER);
        }
        // Nor the report of a delay (shaping).
        if self.holding.active() {
            host.remove_request_header(DELAY_HEADER);
        }
        let planned = plan(&self.config, request);
        for rule in &planned.skipped {
            host.count(Stat::RuleSkipped(*rule), 1);
        }
        if planned.checks.is_empty() {
            return Flow::Continue;
        }
        self.streams.serve();
        let arrival = Arrival::new(now_override, now_ms);
        if let Some((ruling, record)) =
            deny_from_cache(&self.config, &planned.checks, &mut self.cache, arrival.request_ms)
        {
            host.count(Stat::CacheHit, 1);
            rule::record(&self.config, host, id, || Record::Made(record));
            return rule::rule_now(cx!(self, host), id, ruling, &headers);
        }
        if self.synced.any_rule() {
            if let Some(decision) = self.synced.decide(host, &planned.checks, now_ms) {
                let decided = (planned.checks.as_slice(), &decision, Decider::Sync);
                let verdict = rule::rule_by_worker(cx!(self, host), id, decided, now_ms, &headers);
                return answer_now(host, id, verdict);
            }
        }
        if self.holding.active() {
            let (streams, crossings, settlements) = (&self.streams, &self.crossings, &self.settlements);
            // Waiting for its body (a reservation read from it) is waiting too.
            let live = |c| streams.holds(CallId::Request(c)) || crossings.waits(c) || settlements.awaits_body(c);
            if let Some(ruling) = self.holding.arrive((host, &self.config), id, &planned.checks, live) {
                return rule::rule_now(cx!(self, host), id, ruling, &headers);
            }
        }
        let pending = Pending {
            checks: planned.checks,
            arrival,
            noscripts: 0,
            headers,
            sent: false,
            shard: PARKED,
            slot: None,
            redirects: 0,
            asking: false,
            command: Command::Decide(Shape::Unshaped),
            call: Call::Decide,
        };
        let ledger = (&mut self.settlements, &self.config);
        let Some(pending) = reserve::reserve(ledger, id, pending, request) else { return Flow::ReadBody };
        self.proceed(host, id, pending, now_ms)
    }

    /// Awaiting its body: how much of it to read, once Envoy has
    /// buffered `buffered` bytes (None: unknown, as at the trailers) and
    /// `end_of_stream` says whether more follow; a body of a request held
    /// for its decision waits with it (decided on its first
    /// `max_body_bytes`); else it goes on.
    pub fn request_body_step(&self, id: u32, buffered: Option<usize>, end_of_stream: bool) -> BodyStep {
        if !self.settlements.active() {
            // No rule reads a body, so none waits with one: one field read
            // per chunk.
            return BodyStep::Pass;
        }
        if self.settlements.awaits_body(id) {
            let take = reserve::body_take(&self.config, buffered, end_of_stream);
            return take.map_or(BodyStep::Wait, BodyStep::Read);
        }
        if self.waiting(id) {
            BodyStep::Wait
        } else {
            BodyStep::Pass
        }
    }

    /// Its body (its own callback): the first `max_body_bytes` of it at
    /// most; `complete` when that is all of it. The request is then routed
    /// as any other.
    pub fn on_request_body(&mut self, host: &mut dyn Host, id: u32, body: &[u8], complete: bool, now_ms: u64) -> Flow {
        let Some(mut p) = self.settlements.body_arrived(id) else { return Flow::Continue };
        self.begin(host, true);
        reserve::read_body(&self.config, host, &mut p, body, complete);
        // Deadlines count from now: the request waited for its client.
        p.arrival = p.arrival.restarted(now_ms);
        let flow = self.proceed(host, id, p, now_ms);
        self.finish(host, Entry::Request, now_ms);
        flow
    }

    /// Routed: decided now (`failure_mode`, overload), queued for its
    /// shard, or decided across cluster slots.
    fn proceed(&mut self, host: &mut dyn Host, id: u32, mut pending: Pending, now_ms: u64) -> Flow {
        if self.settlements.active() {
            self.settlements.owe(&self.config, id, &pending);
        }
        let (route, slot) = self.streams.route(&pending.checks);
        let shard = match route {
            Route::Shard(shard) => self.streams.down(shard, now_ms).map_or(Ok(shard), Err),
            Route::Parked => Ok(PARKED),
            Route::Unserved(slot) => Err(self.streams.unserved(slot, now_ms)),
            Route::CrossSlot => {
                self.leases.stamp(id, &mut pending.checks, now_ms, true);
                let flow = self.crossings.start(cx!(self, host), others!(self), id, pending, now_ms);
                self.pump(host, false, now_ms);
                return flow;
            }
        };
        let shard = match shard {
            Ok(shard) => shard,
            Err(failure) => {
                // Never sent: a lease only the local limiter may take.
                self.leases.stamp(id, &mut pending.checks, now_ms, false);
                let p = &pending;
                let request = Failing { id, checks: &p.checks, at_ms: p.arrival.request_ms, headers: &p.headers };
                let owes = (&mut self.settlements, &mut self.synced);
                return fail::fail_now(cx!(self, host), owes, &failure, &request, now_ms);
            }
        };
        // The bound is on requests that must wait for room on the stream:
        // as many as the stream can take go out as soon as it is ready.
        if self.streams.full(Some(shard)) {
            let verdict = fail::overloaded(cx!(self, host), &mut self.settlements, id, &pending.checks);
            return answer_now(host, id, verdict);
        }
        pending.shard = shard;
        pending.slot = slot;
        self.leases.stamp(id, &mut pending.checks, now_ms, true);
        if self.holding.active() {
            // (Unshaped, as the request arrived, when no rule shapes.)
            pending.command = Command::Decide(shaping::shape(&self.config, &pending.checks));
        }
        self.streams.push(CallId::Request(id), pending);
        self.pump(host, false, now_ms);
        Flow::Pause
    }

    /// The store decided request `id` (`p`, its call, answered after
    /// `round_trip_ms`): the local limiter learns, its rules are ruled on,
    /// shaping may hold it for its turn, and its verdict is delivered.
    pub(super) fn decided(
        &mut self,
        host: &mut dyn Host,
        id: u32,
        p: &Pending,
        decision: &Decision,
        round_trip_ms: u64,
        now_ms: u64,
    ) {
        let cx = cx!(self, host);
        fail::learn(cx, p, decision, now_ms);
        if self.leases.active() {
            self.leases.decided(cx, id, decision.allowed);
        }
        let (arrival_ms, round_trip) = (p.arrival.request_ms, Some(round_trip_ms));
        let verdict =
            rule::rule_decided(cx, &mut self.settlements, id, &p.checks, decision, arrival_ms, &p.headers, round_trip);
        let verdict = match self.holding.active() {
            true => self.holding.shaped(cx, id, p, decision, verdict, now_ms),
            false => Some(verdict),
        };
        if let Some(verdict) = verdict {
            cx.deliveries.deliver(cx.host, id, verdict);
        }
    }

    /// Whether request `id`'s response is for the worker to read (a rule
    /// counts on it): the filter asks before [`Worker::on_response`], which
    /// costs a clock read.
    pub fn owes(&self, id: u32) -> bool {
        self.settlements.owes(id)
    }

    /// [`Worker::on_response`], with `end_of_stream`: no body follows, so
    /// a response whose cost is in its body is settled at once on the
    /// empty one.
    pub fn on_response_headers(
        &mut self,
        host: &mut dyn Host,
        id: u32,
        (response, end_of_stream): (&dyn ResponseView, bool),
        now_ms: u64,
    ) -> ResponseFlow {
        let flow = self.on_response(host, id, response, now_ms);
        if flow == ResponseFlow::ReadBody && end_of_stream {
            self.on_response_body(host, id, &[], true, now_ms);
            return ResponseFlow::Continue;
        }
        flow
    }

    /// The response headers of request `id` arrived (its own callback):
    /// what it cost, settled, or its body read for it.
    pub fn on_response(
        &mut self,
        host: &mut dyn Host,
        id: u32,
        response: &dyn ResponseView,
        now_ms: u64,
    ) -> ResponseFlow {
        if !self.settlements.settles(id) {
            return ResponseFlow::Continue;
        }
        self.begin(host, true);
        let flow = self.settlements.on_response(cx!(self, host), id, response, now_ms);
        self.finish(host, Entry::Request, now_ms);
        // A hold released within this entry added the headers already.
        // Failures reach a paused response at the next entry, so this is a
        // guard: a `Hold` with no resume to come would pause it for good.
        if flow == ResponseFlow::Pause && !self.settlements.paused(id, &self.deliveries) {
            return ResponseFlow::Released;
        }
        flow
    }

    /// Whether request `id`'s response body goes to the worker
    /// ([`Worker::on_response_body`]), chunk by chunk.
    pub fn reads_response_body(&self, id: u32) -> bool {
        self.settlements.reads_response_body(id)
    }

    /// A chunk of request `id`'s response body (its own callback); `end`:
    /// the last one, when what it says is settled.
    pub fn on_response_body(&mut self, host: &mut dyn Host, id: u32, chunk: &[u8], end: bool, now_ms: u64) {
        if !self.settlements.feed_body(id, chunk, end) {
            return;
        }
        self.begin(host, true);
        self.settlements.settle_body(cx!(self, host), id, now_ms);
        self.finish(host, Entry::Request, now_ms);
    }

    /// Whether request `id` is held for its decision (a request decided on
    /// the first `max_body_bytes` of its body: the rest waits with it).
    pub fn waiting(&self, id: u32) -> bool {
        self.streams.holds(CallId::Request(id))
            || self.crossings.waits(id)
            || self.settlements.awaits_body(id)
            || self.deliveries.waits(id)
            || self.holding.holds(id)
    }

    /// Gone: the request's context is gone (client reset, or done), at any
    /// state; its leases end now (their calls go out in this entry).
    pub fn on_gone(&mut self, host: &mut dyn Host, id: u32, now_ms: u64) {
        self.on_gone_unleased(id);
        if self.leases.holds(id) {
            self.leases.gone(cx!(self, host), id, now_ms);
            // The ends go out with the next entry's pump: under load at
            // once, with other calls; else at the tick, made short here.
            if self.tick.is_zero() || self.tick > TICK {
                host.set_tick(TICK);
                self.tick = TICK;
            }
        }
    }

    /// Whether request `id` holds leases: its [`Worker::on_gone`] sends
    /// their ends, in a VM entry of its own (else
    /// [`Worker::on_gone_unleased`] is all it needs, no host).
    pub fn holds_leases(&self, id: u32) -> bool {
        self.leases.holds(id)
    }

    /// Ends of leases kept to be sent again (tests: their bound).
    #[cfg(test)]
    pub fn leases_to_send_again(&self) -> usize {
        self.leases.retries()
    }

    /// [`Worker::on_gone`] of a request that holds no lease.
    pub fn on_gone_unleased(&mut self, id: u32) {
        self.crossings.gone(&mut self.streams, id);
        let sent = self.streams.withdraw(CallId::Request(id));
        if self.holding.active() {
            match sent.filter(|p| shaping::max_delay(&self.config, &p.checks).is_some()) {
                // Its call may give it a turn: given back when the reply
                // comes (it stays counted until then).
                Some(p) => self.holding.orphan(id, p.checks, p.arrival),
                // A held request's turn is given back at the next entry.
                None => self.holding.gone(id),
            }
        }
        if self.settlements.active() {
            // A reservation whose response never came stands.
            self.settlements.gone(id);
        }
    }
}
