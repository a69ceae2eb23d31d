//! Property tests of the RESP decoder (host only; `make fuzz` runs the same
//! code under cargo fuzz for 10 million executions): arbitrary bytes never
//! panic it, every strict prefix of a valid reply is `Incomplete`, and nested
//! or huge replies are rejected as `TooLarge` before anything is allocated.

use proptest::prelude::*;
use tollgate::resp::{decode, decode_all, encode_value, DecodeError, Limits, Value};

/// Any RESP2 value up to 4 levels deep (lines without CR/LF, as RESP2 requires).
fn value() -> impl Strategy<Value = Value> {
    let line = proptest::collection::vec(any::<u8>().prop_filter("no CR/LF", |b| *b != b'\r' && *b != b'\n'), 0..40);
    let leaf = prop_oneof![
        line.clone().prop_map(Value::Simple),
        line.prop_map(Value::Error),
        any::<i64>().prop_map(Value::Integer),
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(Value::Bulk),
        Just(Value::Nil),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| proptest::collection::vec(inner, 0..8).prop_map(Value::Array))
}

fn encoded(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(&mut out, v);
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        for limits in [Limits::default(), Limits { max_depth: 1, max_elements: 2, max_bulk: 4, max_total_values: 3 }] {
            match decode(&bytes, &limits) {
                Ok((_, used)) => prop_assert!(used > 0 && used <= bytes.len()),
                Err(DecodeError::Invalid { offset, .. }) => prop_assert!(offset <= bytes.len()),
                Err(_) => {}
            }
            let _ = decode_all(&bytes, &limits);
        }
    }

    /// Bytes that start like RESP reach deeper into the decoder than random ones.
    #[test]
    fn resp_looking_bytes_never_panic(
        parts in proptest::collection::vec(
            prop_oneof![
                Just(b"*".to_vec()), Just(b"$".to_vec()), Just(b"%".to_vec()), Just(b"~".to_vec()),
                Just(b"=".to_vec()), Just(b"!".to_vec()), Just(b",".to_vec()), Just(b"(".to_vec()),
                Just(b"#t".to_vec()), Just(b"_".to_vec()), Just(b"\r\n".to_vec()), Just(b"-1".to_vec()),
                Just(b"txt:".to_vec()), (0u64..100_000).prop_map(|n| n.to_string().into_bytes()),
                proptest::collection::vec(any::<u8>(), 0..4),
            ],
            0..40,
        )
    ) {
        let bytes: Vec<u8> = parts.concat();
        let _ = decode(&bytes, &Limits::default());
        let _ = decode_all(&bytes, &Limits::default());
    }

    #[test]
    fn valid_replies_round_trip_and_every_strict_prefix_is_incomplete(v in value()) {
        let bytes = encoded(&v);
        prop_assert_eq!(decode(&bytes, &Limits::default()), Ok((v, bytes.len())));
        for end in 1..bytes.len() {
            prop_assert_eq!(decode(&bytes[..end], &Limits::default()), Err(DecodeError::Incomplete), "prefix {}", end);
        }
    }

    #[test]
    fn nesting_beyond_the_limit_is_too_large(depth in 9usize..2_000) {
        let mut bytes = b"*1\r\n".repeat(depth);
        bytes.extend_from_slice(b":1\r\n");
        prop_assert_eq!(decode(&bytes, &Limits::default()), Err(DecodeError::TooLarge { what: "nesting depth" }));
    }

    #[test]
    fn huge_claims_are_too_large_without_their_bytes(n in 1_048_577u64..u64::MAX, kind in 0usize..5) {
        let (prefix, what) = [
            ("$", "bulk string length"), ("*", "array length"), ("%", "map length"), ("~", "set length"),
            ("!", "bulk string length"),
        ][kind];
        let bytes = format!("{prefix}{n}\r\n");
        prop_assert_eq!(decode(bytes.as_bytes(), &Limits::default()), Err(DecodeError::TooLarge { what }));
    }

    #[test]
    fn too_many_values_in_total_is_too_large(width in 1usize..60, depth in 1usize..8) {
        // A chain of `depth` arrays of `width` elements each (the first
        // element of each is the next array, the rest integers): 1 + depth * width
        // values in all, against a total limit of 50.
        let limits = Limits { max_total_values: 50, ..Limits::default() };
        let total = 1 + depth * width;
        let mut bytes = format!("*{width}\r\n").repeat(depth).into_bytes();
        bytes.extend(std::iter::repeat_n(b":1\r\n".as_slice(), total - depth).flatten());
        let result = decode(&bytes, &limits).map(|(_, n)| n);
        if total > 50 {
            prop_assert_eq!(result, Err(DecodeError::TooLarge { what: "total values" }));
        } else {
            prop_assert_eq!(result, Ok(bytes.len()));
        }
    }
}
