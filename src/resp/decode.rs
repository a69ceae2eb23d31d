//! Strict, bounded, non-recursive RESP reply decoding.
//!
//! Every length is parsed and checked against [`Limits`] before anything is
//! allocated, and a container's capacity is also capped by the bytes actually
//! present, so a reply claiming `*4000000000` or `$999999999999` costs a few
//! comparisons. Nested aggregates are tracked on an explicit, depth-bounded
//! stack instead of the call stack.

use super::{DecodeError, Limits, Value};

/// The shortest encoding of any value (`+\r\n`, `_\r\n`): used to cap the
/// capacity reserved for an aggregate by the bytes that are really there.
const MIN_VALUE_LEN: usize = 3;

/// Longest decimal line accepted for an integer or a length: `u64::MAX` and
/// `i64::MIN` both have 20 characters.
const MAX_NUMBER_LEN: usize = 20;

/// Longest RESP3 double line accepted (servers send at most ~24 characters).
const MAX_DOUBLE_LEN: usize = 64;

/// Decodes the first reply in `buf`, returning it and the number of bytes it
/// took. Bytes after it are left alone.
///
/// Returns [`DecodeError::Incomplete`] when `buf` ends inside the reply (read
/// more and call again with the longer buffer), [`DecodeError::Invalid`] when
/// the bytes are not RESP, and [`DecodeError::TooLarge`] when the reply
/// exceeds `limits` (checked per reply).
pub fn decode(buf: &[u8], limits: &Limits) -> Result<(Value, usize), DecodeError> {
    decode_at(buf, 0, limits)
}

/// Decodes consecutive replies until `buf` ends. A trailing partial reply
/// makes the whole call [`DecodeError::Incomplete`]; an empty buffer gives no
/// replies. Error offsets are relative to the start of `buf`.
pub fn decode_all(buf: &[u8], limits: &Limits) -> Result<Vec<Value>, DecodeError> {
    let mut values = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let (value, next) = decode_at(buf, pos, limits)?;
        values.push(value);
        pos = next;
    }
    Ok(values)
}

/// What one type byte and its header start.
enum Item {
    /// A complete value.
    Leaf(Value),
    /// An aggregate of this many (non-zero or zero) elements that follow.
    Aggregate(usize),
}

/// An aggregate being filled.
struct Frame {
    items: Vec<Value>,
    remaining: usize,
}

/// Decodes one reply starting at `start`; returns it and the offset after it.
fn decode_at(buf: &[u8], start: usize, limits: &Limits) -> Result<(Value, usize), DecodeError> {
    match flat_integers(buf, start, limits) {
        Some(found) => Ok(found),
        None => decode_tree(buf, start, limits),
    }
}

/// [`decode_at`] for any reply: aggregates on an explicit stack.
pub(super) fn decode_tree(buf: &[u8], start: usize, limits: &Limits) -> Result<(Value, usize), DecodeError> {
    let too_many = DecodeError::TooLarge { what: "total values" };
    if limits.max_total_values == 0 {
        return Err(too_many);
    }
    let mut claimed: usize = 1;
    let mut stack: Vec<Frame> = Vec::new();
    let mut pos = start;
    loop {
        let (item, next) = read_item(buf, pos, limits)?;
        pos = next;
        let mut value = match item {
            Item::Leaf(value) => value,
            Item::Aggregate(n) => {
                if stack.len() >= limits.max_depth {
                    return Err(DecodeError::TooLarge { what: "nesting depth" });
                }
                if n == 0 {
                    Value::Array(Vec::new())
                } else {
                    claimed = claimed.checked_add(n).filter(|&c| c <= limits.max_total_values).ok_or(too_many)?;
                    let room = buf.len().saturating_sub(pos) / MIN_VALUE_LEN;
                    stack.push(Frame { items: Vec::with_capacity(n.min(room)), remaining: n });
                    continue;
                }
            }
        };
        // Attach the finished value to its parent, closing every aggregate
        // that it completes.
        loop {
            let Some(frame) = stack.last_mut() else {
                return Ok((value, pos));
            };
            frame.items.push(value);
            frame.remaining = frame.remaining.saturating_sub(1);
            if frame.remaining > 0 {
                break;
            }
            value = Value::Array(std::mem::take(&mut frame.items));
            stack.pop();
        }
    }
}

/// The reply every decision gets (`*5 :1 :now :remaining :reset :retry`):
/// a non-empty array of integers only, decoded without the aggregate stack.
/// `None` for anything else, or anything the general path would refuse,
/// which then decodes it (or names the error) itself.
fn flat_integers(buf: &[u8], start: usize, limits: &Limits) -> Option<(Value, usize)> {
    if buf.get(start) != Some(&b'*') || limits.max_depth == 0 {
        return None;
    }
    let (n, mut pos) = match read_length(buf, start.saturating_add(1), limits.max_elements, "array length") {
        Ok((Some(n), next)) if n > 0 && n < limits.max_total_values => (n, next),
        _ => return None,
    };
    let mut items = Vec::with_capacity(n.min(buf.len().saturating_sub(pos) / MIN_VALUE_LEN));
    for _ in 0..n {
        if buf.get(pos) != Some(&b':') {
            return None;
        }
        let (value, next) = read_integer(buf, pos.saturating_add(1)).ok()?;
        items.push(Value::Integer(value));
        pos = next;
    }
    Some((Value::Array(items), pos))
}

/// Reads one type byte and its header (and, for strings, its payload).
fn read_item(buf: &[u8], pos: usize, limits: &Limits) -> Result<(Item, usize), DecodeError> {
    let Some(&kind) = buf.get(pos) else {
        return Err(DecodeError::Incomplete);
    };
    let body = pos.saturating_add(1);
    let leaf = |(value, next)| Ok((Item::Leaf(value), next));
    match kind {
        b'+' | b'-' => {
            let what = if kind == b'+' { "simple string" } else { "error line" };
            let too_long = DecodeError::TooLarge { what };
            let (line, next) = read_line(buf, body, limits.max_bulk, too_long)?;
            let line = line.to_vec();
            let value = if kind == b'+' { Value::Simple(line) } else { Value::Error(line) };
            leaf((value, next))
        }
        b':' => {
            let (n, next) = read_integer(buf, body)?;
            leaf((Value::Integer(n), next))
        }
        b'$' => match read_length(buf, body, limits.max_bulk, "bulk string length")? {
            (None, next) => leaf((Value::Nil, next)),
            (Some(len), next) => {
                let (data, next) = read_data(buf, next, len)?;
                leaf((Value::Bulk(data.to_vec()), next))
            }
        },
        b'*' => match read_length(buf, body, limits.max_elements, "array length")? {
            (None, next) => leaf((Value::Nil, next)),
            (Some(n), next) => Ok((Item::Aggregate(n), next)),
        },
        // RESP3 types, mapped onto the RESP2 shapes.
        b'_' => {
            let (_, next) = read_line(buf, body, 0, invalid(body, "null has a payload"))?;
            leaf((Value::Nil, next))
        }
        b'#' => {
            let (line, next) = read_line(buf, body, 1, invalid(body, "invalid boolean"))?;
            match line {
                b"t" => leaf((Value::Integer(1), next)),
                b"f" => leaf((Value::Integer(0), next)),
                _ => Err(invalid(body, "invalid boolean")),
            }
        }
        b',' => {
            let too_long = invalid(body, "double too long");
            let (line, next) = read_line(buf, body, MAX_DOUBLE_LEN, too_long)?;
            if !is_double(line) {
                return Err(invalid(body, "invalid double"));
            }
            leaf((Value::Bulk(line.to_vec()), next))
        }
        b'(' => {
            let too_long = DecodeError::TooLarge { what: "big number" };
            let (line, next) = read_line(buf, body, limits.max_bulk, too_long)?;
            let digits = line.strip_prefix(b"-").unwrap_or(line);
            if let Err(reason) = check_digits(digits) {
                return Err(invalid(body, reason));
            }
            leaf((Value::Bulk(line.to_vec()), next))
        }
        b'=' | b'!' => {
            let (len, next) = read_length(buf, body, limits.max_bulk, "bulk string length")?;
            let len = len.ok_or(invalid(body, "null length not allowed here"))?;
            let (data, next) = read_data(buf, next, len)?;
            if kind == b'!' {
                return leaf((Value::Error(data.to_vec()), next));
            }
            match data {
                [_, _, _, b':', text @ ..] => leaf((Value::Bulk(text.to_vec()), next)),
                _ => Err(invalid(body, "verbatim string without format prefix")),
            }
        }
        b'%' | b'~' => {
            let (limit, what) = if kind == b'%' {
                (limits.max_elements / 2, "map length")
            } else {
                (limits.max_elements, "set length")
            };
            let (n, next) = read_length(buf, body, limit, what)?;
            let n = n.ok_or(invalid(body, "null length not allowed here"))?;
            let elements = if kind == b'%' { n.checked_mul(2) } else { Some(n) };
            let elements = elements.ok_or(DecodeError::TooLarge { what })?;
            Ok((Item::Aggregate(elements), next))
        }
        b'|' => Err(invalid(pos, "RESP3 attributes are not supported")),
        b'>' => Err(invalid(pos, "RESP3 push messages are not supported")),
        _ => Err(invalid(pos, "unknown type byte")),
    }
}

fn invalid(offset: usize, reason: &'static str) -> DecodeError {
    DecodeError::Invalid { offset, reason }
}

/// Reads a line of at most `max_len` bytes starting at `start`, which must end
/// in CRLF and contain neither CR nor LF. Scans at most `max_len + 2` bytes.
/// Returns the line (without CRLF) and the offset after the CRLF.
fn read_line(buf: &[u8], start: usize, max_len: usize, too_long: DecodeError) -> Result<(&[u8], usize), DecodeError> {
    let rest = buf.get(start..).unwrap_or_default();
    let window = rest.get(..max_len.saturating_add(1)).unwrap_or(rest);
    let Some(end) = window.iter().position(|&b| b == b'\r' || b == b'\n') else {
        return Err(if window.len() > max_len { too_long } else { DecodeError::Incomplete });
    };
    let Some((line, tail)) = rest.split_at_checked(end) else {
        return Err(DecodeError::Incomplete);
    };
    let at = start.saturating_add(end);
    match tail {
        [b'\r', b'\n', ..] => Ok((line, at.saturating_add(2))),
        [b'\r'] => Err(DecodeError::Incomplete),
        [b'\r', ..] => Err(invalid(at.saturating_add(1), "CR not followed by LF")),
        _ => Err(invalid(at, "LF without CR")),
    }
}

/// Reads `len` bytes of payload at `start` and the CRLF after them.
fn read_data(buf: &[u8], start: usize, len: usize) -> Result<(&[u8], usize), DecodeError> {
    let rest = buf.get(start..).unwrap_or_default();
    let Some((data, tail)) = rest.split_at_checked(len) else {
        return Err(DecodeError::Incomplete);
    };
    let end = start.saturating_add(len);
    match tail {
        [b'\r', b'\n', ..] => Ok((data, end.saturating_add(2))),
        [] | [b'\r'] => Err(DecodeError::Incomplete),
        _ => Err(invalid(end, "bulk data not followed by CRLF")),
    }
}

/// Reads an integer line: an optional `-` then decimal digits, no leading
/// zeros, no `-0`, within `i64`.
fn read_integer(buf: &[u8], start: usize) -> Result<(i64, usize), DecodeError> {
    match canonical_integer(buf, start) {
        Some(found) => Ok(found),
        None => read_integer_line(buf, start),
    }
}

/// [`read_integer`] in one pass, for a well-formed line only: `None` for
/// anything else, which [`read_integer_line`] then reads or names the
/// error of.
pub(super) fn canonical_integer(buf: &[u8], start: usize) -> Option<(i64, usize)> {
    let line = buf.get(start..)?;
    let (negative, digits_at) = if line.first() == Some(&b'-') { (true, 1) } else { (false, 0) };
    let mut magnitude: u64 = 0;
    let mut end = digits_at;
    while let Some(&b) = line.get(end) {
        if !b.is_ascii_digit() {
            break;
        }
        magnitude = push_digit(magnitude, b)?;
        end += 1;
    }
    let digits = end - digits_at;
    let leading_zero = digits > 1 && line.get(digits_at) == Some(&b'0');
    if digits == 0 || leading_zero || end > MAX_NUMBER_LEN || line.get(end..end + 2) != Some(b"\r\n") {
        return None;
    }
    let value = if negative {
        match magnitude {
            0 => return None,
            m => 0i64.checked_sub_unsigned(m)?,
        }
    } else {
        i64::try_from(magnitude).ok()?
    };
    Some((value, start + end + 2))
}

/// [`read_integer`] by its line, with the error of any line refused.
pub(super) fn read_integer_line(buf: &[u8], start: usize) -> Result<(i64, usize), DecodeError> {
    let too_long = invalid(start, "integer too long");
    let (line, next) = read_line(buf, start, MAX_NUMBER_LEN, too_long)?;
    let value = match line.strip_prefix(b"-") {
        Some(digits) => match parse_digits(digits) {
            Ok(0) => Err("negative zero"),
            Ok(magnitude) => 0i64.checked_sub_unsigned(magnitude).ok_or("integer overflows i64"),
            Err(reason) => Err(reason),
        },
        None => parse_digits(line).and_then(|n| i64::try_from(n).map_err(|_| "integer overflows i64")),
    };
    value.map(|v| (v, next)).map_err(|reason| invalid(start, reason))
}

/// Reads a length line: `-1` (returned as `None`) or unsigned decimal digits.
/// A length above `limit` is [`DecodeError::TooLarge`], detected before the
/// caller allocates anything.
fn read_length(
    buf: &[u8],
    start: usize,
    limit: usize,
    what: &'static str,
) -> Result<(Option<usize>, usize), DecodeError> {
    let too_long = invalid(start, "length too long");
    let (line, next) = read_line(buf, start, MAX_NUMBER_LEN, too_long)?;
    if line == b"-1" {
        return Ok((None, next));
    }
    let n = parse_digits(line).map_err(|reason| invalid(start, reason))?;
    match usize::try_from(n) {
        Ok(n) if n <= limit => Ok((Some(n), next)),
        _ => Err(DecodeError::TooLarge { what }),
    }
}

/// Checks that `digits` is a canonical unsigned decimal: non-empty, only
/// ASCII digits, no leading zero unless it is exactly `0`.
fn check_digits(digits: &[u8]) -> Result<(), &'static str> {
    match digits {
        [] => Err("empty number"),
        _ if !digits.iter().all(u8::is_ascii_digit) => Err("not a decimal number"),
        [b'0', _, ..] => Err("leading zero"),
        _ => Ok(()),
    }
}

/// Parses a canonical unsigned decimal (see [`check_digits`]) into a `u64`.
fn parse_digits(digits: &[u8]) -> Result<u64, &'static str> {
    check_digits(digits)?;
    digits.iter().try_fold(0u64, |acc, &d| push_digit(acc, d).ok_or("number overflows"))
}

/// `acc` with the ASCII digit `digit` appended (`acc * 10 + digit`), or
/// `None` past `u64::MAX`. Compared with the bound first rather than by
/// `checked_mul`: in wasm32 that is a 128-bit multiply (`__multi3`), on
/// every digit of every number in the store's replies.
pub(super) fn push_digit(acc: u64, digit: u8) -> Option<u64> {
    const MAX_TENTH: u64 = u64::MAX / 10;
    let d = u64::from(digit.wrapping_sub(b'0'));
    if acc < MAX_TENTH || (acc == MAX_TENTH && d <= u64::MAX % 10) {
        // Within u64 by the comparison above.
        Some(acc.wrapping_mul(10).wrapping_add(d))
    } else {
        None
    }
}

/// A RESP3 double: `inf`, `-inf`, `nan`, or digits with an optional sign,
/// decimal point and exponent.
fn is_double(line: &[u8]) -> bool {
    matches!(line, b"inf" | b"-inf" | b"nan")
        || (line.iter().any(u8::is_ascii_digit)
            && line.iter().all(|&b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-')))
}
