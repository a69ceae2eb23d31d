//! Tests of the decoder: every type, every malformed case, every limit.

use crate::resp::*;
use wasm_bindgen_test::wasm_bindgen_test;

fn one(buf: &[u8]) -> Result<Value, DecodeError> {
    decode(buf, &Limits::default()).map(|(value, used)| {
        assert_eq!(used, buf.len(), "decode must consume exactly one reply");
        value
    })
}

fn bulk(b: &[u8]) -> Value {
    Value::Bulk(b.to_vec())
}

fn is_invalid(r: Result<Value, DecodeError>) -> bool {
    matches!(r, Err(DecodeError::Invalid { .. }))
}

#[wasm_bindgen_test(unsupported = test)]
fn resp2_types() {
    assert_eq!(one(b"+OK\r\n"), Ok(Value::Simple(b"OK".to_vec())));
    assert_eq!(one(b"+\r\n"), Ok(Value::Simple(Vec::new())));
    assert_eq!(one(b"-ERR bad\r\n"), Ok(Value::Error(b"ERR bad".to_vec())));
    assert_eq!(one(b":0\r\n"), Ok(Value::Integer(0)));
    assert_eq!(one(b":-1\r\n"), Ok(Value::Integer(-1)));
    assert_eq!(one(b":1234\r\n"), Ok(Value::Integer(1234)));
    assert_eq!(one(b":9223372036854775807\r\n"), Ok(Value::Integer(i64::MAX)));
    assert_eq!(one(b":-9223372036854775808\r\n"), Ok(Value::Integer(i64::MIN)));
    assert_eq!(one(b"$5\r\nhello\r\n"), Ok(bulk(b"hello")));
    assert_eq!(one(b"$0\r\n\r\n"), Ok(bulk(b"")));
    assert_eq!(one(b"$4\r\n\r\n\r\n\r\n"), Ok(bulk(b"\r\n\r\n")));
    assert_eq!(one(b"$-1\r\n"), Ok(Value::Nil));
    assert_eq!(one(b"*-1\r\n"), Ok(Value::Nil));
    assert_eq!(one(b"*0\r\n"), Ok(Value::Array(Vec::new())));
    assert_eq!(
        one(b"*3\r\n:1\r\n*2\r\n$1\r\na\r\n$-1\r\n-ERR x\r\n"),
        Ok(Value::Array(vec![
            Value::Integer(1),
            Value::Array(vec![bulk(b"a"), Value::Nil]),
            Value::Error(b"ERR x".to_vec()),
        ]))
    );
}

#[wasm_bindgen_test(unsupported = test)]
fn non_utf8_bulk_data() {
    assert_eq!(one(b"$4\r\n\xff\x00\xc3\x28\r\n"), Ok(bulk(b"\xff\x00\xc3\x28")));
    assert_eq!(one(b"+\xff\xfe\r\n"), Ok(Value::Simple(b"\xff\xfe".to_vec())));
}

#[wasm_bindgen_test(unsupported = test)]
fn resp3_types() {
    assert_eq!(one(b"_\r\n"), Ok(Value::Nil));
    assert_eq!(one(b"#t\r\n"), Ok(Value::Integer(1)));
    assert_eq!(one(b"#f\r\n"), Ok(Value::Integer(0)));
    assert_eq!(one(b",1.5\r\n"), Ok(bulk(b"1.5")));
    assert_eq!(one(b",-2.5e+10\r\n"), Ok(bulk(b"-2.5e+10")));
    assert_eq!(one(b",inf\r\n"), Ok(bulk(b"inf")));
    assert_eq!(one(b",-inf\r\n"), Ok(bulk(b"-inf")));
    assert_eq!(one(b",nan\r\n"), Ok(bulk(b"nan")));
    assert_eq!(
        one(b"(3492890328409238509324850943850943825024385\r\n"),
        Ok(bulk(b"3492890328409238509324850943850943825024385"))
    );
    assert_eq!(one(b"(-1\r\n"), Ok(bulk(b"-1")));
    assert_eq!(one(b"=15\r\ntxt:Some string\r\n"), Ok(bulk(b"Some string")));
    assert_eq!(one(b"!21\r\nSYNTAX invalid syntax\r\n"), Ok(Value::Error(b"SYNTAX invalid syntax".to_vec())));
    assert_eq!(
        one(b"%2\r\n+a\r\n:1\r\n+b\r\n:2\r\n"),
        Ok(Value::Array(vec![
            Value::Simple(b"a".to_vec()),
            Value::Integer(1),
            Value::Simple(b"b".to_vec()),
            Value::Integer(2),
        ]))
    );
    assert_eq!(one(b"%0\r\n"), Ok(Value::Array(Vec::new())));
    assert_eq!(one(b"~2\r\n:1\r\n#t\r\n"), Ok(Value::Array(vec![Value::Integer(1), Value::Integer(1)])));
}

#[wasm_bindgen_test(unsupported = test)]
fn resp3_malformed_and_unsupported() {
    for buf in [
        &b"_x\r\n"[..],
        b"#x\r\n",
        b"#tt\r\n",
        b"#\r\n",
        b",\r\n",
        b",abc\r\n",
        b",1.5x\r\n",
        b"(\r\n",
        b"(12a\r\n",
        b"(007\r\n",
        b"=3\r\ntxt\r\n",
        b"=4\r\ntxtx\r\n",
        b"=-1\r\n",
        b"!-1\r\n",
        b"%-1\r\n",
        b"~-1\r\n",
        b"|1\r\n+key\r\n+val\r\n:1\r\n",
        b">2\r\n+message\r\n+hi\r\n",
    ] {
        assert!(is_invalid(one(buf)), "{:?}", String::from_utf8_lossy(buf));
    }
    assert!(is_invalid(one(&[b',', b'1'].repeat(40))));
}

#[wasm_bindgen_test(unsupported = test)]
fn helpers() {
    let array = one(b"*2\r\n:7\r\n$2\r\nhi\r\n").unwrap();
    let items = array.as_array().unwrap();
    assert_eq!(items[0].as_integer(), Some(7));
    assert_eq!(items[1].as_bytes(), Some(&b"hi"[..]));
    assert_eq!(Value::Simple(b"OK".to_vec()).as_bytes(), Some(&b"OK"[..]));
    assert_eq!(array.as_integer(), None);
    assert_eq!(array.as_bytes(), None);
    assert_eq!(items[0].as_array(), None);
    assert!(!array.is_error() && !array.is_nil() && Value::Nil.is_nil());
    assert_eq!(array.error_kind(), None);
    for (line, kind) in [
        ("NOSCRIPT No matching script. Please use EVAL.", "NOSCRIPT"),
        ("READONLY You can't write against a read only replica.", "READONLY"),
        ("WRONGTYPE Operation against a key holding the wrong kind of value", "WRONGTYPE"),
        ("NOAUTH Authentication required.", "NOAUTH"),
        ("ERR", "ERR"),
    ] {
        let value = one(format!("-{line}\r\n").as_bytes()).unwrap();
        assert!(value.is_error());
        assert_eq!(value.as_error(), Some(line.as_bytes()));
        assert_eq!(value.error_kind(), Some(kind));
        assert_eq!(value.as_bytes(), None);
    }
    assert_eq!(one(b"-\r\n").unwrap().error_kind(), None);
    assert_eq!(one(b"- x\r\n").unwrap().error_kind(), None);
    assert_eq!(one(b"-\xff\xfe x\r\n").unwrap().error_kind(), None);
}

#[wasm_bindgen_test(unsupported = test)]
fn malformed_lines_and_lengths() {
    for buf in [
        &b":1\n"[..], // LF without CR
        b":1\rx\n",   // CR not followed by LF
        b"+O\nK\r\n", // LF inside a simple string
        b"+O\rK\r\n", // CR inside a simple string
        b":\r\n",     // empty integer
        b":+1\r\n",   // sign other than '-'
        b":--1\r\n",
        b":-0\r\n",
        b":01\r\n", // leading zero
        b":1.5\r\n",
        b": 1\r\n",
        b":9223372036854775808\r\n",   // i64::MAX + 1
        b":-9223372036854775809\r\n",  // i64::MIN - 1
        b":123456789012345678901\r\n", // longer than any i64
        b"$\r\n",
        b"$x\r\n",
        b"$01\r\n\r\n",
        b"$-2\r\n",
        b"$-0\r\n",
        b"$-\r\n",
        b"$+3\r\nabc\r\n",
        b"$ 3\r\nabc\r\n",
        b"$3 \r\nabc\r\n",
        b"$99999999999999999999\r\n", // overflows u64
        b"*-5\r\n",
        b"*1x\r\n",
        b"$3\r\nabcd\r\n",   // data longer than its length
        b"$3\r\nab\r\n\r\n", // data shorter than its length
        b"$3\r\nabc\n\r",
        b"$3\r\nabc\rx",
        b"*2\r\n:1\r\n?\r\n",
    ] {
        assert!(is_invalid(one(buf)), "{:?}", String::from_utf8_lossy(buf));
    }
}

#[wasm_bindgen_test(unsupported = test)]
fn invalid_offsets() {
    let err = |buf: &[u8]| decode(buf, &Limits::default()).unwrap_err();
    assert!(matches!(err(b"?"), DecodeError::Invalid { offset: 0, .. }));
    assert!(matches!(err(b"*2\r\n:1\r\n?"), DecodeError::Invalid { offset: 8, .. }));
    assert!(matches!(err(b":12\n"), DecodeError::Invalid { offset: 3, .. }));
    assert!(matches!(err(b"$3\r\nabcd"), DecodeError::Invalid { offset: 7, .. }));
    assert!(matches!(
        decode_all(b"+OK\r\n+OK\r\nHTTP/1.1", &Limits::default()),
        Err(DecodeError::Invalid { offset: 10, .. })
    ));
}

#[wasm_bindgen_test(unsupported = test)]
fn garbage_prefix_is_invalid() {
    for buf in [
        &b"upstream connect error or disconnect/reset before headers. reset reason: overflow"[..],
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 19\r\n\r\nupstream connect error",
        b"<html><body>503</body></html>",
        b"\r\n",
        b"\0",
        b" +OK\r\n",
    ] {
        assert!(
            matches!(decode(buf, &Limits::default()), Err(DecodeError::Invalid { offset: 0, .. })),
            "{:?}",
            String::from_utf8_lossy(buf)
        );
        assert!(matches!(decode_all(buf, &Limits::default()), Err(DecodeError::Invalid { offset: 0, .. })));
    }
}

/// A buffer of several replies covering every type, and their values.
fn multi_reply() -> (Vec<u8>, Vec<Value>) {
    let buf = b"+OK\r\n-NOSCRIPT x\r\n:-12\r\n$3\r\na\r\n\r\n$-1\r\n*0\r\n\
        *3\r\n:1\r\n*2\r\n$0\r\n\r\n*-1\r\n+\r\n_\r\n#t\r\n,1.5\r\n(12\r\n\
        =7\r\ntxt:abc\r\n!3\r\nERR\r\n%1\r\n+k\r\n:2\r\n~1\r\n:3\r\n"
        .to_vec();
    let values = vec![
        Value::Simple(b"OK".to_vec()),
        Value::Error(b"NOSCRIPT x".to_vec()),
        Value::Integer(-12),
        bulk(b"a\r\n"),
        Value::Nil,
        Value::Array(Vec::new()),
        Value::Array(vec![Value::Integer(1), Value::Array(vec![bulk(b""), Value::Nil]), Value::Simple(Vec::new())]),
        Value::Nil,
        Value::Integer(1),
        bulk(b"1.5"),
        bulk(b"12"),
        bulk(b"abc"),
        Value::Error(b"ERR".to_vec()),
        Value::Array(vec![Value::Simple(b"k".to_vec()), Value::Integer(2)]),
        Value::Array(vec![Value::Integer(3)]),
    ];
    (buf, values)
}

#[wasm_bindgen_test(unsupported = test)]
fn decode_all_and_consumed_lengths() {
    let (buf, values) = multi_reply();
    let limits = Limits::default();
    assert_eq!(decode_all(&buf, &limits), Ok(values.clone()));
    assert_eq!(decode_all(b"", &limits), Ok(Vec::new()));
    let mut pos = 0;
    for expected in &values {
        let (value, used) = decode(&buf[pos..], &limits).unwrap();
        assert_eq!(&value, expected);
        pos += used;
    }
    assert_eq!(pos, buf.len());
}

#[wasm_bindgen_test(unsupported = test)]
fn truncation_at_every_offset_is_incomplete() {
    let (buf, values) = multi_reply();
    let limits = Limits::default();
    // Offsets where a whole number of replies ends.
    let mut boundaries = vec![0];
    let mut pos = 0;
    while pos < buf.len() {
        pos += decode(&buf[pos..], &limits).unwrap().1;
        boundaries.push(pos);
    }
    for cut in 0..buf.len() {
        let prefix = &buf[..cut];
        match boundaries.iter().position(|&b| b == cut) {
            Some(n) => assert_eq!(decode_all(prefix, &limits), Ok(values[..n].to_vec())),
            None => assert_eq!(decode_all(prefix, &limits), Err(DecodeError::Incomplete), "cut {cut}"),
        }
        // The first reply alone.
        if cut < boundaries[1] {
            assert_eq!(decode(prefix, &limits), Err(DecodeError::Incomplete), "cut {cut}");
        }
    }
}

#[wasm_bindgen_test(unsupported = test)]
fn errors_display() {
    assert_eq!(DecodeError::Incomplete.to_string(), "incomplete RESP reply");
    assert_eq!(DecodeError::Invalid { offset: 3, reason: "x" }.to_string(), "invalid RESP reply at byte 3: x");
    assert_eq!(DecodeError::TooLarge { what: "nesting depth" }.to_string(), "RESP reply too large: nesting depth");
    let boxed: Box<dyn std::error::Error> = Box::new(DecodeError::Incomplete);
    assert!(boxed.source().is_none());
}
