use super::*;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn reply(ip: &str, port: &str) -> Vec<u8> {
    format!("*2\r\n${}\r\n{ip}\r\n${}\r\n{port}\r\n", ip.len(), port.len()).into_bytes()
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
    assert_eq!(parse_lookup(Some("200"), &reply("10.0.0.7", "6379")), Ok(addr("10.0.0.7:6379")));
    assert_eq!(parse_lookup(Some("200"), &reply("::1", "6380")), Ok(addr("[::1]:6380")));
    assert_eq!(parse_lookup(Some("200"), b"*-1\r\n"), Err(LookupError::UnknownMaster));
    assert_eq!(parse_lookup(Some("200"), b"_\r\n"), Err(LookupError::UnknownMaster));
    assert!(matches!(parse_lookup(Some("503"), b"upstream connect error"), Err(LookupError::Unavailable(_))));
    assert!(matches!(parse_lookup(None, b""), Err(LookupError::Unavailable(_))));
    assert!(matches!(parse_lookup(Some("200"), b""), Err(LookupError::Unavailable(_))));
    assert!(matches!(parse_lookup(Some("200"), b"<html>"), Err(LookupError::NotResp(_))));
    assert!(matches!(parse_lookup(Some("200"), b"*2\r\n$3\r\n"), Err(LookupError::NotResp(_))));
    assert!(
        matches!(parse_lookup(Some("200"), b"-IDONTKNOW I'm not a sentinel\r\n"), Err(LookupError::ErrorReply(e)) if e.starts_with("IDONTKNOW"))
    );
    for bad in [
        reply("redis.internal", "6379"),
        reply("10.0.0.7", "0"),
        reply("10.0.0.7", "65536"),
        reply("10.0.0.7", "-1"),
        reply("10.0.0.7:1", "6379"),
        b"*1\r\n$3\r\n1.2\r\n".to_vec(),
        b"*2\r\n:1\r\n:2\r\n".to_vec(),
        b"+OK\r\n".to_vec(),
    ] {
        let got = parse_lookup(Some("200"), &bad);
        assert!(matches!(got, Err(LookupError::BadReply(_))), "{}: {got:?}", String::from_utf8_lossy(&bad));
    }
    // Two replies (e.g. a pipelined extra) are not one answer.
    let mut two = reply("10.0.0.7", "6379");
    two.extend(reply("10.0.0.8", "6379"));
    assert!(matches!(parse_lookup(Some("200"), &two), Err(LookupError::Unavailable(_))));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn errors_never_carry_control_characters_or_long_text() {
    let mut body = b"-ERR ".to_vec();
    body.extend(std::iter::repeat_n(b'x', 1000));
    body.extend_from_slice(b"\r\n");
    let e = parse_lookup(Some("200"), &body).unwrap_err().to_string();
    assert!(e.len() < 200, "{e}");
    let e = parse_lookup(Some("200"), &reply("a\tb", "1")).unwrap_err().to_string();
    assert!(!e.contains('\t'), "{e}");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn lookups_are_scheduled_by_refresh_failure_and_suspicion() {
    let mut d = Discovery::new(5_000);
    assert!(d.due(0) && d.master().is_none());
    d.sent(1, 0);
    assert!(!d.due(0), "one lookup at a time");
    assert_eq!(d.on_reply(99, Some("200"), &reply("10.0.0.1", "1"), 1), None, "not the lookup");
    // A failed lookup retries after the minimum interval, knowing nothing.
    assert!(matches!(d.on_reply(1, Some("503"), b"", 10), Some(Err(LookupError::Unavailable(_)))));
    assert!(!d.due(10 + MIN_LOOKUP_INTERVAL_MS - 1) && d.due(10 + MIN_LOOKUP_INTERVAL_MS));
    d.sent(2, 110);
    assert_eq!(
        d.on_reply(2, Some("200"), &reply("10.0.0.1", "6379"), 112),
        Some(Ok(Change::First(addr("10.0.0.1:6379"))))
    );
    assert!(!d.due(5_111) && d.due(5_112));
    d.sent(3, 5_112);
    assert_eq!(d.on_reply(3, Some("200"), &reply("10.0.0.1", "6379"), 5_113), Some(Ok(Change::Same)));
    // A store call failed: ask again, but not before the minimum interval.
    d.suspect(5_150);
    assert!(!d.due(5_211) && d.due(5_212));
    d.sent(4, 5_212);
    let switched = d.on_reply(4, Some("200"), &reply("10.0.0.2", "6379"), 5_213);
    assert_eq!(switched, Some(Ok(Change::Switched { from: addr("10.0.0.1:6379"), to: addr("10.0.0.2:6379") })));
    // A failed lookup keeps the master known so far.
    d.sent(5, 20_000);
    assert!(matches!(d.on_reply(5, Some("200"), b"*-1\r\n", 20_001), Some(Err(LookupError::UnknownMaster))));
    assert_eq!(d.master(), Some(addr("10.0.0.2:6379")));
    // Suspicion never postpones a lookup already due sooner.
    d.suspect(20_002);
    assert!(d.due(20_101));
    d.send_failed(20_101);
    assert!(!d.due(20_200) && d.due(20_201));
}
