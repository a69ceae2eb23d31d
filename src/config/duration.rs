//! Duration syntax: `"<digits><unit>"` strings and integer seconds.
//!
//! Only the syntax lives here; range checks (`> 0`, `<= 60s`, `<= 366d`) and
//! their messages are in [`super::validate`].

/// Milliseconds per unit, longest suffix first so that `ms` is tried before
/// `s` and `m`.
const UNITS: [(&str, u64); 5] = [("ms", 1), ("s", 1_000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)];

/// Why a duration could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DurationError {
    /// Not `<digits><unit>` (wrong unit, sign, fraction, spaces, empty, ...).
    Syntax,
    /// Well formed, but the number of milliseconds does not fit in a `u64`.
    Overflow,
}

/// Parses `"<digits><unit>"` (unit `ms`, `s`, `m`, `h` or `d`, ASCII digits
/// only, no sign, no fraction, no spaces) into milliseconds. Zero is returned
/// as zero: rejecting it is the caller's business.
pub(crate) fn parse_str(text: &str) -> Result<u64, DurationError> {
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or(DurationError::Syntax)?;
    let (digits, unit) = text.split_at_checked(split).ok_or(DurationError::Syntax)?;
    if digits.is_empty() {
        return Err(DurationError::Syntax);
    }
    let scale = UNITS.iter().find(|(name, _)| *name == unit).map(|(_, scale)| *scale).ok_or(DurationError::Syntax)?;
    // Only ASCII digits remain, so the sole possible failure is overflow.
    let count: u64 = digits.parse().map_err(|_| DurationError::Overflow)?;
    count.checked_mul(scale).ok_or(DurationError::Overflow)
}

/// Converts an integer number of seconds into milliseconds.
pub(crate) fn from_seconds(seconds: u64) -> Result<u64, DurationError> {
    seconds.checked_mul(1_000).ok_or(DurationError::Overflow)
}

/// The shortest exact spelling of `ms` milliseconds: the largest unit that
/// divides it (`"1d"`, `"90m"`, `"3s"`, `"250ms"`).
pub(crate) fn canonical_label(ms: u64) -> String {
    let (name, scale) = UNITS.iter().rev().find(|(_, scale)| ms.is_multiple_of(*scale)).copied().unwrap_or(("ms", 1));
    format!("{}{}", ms / scale, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn every_unit() {
        assert_eq!(parse_str("250ms"), Ok(250));
        assert_eq!(parse_str("3s"), Ok(3_000));
        assert_eq!(parse_str("10m"), Ok(600_000));
        assert_eq!(parse_str("1h"), Ok(3_600_000));
        assert_eq!(parse_str("1d"), Ok(86_400_000));
        assert_eq!(parse_str("366d"), Ok(31_622_400_000));
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn zero_and_leading_zeros_are_syntax_ok() {
        assert_eq!(parse_str("0s"), Ok(0));
        assert_eq!(parse_str("0ms"), Ok(0));
        assert_eq!(parse_str("007s"), Ok(7_000));
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn malformed() {
        for text in [
            "", "3", "s", "ms", "3S", "3MS", "3 s", " 3s", "3s ", "-1s", "+1s", "1.5s", "1e3s", "3sec", "3ss", "3us",
            "3w", "3y", "s3", "1h30m", "\u{661}s", "３s",
        ] {
            assert_eq!(parse_str(text), Err(DurationError::Syntax), "{text:?}");
        }
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn overflow_is_an_error() {
        assert_eq!(parse_str("18446744073709551615ms"), Ok(u64::MAX));
        assert_eq!(parse_str("18446744073709551616ms"), Err(DurationError::Overflow));
        assert_eq!(parse_str("99999999999999999999999999d"), Err(DurationError::Overflow));
        assert_eq!(parse_str("18446744073709552s"), Err(DurationError::Overflow));
        assert_eq!(parse_str("213503982335d"), Err(DurationError::Overflow));
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn seconds() {
        assert_eq!(from_seconds(0), Ok(0));
        assert_eq!(from_seconds(3), Ok(3_000));
        assert_eq!(from_seconds(u64::MAX / 1_000), Ok(u64::MAX / 1_000 * 1_000));
        assert_eq!(from_seconds(u64::MAX / 1_000 + 1), Err(DurationError::Overflow));
        assert_eq!(from_seconds(u64::MAX), Err(DurationError::Overflow));
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn canonical_labels() {
        assert_eq!(canonical_label(1), "1ms");
        assert_eq!(canonical_label(250), "250ms");
        assert_eq!(canonical_label(1_500), "1500ms");
        assert_eq!(canonical_label(3_000), "3s");
        assert_eq!(canonical_label(90_000), "90s");
        assert_eq!(canonical_label(60_000), "1m");
        assert_eq!(canonical_label(5_400_000), "90m");
        assert_eq!(canonical_label(3_600_000), "1h");
        assert_eq!(canonical_label(86_400_000), "1d");
        assert_eq!(canonical_label(172_800_000), "2d");
    }
}
