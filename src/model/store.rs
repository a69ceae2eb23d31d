//! A store that answers a worker's stream with the pure models instead of
//! Valkey: `AUTH`, `FCALL` (`ERR Function not found` until `FUNCTION
//! LOAD`), `FUNCTION LOAD`, `EVALSHA` (`NOSCRIPT` until the script was sent
//! with `EVAL`), `EVAL`, `SENTINEL get-master-addr-by-name`, and `CLUSTER
//! SHARDS` as a cluster of one master serving every slot; the limiter's five
//! entry points (decide, peek, adjust, flush, lease: `store/lease.rs` for the
//! lease sets), checks marked `@` reading override hashes, and `HSET`,
//! `HGETALL`, `DEL` of override hashes (`store/overrides.rs`). The worker's unit tests use it as their store (and as the data of
//! their fake cluster of several masters), and `tollgate simulate` runs the
//! worker against it.

use crate::limiter::model::Model;
use crate::limiter::script::limiter;
use crate::limiter::{Adjustment, Algorithm, Check, Decision, Flush, FlushEntry, LeaseOp, Window};
use crate::resp::{decode_all, encode_value, Limits, Value};
use lease::algorithm_or_lease;
use std::num::NonZeroU64;

/// The models' state, and what the store was asked.
#[derive(Debug)]
pub struct ModelStore {
    pub model: Model,
    /// Whether `EVALSHA` finds the script (else `NOSCRIPT` until an `EVAL`),
    /// and `FCALL` the library (else `Function not found` until a `FUNCTION
    /// LOAD`): a flush or a restart empties both.
    pub script_loaded: bool,
    /// What `FUNCTION LOAD` answers instead of loading (an ACL refusal).
    pub refuse_load: Option<String>,
    /// `FUNCTION LOAD`s received.
    pub loads: usize,
    /// The password `AUTH` must give, if any.
    pub password: Option<String>,
    /// What `SENTINEL get-master-addr-by-name` answers (`ip:port`).
    pub master: Option<String>,
    /// Decisions executed: the store's own record of what ran.
    pub executed: usize,
    /// `EVAL`s received (each carries the script's body).
    pub evals: usize,
    /// Every adjustment applied: its call's `at`, `from` and `to`.
    pub adjusted: Vec<(u64, u64, u64)>,
    /// Every call of the limiter that ran, in order, when [`ModelStore::journal`]
    /// is on (the whole-system simulator reads what was recorded from it).
    pub ran: Vec<Ran>,
    /// Whether calls are journaled in [`ModelStore::ran`].
    pub journal: bool,
}

/// A call of the limiter the store ran, as it was asked and answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ran {
    /// A decision at `now_ms`: its checks (a check's cost is what it
    /// records, unless it only checks), whether it admitted, and a shaped
    /// admission's delay (its turn is `now_ms + delay_ms`).
    Decide { now_ms: u64, checks: Vec<Check>, allowed: bool, delay_ms: u64 },
    /// An `adjust` at `now_ms` of what a decision at `at_ms` recorded.
    Adjust { now_ms: u64, at_ms: u64, adjustments: Vec<Adjustment> },
    /// A flush at `now_ms`: its token, its entries, whether it was applied
    /// now (else it was before: read only).
    Flush { now_ms: u64, token: String, entries: Vec<FlushEntry>, applied: bool },
    /// Leases ended or renewed at `now_ms`, and per op whether it was live.
    Lease { now_ms: u64, ops: Vec<LeaseOp>, live: Vec<bool> },
}

impl Default for ModelStore {
    fn default() -> Self {
        ModelStore {
            model: Model::new(),
            script_loaded: true,
            refuse_load: None,
            loads: 0,
            password: None,
            master: None,
            executed: 0,
            evals: 0,
            adjusted: Vec::new(),
            ran: Vec::new(),
            journal: false,
        }
    }
}

fn text(v: &Value) -> String {
    v.as_bytes().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default()
}

fn error(e: &str) -> Value {
    Value::Error(e.as_bytes().to_vec())
}

impl ModelStore {
    /// The replies to every command in `bytes`, at store time `now_ms`.
    pub fn answer(&mut self, bytes: &[u8], now_ms: u64) -> Vec<u8> {
        let mut out = Vec::new();
        match decode_all(bytes, &Limits::default()) {
            Ok(commands) => {
                for command in commands {
                    let reply = match command.as_array() {
                        Some(args) => self.run(args, now_ms),
                        None => error("ERR Protocol error: expected an array"),
                    };
                    encode_value(&mut out, &reply);
                }
            }
            Err(e) => encode_value(&mut out, &error(&format!("ERR Protocol error: {e}"))),
        }
        out
    }

    /// The reply to one command (`args`: its words), at store time `now_ms`.
    pub fn run(&mut self, args: &[Value], now_ms: u64) -> Value {
        let verb = args.first().map(text).unwrap_or_default();
        match verb.as_str() {
            "AUTH" => match (&self.password, args.last().map(text)) {
                (Some(p), Some(given)) if *p == given => Value::Simple(b"OK".to_vec()),
                _ => error("WRONGPASS invalid username-password pair"),
            },
            "CLUSTER" => self.one_master_shards(),
            "SENTINEL" => match self.master.as_deref().and_then(|m| m.rsplit_once(':')) {
                Some((ip, port)) => Value::Array(vec![Value::Bulk(ip.into()), Value::Bulk(port.into())]),
                None => Value::Nil,
            },
            "FUNCTION" => {
                self.loads += 1;
                match &self.refuse_load {
                    Some(e) => error(e),
                    None if args.get(1).map(text).as_deref() == Some("LOAD") => {
                        self.script_loaded = true;
                        Value::Bulk(limiter().function.clone().into_bytes())
                    }
                    None => error("ERR unknown subcommand"),
                }
            }
            "FCALL" if !self.script_loaded => error("ERR Function not found"),
            "EVALSHA" if !self.script_loaded => error("NOSCRIPT No matching script."),
            "FCALL" | "EVALSHA" | "EVAL" => {
                let script = limiter();
                let target = args.get(1).map(text).unwrap_or_default();
                let entry = match verb.as_str() {
                    "FCALL" if target == script.function => Entry::Decide,
                    "FCALL" if target == script.adjust_function => Entry::Adjust,
                    "FCALL" if target == script.flush_function => Entry::Flush,
                    "FCALL" if target == script.lease_function => Entry::Lease,
                    "FCALL" if target == script.peek_function => Entry::Peek,
                    "FCALL" => return error("ERR Function not found"),
                    "EVALSHA" if target == script.sha => Entry::Decide,
                    "EVALSHA" if target == script.adjust_sha => Entry::Adjust,
                    "EVALSHA" if target == script.flush_sha => Entry::Flush,
                    "EVALSHA" if target == script.lease_sha => Entry::Lease,
                    "EVALSHA" if target == script.peek_sha => Entry::Peek,
                    "EVALSHA" => return error("NOSCRIPT unknown sha"),
                    _ if target == script.adjust_body => Entry::Adjust,
                    _ if target == script.flush_body => Entry::Flush,
                    _ if target == script.lease_body => Entry::Lease,
                    _ if target == script.peek_body => Entry::Peek,
                    _ => Entry::Decide,
                };
                self.evals += usize::from(verb == "EVAL");
                self.script_loaded = true;
                let args = args.get(2..).unwrap_or_default();
                let reply = match entry {
                    Entry::Decide => self.decide(args, now_ms, false),
                    Entry::Peek => self.decide(args, now_ms, true),
                    Entry::Adjust => self.adjust(args, now_ms),
                    Entry::Flush => self.flush(args, now_ms),
                    Entry::Lease => self.lease(args, now_ms),
                };
                match reply {
                    Some(reply) if reply.is_error() => reply,
                    Some(reply) => {
                        self.executed += 1;
                        reply
                    }
                    None => error("ERR tollgate: bad arguments"),
                }
            }
            "HSET" | "HGETALL" | "DEL" => self.hash_command(&verb, args),
            other => error(&format!("ERR unknown command {other}")),
        }
    }

    /// `CLUSTER SHARDS` of a cluster of one master, this store, serving
    /// every slot (at `master`, or 127.0.0.1:6379).
    fn one_master_shards(&self) -> Value {
        let (ip, port) = self.master.as_deref().and_then(|m| m.rsplit_once(':')).unwrap_or(("127.0.0.1", "6379"));
        let pair = |k: &str, v: Value| [Value::Bulk(k.as_bytes().to_vec()), v];
        let port = Value::Integer(port.parse().unwrap_or(6379));
        let node: Vec<Value> =
            [pair("port", port), pair("ip", Value::Bulk(ip.into())), pair("role", Value::Bulk(b"master".to_vec()))]
                .into_iter()
                .flatten()
                .collect();
        let slots = Value::Array(vec![Value::Integer(0), Value::Integer(16383)]);
        let shard: Vec<Value> = [pair("slots", slots), pair("nodes", Value::Array(vec![Value::Array(node)]))]
            .into_iter()
            .flatten()
            .collect();
        Value::Array(vec![Value::Array(shard)])
    }

    /// `numkeys, KEYS..., now, [~max_delay[:floor],] (algorithm, cost, n,
    /// (limit, period)...)...`; a cost `?<units>` only checks; `~max_delay`
    /// shapes (the reply ends with the delay); a lease set's algorithm is
    /// `lease=<id>`, with cost 1 and one window; `@` before the algorithm
    /// marks a check whose override key follows the buckets in KEYS. `dry`:
    /// peek, which records (and journals) nothing.
    fn decide(&mut self, args: &[Value], now_ms: u64, dry: bool) -> Option<Value> {
        let mut args = args.iter().map(text).peekable();
        let (keys, now) = keys_and_clock(&mut args, now_ms)?;
        let mut max_delay = None;
        let mut floor = 0;
        if let Some(delay) = args.next_if(|a| a.starts_with('~')) {
            let delay = delay.get(1..)?;
            let (delay, floor_s) = delay.split_once(':').unwrap_or((delay, "0"));
            max_delay = Some(delay.parse::<u64>().ok()?);
            floor = floor_s.parse::<u64>().ok()?;
        }
        let mut checks = Vec::with_capacity(keys.len());
        while args.peek().is_some() {
            let (algorithm, lease, marked) = algorithm_or_lease(args.next())?;
            let cost = args.next()?;
            let (cost, check_only) = match cost.strip_prefix('?') {
                Some(units) => (nz(Some(units.to_string()))?, true),
                None => (nz(Some(cost))?, false),
            };
            let windows = windows(&mut args)?;
            if lease.is_some() && (cost.get() != 1 || windows.len() != 1) {
                return None;
            }
            let mut check = stored_check(checks.len(), String::new(), windows, algorithm, lease);
            (check.cost, check.check_only) = (cost, check_only);
            checks.push((check, marked));
        }
        let checks = with_keys(checks, keys)?;
        let Some(max_delay) = max_delay else {
            if dry {
                return Some(reply(&self.model.peek(&checks, now), &checks));
            }
            let decision = self.model.decide(&checks, now);
            let answer = reply(&decision, &checks);
            self.note(|| Ran::Decide {
                now_ms: now,
                checks: in_force(checks, &decision),
                allowed: decision.allowed,
                delay_ms: 0,
            });
            return Some(answer);
        };
        let decision = if dry {
            self.model.peek_floored(&checks, max_delay, floor, now)
        } else {
            self.model.decide_floored(&checks, max_delay, floor, now)
        };
        let Value::Array(mut items) = reply(&decision, &checks) else { return None };
        items.push(Value::Integer(i64::try_from(decision.delay_ms).unwrap_or(i64::MAX)));
        if !dry {
            let (allowed, delay_ms) = (decision.allowed, decision.delay_ms);
            self.note(|| Ran::Decide { now_ms: now, checks: in_force(checks, &decision), allowed, delay_ms });
        }
        Some(Value::Array(items))
    }

    /// `numkeys, KEYS..., now, at, (algorithm, from, to, n, (limit, period)...)...`
    /// (a lease set's algorithm `lease=<id>`, with one window; `@` as for a
    /// decision).
    fn adjust(&mut self, args: &[Value], now_ms: u64) -> Option<Value> {
        let mut args = args.iter().map(text).peekable();
        let (keys, now) = keys_and_clock(&mut args, now_ms)?;
        let at: u64 = args.next()?.parse().ok()?;
        let mut checks = Vec::with_capacity(keys.len());
        let mut units = Vec::with_capacity(keys.len());
        while args.peek().is_some() {
            let (algorithm, lease, marked) = algorithm_or_lease(args.next())?;
            let from: u64 = args.next()?.parse().ok()?;
            let to: u64 = args.next()?.parse().ok()?;
            let windows = windows(&mut args)?;
            if lease.is_some() && windows.len() != 1 {
                return None;
            }
            checks.push((stored_check(checks.len(), String::new(), windows, algorithm, lease), marked));
            units.push((from, to));
        }
        let adjustments: Vec<Adjustment> = with_keys(checks, keys)?
            .into_iter()
            .zip(units)
            .map(|(check, (from, to))| Adjustment { check, from, to })
            .collect();
        self.adjusted.extend(adjustments.iter().map(|a| (at, a.from, a.to)));
        let decision = self.model.adjust(&adjustments, at, now);
        let checks: Vec<Check> = adjustments.iter().map(|a| a.check.clone()).collect();
        let journaled = |adjustments: Vec<Adjustment>| {
            let checks = in_force(adjustments.iter().map(|a| a.check.clone()).collect(), &decision);
            adjustments.into_iter().zip(checks).map(|(a, check)| Adjustment { check, ..a }).collect()
        };
        self.note(|| Ran::Adjust { now_ms: now, at_ms: at, adjustments: journaled(adjustments) });
        Some(reply(&decision, &checks))
    }

    /// Journals what `ran` makes, if the journal is on.
    fn note(&mut self, ran: impl FnOnce() -> Ran) {
        if self.journal {
            self.ran.push(ran());
        }
    }

    /// `numkeys, buckets..., their syncer sets..., token key, now, token,
    /// syncer, horizon, (algorithm, units, n, (limit, period)...)...`; a
    /// token key not the first bucket's is refused (`Model::flush_error`).
    fn flush(&mut self, args: &[Value], now_ms: u64) -> Option<Value> {
        let mut args = args.iter().map(text);
        let (keys, now) = keys_and_clock(&mut args, now_ms)?;
        let buckets = keys.len().checked_sub(1)? / 2;
        let token_key = keys.last()?.clone();
        let (token, syncer) = (args.next()?, args.next()?);
        let horizon_ms: u64 = args.next()?.parse().ok()?;
        let mut entries = Vec::with_capacity(buckets);
        for (rule, key) in keys.into_iter().take(buckets).enumerate() {
            let algorithm = algorithm(args.next())?;
            let units: u64 = args.next()?.parse().ok()?;
            let windows = windows(&mut args)?;
            let check = stored_check(rule, key, windows, algorithm, None);
            entries.push(FlushEntry { check, units });
        }
        let flush = Flush { entries, token, syncer, horizon_ms, token_key };
        if let Some(refused) = Model::flush_error(&flush) {
            return Some(error(refused));
        }
        let answer = self.model.flush(&flush, now);
        let applied = answer.applied;
        self.note(|| Ran::Flush { now_ms: now, token: flush.token, entries: flush.entries, applied });
        let Value::Array(mut items) = reply(&answer.state, &[]) else { return None };
        if let Some(first) = items.first_mut() {
            *first = Value::Integer(i64::from(answer.applied));
        }
        for (syncers, rank) in answer.syncers {
            items.extend([syncers, rank].map(|n| Value::Integer(i64::try_from(n).unwrap_or(i64::MAX))));
        }
        Some(Value::Array(items))
    }
}

mod lease;
mod overrides;
use overrides::{in_force, with_keys};

/// Which entry point of the limiter a call runs.
enum Entry {
    Decide,
    Peek,
    Adjust,
    Flush,
    Lease,
}

fn nz(s: Option<String>) -> Option<NonZeroU64> {
    NonZeroU64::new(s?.parse().ok()?)
}

fn algorithm(id: Option<String>) -> Option<Algorithm> {
    let id = id?;
    Algorithm::ALL.into_iter().find(|a| a.id() == id)
}

/// `numkeys, KEYS..., now`: the keys and the call's clock.
fn keys_and_clock(args: &mut impl Iterator<Item = String>, now_ms: u64) -> Option<(Vec<String>, u64)> {
    let n: usize = args.next()?.parse().ok()?;
    let keys: Vec<String> = args.by_ref().take(n).collect();
    let injected = args.next()?;
    let now = if injected.is_empty() { now_ms } else { injected.parse().ok()? };
    Some((keys, now))
}

/// `n, (limit, period)...`
fn windows(args: &mut impl Iterator<Item = String>) -> Option<Vec<Window>> {
    let count: usize = args.next()?.parse().ok()?;
    (0..count).map(|_| Some(Window { limit: nz(args.next())?, period_ms: nz(args.next())? })).collect()
}

/// The limiter's reply to a decision, a peek or an adjustment: a check
/// with an override key (of `checks`) answers its `overridden` flag, then
/// the limit in force before each window's three numbers.
fn reply(d: &Decision, checks: &[Check]) -> Value {
    let int = |n: u64| Value::Integer(i64::try_from(n).unwrap_or(i64::MAX));
    let mut reply = vec![Value::Integer(i64::from(d.allowed)), int(d.now_ms)];
    for w in &d.windows {
        let marked = checks.get(w.check).is_some_and(|c| c.override_key.is_some());
        if marked && w.window == 0 {
            reply.push(int(u64::from(w.overridden)));
        }
        if marked {
            reply.push(int(w.limit));
        }
        reply.extend([int(w.remaining), int(w.reset_ms), int(w.retry_ms)]);
    }
    Value::Array(reply)
}

/// The check an `adjust` or a flush names: what its record was, at cost 1.
fn stored_check(
    rule: usize,
    key: String,
    windows: Vec<Window>,
    algorithm: Algorithm,
    lease: Option<std::rc::Rc<str>>,
) -> Check {
    Check {
        rule,
        key,
        windows: windows.into(),
        cost: NonZeroU64::MIN,
        algorithm,
        check_only: false,
        lease,
        override_key: None,
    }
}
