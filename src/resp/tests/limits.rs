//! Tests of the decoder's limits: every length, count and depth is bounded
//! before anything is allocated.

use crate::resp::*;
use wasm_bindgen_test::wasm_bindgen_test;

fn one(buf: &[u8]) -> Result<Value, DecodeError> {
    decode(buf, &Limits::default()).map(|(value, _)| value)
}

fn bulk(b: &[u8]) -> Value {
    Value::Bulk(b.to_vec())
}

fn is_too_large(r: Result<Value, DecodeError>) -> bool {
    matches!(r, Err(DecodeError::TooLarge { .. }))
}

#[wasm_bindgen_test(unsupported = test)]
fn huge_claimed_lengths_fail_cheaply() {
    for buf in [
        &b"*4000000000\r\n"[..],
        b"*18446744073709551615\r\n",
        b"$999999999999\r\n",
        b"$18446744073709551615\r\n",
        b"$1048577\r\n",
        b"*65537\r\n",
        b"%32769\r\n",
        b"~65537\r\n",
        b"!1048577\r\n",
        b"=1048577\r\n",
        b"*1\r\n*1\r\n$4294967296\r\n",
    ] {
        assert!(is_too_large(one(buf)), "{:?}", String::from_utf8_lossy(buf));
    }
    // At the limits, a claimed length only waits for its bytes.
    assert_eq!(one(b"$1048576\r\nabc"), Err(DecodeError::Incomplete));
    assert_eq!(one(b"*65536\r\n:1\r\n"), Err(DecodeError::Incomplete));
    assert_eq!(one(b"%32768\r\n"), Err(DecodeError::Incomplete));
}

#[wasm_bindgen_test(unsupported = test)]
fn bulk_and_line_limits() {
    let limits = Limits { max_bulk: 4, ..Limits::default() };
    let dec = |buf: &[u8]| decode(buf, &limits).map(|(v, _)| v);
    assert_eq!(dec(b"$4\r\nabcd\r\n"), Ok(bulk(b"abcd")));
    assert!(is_too_large(dec(b"$5\r\nabcde\r\n")));
    assert_eq!(dec(b"+abcd\r\n"), Ok(Value::Simple(b"abcd".to_vec())));
    assert!(is_too_large(dec(b"+abcde\r\n")));
    // Too long even before its end has arrived.
    assert!(is_too_large(dec(b"-abcde")));
    assert!(is_too_large(dec(b"(12345")));
    assert_eq!(dec(b"+abcd"), Err(DecodeError::Incomplete));
}

#[wasm_bindgen_test(unsupported = test)]
fn element_limits() {
    let limits = Limits { max_elements: 2, ..Limits::default() };
    let dec = |buf: &[u8]| decode(buf, &limits).map(|(v, _)| v);
    assert!(dec(b"*2\r\n:1\r\n:2\r\n").is_ok());
    assert!(is_too_large(dec(b"*3\r\n")));
    assert!(dec(b"%1\r\n:1\r\n:2\r\n").is_ok());
    assert!(is_too_large(dec(b"%2\r\n")));
    assert!(is_too_large(dec(b"~3\r\n")));
}

#[wasm_bindgen_test(unsupported = test)]
fn total_value_limit() {
    let limits = Limits { max_total_values: 3, ..Limits::default() };
    let dec = |buf: &[u8]| decode(buf, &limits).map(|(v, _)| v);
    assert!(dec(b"*2\r\n:1\r\n:2\r\n").is_ok());
    assert!(is_too_large(dec(b"*3\r\n")));
    assert!(is_too_large(dec(b"*1\r\n*2\r\n:1\r\n:2\r\n")));
    // Per reply: many small replies are fine.
    assert_eq!(decode_all(&b":1\r\n".repeat(10), &limits).map(|v| v.len()), Ok(10));
    let none = Limits { max_total_values: 0, ..Limits::default() };
    assert!(matches!(decode(b":1\r\n", &none), Err(DecodeError::TooLarge { .. })));
}

#[wasm_bindgen_test(unsupported = test)]
fn nesting_limit() {
    let limits = Limits::default();
    let nested = |depth: usize| {
        let mut buf = b"*1\r\n".repeat(depth);
        buf.extend_from_slice(b":1\r\n");
        buf
    };
    let mut expected = Value::Integer(1);
    for _ in 0..8 {
        expected = Value::Array(vec![expected]);
    }
    assert_eq!(decode(&nested(8), &limits).map(|(v, _)| v), Ok(expected));
    for depth in [9, 100, 1_000_000] {
        assert_eq!(decode(&nested(depth), &limits), Err(DecodeError::TooLarge { what: "nesting depth" }));
    }
    // An empty aggregate counts as a level too.
    let mut buf = b"*1\r\n".repeat(8);
    buf.extend_from_slice(b"*0\r\n");
    assert!(is_too_large(decode(&buf, &limits).map(|(v, _)| v)));
    let flat = Limits { max_depth: 0, ..Limits::default() };
    assert!(is_too_large(decode(b"*0\r\n", &flat).map(|(v, _)| v)));
    assert_eq!(decode(b":1\r\n", &flat).map(|(v, _)| v), Ok(Value::Integer(1)));
}
