//! The encoders of the entry points other than `decide`: `peek` (its
//! contract in `prelude.lua`), `adjust`, `flush` and `lease` (theirs in
//! `adjust.lua`, `flush.lua` and `lease_ops.lua`).

use super::{
    encode_decide, invoked, lease_len, marked, now, override_len, write_algorithm, write_override_keys, write_windows,
    Decide, Invocation, Script,
};
use crate::key::SYNCERS_SUFFIX;
use crate::limiter::Check;
use crate::limiter::{Adjustment, Flush, LeaseChange, LeaseOp, ADJUST_MAX};
use crate::resp::CommandWriter;

/// Appends one `EVALSHA`/`EVAL`/`FCALL` command of `peek`: the dry run of
/// [`super::encode_call`]'s decision, with the same KEYS and ARGV. It
/// records nothing and writes nothing; its reply, parsed by
/// [`crate::limiter::reply::parse`], is the decision's with nothing
/// committed (`allowed`: the next such request would be admitted; per
/// window the state as it is). The function is registered `no-writes`:
/// `FCALL_RO` may replace `FCALL` (and `EVALSHA_RO`/`EVAL_RO` the script's
/// verbs) by editing the verb, e.g. to run on a replica.
pub fn encode_peek(out: &mut Vec<u8>, script: &Script, how: Invocation, checks: &[Check], now_ms: Option<u64>) {
    encode_decide(out, (script, Decide::Peek), how, checks, None, now_ms);
}

/// [`encode_peek`] of a shaped decision ([`super::encode_floored_call`]'s
/// `(max_delay_ms, floor_ms)`): the reply's `delay_ms` is the turn the
/// request would get, not recorded.
pub fn encode_shaped_peek(
    out: &mut Vec<u8>,
    script: &Script,
    how: Invocation,
    checks: &[Check],
    shape: (u64, u64),
    now_ms: Option<u64>,
) {
    encode_decide(out, (script, Decide::Peek), how, checks, Some(shape), now_ms);
}

/// Appends one `EVALSHA`/`EVAL`/`FCALL` command of `adjust` (contract in
/// `adjust.lua`): every adjustment at once, for decisions made at `at_ms`
/// on the store's clock (a decision's reply says it). A check with an
/// override key is marked `@` and its key sent after the buckets, as in a
/// decision. `now_ms` as for [`super::encode_call`].
pub fn encode_adjust(
    out: &mut Vec<u8>,
    script: &Script,
    how: Invocation,
    adjustments: &[Adjustment],
    at_ms: u64,
    now_ms: Option<u64>,
) {
    let (verb, target) = invoked(how, (&script.adjust_sha, script.adjust_body, &script.adjust_function));
    let windows: usize = adjustments.iter().map(|a| a.check.windows.len()).sum();
    let marked = marked(adjustments.iter().map(|a| &a.check));
    let args = 5 + adjustments.len() * 5 + marked + windows * 2;
    out.reserve(
        target.len()
            + 96
            + adjustments
                .iter()
                .map(|a| a.check.key.len() + 72 + lease_len(&a.check) + override_len(&a.check))
                .sum::<usize>()
            + windows * 48,
    );
    let mut w = CommandWriter::new(out, args);
    w.bulk(verb);
    w.bulk(target);
    w.decimal(b"", (adjustments.len() + marked) as u64);
    for a in adjustments {
        w.bulk(a.check.key.as_bytes());
    }
    write_override_keys(&mut w, adjustments.iter().map(|a| &a.check));
    now(&mut w, now_ms);
    w.decimal(b"", at_ms);
    for a in adjustments {
        write_algorithm(&mut w, &a.check);
        w.decimal(b"", a.from.min(ADJUST_MAX));
        w.decimal(b"", a.to.min(ADJUST_MAX));
        write_windows(&mut w, &a.check.windows);
    }
}

/// Appends one `EVALSHA`/`EVAL`/`FCALL` command of `flush` (contract in
/// `flush.lua`): KEYS are the entries' keys, then their syncer sets
/// ([`crate::key::syncers_key`]), then [`Flush::token_key`]. Never marked
/// `@` (the script refuses overrides in a flush; the configuration refuses
/// them for synced rules). Units beyond
/// [`ADJUST_MAX`] are sent as [`ADJUST_MAX`]. `now_ms` as for [`super::encode_call`].
pub fn encode_flush(out: &mut Vec<u8>, script: &Script, how: Invocation, flush: &Flush, now_ms: Option<u64>) {
    let (verb, target) = invoked(how, (&script.flush_sha, script.flush_body, &script.flush_function));
    let entries = &flush.entries;
    let windows: usize = entries.iter().map(|e| e.check.windows.len()).sum();
    let args = 8 + entries.len() * 5 + windows * 2;
    out.reserve(
        target.len()
            + 128
            + flush.token_key.len()
            + flush.token.len()
            + flush.syncer.len()
            + entries.iter().map(|e| 2 * e.check.key.len() + 80).sum::<usize>()
            + windows * 48,
    );
    let mut w = CommandWriter::new(out, args);
    w.bulk(verb);
    w.bulk(target);
    w.decimal(b"", (2 * entries.len() + 1) as u64);
    for e in entries {
        w.bulk(e.check.key.as_bytes());
    }
    for e in entries {
        w.bulk_joined(&[e.check.key.as_bytes(), SYNCERS_SUFFIX.as_bytes()]);
    }
    w.bulk(flush.token_key.as_bytes());
    now(&mut w, now_ms);
    w.bulk(flush.token.as_bytes());
    w.bulk(flush.syncer.as_bytes());
    w.decimal(b"", flush.horizon_ms);
    for e in entries {
        w.bulk(e.check.algorithm.id().as_bytes());
        w.decimal(b"", e.units.min(ADJUST_MAX));
        write_windows(&mut w, &e.check.windows);
    }
}

/// Appends one `EVALSHA`/`EVAL`/`FCALL` command of `lease` (contract in
/// `lease_ops.lua`): KEYS are the ops' keys (one hash slot; a key may
/// repeat), then per op `-` (end) or `+<ttl_ms>` (renew) and its id. The
/// reply: [`crate::limiter::reply::parse_lease`]. `now_ms` as for [`super::encode_call`].
pub fn encode_lease(out: &mut Vec<u8>, script: &Script, how: Invocation, ops: &[LeaseOp], now_ms: Option<u64>) {
    let (verb, target) = invoked(how, (&script.lease_sha, script.lease_body, &script.lease_function));
    let args = 4 + ops.len() * 3;
    out.reserve(target.len() + 64 + ops.iter().map(|op| op.key.len() + op.id.len() + 48).sum::<usize>());
    let mut w = CommandWriter::new(out, args);
    w.bulk(verb);
    w.bulk(target);
    w.decimal(b"", ops.len() as u64);
    for op in ops {
        w.bulk(op.key.as_bytes());
    }
    now(&mut w, now_ms);
    for op in ops {
        match op.change {
            LeaseChange::End => w.bulk(b"-"),
            LeaseChange::Renew { ttl_ms } => w.decimal(b"+", ttl_ms),
        }
        w.bulk(op.id.as_bytes());
    }
}
