//! A request's arrival: planned, denied from the cache, read for its
//! reservation (a request body, `count.reserve.body`), then routed: decided
//! now (`failure_mode`, overload), queued for its shard, or decided across
//! cluster slots ([`super::cluster_cross`]).

use super::cluster_routing::Route;
use super::fail::Held;
use super::host::{Flow, Host, ResponseHeaders, Stat};
use super::requests::{Call, Pending, PARKED};
use super::reserve;
use super::respond::deny_from_cache;
use super::{Settle, Worker};
use crate::plan::{plan, RequestView};
use crate::response::SHADOW_HEADER;

impl Worker {
    pub(super) fn start(
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
        let planned = plan(&self.config, request);
        for rule in &planned.skipped {
            host.count(Stat::RuleSkipped(*rule), 1);
        }
        if planned.checks.is_empty() {
            return Flow::Continue;
        }
        self.serving = true;
        let arrival_ms = now_override.unwrap_or(now_ms);
        if let Some(ruling) = deny_from_cache(&self.config, &planned.checks, &mut self.cache, arrival_ms) {
            host.count(Stat::CacheHit, 1);
            return self.rule_now(host, id, ruling, &headers);
        }
        let mut pending = Pending {
            checks: planned.checks,
            now_override,
            arrival_ms,
            local_arrival_ms: now_ms,
            noscripts: 0,
            headers,
            sent: false,
            shard: PARKED,
            slot: None,
            redirects: 0,
            asking: false,
            call: Call::Decide,
        };
        if self.settlements.active && reserve::prepare(&self.config, &mut pending.checks, request) {
            self.settlements.awaiting_body.insert(id, pending);
            return Flow::ReadBody;
        }
        self.proceed(host, id, pending, now_ms)
    }

    /// Routes a planned request, and decides it now (`failure_mode`,
    /// overload) or queues it for its shard.
    pub(super) fn proceed(&mut self, host: &mut dyn Host, id: u32, mut pending: Pending, now_ms: u64) -> Flow {
        if self.settlements.active {
            self.owe(id, &pending);
        }
        let (route, slot) = self.route(&pending.checks);
        let request = Held { id, checks: &pending.checks, at_ms: pending.arrival_ms, headers: &pending.headers };
        let shard = match route {
            Route::Shard(shard) => shard,
            Route::Parked => PARKED,
            Route::Unserved(slot) => {
                let failure = self.unserved(slot, now_ms);
                return self.fail_now(host, id, &failure, &request, now_ms);
            }
            Route::CrossSlot => return self.cross_start(host, id, pending, now_ms),
        };
        let link = self.shards.get(shard).map(|s| &s.link);
        if let Some(failure) = link.and_then(|l| l.down(now_ms)).cloned() {
            return self.fail_now(host, id, &failure, &request, now_ms);
        }
        // The bound is on requests that must wait for room on the stream:
        // as many as the stream can take go out as soon as it is ready.
        let room = self.config.valkey.max_in_flight.saturating_sub(link.map_or(0, |l| l.in_flight().0));
        if self.requests.queued() >= self.config.valkey.max_queue.saturating_add(room) {
            return match self.overloaded(host, id) {
                Settle::Admit(_) | Settle::Resume(_) => Flow::Continue,
                Settle::Reply(reply) => {
                    host.reply(id, &reply);
                    Flow::Pause
                }
            };
        }
        pending.shard = shard;
        pending.slot = slot;
        self.requests.push(id, pending);
        self.pump(host, false, now_ms);
        Flow::Pause
    }
}
