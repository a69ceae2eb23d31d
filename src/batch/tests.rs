use super::*;
use crate::limiter::script::limiter;
use crate::limiter::Window;
use crate::resp::{decode_all, Value};
use std::num::NonZeroU64;

fn check(key: &str) -> Vec<Check> {
    let nz = |n| NonZeroU64::new(n).unwrap();
    vec![Check {
        rule: 0,
        key: key.into(),
        windows: vec![Window { limit: nz(5), period_ms: nz(1_000) }],
        cost: nz(1),
        algorithm: crate::limiter::Algorithm::SlidingLog,
    }]
}

fn limits() -> Limits {
    Limits { max_in_flight: 2, max_batch: 3, max_queue: 5 }
}

/// A script reply admitting the request with `remaining` left.
fn ok(remaining: i64) -> String {
    format!("*5\r\n:1\r\n:1000\r\n:{remaining}\r\n:1000\r\n:0\r\n")
}

fn commands(body: &[u8]) -> Vec<Vec<Vec<u8>>> {
    decode_all(body, &RespLimits::default())
        .unwrap()
        .into_iter()
        .map(|v| match v {
            Value::Array(items) => items.into_iter().map(|i| i.as_bytes().unwrap().to_vec()).collect(),
            other => panic!("{other:?}"),
        })
        .collect()
}

fn queue(b: &mut Batcher, id: u32, now: u64) {
    assert_eq!(b.submit(id, check(&format!("k{id}")), None, now, 100), Submit::Queued);
}

/// Fills both slots with calls 10 and 11 (requests 1 and 2).
fn busy() -> Batcher {
    let mut b = Batcher::new(limits());
    for (id, token) in [(1, 10), (2, 11)] {
        queue(&mut b, id, 0);
        let call = b.next_call(limiter(), 0).unwrap();
        assert_eq!(call.requests, vec![id]);
        b.dispatched(token, call, 0);
    }
    assert!(!b.ready());
    b
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_lone_request_goes_out_at_once() {
    let mut b = Batcher::new(limits());
    queue(&mut b, 7, 1_000);
    assert!(b.ready());
    let call = b.next_call(limiter(), 1_000).unwrap();
    assert_eq!(call.requests, vec![7]);
    assert_eq!(call.timeout_ms, 100);
    assert_eq!(commands(&call.body).len(), 1);
    b.dispatched(1, call, 1_000);
    assert_eq!(b.sent_at(1), Some(1_000));
    let out = b.on_reply(1, Some("200"), ok(4).as_bytes());
    assert_eq!(out.len(), 1);
    assert!(matches!(&out[0], Answer { request: 7, outcome: Ok(Outcome::Decided(d)), .. } if d.allowed));
    assert_eq!((b.pending(), b.in_flight()), (0, 0));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn requests_wait_only_while_every_slot_is_busy_and_leave_together() {
    let mut b = busy();
    for id in 3..=7 {
        queue(&mut b, id, 5);
    }
    assert_eq!(b.submit(99, check("x"), None, 5, 100), Submit::Overflow, "queue bound");
    assert!(b.next_call(limiter(), 20).is_none(), "both slots busy");
    // Call 11 answers; the queue leaves in batches of max_batch (3).
    let out = b.on_reply(11, Some("200"), ok(3).as_bytes());
    assert_eq!(out.len(), 1);
    assert!(b.ready());
    let call = b.next_call(limiter(), 20).unwrap();
    assert_eq!(call.requests, vec![3, 4, 5]);
    assert_eq!(call.timeout_ms, 85, "the earliest deadline among its requests");
    let keys: Vec<Vec<u8>> = commands(&call.body).into_iter().map(|c| c[3].clone()).collect();
    assert_eq!(keys, vec![b"k3".to_vec(), b"k4".to_vec(), b"k5".to_vec()]);
    b.dispatched(12, call, 20);
    // Each request gets its own reply, in pipeline order.
    let body = format!("{}{}{}", ok(3), ok(2), ok(1));
    let out = b.on_reply(12, Some("200"), body.as_bytes());
    let remaining: Vec<(u32, u64)> = out
        .iter()
        .map(|a| match &a.outcome {
            Ok(Outcome::Decided(d)) => (a.request, d.windows[0].remaining),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(remaining, vec![(3, 3), (4, 2), (5, 1)]);
    assert_eq!(b.next_call(limiter(), 30).unwrap().requests, vec![6, 7]);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn noscript_requeues_first_with_eval() {
    let mut b = busy();
    queue(&mut b, 3, 1);
    let out = b.on_reply(10, Some("200"), b"-NOSCRIPT No matching script.\r\n");
    assert!(out.is_empty(), "not answered yet");
    let call = b.next_call(limiter(), 2).unwrap();
    assert_eq!(call.requests, vec![1, 3]);
    let cmds = commands(&call.body);
    assert_eq!(cmds[0][0], b"EVAL", "the NOSCRIPT request is retried with the body");
    assert_eq!(cmds[1][0], b"EVALSHA");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn failures_reach_every_request_of_the_call() {
    let mut b = busy();
    queue(&mut b, 3, 1);
    queue(&mut b, 4, 1);
    b.on_reply(10, Some("200"), ok(4).as_bytes());
    let call = b.next_call(limiter(), 2).unwrap();
    b.dispatched(12, call, 2);
    let out = b.on_reply(12, None, b"");
    assert_eq!(out.iter().map(|a| (a.request, a.outcome.is_err())).collect::<Vec<_>>(), vec![(3, true), (4, true)]);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_reply_with_too_few_results_fails_the_whole_call() {
    let mut b = busy();
    queue(&mut b, 3, 1);
    queue(&mut b, 4, 1);
    b.on_reply(10, Some("200"), ok(4).as_bytes());
    let call = b.next_call(limiter(), 2).unwrap();
    b.dispatched(12, call, 2);
    let out = b.on_reply(12, Some("200"), ok(1).as_bytes());
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|a| a.outcome.is_err()));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn queued_requests_expire_at_their_deadline_and_cancelled_ones_are_forgotten() {
    let mut b = busy();
    queue(&mut b, 3, 10);
    queue(&mut b, 4, 50);
    queue(&mut b, 5, 50);
    b.cancel(5);
    assert_eq!(b.expire(109), Vec::<u32>::new());
    assert_eq!(b.expire(110), vec![3]);
    assert_eq!(b.queued(), 1);
    // A request cancelled while in a call: its reply is ignored.
    b.cancel(1);
    assert_eq!(b.on_reply(10, Some("200"), ok(1).as_bytes()), vec![]);
}

fn auth_batcher() -> Batcher {
    let auth =
        crate::config::Auth { username: Some("lim".into()), password: crate::config::Secret::new(b"pw".to_vec()) };
    Batcher::with_preamble(limits(), Preamble::auth(Some(&auth)))
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn the_preamble_leads_every_call_and_its_reply_is_skipped() {
    let mut b = auth_batcher();
    queue(&mut b, 1, 0);
    queue(&mut b, 2, 0);
    let call = b.next_call(limiter(), 0).unwrap();
    let cmds = commands(&call.body);
    assert_eq!(cmds.len(), 3);
    assert_eq!(cmds[0], [&b"AUTH"[..], b"lim", b"pw"]);
    assert!(cmds[1..].iter().all(|c| c[0] == b"EVALSHA"));
    b.dispatched(10, call, 0);
    let reply = format!("+OK\r\n{}{}", ok(4), ok(3));
    let answers = b.on_reply(10, Some("200"), reply.as_bytes());
    assert_eq!(answers.len(), 2);
    assert!(answers.iter().all(|a| matches!(a.outcome, Ok(Outcome::Decided(_)))), "{answers:?}");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_failed_auth_fails_the_whole_call_as_auth() {
    for auth_reply in
        ["-WRONGPASS invalid username-password pair or user is disabled.\r\n", "-NOAUTH Authentication required.\r\n"]
    {
        let mut b = auth_batcher();
        queue(&mut b, 1, 0);
        queue(&mut b, 2, 0);
        let call = b.next_call(limiter(), 0).unwrap();
        b.dispatched(10, call, 0);
        // The scripts still ran (as the default user) and answered: ignored.
        let reply = format!("{auth_reply}{}{}", ok(4), ok(3));
        let answers = b.on_reply(10, Some("200"), reply.as_bytes());
        assert_eq!(answers.len(), 2);
        for a in answers {
            let Err(failure) = &a.outcome else { panic!("{a:?}") };
            assert_eq!(failure.kind(), crate::store::FailureKind::Auth, "{failure}");
        }
        assert_eq!(b.pending(), 0);
    }
    // Valkey closes an unauthenticated connection on a long command: the
    // replies fall short, and the failed AUTH is still what is reported.
    let mut b = auth_batcher();
    queue(&mut b, 1, 0);
    let call = b.next_call(limiter(), 0).unwrap();
    b.dispatched(10, call, 0);
    let reply =
        "-WRONGPASS invalid username-password pair\r\n-ERR Protocol error: unauthenticated multibulk length\r\n";
    let answers = b.on_reply(10, Some("200"), reply.as_bytes());
    assert!(matches!(&answers[0].outcome, Err(f) if f.kind() == crate::store::FailureKind::Auth), "{answers:?}");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_reply_missing_the_preamble_is_a_count_mismatch() {
    let mut b = auth_batcher();
    queue(&mut b, 1, 0);
    let call = b.next_call(limiter(), 0).unwrap();
    b.dispatched(10, call, 0);
    let answers = b.on_reply(10, Some("200"), ok(4).as_bytes());
    let Err(Failure::Lost(why)) = &answers[0].outcome else { panic!("{answers:?}") };
    assert_eq!(why, "expected 2 replies, got 1");
    assert!(answers[0].outcome.as_ref().is_err_and(Failure::may_have_run), "sent, no whole reply: may have run");
}
