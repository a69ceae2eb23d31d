//! The response side of counting on the response: what the status, the
//! headers and the body of an admitted request's response say it cost, per
//! counting rule (`count.status`, `count.header`, `count.cost`). A cost that
//! cannot be read (missing, not an integer, a body past `max_body_bytes`)
//! is the reservation, or the rule's `cost` without one (`cost_fallback`).
//! The settlement itself: [`crate::worker::counting::settle`].

use crate::config::Config;
use crate::config::CostSource;
use crate::limiter::Check;
use crate::worker::counting::body::{integer, BodyReader};
use crate::worker::counting::owed::Settlements;
use crate::worker::counting::owed::{Decided, Owed, Stage};
use crate::worker::cx::Cx;
use crate::worker::host::{CountStat, ResponseFlow, ResponseView, Stat};

impl Settlements {
    /// Whether request `id`'s response is for the worker to read (a rule
    /// counts on it): the filter asks before `Worker::on_response`, which
    /// costs a clock read.
    pub fn owes(&self, id: u32) -> bool {
        self.active && self.owed.contains_key(&id)
    }

    /// Whether request `id`'s response body goes to the worker
    /// (`Worker::on_response_body`), chunk by chunk.
    pub fn reads_response_body(&self, id: u32) -> bool {
        self.active && matches!(self.owed.get(&id), Some(Owed { stage: Stage::Body { .. }, .. }))
    }

    /// Whether request `id`'s response settles what it owes (a rule
    /// counts on it, and it was admitted).
    pub fn settles(&self, id: u32) -> bool {
        self.active && self.owed.get(&id).is_some_and(|o| !matches!(o.decided, Decided::Not))
    }

    /// The response headers of request `id` arrived (its own callback;
    /// [`Settlements::settles`] it): what they say it cost, settled, or
    /// its body read for it.
    pub fn on_response(&mut self, cx: &mut Cx<'_>, id: u32, response: &dyn ResponseView, now_ms: u64) -> ResponseFlow {
        let Some(mut owed) = self.owed.remove(&id) else { return ResponseFlow::Continue };
        let status = response.status().unwrap_or(0);
        let mut costs = Vec::with_capacity(owed.checks.len());
        let mut body_paths = Vec::new();
        for check in &owed.checks {
            let count = cx.config.rules.get(check.rule).and_then(|r| r.count.as_ref());
            let Some(count) = count else {
                costs.push(None);
                body_paths.push(None);
                continue;
            };
            let counted = count.counts_status(status)
                && count.header.as_ref().is_none_or(|h| h.holds(response.header(&h.name).as_deref()));
            let (cost, path) = match (&count.cost, counted) {
                (_, false) => (Some(0), None),
                (None, true) => (Some(rule_cost(cx.config, check)), None),
                (Some(CostSource::Header(name)), true) => {
                    let said = response.header(name).and_then(|v| integer(&v));
                    (Some(said.unwrap_or_else(|| fallback(cx, check))), None)
                }
                (Some(CostSource::Body(path)), true) => (None, Some(path.clone())),
            };
            costs.push(cost);
            body_paths.push(path);
        }
        if body_paths.iter().any(Option::is_some) {
            let sse = response.header("content-type").is_some_and(|t| t.starts_with(b"text/event-stream"));
            let reader = BodyReader::new(sse, cx.config.max_body_bytes, body_paths);
            owed.stage = Stage::Body { reader, costs };
            self.owed.insert(id, owed);
            ResponseFlow::ReadBody
        } else {
            let costs = costs.into_iter().map(|c| c.unwrap_or(0)).collect();
            self.settle_owed(cx, id, owed, costs, true, now_ms)
        }
    }

    /// A chunk of request `id`'s response body; `end`: the last one. True
    /// when the body ended and was read: what it says is settled
    /// ([`Settlements::settle_body`]).
    pub fn feed_body(&mut self, id: u32, chunk: &[u8], end: bool) -> bool {
        let Some(owed) = self.owed.get_mut(&id) else { return false };
        let Stage::Body { reader, .. } = &mut owed.stage else { return false };
        reader.feed(chunk);
        end
    }

    /// Settles request `id` on what its response body said.
    pub fn settle_body(&mut self, cx: &mut Cx<'_>, id: u32, now_ms: u64) {
        let Some(mut owed) = self.owed.remove(&id) else { return };
        let Stage::Body { reader, costs } = std::mem::replace(&mut owed.stage, Stage::Waiting) else { return };
        let (found, too_large) = reader.finish();
        if too_large {
            cx.host.count(Stat::BodyTooLarge, 1);
        }
        let mut settled = Vec::with_capacity(costs.len());
        for ((cost, found), check) in costs.into_iter().zip(found).zip(&owed.checks) {
            settled.push(match (cost, found) {
                (Some(c), _) => c,
                (None, Some(f)) => f,
                (None, None) => fallback(cx, check),
            });
        }
        self.settle_owed(cx, id, owed, settled, false, now_ms);
    }
}

/// The units a counted response costs when it does not say.
fn rule_cost(config: &Config, check: &Check) -> u64 {
    config.rules.get(check.rule).map_or(1, |r| r.cost.get())
}

/// The cost of a response that did not say it: the reservation, or the
/// rule's cost without one (counted).
fn fallback(cx: &mut Cx<'_>, check: &Check) -> u64 {
    cx.host.count(Stat::Count(check.rule, CountStat::CostFallback), 1);
    if check.check_only {
        rule_cost(cx.config, check)
    } else {
        check.cost.get()
    }
}
