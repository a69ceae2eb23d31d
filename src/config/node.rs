//! What stage 1's reader makes of a value that passed the shape check
//! ([`Node`]), before the raw structs take it ([`super::shape`]'s `Shaped`):
//! shared by the reader ([`super::read`]) and the shapes, which import it
//! and not each other's.

use serde_json::Number;

/// A value that passed the shape check.
#[derive(Debug)]
pub(crate) enum Node {
    Str(String),
    Bool(bool),
    /// `Kind::Number`, `Kind::U64` and `Kind::U32` (the last two in range),
    /// and the number form of `Kind::NumOrObj`.
    Num(Number),
    /// `Kind::Duration` and `Kind::Any`: any JSON value, checked later.
    Loose(Loose),
    /// An object's fields, by position in its shape; `None` when absent or
    /// `null` (optional fields only: required ones are always there).
    Obj(Vec<Option<Node>>),
    Arr(Vec<Node>),
}

/// Any JSON value, as far as later checks need it (durations, status codes).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Loose {
    Str(String),
    Num(Number),
    Bool(bool),
    Null,
    Array,
    Object,
}
