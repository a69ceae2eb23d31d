//! A request's arrival: planned, denied from the cache, read for its
//! reservation (a request body, `count.reserve.body`), then routed: decided
//! now (`failure_mode`, overload), queued for its shard, or decided across
//! cluster slots ([`crate::worker::cross::crossings`]).

use crate::answer::response::{DELAY_HEADER, SHADOW_HEADER};
use crate::plan::{plan, RequestView};
use crate::worker::calls::{Arrival, Call, CallId, Pending, PARKED};
use crate::worker::discovery::routing::Route;
use crate::worker::host::{Flow, Host, ResponseHeaders, Stat};
use crate::worker::request::fail::Failing;
use crate::worker::request::record::Record;
use crate::worker::request::rule::{self, answer_now};
use crate::worker::request::ruling::deny_from_cache;
use crate::worker::Worker;

impl Worker {
    pub(in crate::worker) fn start(
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
        self.serving = true;
        let arrival = Arrival::new(now_override, now_ms);
        if let Some((ruling, record)) =
            deny_from_cache(&self.config, &planned.checks, &mut self.cache, arrival.request_ms)
        {
            host.count(Stat::CacheHit, 1);
            rule::record(&self.config, host, id, || Record::Made(record));
            return self.rule_now(host, id, ruling, &headers);
        }
        if self.synced.any_rule() {
            if let Some(flow) = self.sync_decide(host, id, &planned.checks, now_ms, &headers) {
                return flow;
            }
        }
        if self.holding.active() {
            if let Some(ruling) = self.shaping_enter(host, id, &planned.checks) {
                return self.rule_now(host, id, ruling, &headers);
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
            call: Call::Decide,
        };
        let Some(pending) = self.reserve(id, pending, request) else { return Flow::ReadBody };
        self.proceed(host, id, pending, now_ms)
    }

    /// Routes a planned request, and decides it now (`failure_mode`,
    /// overload) or queues it for its shard.
    pub(in crate::worker) fn proceed(
        &mut self,
        host: &mut dyn Host,
        id: u32,
        mut pending: Pending,
        now_ms: u64,
    ) -> Flow {
        if self.settlements.active() {
            self.owe(id, &pending);
        }
        let (route, slot) = self.route(&pending.checks);
        let request =
            Failing { id, checks: &pending.checks, at_ms: pending.arrival.request_ms, headers: &pending.headers };
        let shard = match route {
            Route::Shard(shard) => shard,
            Route::Parked => PARKED,
            Route::Unserved(slot) => {
                let failure = self.unserved(slot, now_ms);
                return self.fail_now(host, id, &failure, &request, now_ms);
            }
            Route::CrossSlot => return self.cross_start(host, id, pending, now_ms),
        };
        let link = self.shards.get(shard).map(|s| s.link());
        if let Some(failure) = link.and_then(|l| l.down(now_ms)).cloned() {
            return self.fail_now(host, id, &failure, &request, now_ms);
        }
        // The bound is on requests that must wait for room on the stream:
        // as many as the stream can take go out as soon as it is ready.
        let room = self.config.valkey.max_in_flight.saturating_sub(link.map_or(0, |l| l.in_flight().0));
        if self.calls.queued() >= self.config.valkey.max_queue.saturating_add(room) {
            let verdict = self.overloaded(host, id, &pending.checks);
            return answer_now(host, id, verdict);
        }
        pending.shard = shard;
        pending.slot = slot;
        self.calls.push(CallId::Request(id), pending);
        self.pump(host, false, now_ms);
        Flow::Pause
    }
}
