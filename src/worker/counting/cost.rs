//! The response side of counting on the response: what the status, the
//! headers and the body of an admitted request's response say it cost, per
//! counting rule (`count.status`, `count.header`, `count.cost`). A cost that
//! cannot be read (missing, not an integer, a body past `max_body_bytes`)
//! is the reservation, or the rule's `cost` without one (`cost_fallback`).
//! The settlement itself: [`crate::worker::counting::settle`].

use crate::config::CostSource;
use crate::limiter::Check;
use crate::worker::counting::body::{integer, BodyReader};
use crate::worker::counting::owed::{Decided, Owed, Stage};
use crate::worker::host::{CountStat, Host, ResponseFlow, ResponseView, Stat};
use crate::worker::{Entry, Worker};

impl Worker {
    /// Whether request `id`'s response is for the worker to read (a rule
    /// counts on it): the filter asks before [`Worker::on_response`], which
    /// costs a clock read.
    pub fn owes(&self, id: u32) -> bool {
        self.settlements.active && self.settlements.owed.contains_key(&id)
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

    /// Whether request `id`'s response body goes to the worker
    /// ([`Worker::on_response_body`]), chunk by chunk.
    pub fn reads_response_body(&self, id: u32) -> bool {
        self.settlements.active
            && matches!(self.settlements.owed.get(&id), Some(Owed { stage: Stage::Body { .. }, .. }))
    }

    /// The response headers of request `id` arrived (its own callback).
    pub fn on_response(
        &mut self,
        host: &mut dyn Host,
        id: u32,
        response: &dyn ResponseView,
        now_ms: u64,
    ) -> ResponseFlow {
        if !self.settlements.active {
            return ResponseFlow::Continue;
        }
        let Some(mut owed) = self.settlements.owed.remove(&id) else { return ResponseFlow::Continue };
        if matches!(owed.decided, Decided::Not) {
            return ResponseFlow::Continue;
        }
        self.begin(host, true);
        let status = response.status().unwrap_or(0);
        let mut costs = Vec::with_capacity(owed.checks.len());
        let mut body_paths = Vec::new();
        for check in &owed.checks {
            let count = self.config.rules.get(check.rule).and_then(|r| r.count.as_ref());
            let Some(count) = count else {
                costs.push(None);
                body_paths.push(None);
                continue;
            };
            let counted = count.counts_status(status)
                && count.header.as_ref().is_none_or(|h| h.holds(response.header(&h.name).as_deref()));
            let (cost, path) = match (&count.cost, counted) {
                (_, false) => (Some(0), None),
                (None, true) => (Some(self.rule_cost(check)), None),
                (Some(CostSource::Header(name)), true) => {
                    let said = response.header(name).and_then(|v| integer(&v));
                    (Some(said.unwrap_or_else(|| self.fallback(host, check))), None)
                }
                (Some(CostSource::Body(path)), true) => (None, Some(path.clone())),
            };
            costs.push(cost);
            body_paths.push(path);
        }
        let flow = if body_paths.iter().any(Option::is_some) {
            let sse = response.header("content-type").is_some_and(|t| t.starts_with(b"text/event-stream"));
            let reader = BodyReader::new(sse, self.config.max_body_bytes, body_paths);
            owed.stage = Stage::Body { reader, costs };
            self.settlements.owed.insert(id, owed);
            ResponseFlow::ReadBody
        } else {
            let costs = costs.into_iter().map(|c| c.unwrap_or(0)).collect();
            self.settle_owed(host, id, owed, costs, true, now_ms)
        };
        self.finish(host, Entry::Request, now_ms);
        // A hold released within this entry added the headers already.
        // Failures reach a held response at the next entry, so this is a
        // guard: a `Hold` with no resume to come would pause it for good.
        if flow == ResponseFlow::Hold && !self.holding(id) {
            return ResponseFlow::Released;
        }
        flow
    }

    /// A chunk of request `id`'s response body (its own callback); `end`:
    /// the last one.
    pub fn on_response_body(&mut self, host: &mut dyn Host, id: u32, chunk: &[u8], end: bool, now_ms: u64) {
        let Some(owed) = self.settlements.owed.get_mut(&id) else { return };
        let Stage::Body { reader, .. } = &mut owed.stage else { return };
        reader.feed(chunk);
        if !end {
            return;
        }
        let Some(mut owed) = self.settlements.owed.remove(&id) else { return };
        let Stage::Body { reader, costs } = std::mem::replace(&mut owed.stage, Stage::Waiting) else { return };
        self.begin(host, true);
        let (found, too_large) = reader.finish();
        if too_large {
            host.count(Stat::BodyTooLarge, 1);
        }
        let mut settled = Vec::with_capacity(costs.len());
        for ((cost, found), check) in costs.into_iter().zip(found).zip(&owed.checks) {
            settled.push(match (cost, found) {
                (Some(c), _) => c,
                (None, Some(f)) => f,
                (None, None) => self.fallback(host, check),
            });
        }
        self.settle_owed(host, id, owed, settled, false, now_ms);
        self.finish(host, Entry::Request, now_ms);
    }

    /// The units a counted response costs when it does not say.
    fn rule_cost(&self, check: &Check) -> u64 {
        self.config.rules.get(check.rule).map_or(1, |r| r.cost.get())
    }

    /// The cost of a response that did not say it: the reservation, or
    /// the rule's cost without one (counted).
    fn fallback(&self, host: &mut dyn Host, check: &Check) -> u64 {
        host.count(Stat::Count(check.rule, CountStat::CostFallback), 1);
        if check.check_only {
            self.rule_cost(check)
        } else {
            check.cost.get()
        }
    }
}
