//! The local denial cache: when the store says a bucket denies until time T,
//! further requests for that bucket are denied in the proxy until T without
//! a store call.
//!
//! For the limiter's exact algorithms this changes no decision: a bucket's
//! key includes its rule, so the windows and the cost are the same for every
//! request of the bucket, and the store's `retry_ms` is the earliest time at
//! which anything can free in those windows. T is computed from when the
//! call was *sent*, so the proxy's view of T is never later than the store's.
//! Where it is not exact is documented in docs/performance.md. A refund
//! (`count`, a settlement below the reservation) frees room before T: the
//! worker that settles forgets the bucket; another worker's entry may deny
//! until its T, never admit wrongly.
//!
//! Bounded: at most `capacity` keys per worker; on insert, expired entries go
//! first, then the least recently used.

use crate::limiter::WindowOutcome;
use std::collections::{BTreeMap, HashMap};

/// Default capacity per worker.
pub const DEFAULT_CAPACITY: usize = 10_000;

#[derive(Debug, Clone)]
struct Entry {
    until_ms: u64,
    at_ms: u64,
    seq: u64,
    windows: Vec<WindowOutcome>,
}

/// Denied buckets of one worker, by key.
#[derive(Debug, Default)]
pub struct DenialCache {
    capacity: usize,
    entries: HashMap<String, Entry>,
    /// Entries by last use, oldest first.
    order: BTreeMap<u64, String>,
    seq: u64,
}

impl DenialCache {
    pub fn new(capacity: usize) -> DenialCache {
        DenialCache { capacity, ..DenialCache::default() }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Records that `key` denies until `until_ms`; `windows` are the key's
    /// windows as the store reported them at `at_ms` (the time the call was
    /// sent).
    pub fn insert(&mut self, key: &str, until_ms: u64, at_ms: u64, windows: Vec<WindowOutcome>) {
        if self.capacity == 0 || until_ms <= at_ms {
            return;
        }
        if let Some(old) = self.entries.remove(key) {
            self.order.remove(&old.seq);
        }
        if self.entries.len() >= self.capacity {
            self.evict(at_ms);
        }
        self.seq += 1;
        self.order.insert(self.seq, key.to_owned());
        self.entries.insert(key.to_owned(), Entry { until_ms, at_ms, seq: self.seq, windows });
    }

    /// The key's windows if it is still denied at `now_ms`, with reset and
    /// retry times reduced by the time elapsed since the store answered.
    pub fn lookup(&mut self, key: &str, now_ms: u64) -> Option<Vec<WindowOutcome>> {
        let entry = self.entries.get_mut(key)?;
        if now_ms >= entry.until_ms {
            let seq = entry.seq;
            self.entries.remove(key);
            self.order.remove(&seq);
            return None;
        }
        self.order.remove(&entry.seq);
        self.seq += 1;
        entry.seq = self.seq;
        self.order.insert(self.seq, key.to_owned());
        let elapsed = now_ms.saturating_sub(entry.at_ms);
        Some(
            entry
                .windows
                .iter()
                .map(|w| WindowOutcome {
                    reset_ms: w.reset_ms.saturating_sub(elapsed),
                    retry_ms: if w.retry_ms > 0 { w.retry_ms.saturating_sub(elapsed).max(1) } else { 0 },
                    ..*w
                })
                .collect(),
        )
    }

    /// Forgets `key` (a refund freed room in it).
    pub fn forget(&mut self, key: &str) {
        if let Some(entry) = self.entries.remove(key) {
            self.order.remove(&entry.seq);
        }
    }

    fn evict(&mut self, now_ms: u64) {
        let expired: Vec<(u64, String)> = self
            .order
            .iter()
            .filter(|(_, k)| self.entries.get(*k).is_none_or(|e| e.until_ms <= now_ms))
            .map(|(s, k)| (*s, k.clone()))
            .collect();
        for (seq, key) in &expired {
            self.order.remove(seq);
            self.entries.remove(key);
        }
        while self.entries.len() >= self.capacity {
            let Some((_, key)) = self.order.pop_first() else { break };
            self.entries.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(retry_ms: u64) -> WindowOutcome {
        WindowOutcome {
            check: 0,
            window: 0,
            limit: 5,
            period_ms: 3_000,
            remaining: 0,
            reset_ms: 2_000,
            retry_ms,
            overridden: false,
        }
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn denies_until_the_retry_time_with_times_counting_down() {
        let mut c = DenialCache::new(10);
        c.insert("k", 1_500, 1_000, vec![window(500)]);
        let w = c.lookup("k", 1_200).unwrap();
        assert_eq!((w[0].retry_ms, w[0].reset_ms), (300, 1_800));
        assert!(c.lookup("k", 1_500).is_none(), "at T the store decides again");
        assert!(c.is_empty(), "expired entries are dropped");
        assert!(c.lookup("other", 0).is_none());
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn bounded_with_expired_entries_then_the_least_recently_used_evicted() {
        let mut c = DenialCache::new(2);
        c.insert("a", 10_000, 0, vec![window(1)]);
        c.insert("b", 50, 0, vec![window(1)]);
        c.insert("c", 10_000, 100, vec![window(1)]);
        assert_eq!(c.len(), 2);
        assert!(c.lookup("b", 100).is_none(), "the expired entry went first");
        assert!(c.lookup("a", 100).is_some());
        c.insert("d", 10_000, 100, vec![window(1)]);
        assert!(c.lookup("c", 100).is_none(), "least recently used evicted");
        assert!(c.lookup("a", 100).is_some() && c.lookup("d", 100).is_some());
        let mut off = DenialCache::new(0);
        off.insert("a", 10, 0, vec![]);
        assert!(off.is_empty(), "capacity 0 disables the cache");
    }
}
