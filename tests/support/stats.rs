//! Envoy's stats as the tests read them: one `/stats` read, or tollgate's
//! once settled (its workers report the counters of requests' callbacks at
//! their next tick when busy: docs/configuration.md, "Stats").

use super::envoy::Envoy;
use super::http::admin_get;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

impl Envoy {
    /// Every counter and gauge whose name matches `filter` (a regex), from
    /// one read of `/stats`.
    pub fn stats(&self, filter: &str) -> Option<BTreeMap<String, u64>> {
        let path = format!("/stats?filter={filter}");
        let admin = self.admin_port;
        let body = self.net(|| admin_get(admin, &path))?.body;
        Some(parse_stats(&String::from_utf8_lossy(&body)))
    }

    /// The value of one counter or gauge from `/stats`. A tollgate stat
    /// (other than the cost counters, reported by each callback) is read
    /// once the module's stats are settled: its workers report counters
    /// counted in requests' callbacks at their next tick when busy, so a
    /// stat can be a tick (5 ms) late (docs/configuration.md, "Stats").
    pub fn stat(&self, name: &str) -> Option<u64> {
        if name.starts_with("wasmcustom.tollgate.") && !name.starts_with("wasmcustom.tollgate.cost.") {
            return self.settled_stats().get(name).copied();
        }
        self.stat_now(name)
    }

    /// The value of one counter or gauge from one read of `/stats`, for a
    /// poll while load runs: a tollgate counter may be a tick behind (and
    /// [`Envoy::stat`] would wait up to 300 ms for stats that keep moving).
    pub fn stat_now(&self, name: &str) -> Option<u64> {
        let path = format!("/stats?filter=^{name}$");
        let admin = self.admin_port;
        let body = self.net(|| admin_get(admin, &path))?.body;
        let text = String::from_utf8_lossy(&body).into_owned();
        text.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))?.trim().parse().ok())
    }

    /// Every tollgate stat, settled ([`settled`]).
    pub fn settled_stats(&self) -> BTreeMap<String, u64> {
        settled(|| self.stats(TOLLGATE_STATS).unwrap_or_default())
    }
}

/// The filter of every tollgate stat (`/stats?filter=`).
pub const TOLLGATE_STATS: &str = r"^wasmcustom\.tollgate\.";

/// Stats from `read` once none has moved for 100 ms, twenty of the
/// module's ticks; under a load that keeps them moving, the last read
/// after 300 ms (a poll for a condition then sees its value a tick late).
pub fn settled(read: impl Fn() -> BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let start = Instant::now();
    let mut last = read();
    let mut since = Instant::now();
    while since.elapsed() < Duration::from_millis(100) && start.elapsed() < Duration::from_millis(300) {
        std::thread::sleep(Duration::from_millis(10));
        let now = read();
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    last
}

/// Counter and gauge values from a `/stats` text.
pub fn parse_stats(text: &str) -> BTreeMap<String, u64> {
    let value = |line: &str| {
        let (name, value) = line.split_once(": ")?;
        Some((name.to_owned(), value.trim().parse().ok()?))
    };
    text.lines().filter_map(value).collect()
}
