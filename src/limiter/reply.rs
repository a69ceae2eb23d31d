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
    /// A marked check's `overridden` flag (at this index) is not 0 or 1.
    BadOverrideFlag {
        index: usize,
    },
    /// A marked check's limit in force (at this index) is 0.
    BadLimit {
        index: usize,
    },
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
            Self::BadOverrideFlag { index } => {
                write!(f, "script reply element {index} (an overridden flag) is not 0 or 1")
            }
            Self::BadLimit { index } => write!(f, "script reply element {index} (a limit in force) is 0"),
            Self::Inconsistent => write!(f, "script reply allowed flag disagrees with its windows"),
        }
    }
}

impl std::error::Error for ReplyError {}

/// Parses `{allowed, now_ms, (remaining, reset_ms, retry_ms) per window}`,
/// and a shaped call's reply, which ends with one more item: `delay_ms`
/// (only an admission waits). A check with an override key (marked `@` on
/// the wire) answers `overridden` (0|1) first, then per window `limit`
/// (the limit in force, into [`WindowOutcome::limit`]), remaining,
/// reset_ms, retry_ms. The replies of `decide`, `peek` and `adjust`.
pub fn parse(value: &Value, checks: &[Check]) -> Result<Decision, ReplyError> {
    let Value::Array(items) = value else {
        return Err(ReplyError::NotAnArray);
    };
    let windows: usize = checks.iter().map(|c| c.windows.len()).sum();
    let expected = 2 + checks.iter().map(|c| items_of(c, c.override_key.is_some())).sum::<usize>();
    if items.len() != expected && items.len() != expected + 1 {
        return Err(ReplyError::WrongLength { expected, got: items.len() });
    }
    let mut numbers = numbers(items);
    let mut next = || numbers.next().unwrap_or(Err(ReplyError::Inconsistent));
    let allowed = flag(next()?.1)?;
    let now_ms = next()?.1;
    let outcomes = outcomes(checks.iter().map(|c| (c, c.override_key.is_some())), windows, &mut next)?;
    let delay_ms = if items.len() > expected { next()?.1 } else { 0 };
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
    let applied = flag(next()?.1)?;
    let now_ms = next()?.1;
    // A flush reads no overrides: never the marked layout.
    let outcomes = outcomes(entries.iter().map(|e| (&e.check, false)), windows, &mut next)?;
    if outcomes.iter().any(WindowOutcome::denied) {
        return Err(ReplyError::Inconsistent);
    }
    let mut syncers = Vec::with_capacity(entries.len());
    for _ in entries {
        let (count, rank) = (next()?.1, next()?.1);
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
    let now_ms = numbers.next().unwrap_or(Err(ReplyError::Inconsistent))?.1;
    let live = numbers.map(|n| flag(n?.1)).collect::<Result<Vec<bool>, ReplyError>>()?;
    Ok(LeaseReply { now_ms, live })
}

/// The reply's items as non-negative integers with their index (or where
/// one is not).
fn numbers(items: &[Value]) -> impl Iterator<Item = Result<(usize, u64), ReplyError>> + '_ {
    items.iter().enumerate().map(|(index, v)| match v {
        Value::Integer(n) if *n >= 0 => Ok((index, *n as u64)),
        _ => Err(ReplyError::NotANumber { index }),
    })
}

/// The items a check's part of a reply has: 3 per window, or marked, an
/// `overridden` flag and 4 per window.
fn items_of(check: &Check, marked: bool) -> usize {
    if marked {
        1 + 4 * check.windows.len()
    } else {
        3 * check.windows.len()
    }
}

/// A reply's first item: 1 or 0.
fn flag(n: u64) -> Result<bool, ReplyError> {
    match n {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(ReplyError::BadAllowedFlag(other as i64)),
    }
}

/// The `windows` outcomes of `checks` (remaining, reset_ms, retry_ms each;
/// a marked check's: its `overridden` flag first, and the limit in force
/// before each window's three), read from `next`.
fn outcomes<'a>(
    checks: impl Iterator<Item = (&'a Check, bool)>,
    windows: usize,
    next: &mut impl FnMut() -> Result<(usize, u64), ReplyError>,
) -> Result<Vec<WindowOutcome>, ReplyError> {
    let mut outcomes = Vec::with_capacity(windows);
    for (ci, (check, marked)) in checks.enumerate() {
        let overridden = match marked.then(&mut *next).transpose()? {
            None | Some((_, 0)) => false,
            Some((_, 1)) => true,
            Some((index, _)) => return Err(ReplyError::BadOverrideFlag { index }),
        };
        for (wi, w) in check.windows.iter().enumerate() {
            let limit = match marked.then(&mut *next).transpose()? {
                None => w.limit.get(),
                Some((index, 0)) => return Err(ReplyError::BadLimit { index }),
                Some((_, limit)) => limit,
            };
            outcomes.push(WindowOutcome {
                // Per window: the check's flag covers all its windows, and
                // a window its override left alone keeps its own limit.
                overridden: overridden && limit != w.limit.get(),
                check: ci,
                window: wi,
                limit,
                period_ms: w.period_ms.get(),
                remaining: next()?.1,
                reset_ms: next()?.1,
                retry_ms: next()?.1,
            });
        }
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests;
