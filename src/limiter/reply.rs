//! Parsing the script's reply into a [`Decision`] (a flush's into a
//! [`FlushReply`], a lease call's into a [`LeaseReply`]), without ever
//! indexing blindly: a reply of the wrong shape is an error, never a panic.

use super::{Check, Decision, FlushEntry, FlushReply, LeaseOp, LeaseReply, WindowOutcome};
use crate::resp::Value;
use std::fmt;

/// Why a script reply could not be understood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyError {
    NotAnArray,
    /// The reply's length does not match the windows that were asked about.
    WrongLength {
        expected: usize,
        got: usize,
    },
    /// The element at this index is not a non-negative integer.
    NotANumber {
        index: usize,
    },
    /// The first element (`allowed`, or a flush's `applied`) is not 0 or 1
    /// (a lease call's: a per-op `live` flag).
    BadAllowedFlag(i64),
    /// `allowed` disagrees with the per-window retry times (a flush: a
    /// retry time is not 0, or a rank is not below its syncer count).
    Inconsistent,
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAnArray => write!(f, "script reply is not an array"),
            Self::WrongLength { expected, got } => {
                write!(f, "script reply has {got} elements, expected {expected}")
            }
            Self::NotANumber { index } => {
                write!(f, "script reply element {index} is not a non-negative integer")
            }
            Self::BadAllowedFlag(v) => write!(f, "script reply allowed flag is {v}, not 0 or 1"),
            Self::Inconsistent => write!(f, "script reply allowed flag disagrees with its windows"),
        }
    }
}

impl std::error::Error for ReplyError {}

/// Parses `{allowed, now_ms, (remaining, reset_ms, retry_ms) per window}`,
/// and a shaped call's reply, which ends with one more item: `delay_ms`
/// (only an admission waits).
pub fn parse(value: &Value, checks: &[Check]) -> Result<Decision, ReplyError> {
    let Value::Array(items) = value else {
        return Err(ReplyError::NotAnArray);
    };
    let windows: usize = checks.iter().map(|c| c.windows.len()).sum();
    let expected = 2 + 3 * windows;
    if items.len() != expected && items.len() != expected + 1 {
        return Err(ReplyError::WrongLength { expected, got: items.len() });
    }
    let mut numbers = numbers(items);
    let mut next = || numbers.next().unwrap_or(Err(ReplyError::Inconsistent));
    let allowed = flag(next()?)?;
    let now_ms = next()?;
    let outcomes = outcomes(checks.iter(), windows, &mut next)?;
    let delay_ms = if items.len() > expected { next()? } else { 0 };
    let decision = Decision { allowed, now_ms, windows: outcomes, delay_ms };
    if decision.allowed == decision.denied_by().next().is_some() || (!allowed && delay_ms > 0) {
        return Err(ReplyError::Inconsistent);
    }
    Ok(decision)
}

/// Parses a flush's reply (`flush.lua`): `{applied, now_ms, (remaining,
/// reset_ms, 0) per window, (syncers, rank) per entry}`.
pub fn parse_flush(value: &Value, entries: &[FlushEntry]) -> Result<FlushReply, ReplyError> {
    let Value::Array(items) = value else {
        return Err(ReplyError::NotAnArray);
    };
    let windows: usize = entries.iter().map(|e| e.check.windows.len()).sum();
    let expected = 2 + 3 * windows + 2 * entries.len();
    if items.len() != expected {
        return Err(ReplyError::WrongLength { expected, got: items.len() });
    }
    let mut numbers = numbers(items);
    let mut next = || numbers.next().unwrap_or(Err(ReplyError::Inconsistent));
    let applied = flag(next()?)?;
    let now_ms = next()?;
    let outcomes = outcomes(entries.iter().map(|e| &e.check), windows, &mut next)?;
    if outcomes.iter().any(WindowOutcome::denied) {
        return Err(ReplyError::Inconsistent);
    }
    let mut syncers = Vec::with_capacity(entries.len());
    for _ in entries {
        let (count, rank) = (next()?, next()?);
        if rank >= count {
            return Err(ReplyError::Inconsistent);
        }
        syncers.push((count, rank));
    }
    let state = Decision { allowed: true, now_ms, windows: outcomes, delay_ms: 0 };
    Ok(FlushReply { applied, state, syncers })
}

/// Parses a lease call's reply (`lease_ops.lua`): `{now_ms, live (1|0) per
/// op}`.
pub fn parse_lease(value: &Value, ops: &[LeaseOp]) -> Result<LeaseReply, ReplyError> {
    let Value::Array(items) = value else {
        return Err(ReplyError::NotAnArray);
    };
    let expected = 1 + ops.len();
    if items.len() != expected {
        return Err(ReplyError::WrongLength { expected, got: items.len() });
    }
    let mut numbers = numbers(items);
    let now_ms = numbers.next().unwrap_or(Err(ReplyError::Inconsistent))?;
    let live = numbers.map(|n| flag(n?)).collect::<Result<Vec<bool>, ReplyError>>()?;
    Ok(LeaseReply { now_ms, live })
}

/// The reply's items as non-negative integers (or where one is not).
fn numbers(items: &[Value]) -> impl Iterator<Item = Result<u64, ReplyError>> + '_ {
    items.iter().enumerate().map(|(index, v)| match v {
        Value::Integer(n) if *n >= 0 => Ok(*n as u64),
        _ => Err(ReplyError::NotANumber { index }),
    })
}

/// A reply's first item: 1 or 0.
fn flag(n: u64) -> Result<bool, ReplyError> {
    match n {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(ReplyError::BadAllowedFlag(other as i64)),
    }
}

/// The `windows` outcomes of `checks` (remaining, reset_ms, retry_ms each),
/// read from `next`.
fn outcomes<'a>(
    checks: impl Iterator<Item = &'a Check>,
    windows: usize,
    next: &mut impl FnMut() -> Result<u64, ReplyError>,
) -> Result<Vec<WindowOutcome>, ReplyError> {
    let mut outcomes = Vec::with_capacity(windows);
    for (ci, check) in checks.enumerate() {
        for (wi, w) in check.windows.iter().enumerate() {
            outcomes.push(WindowOutcome {
                overridden: false,
                check: ci,
                window: wi,
                limit: w.limit.get(),
                period_ms: w.period_ms.get(),
                remaining: next()?,
                reset_ms: next()?,
                retry_ms: next()?,
            });
        }
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checks() -> Vec<Check> {
        vec![Check::for_test(3, "k", &[(20, 60_000), (5, 3_000)], 1)]
    }

    fn ints(v: &[i64]) -> Value {
        Value::Array(v.iter().map(|n| Value::Integer(*n)).collect())
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn parses_a_denial_naming_the_window() {
        let d = parse(&ints(&[0, 1000, 15, 59_000, 0, 0, 2_000, 1_500]), &checks()).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.now_ms, 1000);
        let denied: Vec<_> = d.denied_by().collect();
        assert_eq!(denied.len(), 1);
        assert_eq!((denied[0].check, denied[0].window, denied[0].limit), (0, 1, 5));
        assert_eq!(d.retry_after_ms(), 1_500);
        assert_eq!(d.windows[0].remaining, 15);
        assert_eq!(d.most_constrained().map(|w| w.window), Some(1));
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn parses_an_admission() {
        let d = parse(&ints(&[1, 7, 19, 60_000, 0, 4, 3_000, 0]), &checks()).unwrap();
        assert!(d.allowed);
        assert_eq!(d.retry_after_ms(), 0);
        assert_eq!(d.windows[1].remaining, 4);
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn parses_a_shaped_reply_with_its_delay() {
        let d = parse(&ints(&[1, 7, 19, 60_000, 0, 0, 3_000, 0, 1_200]), &checks()).unwrap();
        assert!(d.allowed);
        assert_eq!(d.delay_ms, 1_200);
        assert_eq!(parse(&ints(&[1, 7, 19, 60_000, 0, 0, 3_000, 0]), &checks()).unwrap().delay_ms, 0);
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn rejects_every_malformed_shape() {
        let c = checks();
        assert_eq!(parse(&Value::Integer(1), &c), Err(ReplyError::NotAnArray));
        assert_eq!(parse(&ints(&[1, 7, 19]), &c), Err(ReplyError::WrongLength { expected: 8, got: 3 }));
        let long = ints(&[1, 7, 19, 1, 0, 4, 3_000, 0, 5, 5]);
        assert_eq!(parse(&long, &c), Err(ReplyError::WrongLength { expected: 8, got: 10 }));
        assert_eq!(parse(&ints(&[0, 7, 19, 1, 0, 4, 3_000, 9, 5]), &c), Err(ReplyError::Inconsistent));
        assert_eq!(parse(&ints(&[1, 7, 19, -1, 0, 4, 3_000, 0]), &c), Err(ReplyError::NotANumber { index: 3 }));
        assert_eq!(parse(&ints(&[2, 7, 19, 1, 0, 4, 3_000, 0]), &c), Err(ReplyError::BadAllowedFlag(2)));
        assert_eq!(parse(&ints(&[1, 7, 19, 1, 0, 4, 3_000, 9]), &c), Err(ReplyError::Inconsistent));
        assert_eq!(parse(&ints(&[0, 7, 19, 1, 0, 4, 3_000, 0]), &c), Err(ReplyError::Inconsistent));
        let Value::Array(mut bulk) = ints(&[1, 7, 19, 1, 0, 4, 3_000, 0]) else { panic!("not an array") };
        bulk[2] = Value::Bulk(b"19".to_vec());
        assert_eq!(parse(&Value::Array(bulk), &c), Err(ReplyError::NotANumber { index: 2 }));
    }

    fn entries() -> Vec<FlushEntry> {
        vec![
            FlushEntry { check: checks().remove(0), units: 3 },
            FlushEntry { check: Check::for_test(4, "o", &[(9, 1_000)], 1), units: 0 },
        ]
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn parses_a_flush_with_its_syncers() {
        let r = parse_flush(&ints(&[0, 7, 15, 59_000, 0, 2, 2_500, 0, 9, 0, 0, 3, 1, 1, 0]), &entries()).unwrap();
        assert!(!r.applied);
        assert!(r.state.allowed);
        assert_eq!(r.state.now_ms, 7);
        assert_eq!(r.state.windows.len(), 3);
        assert_eq!((r.state.windows[2].check, r.state.windows[2].remaining), (1, 9));
        assert_eq!(r.syncers, vec![(3, 1), (1, 0)]);
        assert!(
            parse_flush(&ints(&[1, 7, 15, 59_000, 0, 2, 2_500, 0, 9, 0, 0, 3, 1, 1, 0]), &entries()).unwrap().applied
        );
    }

    fn ops() -> Vec<LeaseOp> {
        use crate::limiter::LeaseChange;
        let op = |id: &str, change| LeaseOp { key: "p:{a}:lease".into(), id: id.into(), change };
        vec![op("a", LeaseChange::End), op("b", LeaseChange::Renew { ttl_ms: 5_000 })]
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn parses_a_lease_reply() {
        let r = parse_lease(&ints(&[1_234, 1, 0]), &ops()).unwrap();
        assert_eq!(r, LeaseReply { now_ms: 1_234, live: vec![true, false] });
        assert_eq!(parse_lease(&ints(&[7]), &[]).unwrap(), LeaseReply { now_ms: 7, live: vec![] });
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn rejects_every_malformed_lease_reply() {
        let o = ops();
        assert_eq!(parse_lease(&Value::Integer(1), &o), Err(ReplyError::NotAnArray));
        assert_eq!(parse_lease(&ints(&[1, 1]), &o), Err(ReplyError::WrongLength { expected: 3, got: 2 }));
        assert_eq!(parse_lease(&ints(&[1, 1, 0, 1]), &o), Err(ReplyError::WrongLength { expected: 3, got: 4 }));
        assert_eq!(parse_lease(&ints(&[1, 2, 0]), &o), Err(ReplyError::BadAllowedFlag(2)));
        assert_eq!(parse_lease(&ints(&[-1, 1, 0]), &o), Err(ReplyError::NotANumber { index: 0 }));
        assert_eq!(parse_lease(&ints(&[5, 1, -1]), &o), Err(ReplyError::NotANumber { index: 2 }));
        assert_eq!(
            parse_lease(&Value::Array(vec![Value::Integer(5), Value::Nil, Value::Integer(1)]), &o),
            Err(ReplyError::NotANumber { index: 1 })
        );
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn rejects_every_malformed_flush_reply() {
        let e = entries();
        let good = [1, 7, 15, 59_000, 0, 2, 2_500, 0, 9, 0, 0, 3, 1, 1, 0];
        let with = |i: usize, v: i64| {
            let mut r = good.to_vec();
            r[i] = v;
            ints(&r)
        };
        assert_eq!(parse_flush(&Value::Integer(1), &e), Err(ReplyError::NotAnArray));
        assert_eq!(parse_flush(&ints(&good[..13]), &e), Err(ReplyError::WrongLength { expected: 15, got: 13 }));
        assert_eq!(parse_flush(&with(0, 2), &e), Err(ReplyError::BadAllowedFlag(2)));
        assert_eq!(parse_flush(&with(4, 5), &e), Err(ReplyError::Inconsistent), "a retry time");
        assert_eq!(parse_flush(&with(12, 3), &e), Err(ReplyError::Inconsistent), "rank 3 of 3");
        assert_eq!(parse_flush(&with(13, 0), &e), Err(ReplyError::Inconsistent), "no syncer");
        assert_eq!(parse_flush(&with(6, -1), &e), Err(ReplyError::NotANumber { index: 6 }));
    }
}
