use super::*;

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn replies_pair_with_commands_in_order_across_messages() {
    let mut link = Link::default();
    link.opened(7, true, 0);
    link.sent(Awaited::Call(CallId::Request(1)), 10, 0);
    link.sent(Awaited::Call(CallId::Request(2)), 20, 1);
    assert_eq!(link.in_flight(), (2, 30));
    let (replies, error) = link.feed(b"+A\r\n$3\r\nb", 5);
    assert_eq!(error, None);
    assert_eq!(replies, vec![(Awaited::Call(CallId::Request(1)), 0, Value::Simple(b"A".to_vec()))]);
    assert_eq!(link.in_flight(), (1, 20));
    let (replies, _) = link.feed(b"cd\r\n", 6);
    assert_eq!(replies, vec![(Awaited::Call(CallId::Request(2)), 1, Value::Bulk(b"bcd".to_vec()))]);
    assert_eq!(link.in_flight(), (0, 0));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_unexpected_reply_or_garbage_ends_the_stream_after_the_good_replies() {
    let mut link = Link::default();
    link.opened(1, true, 0);
    link.sent(Awaited::Call(CallId::Request(1)), 1, 0);
    let (replies, error) = link.feed(b"+A\r\n+B\r\n", 1);
    assert_eq!(replies.len(), 1);
    assert!(matches!(error, Some(Failure::Lost(_))));
    let mut link = Link::default();
    link.opened(1, true, 0);
    link.sent(Awaited::Call(CallId::Request(1)), 1, 0);
    let (replies, error) = link.feed(b"<html>", 1);
    assert!(replies.is_empty() && matches!(error, Some(Failure::NotResp(_))));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn stalls_count_from_the_last_reply_or_the_first_outstanding_send() {
    let mut link = Link::default();
    link.opened(1, true, 0);
    assert!(!link.stalled(1_000, 100, 100), "nothing outstanding: never stalled");
    link.sent(Awaited::Call(CallId::Request(1)), 1, 500);
    link.sent(Awaited::Call(CallId::Request(2)), 1, 590);
    let ticks = |link: &mut Link, n: u32| (0..n).for_each(|_| link.tick());
    ticks(&mut link, MIN_SILENT_TICKS - 1);
    assert!(!link.stalled(900, 100, 100), "too few silent ticks: the proxy may be what lags");
    ticks(&mut link, 1);
    assert!(!link.stalled(599, 100, 100) && link.stalled(600, 100, 100));
    link.feed(b":1\r\n", 580);
    link.tick();
    assert!(!link.stalled(700, 100, 100), "a reply since the last tick: not silent");
    ticks(&mut link, MIN_SILENT_TICKS);
    assert!(!link.stalled(679, 100, 100) && link.stalled(680, 100, 100), "progress at the reply");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_stream_that_never_answered_backs_off_doubling_one_that_did_reopens_at_once() {
    let mut link = Link::default();
    let fail = || Failure::Unavailable("refused".into());
    let mut until = Vec::new();
    for i in 0..6 {
        let now = i * 1_000;
        link.opened(i as u32, true, now);
        link.sent(Awaited::Call(CallId::Request(1)), 1, now);
        assert_eq!(link.closed(fail(), false, now), vec![Awaited::Call(CallId::Request(1))]);
        let LinkState::Down { until_ms, .. } = link.state.clone() else { panic!("not down") };
        assert!(link.down(now).is_some() && !link.may_open(now));
        until.push(until_ms - now);
    }
    assert_eq!(until, [50, 100, 200, 400, 800, 800]);
    link.opened(9, true, 10_000);
    link.sent(Awaited::Call(CallId::Request(1)), 1, 10_000);
    link.feed(b":1\r\n", 10_001);
    link.closed(fail(), false, 10_002);
    assert_eq!(link.state, LinkState::Idle, "it had answered: reopen at once");
    link.opened(10, true, 10_003);
    link.closed(fail(), false, 10_003);
    let LinkState::Down { until_ms, .. } = link.state.clone() else { panic!("not down") };
    assert_eq!(until_ms, 10_053, "the backoff starts over after a stream that answered");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn abandoned_requests_keep_their_place() {
    let mut link = Link::default();
    link.opened(1, true, 0);
    link.sent(Awaited::Call(CallId::Request(1)), 1, 0);
    link.sent(Awaited::Call(CallId::Request(2)), 1, 0);
    link.abandon(CallId::Request(1));
    assert_eq!(link.calls().collect::<Vec<_>>(), vec![CallId::Request(2)]);
    let (replies, _) = link.feed(b":1\r\n:2\r\n", 1);
    let awaited: Vec<Awaited> = replies.into_iter().map(|(s, _, _)| s).collect();
    assert_eq!(awaited, vec![Awaited::Abandoned(CallId::Request(1)), Awaited::Call(CallId::Request(2))]);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_slow_but_answering_stream_earns_a_longer_silence_up_to_the_cap() {
    let mut link = Link::default();
    link.opened(1, true, 0);
    assert_eq!(link.stall_after(100, 1_000), 100, "no round trip known: the timeout");
    // Replies come back 200 ms after their commands (a flooded proxy).
    for i in 0..40u64 {
        link.sent(Awaited::Call(CallId::Request(i as u32)), 1, i * 10);
        link.feed(b":1\r\n", i * 10 + 200);
    }
    assert_eq!(link.stall_after(100, 1_000), 800, "four round trips");
    assert_eq!(link.stall_after(100, 500), 500, "at most the cap");
    assert_eq!(link.stall_after(2_000, 1_000), 2_000, "never less than the timeout");
    link.sent(Awaited::Call(CallId::Request(99)), 1, 1_000);
    // The first tick sees the replies of the loop above; the next ones are silent.
    for _ in 0..=MIN_SILENT_TICKS {
        link.tick();
    }
    assert!(!link.stalled(1_799, 100, 1_000) && link.stalled(1_800, 100, 1_000));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_message_holds_its_place_until_its_last_reply_and_a_closed_stream_frees_all() {
    let mut link = Link::default();
    link.opened(7, true, 0);
    link.sent(Awaited::Call(CallId::Request(1)), 1, 0);
    link.sent(Awaited::Call(CallId::Request(2)), 1, 0);
    link.message_sent();
    link.message_sent();
    assert_eq!(link.messages(), 1, "a second mark with nothing new sent is no message");
    link.sent(Awaited::Call(CallId::Request(3)), 1, 1);
    link.message_sent();
    assert_eq!(link.messages(), 2);
    link.abandon(CallId::Request(2));
    link.feed(b"+A\r\n", 2);
    assert_eq!(link.messages(), 2, "the first message's last reply is still out");
    link.feed(b"+B\r\n", 3);
    assert_eq!(link.messages(), 1, "an abandoned call's reply still ends its message");
    link.closed(Failure::NoResponse, false, 4);
    assert_eq!(link.messages(), 0);
}
