use super::*;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn reply(ip: &str, port: &str) -> Value {
    Value::Array(vec![Value::Bulk(ip.as_bytes().to_vec()), Value::Bulk(port.as_bytes().to_vec())])
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn the_command_is_the_sentinel_lookup() {
    assert_eq!(
        lookup_command("mymaster"),
        b"*3\r\n$8\r\nSENTINEL\r\n$23\r\nget-master-addr-by-name\r\n$8\r\nmymaster\r\n"
    );
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn replies_parse_to_an_address_or_a_named_error() {
    assert_eq!(parse_lookup(&reply("10.0.0.7", "6379")), Ok(addr("10.0.0.7:6379")));
    assert_eq!(parse_lookup(&reply("::1", "6380")), Ok(addr("[::1]:6380")));
    assert_eq!(parse_lookup(&Value::Nil), Err(LookupError::UnknownMaster));
    let error = Value::Error(b"IDONTKNOW I'm not a sentinel".to_vec());
    assert!(matches!(parse_lookup(&error), Err(LookupError::ErrorReply(e)) if e.starts_with("IDONTKNOW")));
    for bad in [
        reply("redis.internal", "6379"),
        reply("10.0.0.7", "0"),
        reply("10.0.0.7", "65536"),
        reply("10.0.0.7", "-1"),
        reply("10.0.0.7:1", "6379"),
        Value::Array(vec![Value::Bulk(b"1.2".to_vec())]),
        Value::Array(vec![Value::Integer(1), Value::Integer(2)]),
        Value::Simple(b"OK".to_vec()),
    ] {
        let got = parse_lookup(&bad);
        assert!(matches!(got, Err(LookupError::BadReply(_))), "{bad:?}: {got:?}");
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn errors_never_carry_control_characters_or_long_text() {
    let mut text = b"ERR ".to_vec();
    text.extend(std::iter::repeat_n(b'x', 1000));
    let e = parse_lookup(&Value::Error(text)).unwrap_err().to_string();
    assert!(e.len() < 200, "{e}");
    let e = parse_lookup(&reply("a\tb", "1")).unwrap_err().to_string();
    assert!(!e.contains('\t'), "{e}");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn lookups_are_scheduled_by_refresh_failure_and_suspicion() {
    let mut d = Discovery::new(5_000);
    assert!(d.due(0) && d.master().is_none());
    d.sent(0);
    assert!(!d.due(0), "one lookup at a time");
    // A failed lookup retries after the minimum interval, knowing nothing.
    d.failed(10);
    assert!(!d.due(10 + MIN_LOOKUP_INTERVAL_MS - 1) && d.due(10 + MIN_LOOKUP_INTERVAL_MS));
    d.sent(110);
    assert_eq!(d.on_reply(parse_lookup(&reply("10.0.0.1", "6379")), 112), Ok(Change::First(addr("10.0.0.1:6379"))));
    assert!(!d.due(5_111) && d.due(5_112));
    d.sent(5_112);
    assert_eq!(d.on_reply(parse_lookup(&reply("10.0.0.1", "6379")), 5_113), Ok(Change::Same));
    // A store call failed: ask again, but not before the minimum interval.
    d.suspect(5_150);
    assert!(!d.due(5_211) && d.due(5_212));
    d.sent(5_212);
    let switched = d.on_reply(parse_lookup(&reply("10.0.0.2", "6379")), 5_213);
    assert_eq!(switched, Ok(Change::Switched { from: addr("10.0.0.1:6379"), to: addr("10.0.0.2:6379") }));
    // A failed lookup keeps the master known so far.
    d.sent(20_000);
    assert_eq!(d.on_reply(parse_lookup(&Value::Nil), 20_001), Err(LookupError::UnknownMaster));
    assert_eq!(d.master(), Some(addr("10.0.0.2:6379")));
    // Suspicion never postpones a lookup already due sooner.
    d.suspect(20_002);
    assert!(d.due(20_101));
    d.sent(20_101);
    d.failed(20_101);
    assert!(!d.due(20_200) && d.due(20_201));
}
