//! Rules decided on the worker and synced with the store every interval
//! (`rules[].sync`, docs/sync.md). A request all of whose rules are synced
//! is decided from this worker's view of each window ([`table`]): admitted
//! only if every window of every rule has room in this worker's share of
//! what the store said remained. Every interval the worker flushes, in one
//! atomic call per slot, what it admitted per bucket since its last flush,
//! and reads every window back with its share (the store splits what
//! remains among the bucket's syncers). A flush whose reply was lost goes
//! again with the same token, which the store applies once; one older than
//! its longest period is dropped (it no longer counts in any window).
//!
//! A request that also matches a rule that is not synced is decided by the
//! store for all of them, as is a bucket this worker has no view of yet.
//!
//! The same flushes carry what `failure_mode: local` admitted while the
//! store could not answer ([`Syncing::carry`]), so the store learns it when
//! it is back.

mod decide;
pub mod flush;
pub mod table;

use crate::config::Config;
use crate::limiter::Check;
use crate::worker::calls::{CallId, Pending};
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;
use table::Table;

/// Keys in one flush, at most (a slot's keys beyond go in the next call).
pub const MAX_FLUSH_KEYS: usize = 256;
/// A syncer counts as active for this many intervals after its last flush.
pub const HORIZON_INTERVALS: u64 = 3;
/// How often units the local limiter admitted, carried to the store, are flushed (and failed
/// flushes of them sent again).
pub const CARRY_INTERVAL_MS: u64 = 100;

/// The synced rules' tables, and the flushes to send again.
#[derive(Debug)]
pub struct Syncing {
    /// By rule index; `None` for a rule that is not synced.
    tables: Vec<Option<Table>>,
    /// Whether any rule is synced (known from the configuration).
    any_rule: bool,
    /// This worker's name among syncers, unique per worker and start.
    syncer: String,
    /// Flushes made, for their ids and tokens.
    seq: u32,
    /// Flushes whose reply was lost (or whose stream is down), sent again
    /// from the time given.
    again: Vec<(u64, CallId, Pending)>,
    /// Units the local limiter admitted per bucket, not yet flushed, and
    /// how many buckets it may hold (`local_limiter.max_keys`).
    carried: HashMap<String, (Check, u64)>,
    carried_room: usize,
    /// Buckets in a carried flush not yet answered: left out of the next
    /// one (their token key must not be replaced before).
    carried_flying: HashSet<String>,
    /// When carried units are flushed next.
    carried_due_ms: u64,
}

impl Syncing {
    pub fn new(config: &Config) -> Syncing {
        // A random name (std seeds its hasher keys from the OS: WASI's
        // `random_get` in Envoy).
        let syncer = format!("{:016x}", std::collections::hash_map::RandomState::new().build_hasher().finish());
        Syncing {
            tables: config.rules.iter().map(|r| r.sync.map(Table::new)).collect(),
            any_rule: config.rules.iter().any(|r| r.sync.is_some()),
            syncer,
            seq: 0,
            again: Vec::new(),
            carried: HashMap::new(),
            carried_room: config.local_limiter.max_keys,
            carried_flying: HashSet::new(),
            carried_due_ms: 0,
        }
    }

    /// Whether any rule is synced, or units are carried to the store.
    pub fn active(&self) -> bool {
        self.any_rule || !self.carried.is_empty() || !self.again.is_empty()
    }

    /// Whether any rule is synced.
    pub fn any_rule(&self) -> bool {
        self.any_rule
    }

    /// The local limiter admitted `units` in `check`'s bucket while the
    /// store could not answer: flushed when it can (a bucket beyond
    /// `local_limiter.max_keys` carried ones is not remembered: false).
    pub fn carry(&mut self, check: &Check, units: u64) -> bool {
        if let Some((_, carried)) = self.carried.get_mut(&check.key) {
            *carried = carried.saturating_add(units);
            return true;
        }
        if self.carried.len() >= self.carried_room {
            return false;
        }
        self.carried.insert(check.key.clone(), (check.clone(), units));
        true
    }

    /// The carried units to flush at `now_ms`, at most every [`CARRY_INTERVAL_MS`].
    fn take_carried(&mut self, now_ms: u64) -> Vec<(Check, u64)> {
        if self.carried.is_empty() || now_ms < self.carried_due_ms {
            return Vec::new();
        }
        self.carried_due_ms = now_ms.saturating_add(CARRY_INTERVAL_MS);
        let flying = &self.carried_flying;
        let ready: Vec<String> = self.carried.keys().filter(|k| !flying.contains(*k)).cloned().collect();
        let taken: Vec<(Check, u64)> = ready.iter().filter_map(|k| self.carried.remove(k)).collect();
        self.carried_flying.extend(ready);
        taken
    }

    /// A carried flush was answered or dropped: its buckets may go again.
    fn carried_landed(&mut self, checks: &[Check]) {
        for c in checks {
            self.carried_flying.remove(&c.key);
        }
    }

    /// The series name of a flush's token key: the syncer, or for carried
    /// units the syncer + `.owed` (its name in the store since it began).
    fn series(&self, rule: Option<usize>) -> String {
        match rule {
            Some(_) => self.syncer.clone(),
            None => format!("{}.owed", self.syncer),
        }
    }

    /// Whether every one of `checks` belongs to a synced rule.
    pub fn all_synced(&self, checks: &[Check]) -> bool {
        checks.iter().all(|c| self.tables.get(c.rule).is_some_and(Option::is_some))
    }

    /// The tick the tables need: their shortest interval while they hold
    /// buckets or flushes to send again.
    pub fn tick(&self) -> Option<Duration> {
        let busy = !self.again.is_empty();
        let owed = (busy || !self.carried.is_empty()).then_some(Duration::from_millis(CARRY_INTERVAL_MS));
        self.tables
            .iter()
            .flatten()
            .filter(|t| busy || t.len() > 0)
            .map(|t| Duration::from_millis(t.interval_ms()))
            .chain(owed)
            .min()
    }

    fn table(&mut self, rule: usize) -> Option<&mut Table> {
        self.tables.get_mut(rule).and_then(Option::as_mut)
    }
}
