//! The differential harness of the differential and script tests (and of the
//! `script_cost` and `algorithms_report` examples): the limiter called
//! directly in a real Valkey next to the pure model, with injected time,
//! through either path the filter may use ([`Path`]). It uses only `limiter::script` (encoding,
//! the missing-code predicate) and `limiter::reply` (parsing), as the
//! transport does. The calls themselves are in [`calls`]; the lease sets'
//! part (the `lease` entry point, their stored leases and TTLs) in
//! [`leases`]; overrides and the dry run (`peek`) in [`peek`].

mod calls;
mod leases;
mod peek;
pub use calls::{
    decide_on, encoded_via, raw_call, shaped_on, store_adjust_via, store_decide, store_decide_at, store_decide_via,
    store_flush_via, store_reply, store_shaped_via, Path,
};
pub use leases::store_lease_via;
pub use peek::store_peek_via;

use super::Valkey;
use std::collections::BTreeMap;
use std::num::NonZeroU64;
use std::time::Instant;
use tollgate::limiter::model::Model;
use tollgate::limiter::{Adjustment, Algorithm, Check, Decision, Flush, FlushReply, Window};
use tollgate::resp::Value;

pub fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap()
}

/// The checks builder the unit tests use (`Check::for_test`).
#[path = "../../src/testing/check.rs"]
mod checks;
pub use checks::{check, lease};

/// How long after its last admission a bucket's key lives (the script's
/// `PEXPIRE`, without the injected-clock slack).
pub fn ttl_ms(check: &Check) -> u64 {
    let max = check.windows.iter().map(|w| w.period_ms.get()).max().unwrap_or(0);
    match check.algorithm {
        Algorithm::SlidingWindow => 2 * max,
        _ => max,
    }
}

/// What the script adds to every TTL when the clock is injected
/// (`ttl_slack` in prelude.lua).
pub const TTL_SLACK_MS: u64 = 60_000;

/// Model and script side by side. Keys whose TTL has run out in injected
/// time are deleted from Valkey only, as real expiry would: the model keeps
/// its stale state, so agreement proves the TTLs are long enough. Every key
/// a step writes is checked to live exactly as long as expected (`PTTL`).
pub struct Differential<'a> {
    pub valkey: &'a Valkey,
    pub path: Path,
    pub model: Model,
    /// Per key: the time of its last admission and its TTL.
    written: BTreeMap<String, (u64, u64)>,
    pub steps: usize,
    pub expired: usize,
}

impl<'a> Differential<'a> {
    /// Through the function library.
    pub fn new(valkey: &'a Valkey) -> Self {
        Self::via(valkey, Path::Function)
    }

    pub fn via(valkey: &'a Valkey, path: Path) -> Self {
        Self { valkey, path, model: Model::new(), written: BTreeMap::new(), steps: 0, expired: 0 }
    }

    /// Adjusts what a decision at `at` recorded, at `now`, in both, and
    /// asserts identical answers and stored entries.
    pub fn adjust(&mut self, adjustments: &[Adjustment], at: u64, now: u64) -> Decision {
        self.expire(now);
        // An extra charge lands at the later of now and the bucket's last slot.
        let charged_at: Vec<u64> = adjustments.iter().map(|a| now.max(self.model.last_turn(&a.check))).collect();
        let before: Vec<Option<u64>> = adjustments.iter().map(|a| self.lease_latest(&a.check, now)).collect();
        let expected = self.model.adjust(adjustments, at, now);
        let sent = Instant::now();
        let got = store_adjust_via(self.valkey, self.path, adjustments, at, Some(now));
        assert_eq!(
            got, expected,
            "{:?} step {} at {now} ms: store and model disagree on adjusting (at {at}) {adjustments:#?}",
            self.path, self.steps
        );
        for ((a, c), latest) in adjustments.iter().zip(charged_at).zip(before) {
            self.check_entries(&a.check, now);
            self.check_expires(&a.check.key);
            if a.to > a.from && leases::ttl_set(&a.check, c, latest) {
                self.wrote(&a.check.key, c, ttl_ms(&a.check), now, sent);
            }
        }
        self.steps += 1;
        got
    }

    /// Flushes at `now` in both, and asserts identical answers and stored
    /// entries. The token key and syncer sets expire as Valkey's would.
    pub fn flush(&mut self, flush: &Flush, now: u64) -> FlushReply {
        self.expire(now);
        let charged_at: Vec<u64> = flush.entries.iter().map(|e| now.max(self.model.last_turn(&e.check))).collect();
        let expected = self.model.flush(flush, now);
        let sent = Instant::now();
        let got = store_flush_via(self.valkey, self.path, flush, Some(now));
        assert_eq!(
            got, expected,
            "{:?} step {} at {now} ms: store and model disagree on {flush:#?}",
            self.path, self.steps
        );
        for (e, c) in flush.entries.iter().zip(charged_at) {
            self.check_entries(&e.check, now);
            if got.applied && e.units > 0 {
                self.wrote(&e.check.key, c, ttl_ms(&e.check), now, sent);
            }
            let syncers = tollgate::key::syncers_key(&e.check.key);
            let expiry = self.model.flush_key_expiry(&syncers).unwrap();
            self.wrote(&syncers, now, expiry - now, now, sent);
        }
        if got.applied {
            let longest =
                flush.entries.iter().map(|e| e.check.windows.iter().map(|w| w.period_ms.get()).max().unwrap_or(0));
            self.wrote(&flush.token_key, now, longest.max().unwrap_or(0), now, sent);
        }
        self.steps += 1;
        got
    }

    /// Puts `member` in syncer set `set` scored `score` as a version before
    /// `~`-members wrote it (its last flush, the set living 3 s), in both.
    pub fn put_old_syncer(&mut self, set: &str, member: &str, score: u64) {
        self.valkey.cmd(&["ZADD", set, &score.to_string(), member]);
        self.valkey.cmd(&["PEXPIRE", set, &(3_000 + TTL_SLACK_MS).to_string()]);
        self.model.put_syncer(set, member, score, score + 3_000);
        self.written.insert(set.to_string(), (score, 3_000));
    }

    /// A key the limiter wrote always expires (`PTTL` is -1 for a key
    /// without an expiry, -2 for none).
    fn check_expires(&self, key: &str) {
        let pttl = self.valkey.int(&["PTTL", key]);
        assert_ne!(pttl, -1, "{:?} step {}: {key} has no expiry", self.path, self.steps);
    }

    /// The log's stored entries: as many as the model's, at the same times
    /// (compared when there are at most a few thousand); a lease set's
    /// leases after a decision or adjustment at `now` ([`leases`]).
    fn check_entries(&self, c: &Check, now: u64) {
        if c.algorithm == Algorithm::Lease {
            self.check_leases(&c.key, now, true);
        }
        if c.algorithm == Algorithm::SlidingLog {
            let zcard = self.valkey.int(&["ZCARD", &c.key]);
            assert_eq!(zcard as usize, self.model.entries(&c.key), "step {}: entries of {}", self.steps, c.key);
            if zcard <= 4_096 {
                let Value::Array(items) = self.valkey.cmd(&["ZRANGE", &c.key, "0", "-1", "WITHSCORES"]) else {
                    panic!("ZRANGE {}", c.key)
                };
                let times: Vec<u64> = items
                    .iter()
                    .skip(1)
                    .step_by(2)
                    .map(|s| String::from_utf8_lossy(s.as_bytes().unwrap()).parse().unwrap())
                    .collect();
                assert_eq!(times, self.model.entry_times(&c.key), "step {}: entry times of {}", self.steps, c.key);
            }
        }
    }

    /// `key` was written (its TTL set) at `at` by a call at `now` sent at
    /// `sent`, to live `ttl` ms after `at`: it expires then in injected time,
    /// and its `PTTL` is `at + ttl - now` plus the slack, less the real time
    /// since the call was sent.
    pub fn wrote(&mut self, key: &str, at: u64, ttl: u64, now: u64, sent: Instant) {
        self.written.insert(key.to_string(), (at, ttl));
        let pttl = self.valkey.int(&["PTTL", key]);
        let expected = i64::try_from(at + ttl - now + TTL_SLACK_MS).unwrap();
        let passed = i64::try_from(sent.elapsed().as_millis()).unwrap();
        assert!(
            pttl <= expected + 1 && pttl >= expected - passed - 1,
            "{:?} step {} at {now} ms: {key} lives {pttl} ms, not {expected} ({passed} ms passed since)",
            self.path,
            self.steps
        );
    }

    /// Deletes from Valkey the keys whose TTL ran out by `now`.
    fn expire(&mut self, now: u64) {
        let due: Vec<String> = self
            .written
            .iter()
            .filter(|(_, &(at, ttl))| now.saturating_sub(at) >= ttl)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            self.valkey.cmd(&["DEL", &key]);
            self.written.remove(&key);
            self.expired += 1;
        }
    }

    /// Decides `checks` at `now` in both and asserts identical answers.
    pub fn step(&mut self, checks: &[Check], now: u64) -> Decision {
        self.expire(now);
        let before: Vec<Option<u64>> = checks.iter().map(|c| self.lease_latest(c, now)).collect();
        let expected = self.model.decide(checks, now);
        let sent = Instant::now();
        let got = store_decide_via(self.valkey, self.path, checks, Some(now));
        assert_eq!(
            got, expected,
            "{:?} step {} at {now} ms: store and model disagree on {checks:#?}",
            self.path, self.steps
        );
        self.decided(checks, &got, &before, now, sent);
        got
    }

    /// After a decision at `now` sent at `sent` (`before`: each check's
    /// latest live lease then, [`leases`]): the stored entries, and the TTL
    /// of every key admitted into, from its turn.
    fn decided(&mut self, checks: &[Check], got: &Decision, before: &[Option<u64>], now: u64, sent: Instant) {
        let turn = now + got.delay_ms;
        for (c, &latest) in checks.iter().zip(before) {
            self.check_entries(c, now);
            if got.allowed && !c.check_only && leases::ttl_set(c, turn, latest) {
                self.wrote(&c.key, turn, ttl_ms(c), now, sent);
            }
        }
        self.steps += 1;
    }

    /// Decides `checks` at `now` in both, shaped with `max_delay`, and
    /// asserts identical answers (keys written at the slot live a TTL after it).
    pub fn step_shaped(&mut self, checks: &[Check], max_delay: u64, now: u64) -> Decision {
        self.step_floored(checks, max_delay, 0, now)
    }

    /// [`Differential::step_shaped`] with the slot at `now + floor` or later.
    pub fn step_floored(&mut self, checks: &[Check], max_delay: u64, floor: u64, now: u64) -> Decision {
        self.expire(now);
        let before: Vec<Option<u64>> = checks.iter().map(|c| self.lease_latest(c, now)).collect();
        let expected = self.model.decide_floored(checks, max_delay, floor, now);
        let sent = Instant::now();
        let got = store_shaped_via(self.valkey, self.path, checks, (max_delay, floor), Some(now));
        assert_eq!(
            got, expected,
            "{:?} step {} at {now} ms (max_delay {max_delay}, floor {floor}): store and model disagree on {checks:#?}",
            self.path, self.steps
        );
        self.decided(checks, &got, &before, now, sent);
        got
    }

    /// Runs `(time, checks)` steps.
    pub fn run(&mut self, steps: &[(u64, Vec<Check>)]) {
        for (now, checks) in steps {
            self.step(checks, *now);
        }
    }
}
