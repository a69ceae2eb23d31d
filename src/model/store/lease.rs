//! The store's lease sets: `lease=<id>` in decisions and adjustments, and
//! the `lease` entry point (`lease_ops.lua`), answered by `Model::lease`.

use super::{keys_and_clock, text, ModelStore, Ran};
use crate::limiter::{Algorithm, LeaseChange, LeaseOp};
use crate::resp::Value;
use std::rc::Rc;

impl ModelStore {
    /// `numkeys, KEYS..., now, (op, id)...`: op `-` ends a lease, `+<ttl_ms>`
    /// renews it; the reply `{ now, live (1|0) per op }`.
    pub(super) fn lease(&mut self, args: &[Value], now_ms: u64) -> Option<Value> {
        let mut args = args.iter().map(text);
        let (keys, now) = keys_and_clock(&mut args, now_ms)?;
        let mut ops = Vec::with_capacity(keys.len());
        for key in keys {
            let op = args.next()?;
            let change = match op.strip_prefix('+') {
                None if op == "-" => LeaseChange::End,
                Some(ms) if !ms.is_empty() && ms.bytes().all(|b| b.is_ascii_digit()) => {
                    LeaseChange::Renew { ttl_ms: ms.parse().ok()? }
                }
                _ => return None,
            };
            ops.push(LeaseOp { key, id: lease_id(&args.next()?)?, change });
        }
        if args.next().is_some() {
            return None;
        }
        let answer = self.model.lease(&ops, now);
        let int = |n: u64| Value::Integer(i64::try_from(n).unwrap_or(i64::MAX));
        let mut reply = vec![int(answer.now_ms)];
        reply.extend(answer.live.iter().map(|&live| int(u64::from(live))));
        self.note(|| Ran::Lease { now_ms: now, ops, live: answer.live });
        Some(Value::Array(reply))
    }
}

/// A decision's or adjustment's algorithm argument: an algorithm's id, or
/// `lease=<id>` (a lease set, with its lease id); and whether it is marked
/// `@` (the check reads its override key).
pub(super) fn algorithm_or_lease(arg: Option<String>) -> Option<(Algorithm, Option<Rc<str>>, bool)> {
    let arg = arg?;
    let (arg, marked) = match arg.strip_prefix('@') {
        Some(rest) => (rest.to_string(), true),
        None => (arg, false),
    };
    match arg.strip_prefix("lease=") {
        Some(id) => Some((Algorithm::Lease, Some(lease_id(id)?), marked)),
        None => Some((super::algorithm(Some(arg))?, None, marked)),
    }
}

/// A lease id as the script takes it: 1..64 bytes of `[0-9A-Za-z:._-]`.
fn lease_id(id: &str) -> Option<Rc<str>> {
    let ok = |b: u8| b.is_ascii_alphanumeric() || b":._-".contains(&b);
    if !(1..=64).contains(&id.len()) || !id.bytes().all(ok) {
        return None;
    }
    Some(id.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::model::Model;
    use crate::limiter::script::{encode_adjust, encode_call, encode_lease, limiter, Invocation};
    use crate::limiter::{reply, Adjustment, Check};
    use crate::resp::{decode, Limits};
    use crate::testing::{check, lease};

    fn answer(store: &mut ModelStore, command: &[u8]) -> Value {
        let out = store.answer(command, 0);
        decode(&out, &Limits::default()).unwrap().0
    }

    /// Decisions, an undo and lease calls through the store's stream, as the
    /// Lua takes them, answer what the model answers.
    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn leases_through_the_stream_answer_as_the_model() {
        let (mut store, mut model) = (ModelStore { journal: true, ..ModelStore::default() }, Model::new());
        let window = check(Algorithm::Gcra, 1, "p:{a}:gcra", &[(5, 1_000)], 1);
        let t = 1_800_000_000_000;
        for (i, how) in [Invocation::FCall, Invocation::EvalSha, Invocation::Eval, Invocation::FCall].iter().enumerate()
        {
            let checks = [lease(0, "p:{a}:lease", 2, 1_000, &format!("r{i}")), window.clone()];
            let mut out = Vec::new();
            encode_call(&mut out, limiter(), *how, &checks, Some(t + i as u64));
            let got = reply::parse(&answer(&mut store, &out), &checks).unwrap();
            assert_eq!(got, model.decide(&checks, t + i as u64), "{how:?}");
        }
        let undo = [Adjustment { check: lease(0, "p:{a}:lease", 2, 1_000, "r0"), from: 1, to: 0 }];
        let mut out = Vec::new();
        encode_adjust(&mut out, limiter(), Invocation::FCall, &undo, t, Some(t + 5));
        let checks: Vec<Check> = undo.iter().map(|a| a.check.clone()).collect();
        let got = reply::parse(&answer(&mut store, &out), &checks).unwrap();
        assert_eq!(got, model.adjust(&undo, t, t + 5));
        let op = |id: &str, change| LeaseOp { key: "p:{a}:lease".into(), id: id.into(), change };
        let ops =
            [op("r0", LeaseChange::End), op("r1", LeaseChange::Renew { ttl_ms: 3_000 }), op("r1", LeaseChange::End)];
        for how in [Invocation::FCall, Invocation::EvalSha, Invocation::Eval] {
            let mut out = Vec::new();
            encode_lease(&mut out, limiter(), how, &ops, Some(t + 6));
            let got = reply::parse_lease(&answer(&mut store, &out), &ops).unwrap();
            assert_eq!(got, model.lease(&ops, t + 6), "{how:?}");
        }
        assert!(matches!(store.ran.last(), Some(Ran::Lease { ops: o, .. }) if o.len() == 3));
        assert_eq!(store.model.leases("p:{a}:lease"), model.leases("p:{a}:lease"));
    }

    /// A lease key without a good id, or of another cost or window count,
    /// and a malformed op are refused, as the script refuses them.
    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn malformed_leases_are_refused() {
        let mut store = ModelStore::default();
        let mut bad = vec![lease(0, "k", 2, 1_000, "a b"), lease(0, "k", 2, 1_000, &"x".repeat(65))];
        bad.push(Check { lease: None, ..lease(0, "k", 2, 1_000, "a") });
        let mut two = lease(0, "k", 2, 1_000, "a");
        two.cost = std::num::NonZeroU64::MIN.saturating_add(1);
        bad.push(two);
        for c in bad {
            let mut out = Vec::new();
            encode_call(&mut out, limiter(), Invocation::FCall, std::slice::from_ref(&c), Some(1));
            assert!(answer(&mut store, &out).is_error(), "{c:?}");
        }
        let mut out = Vec::new();
        let renew = LeaseOp { key: "k".into(), id: "a".into(), change: LeaseChange::Renew { ttl_ms: 1 } };
        encode_lease(&mut out, limiter(), Invocation::FCall, &[renew], Some(1));
        let text = String::from_utf8(out).unwrap().replace("$2\r\n+1\r\n", "$2\r\n+x\r\n");
        assert!(answer(&mut store, text.as_bytes()).is_error());
        assert_eq!(store.executed, 0);
    }
}
