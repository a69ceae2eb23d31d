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
/// `lease=<id>` (a lease set, with its lease id).
pub(super) fn algorithm_or_lease(arg: Option<String>) -> Option<(Algorithm, Option<Rc<str>>)> {
    let arg = arg?;
    match arg.strip_prefix("lease=") {
        Some(id) => Some((Algorithm::Lease, Some(lease_id(id)?))),
        None => Some((super::algorithm(Some(arg))?, None)),
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
