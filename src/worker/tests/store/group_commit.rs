//! Group commit on the store stream (`valkey.max_messages_in_flight`):
//! while the window of messages awaiting replies is full, decisions wait in
//! the worker's queue and leave together when a reply frees it; no timer.

use crate::store::FailureKind;
use crate::testing::{plugin, Plugin};
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{Stat, MAX_WAIT_MS};

fn rule() -> Plugin {
    plugin().timeout("100ms").rule("api", Some("x-user-id"), &[(2, "1h")])
}

/// Messages sent on the store stream, and decisions in them.
fn sent(rig: &Rig) -> (u64, u64) {
    (rig.host.count(Stat::StoreMessages), rig.host.count(Stat::StoreRequests))
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn decisions_that_arrive_while_a_message_is_out_leave_together_on_its_reply() {
    let mut rig = Rig::new(rule());
    let (first, _) = rig.request("u0");
    rig.wake();
    let token = rig.stream();
    assert_eq!(sent(&rig), (1, 1), "nothing in flight: the first decision leaves at once");
    let waiting: Vec<u32> = (1..=5).map(|i| rig.request(&format!("u{i}")).0).collect();
    assert_eq!(sent(&rig), (1, 1), "the window (1 message) is full: the others wait");
    assert!(waiting.iter().all(|id| rig.host.status(*id).is_none()));
    rig.answer(token);
    assert_eq!(rig.host.status(first), Some(200));
    assert_eq!(sent(&rig), (2, 6), "the reply freed the window: the five left in one message");
    rig.answer(token);
    assert!(waiting.iter().all(|id| rig.host.status(*id) == Some(200)));
    assert_eq!(sent(&rig), (2, 6));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_wider_window_lets_that_many_messages_out_before_decisions_wait() {
    let mut rig = Rig::new(rule().valkey(r#""max_messages_in_flight": 2"#));
    rig.request("u0");
    rig.wake();
    let token = rig.stream();
    rig.request("u1");
    assert_eq!(sent(&rig), (2, 2), "two messages may await replies");
    let late: Vec<u32> = (2..6).map(|i| rig.request(&format!("u{i}")).0).collect();
    assert_eq!(sent(&rig), (2, 2));
    // One reply frees one place: the four waiting leave in one message.
    let bytes = rig.host.take_outbox(token);
    let reply = rig.store.answer(&bytes, rig.now);
    rig.message(token, &reply);
    assert_eq!(sent(&rig), (3, 6));
    rig.answer(token);
    assert!(late.iter().all(|id| rig.host.status(*id) == Some(200)));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_message_split_across_replies_holds_its_place_until_its_last_reply() {
    let mut rig = Rig::new(rule());
    let ids: Vec<u32> = (0..3).map(|i| rig.request(&format!("u{i}")).0).collect();
    rig.wake();
    let token = rig.stream();
    assert_eq!(sent(&rig), (1, 3));
    let (waiting, _) = rig.request("w");
    let bytes = rig.host.take_outbox(token);
    let reply = rig.store.answer(&bytes, rig.now);
    let (head, tail) = reply.split_at(reply.len() - 3);
    rig.message(token, head);
    assert_eq!(sent(&rig), (1, 3), "two of three replies: the message still holds the window");
    assert_eq!(ids.iter().filter(|id| rig.host.status(**id) == Some(200)).count(), 2);
    rig.message(token, tail);
    assert_eq!(sent(&rig), (2, 4));
    rig.answer(token);
    assert_eq!(rig.host.status(waiting), Some(200));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_decision_waiting_for_the_window_of_a_stalled_stream_never_ran() {
    let mut rig = Rig::new(rule().failure_mode("deny"));
    let (sent_id, _) = rig.request("s");
    rig.wake();
    rig.stream();
    rig.run_for(50);
    let (waiting, _) = rig.request("w");
    rig.run_for(50);
    assert_eq!(rig.host.status(sent_id), Some(503), "answered at timeout (+ one tick)");
    assert_eq!(rig.host.status(waiting), Some(503), "failed with the stalled stream it waited for");
    assert_eq!(rig.host.count(Stat::StoreError(FailureKind::Timeout)), 1, "only the sent one was on the stream");
    assert_eq!(rig.host.count(Stat::StoreError(FailureKind::Unavailable)), 1, "the waiting one: never sent");
    assert_eq!(rig.host.count(Stat::UnknownOutcome), 1, "the waiting one never ran");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn waiting_for_the_window_counts_against_max_wait() {
    // One message of one decision at a time (the window), answered every
    // 90 ms: the stream stays healthy, decisions wait for the window longer
    // than they may, and are then refused as overload, never admitted.
    let mut rig = Rig::new(rule().failure_mode("allow").valkey(r#""max_batch": 1"#));
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
}
