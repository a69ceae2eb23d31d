//! A request whose checks hash to several slots of a Valkey Cluster: one
//! call can only touch the keys of one slot (`CROSSSLOT` otherwise, even on
//! one master), so no single call can decide it all or nothing.
//!
//! **Interim behaviour (part 1), never over-admitting:** such a request is
//! refused with a `503` (`Retry-After: 1`, `rate limiter cannot decide
//! across cluster slots`), whatever `failure_mode` says (`allow` and
//! `local` would admit it past its limits), and counted in
//! `cluster.cross_shard`; nothing is recorded in any bucket. A request whose
//! every check is a shadow rule passes (shadow rules never deny). Rules
//! tagged by a shared key part (`rules[].hash_tag`) avoid this.
//!
//! Part 2 replaces [`Worker::cross_shard`]: record in each slot if it fits,
//! then undo where recorded when any slot denied.

use super::host::{Host, Level, ResponseHeaders, Stat};
use super::respond::is_shadow;
use super::{Flow, Throttle, Worker};
use crate::limiter::Check;
use crate::response::LocalReply;

/// The reply of a request refused because its checks span slots.
pub fn cross_slot_reply() -> LocalReply {
    LocalReply {
        status: 503,
        headers: vec![("retry-after".into(), "1".to_string()), ("content-type".into(), "text/plain".to_string())],
        body: b"rate limiter cannot decide across cluster slots\n".to_vec(),
    }
}

impl Worker {
    /// Decides request `id`, whose `checks` hash to several slots, in its
    /// own callback (see the module documentation).
    pub(super) fn cross_shard(
        &mut self,
        host: &mut dyn Host,
        id: u32,
        checks: &[Check],
        _headers: &ResponseHeaders,
        now_ms: u64,
    ) -> Flow {
        host.count(Stat::ClusterCrossShard, 1);
        if self.cross_log.due(now_ms) {
            let rules: Vec<&str> =
                checks.iter().filter_map(|c| self.config.rules.get(c.rule)).map(|r| r.name.as_str()).collect();
            host.log(
                Level::Warn,
                &format!(
                    "tollgate: a request matched rules whose buckets are in different cluster slots ({}): refused with 503; give them a shared rules[].hash_tag (repeats are not logged for {}s)",
                    rules.join(", "),
                    Throttle::INTERVAL_MS / 1000
                ),
            );
        }
        if checks.iter().all(|c| is_shadow(&self.config, c)) {
            return Flow::Continue;
        }
        host.reply(id, &cross_slot_reply());
        Flow::Pause
    }
}
