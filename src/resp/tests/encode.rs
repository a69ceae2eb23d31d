//! Tests of the encoders, and round trips through the decoder.

use crate::resp::*;
use wasm_bindgen_test::wasm_bindgen_test;

fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_command(&mut out, args);
    out
}

fn reply(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(&mut out, value);
    out
}

fn bulks(args: &[&[u8]]) -> Value {
    Value::Array(args.iter().map(|a| Value::Bulk(a.to_vec())).collect())
}

#[wasm_bindgen_test(unsupported = test)]
fn command_exact_bytes() {
    assert_eq!(
        command(&[b"EVALSHA", b"abc", b"1", b"k{x}"]),
        b"*4\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n1\r\n$4\r\nk{x}\r\n".to_vec()
    );
    assert_eq!(command(&[]), b"*0\r\n".to_vec());
    assert_eq!(command(&[b""]), b"*1\r\n$0\r\n\r\n".to_vec());
}

#[wasm_bindgen_test(unsupported = test)]
fn command_appends_without_clearing() {
    let mut out = b"prior".to_vec();
    encode_command(&mut out, &[b"PING"]);
    encode_command(&mut out, &[b"ECHO", b"hi"]);
    assert_eq!(out, b"prior*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n".to_vec());
}

#[wasm_bindgen_test(unsupported = test)]
fn command_cannot_be_split_by_its_arguments() {
    let evil: &[u8] = b"x\r\nFLUSHALL\r\n*1\r\n$8\r\nFLUSHALL\r\n";
    let buf = command(&[b"GET", evil]);
    let replies = decode_all(&buf, &Limits::default()).unwrap();
    assert_eq!(replies, vec![bulks(&[b"GET", evil])]);
}

#[wasm_bindgen_test(unsupported = test)]
fn command_is_binary_safe_for_every_byte() {
    let all: Vec<u8> = (0..=255u8).collect();
    let braces: &[u8] = b"{}\0\xff\xfe";
    let buf = command(&[&all, braces, b"\r", b"\n", b"$-1"]);
    let (value, used) = decode(&buf, &Limits::default()).unwrap();
    assert_eq!(used, buf.len());
    assert_eq!(value, bulks(&[&all, braces, b"\r", b"\n", b"$-1"]));
}

#[wasm_bindgen_test(unsupported = test)]
fn command_length_header_is_byte_length() {
    let big = vec![b'a'; 100_000];
    let buf = command(&[&big]);
    assert!(buf.starts_with(b"*1\r\n$100000\r\naaa"));
    assert_eq!(buf.len(), 4 + 9 + 100_000 + 2);
    // Multi-byte UTF-8 counts bytes, not characters.
    assert_eq!(command(&["é".as_bytes()]), b"*1\r\n$2\r\n\xc3\xa9\r\n".to_vec());
}

#[wasm_bindgen_test(unsupported = test)]
fn value_exact_bytes() {
    assert_eq!(reply(&Value::Simple(b"OK".to_vec())), b"+OK\r\n".to_vec());
    assert_eq!(reply(&Value::Error(b"ERR x".to_vec())), b"-ERR x\r\n".to_vec());
    assert_eq!(reply(&Value::Integer(0)), b":0\r\n".to_vec());
    assert_eq!(reply(&Value::Integer(-42)), b":-42\r\n".to_vec());
    assert_eq!(reply(&Value::Integer(i64::MIN)), b":-9223372036854775808\r\n".to_vec());
    assert_eq!(reply(&Value::Integer(i64::MAX)), b":9223372036854775807\r\n".to_vec());
    assert_eq!(reply(&Value::Bulk(Vec::new())), b"$0\r\n\r\n".to_vec());
    assert_eq!(reply(&Value::Nil), b"$-1\r\n".to_vec());
    assert_eq!(reply(&Value::Array(Vec::new())), b"*0\r\n".to_vec());
    assert_eq!(
        reply(&Value::Array(vec![
            Value::Integer(1),
            Value::Array(vec![Value::Nil]),
            Value::Array(Vec::new()),
            Value::Bulk(b"z".to_vec()),
        ])),
        b"*4\r\n:1\r\n*1\r\n$-1\r\n*0\r\n$1\r\nz\r\n".to_vec()
    );
}

#[wasm_bindgen_test(unsupported = test)]
fn value_lines_never_carry_cr_or_lf() {
    let buf = reply(&Value::Error(b"ERR a\r\n+OK".to_vec()));
    assert_eq!(buf, b"-ERR a  +OK\r\n".to_vec());
    assert_eq!(decode_all(&buf, &Limits::default()).unwrap(), vec![Value::Error(b"ERR a  +OK".to_vec())]);
}

#[wasm_bindgen_test(unsupported = test)]
fn value_round_trips() {
    let values = vec![
        Value::Simple(b"OK".to_vec()),
        Value::Simple(Vec::new()),
        Value::Error(b"WRONGTYPE Operation against a key".to_vec()),
        Value::Integer(i64::MIN),
        Value::Integer(-1),
        Value::Integer(0),
        Value::Integer(i64::MAX),
        Value::Bulk(b"\xff\xfe\x00\r\n{}".to_vec()),
        Value::Bulk(Vec::new()),
        Value::Nil,
        Value::Array(Vec::new()),
        Value::Array(vec![
            Value::Integer(1),
            Value::Array(vec![Value::Array(vec![Value::Nil, Value::Bulk(b"x".to_vec())])]),
            Value::Error(b"NOSCRIPT No matching script".to_vec()),
        ]),
    ];
    let mut buf = Vec::new();
    for value in &values {
        let one = reply(value);
        assert_eq!(decode(&one, &Limits::default()).unwrap(), (value.clone(), one.len()));
        buf.extend_from_slice(&one);
    }
    assert_eq!(decode_all(&buf, &Limits::default()).unwrap(), values);
}

/// The writer's decimals and headers are the text of the number, at every
/// length they are written in one copy or not: against `format!`.
#[wasm_bindgen_test(unsupported = test)]
fn command_writer_decimals_are_their_text() {
    let edges = [0, 9, 10, 99, 100, 12_345, 10_u64.pow(19), u64::MAX];
    for n in edges {
        for prefix in [&b""[..], b"?", b"~"] {
            let mut out = Vec::new();
            CommandWriter::new(&mut out, 1).decimal(prefix, n);
            let text = format!("{}{n}", String::from_utf8_lossy(prefix));
            assert_eq!(out, format!("*1\r\n${}\r\n{text}\r\n", text.len()).into_bytes(), "{prefix:?} {n}");
        }
    }
    for len in [0, 9, 10, 99, 100, 255, 256, 1_000] {
        let arg = vec![b'x'; len];
        let expected = [format!("*1\r\n${len}\r\n").into_bytes(), arg.clone(), b"\r\n".to_vec()].concat();
        assert_eq!(command(&[&arg]), expected, "{len}");
    }
}
