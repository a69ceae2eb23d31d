//! The store stream: replies paired in order however they are split, a
//! stream that closes, is refused or stalls, `AUTH`, deadlines and overload.

use crate::store::FailureKind;
use crate::testing::{plugin, Plugin};
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{Reset, Stat, MAX_WAIT_MS};

fn rule() -> Plugin {
    plugin().timeout("100ms").rule("api", Some("x-user-id"), &[(2, "1h")])
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn replies_split_anywhere_are_paired_with_their_requests_in_order() {
    let mut rig = Rig::new(rule());
    // u0 twice: its second request is its third decision after the first
    // message, so its answer differs from the others'.
    let users = ["u0", "u1", "u0", "u2", "u0"];
    let ids: Vec<u32> = users.iter().map(|u| rig.request(u).0).collect();
    rig.wake();
    let token = rig.stream();
    let sent = rig.host.take_outbox(token);
    let reply = rig.store.answer(&sent, rig.now);
    for chunk in reply.chunks(7) {
        rig.message(token, chunk);
    }
    let statuses: Vec<Option<u32>> = ids.iter().map(|id| rig.host.status(*id)).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 429].map(Some), "u0's third request is its denial");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_stream_closed_with_requests_on_it_fails_them_as_may_have_run_and_reopens() {
    let mut rig = Rig::new(rule().failure_mode("deny"));
    let ids: Vec<u32> = (0..3).map(|i| rig.request(&format!("c{i}")).0).collect();
    rig.wake();
    let first = rig.stream();
    rig.answer(first);
    let (lost, _) = rig.request("lost");
    rig.close(first, 2);
    assert_eq!(rig.host.status(lost), Some(503));
    assert_eq!(rig.host.count(Stat::StoreError(FailureKind::Unavailable)), 1);
    assert_eq!(rig.host.count(Stat::UnknownOutcome), 1, "sent, no reply: it may have run");
    assert_eq!(rig.host.count(Stat::StreamReset(Reset::Closed)), 1);
    // The stream had answered: the next request reopens at once.
    let (next, _) = rig.request("next");
    rig.run_until_quiet();
    assert_ne!(rig.stream(), first);
    assert_eq!(rig.host.status(next), Some(200));
    assert!(ids.iter().all(|id| rig.host.status(*id) == Some(200)));
    assert_eq!(rig.host.count(Stat::StreamOpen), 2);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_refused_stream_never_ran_anything_its_requests_fail_fast_until_the_backoff_ends() {
    let mut rig = Rig::new(rule().failure_mode("deny"));
    let (a, _) = rig.request("a");
    rig.wake();
    let token = rig.stream();
    rig.close(token, 14); // what Envoy says when the tunnel cannot connect
    assert_eq!(rig.host.status(a), Some(503));
    assert_eq!(rig.host.count(Stat::UnknownOutcome), 0, "refused: the request never reached the store");
    assert_eq!(rig.host.count(Stat::StreamReset(Reset::Refused)), 1);
    // While down, new requests fail at once, in their own callback.
    let (b, flow) = rig.request("b");
    assert_eq!((flow, rig.host.status(b)), (crate::worker::Flow::Pause, Some(503)));
    assert_eq!(rig.host.opened.len(), 1, "no new stream during the backoff");
    // After the backoff the next request opens a stream and is decided.
    rig.tick(60);
    let (c, _) = rig.request("c");
    rig.run_until_quiet();
    assert_eq!(rig.host.status(c), Some(200));
    assert_eq!(rig.host.opened.len(), 2);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_stream_that_cannot_be_opened_fails_requests_by_failure_mode() {
    let mut rig = Rig::new(rule().failure_mode("allow"));
    rig.host.refuse_open = Some("ParseFailure".into());
    let (id, _) = rig.request("x");
    rig.wake();
    assert_eq!(rig.host.status(id), Some(200));
    assert_eq!(rig.host.count(Stat::FailureMode { allowed: true }), 1);
    assert!(rig.host.logs.iter().any(|(_, l)| l.contains("cannot open a stream to cluster tollgate_valkey")));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_stalled_stream_is_reset_after_the_timeout_and_its_requests_get_failure_mode() {
    // Pipelined (no group commit): the late request is on the stream too.
    let mut rig = Rig::new(rule().failure_mode("deny").valkey(r#""max_messages_in_flight": 64"#));
    let (sent, _) = rig.request("s");
    rig.wake();
    let token = rig.stream();
    rig.run_for(50);
    let (queued_late, _) = rig.request("q");
    rig.run_for(49);
    assert_eq!(rig.host.status(sent), None, "still within the timeout");
    rig.run_for(1);
    assert_eq!(rig.host.status(sent), Some(503), "answered at timeout (+ one tick)");
    assert_eq!(rig.host.cancelled, vec![token]);
    assert_eq!(rig.host.count(Stat::StoreError(FailureKind::Timeout)), 2, "both were on the stalled stream");
    assert_eq!(rig.host.count(Stat::UnknownOutcome), 2);
    assert_eq!(rig.host.count(Stat::StreamReset(Reset::Stalled)), 1);
    assert_eq!(rig.host.status(queued_late), Some(503));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn queued_requests_wait_at_most_the_timeout_for_a_stream_that_never_becomes_ready() {
    // AUTH is sent when the stream opens and never answered: nothing else
    // is sent, and the request waits no longer than the timeout.
    let config = rule().failure_mode("deny").valkey(r#""password_env": "PW""#).build_with_env(&[("PW", "pw")]);
    let mut rig = Rig::with_config(config);
    let (id, _) = rig.request("w");
    rig.wake();
    rig.run_for(95);
    assert_eq!(rig.host.status(id), None);
    rig.run_for(5);
    assert_eq!(rig.host.status(id), Some(503));
    assert_eq!(rig.host.count(Stat::UnknownOutcome), 0, "never sent");
    assert_eq!(rig.host.count(Stat::StreamReset(Reset::Stalled)), 1, "the unanswered AUTH stalled the stream");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_busy_store_that_keeps_answering_is_waited_for_then_overload_is_refused_not_admitted() {
    // One decision at a time, answered every 90 ms: the stream stays
    // healthy, the queue drains slower than requests could wait.
    let mut rig = Rig::new(rule().failure_mode("allow").valkey(r#""max_in_flight": 1"#));
    let ids: Vec<u32> = (0..20).map(|i| rig.request(&format!("b{i}")).0).collect();
    rig.wake();
    let token = rig.stream();
    while rig.now - 1_000_000 < MAX_WAIT_MS + 100 {
        rig.tick(90);
        rig.answer(token);
    }
    let decided = ids.iter().filter(|id| rig.host.status(**id) == Some(200)).count();
    let refused = ids.iter().filter(|id| rig.host.reply(**id).is_some_and(|r| r.status == 503)).count();
    assert_eq!((decided, refused), (11, 9), "decided while within max_wait, then refused");
    assert_eq!(rig.host.count(Stat::Overloaded), 9);
    assert_eq!(rig.host.count(Stat::FailureMode { allowed: true }), 0, "never admitted unchecked");
    // The one refused while on the stream still ran: counted as a request
    // that may have been charged.
    assert_eq!((rig.store.executed, rig.host.count(Stat::UnknownOutcome)), (12, 1));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_reply_nothing_was_sent_for_resets_the_stream() {
    let mut rig = Rig::new(rule());
    let (id, _) = rig.request("p");
    rig.wake();
    let token = rig.stream();
    rig.host.take_outbox(token);
    rig.message(token, b"+OK\r\n+OK\r\n");
    assert_eq!(rig.host.count(Stat::StreamReset(Reset::Protocol)), 1);
    assert_eq!(rig.host.cancelled, vec![token]);
    assert_eq!(rig.host.status(id), Some(200), "the first +OK was its (malformed) reply: failure_mode allow");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn auth_goes_first_and_nothing_else_before_it_is_accepted() {
    let config = rule().valkey(r#""password_env": "PW""#).build_with_env(&[("PW", "s3cret")]);
    let mut rig = Rig::with_config(config);
    rig.store.password = Some("s3cret".into());
    let (id, _) = rig.request("a");
    rig.wake();
    let token = rig.stream();
    let sent = rig.host.take_outbox(token);
    assert!(sent.starts_with(b"*2\r\n$4\r\nAUTH\r\n") && !sent.windows(7).any(|w| w == b"EVALSHA"));
    let reply = rig.store.answer(&sent, rig.now);
    rig.message(token, &reply);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(200));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_refused_password_fails_requests_as_auth() {
    let config = rule().failure_mode("deny").valkey(r#""password_env": "PW""#).build_with_env(&[("PW", "wrong")]);
    let mut rig = Rig::with_config(config);
    rig.store.password = Some("s3cret".into());
    let (id, _) = rig.request("a");
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(503));
    assert_eq!(rig.host.count(Stat::StoreError(FailureKind::Auth)), 1);
    assert_eq!(rig.host.count(Stat::StreamReset(Reset::Auth)), 1);
    let (next, _) = rig.request("b");
    assert_eq!(rig.host.status(next), Some(503), "failed fast while the link is down");
    assert_eq!(rig.host.count(Stat::StoreError(FailureKind::Auth)), 2);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_failed_send_puts_the_requests_back_and_never_fails_them_as_run() {
    let mut rig = Rig::new(rule());
    rig.request("warm");
    rig.run_until_quiet();
    rig.host.refuse_send = true;
    let (id, _) = rig.request("r");
    assert_eq!(rig.host.count(Stat::StreamReset(Reset::Closed)), 1);
    rig.host.refuse_send = false;
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(200), "sent on the next stream");
    assert_eq!(rig.host.count(Stat::UnknownOutcome), 0);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn events_of_an_old_stream_are_ignored() {
    let mut rig = Rig::new(rule());
    rig.request("o");
    rig.run_until_quiet();
    let old = rig.stream();
    rig.close(old, 2);
    let (id, _) = rig.request("n");
    rig.wake();
    rig.message(old, b":1\r\n");
    rig.close(old, 2);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(200));
    assert_eq!(rig.host.count(Stat::StreamReset(Reset::Closed)), 1);
}

/// With `max_in_flight: 1`, the first call goes with the library's load
/// ahead of it (it once waited for room that never came, until overload).
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn one_decision_in_flight_still_goes_out_behind_the_librarys_load() {
    let mut rig = Rig::new(rule().valkey(r#""max_in_flight": 1"#));
    rig.store.script_loaded = false;
    let (first, _) = rig.request("a");
    rig.run_until_quiet();
    let (second, _) = rig.request("b");
    rig.run_until_quiet();
    assert_eq!((rig.host.status(first), rig.host.status(second)), (Some(200), Some(200)));
    assert_eq!(rig.host.count(Stat::Overloaded), 0);
}
