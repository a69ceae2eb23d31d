//! The differential harness shared by `differential.rs` and
//! `differential_props.rs`: the script called directly in a real Valkey
//! (EVALSHA, then EVAL on NOSCRIPT) next to the pure model, with injected time.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use crate::support::{try_command, Valkey};
use std::collections::BTreeMap;
use tollgate::limiter::model::Model;
use tollgate::limiter::script::{encode_call, limiter, Invocation};
use tollgate::limiter::{Algorithm, Check, Decision, Window};
use tollgate::resp::Value;
use tollgate::store::{self, Outcome};

/// The checks builder the unit tests use (`Check::for_test`).
#[path = "../../src/testing/check.rs"]
mod checks;
pub use checks::check;

/// The script, called directly; `now_ms` `None` means Valkey's clock.
pub fn store_decide_at(valkey: &Valkey, checks: &[Check], now_ms: Option<u64>) -> Decision {
    for how in [Invocation::EvalSha, Invocation::Eval] {
        let mut body = Vec::new();
        encode_call(&mut body, limiter(), how, checks, now_ms);
        let reply = raw_call(valkey.port, &body);
        match store::interpret_reply(&reply, checks) {
            Outcome::Decided(d) => return d,
            Outcome::NoScript => continue,
            Outcome::Failed(f) => panic!("store failed: {f}"),
        }
    }
    panic!("NOSCRIPT after EVAL")
}

pub fn store_decide(valkey: &Valkey, checks: &[Check], now_ms: u64) -> Decision {
    store_decide_at(valkey, checks, Some(now_ms))
}

fn raw_call(port: u16, body: &[u8]) -> Value {
    // Re-split the encoded command into arguments for the test client.
    let (Value::Array(items), _) = tollgate::resp::decode(body, &Default::default()).unwrap() else {
        panic!("pipeline is not one command")
    };
    let args: Vec<&[u8]> = items.iter().map(|v| v.as_bytes().unwrap()).collect();
    try_command(port, &args).unwrap()
}

/// How long after its last admission a bucket's key lives (the script's
/// `PEXPIRE`, without the injected-clock slack).
pub fn ttl_ms(check: &Check) -> u64 {
    let max = check.windows.iter().map(|w| w.period_ms.get()).max().unwrap_or(0);
    match check.algorithm {
        Algorithm::SlidingWindow => 2 * max,
        _ => max,
    }
}

/// Model and script side by side. Keys whose TTL has run out in injected
/// time are deleted from Valkey only, as real expiry would: the model keeps
/// its stale state, so agreement proves the TTLs are long enough.
pub struct Differential<'a> {
    pub valkey: &'a Valkey,
    pub model: Model,
    /// Per key: the time of its last admission and its TTL.
    written: BTreeMap<String, (u64, u64)>,
    pub steps: usize,
    pub expired: usize,
}

impl<'a> Differential<'a> {
    pub fn new(valkey: &'a Valkey) -> Self {
        Self { valkey, model: Model::new(), written: BTreeMap::new(), steps: 0, expired: 0 }
    }

    /// Decides `checks` at `now` in both and asserts identical answers.
    pub fn step(&mut self, checks: &[Check], now: u64) -> Decision {
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
        let expected = self.model.decide(checks, now);
        let got = store_decide(self.valkey, checks, now);
        assert_eq!(got, expected, "step {} at {now} ms: store and model disagree on {checks:#?}", self.steps);
        for c in checks {
            if c.algorithm == Algorithm::SlidingLog {
                let zcard = self.valkey.int(&["ZCARD", &c.key]);
                assert_eq!(zcard as usize, self.model.entries(&c.key), "step {}: entries of {}", self.steps, c.key);
            }
            if got.allowed {
                self.written.insert(c.key.clone(), (now, ttl_ms(c)));
            }
        }
        self.steps += 1;
        got
    }

    /// Runs `(time, checks)` steps.
    pub fn run(&mut self, steps: &[(u64, Vec<Check>)]) {
        for (now, checks) in steps {
            self.step(checks, *now);
        }
    }
}
