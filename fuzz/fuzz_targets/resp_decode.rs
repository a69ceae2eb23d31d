//! The RESP decoder on arbitrary bytes: never panics, never reads past the
//! buffer, and what it decodes re-encodes (as RESP2) to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate::resp::{decode, decode_all, encode_value, DecodeError, Limits, Value};

/// RESP2 has no CR/LF in an error line: the encoder writes them as spaces.
fn normalize(value: &Value) -> Value {
    match value {
        Value::Error(e) => Value::Error(e.iter().map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }).collect()),
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        other => other.clone(),
    }
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks small limits too, so that every limit is reached.
    let small = match data.first() {
        Some(&b) => Limits {
            max_depth: usize::from(b & 0x7),
            max_elements: usize::from(b >> 3 & 0x7),
            max_bulk: usize::from(b >> 6) * 8,
            max_total_values: usize::from(b >> 5),
        },
        None => Limits::default(),
    };
    for limits in [Limits::default(), small] {
        match decode(data, &limits) {
            Ok((value, used)) => {
                assert!(used > 0 && used <= data.len());
                let mut again = Vec::new();
                encode_value(&mut again, &value);
                // A RESP3 double (up to 64 bytes, whatever max_bulk says) comes back as a bulk string.
                let relaxed = Limits { max_bulk: limits.max_bulk.max(64), ..limits };
                let (back, n) = decode(&again, &relaxed).expect("re-encoded value decodes");
                assert_eq!(n, again.len());
                assert_eq!(back, normalize(&value));
                // A strict prefix of a complete reply is incomplete, never invalid.
                if let Some(prefix) = data.get(..used - 1) {
                    if !prefix.is_empty() {
                        assert_eq!(decode(prefix, &limits).map(|_| ()), Err(DecodeError::Incomplete));
                    }
                }
            }
            Err(DecodeError::Invalid { offset, .. }) => assert!(offset <= data.len()),
            Err(_) => {}
        }
        let _ = decode_all(data, &limits);
    }
});
