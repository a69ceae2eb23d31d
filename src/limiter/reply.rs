//! Parsing the script's reply into a [`Decision`], without ever indexing
//! blindly: a reply of the wrong shape is an error, never a panic.

use super::{Check, Decision, WindowOutcome};
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
    BadAllowedFlag(i64),
    /// `allowed` disagrees with the per-window retry times.
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
    let mut numbers = items.iter().enumerate().map(|(index, v)| match v {
        Value::Integer(n) if *n >= 0 => Ok(*n as u64),
        _ => Err(ReplyError::NotANumber { index }),
    });
    let mut next = || numbers.next().unwrap_or(Err(ReplyError::Inconsistent));
    let allowed = match next()? {
        0 => false,
        1 => true,
        other => return Err(ReplyError::BadAllowedFlag(other as i64)),
    };
    let now_ms = next()?;
    let mut outcomes = Vec::with_capacity(windows);
    for (ci, check) in checks.iter().enumerate() {
        for (wi, w) in check.windows.iter().enumerate() {
            outcomes.push(WindowOutcome {
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
    let delay_ms = if items.len() > expected { next()? } else { 0 };
    let decision = Decision { allowed, now_ms, windows: outcomes, delay_ms };
    if decision.allowed == decision.denied_by().next().is_some() || (!allowed && delay_ms > 0) {
        return Err(ReplyError::Inconsistent);
    }
    Ok(decision)
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
}
