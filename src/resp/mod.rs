//! RESP, the Valkey/Redis wire protocol: a binary-safe command encoder and a
//! strict, bounded reply decoder.
//!
//! Commands are always sent as RESP arrays of bulk strings, so no byte of an
//! argument (CR, LF, NUL, braces, non-UTF-8) can ever be read as a protocol
//! delimiter. Replies come from the network and are untrusted: the decoder
//! checks every length against [`Limits`] *before* allocating, bounds nesting
//! without recursion, and never panics. RESP2 is decoded completely; the RESP3
//! types are mapped onto the RESP2 shapes where that is cheap and unambiguous
//! (see [`Value`]) and rejected otherwise.
//!
//! ```
//! use tollgate::resp::{decode, decode_all, encode_command, DecodeError, Limits, Value};
//!
//! let mut out = Vec::new();
//! encode_command(&mut out, &[b"GET", b"tollgate:{rule:alice}:log"]);
//! assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$25\r\ntollgate:{rule:alice}:log\r\n".to_vec());
//!
//! let limits = Limits::default();
//! let (value, used) = decode(b"*2\r\n:1\r\n$2\r\nok\r\n+extra", &limits).unwrap();
//! assert_eq!(used, 16);
//! assert_eq!(value, Value::Array(vec![Value::Integer(1), Value::Bulk(b"ok".to_vec())]));
//! assert_eq!(value.as_array().unwrap()[0].as_integer(), Some(1));
//!
//! let replies = decode_all(b"+OK\r\n-NOSCRIPT No matching script\r\n", &limits).unwrap();
//! assert_eq!(replies[1].error_kind(), Some("NOSCRIPT"));
//!
//! // A truncated reply asks for more bytes; garbage is rejected.
//! assert_eq!(decode(b"$5\r\nhel", &limits), Err(DecodeError::Incomplete));
//! assert!(matches!(
//!     decode(b"upstream connect error", &limits),
//!     Err(DecodeError::Invalid { offset: 0, .. })
//! ));
//! ```

mod decode;
mod encode;

#[cfg(test)]
mod tests;

use std::fmt;

pub use decode::{decode, decode_all};
pub use encode::{encode_command, encode_value, CommandWriter};

/// One decoded reply.
///
/// RESP3 types are mapped onto these shapes: null (`_`) is [`Value::Nil`],
/// boolean (`#t`/`#f`) is [`Value::Integer`] 1/0, double (`,`), big number
/// (`(`) and verbatim string (`=`, without its `txt:` format prefix) are
/// [`Value::Bulk`] of their text (exactly what RESP2 servers send for them),
/// bulk error (`!`) is [`Value::Error`], map (`%`, flattened to key, value,
/// key, value...) and set (`~`) are [`Value::Array`]. Attributes (`|`) and
/// push messages (`>`) are rejected as invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `+OK`: a status line (never contains CR or LF).
    Simple(Vec<u8>),
    /// `-ERR message`: an error reply.
    Error(Vec<u8>),
    /// `:42`: a signed 64-bit integer.
    Integer(i64),
    /// `$3\r\nabc`: binary-safe bytes.
    Bulk(Vec<u8>),
    /// `$-1`, `*-1` or RESP3 `_`.
    Nil,
    /// `*2\r\n...`: a (possibly empty) list of values.
    Array(Vec<Value>),
}

impl Value {
    /// The integer of an [`Value::Integer`] reply.
    pub fn as_integer(&self) -> Option<i64> {
        match self {
            Value::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// The bytes of a [`Value::Bulk`] or [`Value::Simple`] reply.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bulk(b) | Value::Simple(b) => Some(b),
            _ => None,
        }
    }

    /// The elements of a [`Value::Array`] reply.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The full message of a [`Value::Error`] reply.
    pub fn as_error(&self) -> Option<&[u8]> {
        match self {
            Value::Error(e) => Some(e),
            _ => None,
        }
    }

    /// True for [`Value::Error`].
    pub fn is_error(&self) -> bool {
        matches!(self, Value::Error(_))
    }

    /// True for [`Value::Nil`].
    pub fn is_nil(&self) -> bool {
        matches!(self, Value::Nil)
    }

    /// The first word of an error reply (`NOSCRIPT`, `READONLY`, `WRONGTYPE`,
    /// `NOAUTH`, `ERR`, ...); `None` for other values, an empty error, or a
    /// first word that is not UTF-8.
    pub fn error_kind(&self) -> Option<&str> {
        let message = self.as_error()?;
        let word = message.split(|&b| b == b' ').next()?;
        if word.is_empty() {
            return None;
        }
        std::str::from_utf8(word).ok()
    }
}

/// Bounds that the decoder enforces before allocating anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most aggregates (arrays, maps, sets) nested in one another. Decoding
    /// does not recurse, but dropping, comparing or printing a [`Value`] does,
    /// so keep this small.
    pub max_depth: usize,
    /// Most elements of one aggregate (a map of n pairs counts 2n).
    pub max_elements: usize,
    /// Longest bulk string, and longest simple string or error line.
    pub max_bulk: usize,
    /// Most values in one reply, counting every nested value and the reply.
    pub max_total_values: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_depth: 8, max_elements: 65_536, max_bulk: 1024 * 1024, max_total_values: 1_000_000 }
    }
}

/// Why a buffer does not (yet) hold a valid reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The buffer ends inside a reply: read more bytes and decode again.
    Incomplete,
    /// The bytes are not RESP; `offset` is where the problem was detected.
    Invalid { offset: usize, reason: &'static str },
    /// A length, element count, nesting depth or value count exceeds [`Limits`].
    TooLarge { what: &'static str },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Incomplete => f.write_str("incomplete RESP reply"),
            DecodeError::Invalid { offset, reason } => {
                write!(f, "invalid RESP reply at byte {offset}: {reason}")
            }
            DecodeError::TooLarge { what } => write!(f, "RESP reply too large: {what}"),
        }
    }
}

impl std::error::Error for DecodeError {}
