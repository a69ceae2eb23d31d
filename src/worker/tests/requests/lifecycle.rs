//! Requests from arrival to answer: decisions, the denial cache, shadow mode,
//! coalescing, the bounds, `NOSCRIPT`, `failure_mode` per failure kind.

use crate::answer::response::SHADOW_HEADER;
use crate::store::FailureKind;
use crate::testing::{plugin, Plugin};
use crate::worker::decision::ruling::RuleOutcome;
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{Flow, Stat, DEFERRED_TICK, TICK};
use std::time::Duration;

/// The seed's rule: 20 per 60 s and 5 per 3 s per `x-user-id`.
fn seed() -> Plugin {
    plugin().rule("auth.createToken", Some("x-user-id"), &[(20, "60s"), (5, "3s")])
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn the_seed_scenario_with_cache_denials_after_the_first() {
    let mut rig = Rig::new(seed());
    let mut statuses = Vec::new();
    for _ in 0..8 {
        let (id, flow) = rig.request("alice");
        if flow == Flow::Pause {
            rig.run_until_quiet();
        }
        statuses.push(rig.host.status(id));
        rig.now += 10;
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429].map(Some));
    assert_eq!(rig.store.executed, 6, "calls 7 and 8 are denied from the cache");
    assert_eq!(rig.host.count(Stat::CacheHit), 2);
    assert_eq!(rig.host.count(Stat::Rule(0, RuleOutcome::Allowed)), 5);
    assert_eq!(rig.host.count(Stat::Rule(0, RuleOutcome::Denied)), 3);
    let headers = rig.response_headers(101 + 4);
    let ratelimit = headers.iter().find(|(k, _)| k == "ratelimit").map(|(_, v)| v.as_str());
    assert_eq!(ratelimit, Some(r#""auth.createToken/60s";r=15;t=60, "auth.createToken/3s";r=0;t=3"#));
    let denial = rig.host.reply(101 + 7).unwrap();
    assert!(String::from_utf8_lossy(&denial.body).contains("auth.createToken/3s"));
    assert_eq!(rig.host.tick, Duration::from_millis(5), "the tick stays on until its own callback");
    rig.tick(5);
    assert_eq!(rig.host.tick, Duration::ZERO, "nothing held: no tick after the next one");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn requests_that_match_nothing_or_miss_their_key_pass_untouched() {
    let mut rig = Rig::new(seed());
    let (_, flow) = rig.request_with(&[]);
    assert_eq!(flow, Flow::Continue);
    assert_eq!(rig.host.count(Stat::RuleSkipped(0)), 1);
    assert!(rig.host.opened.is_empty() && rig.host.wakes == 0);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn requests_arriving_together_share_one_message_each_with_its_own_call() {
    let mut rig = Rig::new(seed());
    let ids: Vec<u32> = (0..10).map(|i| rig.request(&format!("u{i}")).0).collect();
    assert_eq!(rig.host.wakes, 1, "one wake-up opens the stream, however many requests wait");
    rig.wake();
    assert_eq!(rig.host.messages, 1, "all ten in one message");
    assert_eq!(rig.host.count(Stat::StoreRequests), 10);
    assert_eq!(rig.gauges().0, 10);
    assert_eq!(rig.host.tick, TICK, "held requests: the deadline tick runs");
    rig.run_until_quiet();
    assert!(ids.iter().all(|id| rig.host.status(*id) == Some(200)));
    assert_eq!(rig.store.executed, 10);
    assert_eq!(rig.gauges().0, 0);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_full_queue_refuses_explicitly_and_never_admits_unchecked() {
    let mut rig = Rig::new(seed().valkey(r#""max_queue": 1"#).valkey(r#""max_in_flight": 2"#).failure_mode("allow"));
    // Two fit the stream once it opens, one more may wait for room.
    for i in 0..3 {
        assert_eq!(rig.request(&format!("u{i}")).1, Flow::Pause);
    }
    let (id, flow) = rig.request("u3");
    assert_eq!(flow, Flow::Pause);
    let reply = rig.host.reply(id).expect("refused at once");
    assert_eq!((reply.status, &reply.body), (503, &crate::answer::response::overloaded().body));
    assert_eq!(rig.host.count(Stat::Overloaded), 1);
    assert_eq!(rig.host.count(Stat::FailureMode { allowed: true }), 0);
    rig.run_until_quiet();
    assert_eq!(rig.store.executed, 3);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn the_stream_holds_at_most_max_in_flight_decisions() {
    let mut rig = Rig::new(seed().valkey(r#""max_in_flight": 2"#));
    let ids: Vec<u32> = (0..5).map(|i| rig.request(&format!("u{i}")).0).collect();
    rig.wake();
    assert_eq!((rig.host.messages, rig.gauges().0), (1, 2));
    let token = rig.stream();
    rig.answer(token);
    assert_eq!((rig.host.messages, rig.gauges().0), (2, 2), "the replies made room for two more");
    rig.run_until_quiet();
    assert!(ids.iter().all(|id| rig.host.status(*id) == Some(200)));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_missing_library_is_loaded_once_and_each_request_runs_once() {
    let mut rig = Rig::new(seed());
    rig.store.script_loaded = false;
    let ids: Vec<u32> = (0..30).map(|i| rig.request(&format!("u{i}")).0).collect();
    rig.run_until_quiet();
    assert!(ids.iter().all(|id| rig.host.status(*id) == Some(200)));
    assert_eq!(rig.store.executed, 30, "a missing function ran nothing; each request ran once");
    assert_eq!((rig.store.loads, rig.store.evals), (1, 0), "one FUNCTION LOAD, ahead of the calls sent again");
    assert_eq!(rig.host.count(Stat::StoreMessages), 2);
    assert_eq!(rig.host.count(Stat::StoreError(FailureKind::NoScript)), 0);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_refused_function_load_moves_the_worker_to_the_script() {
    let mut rig = Rig::new(seed());
    rig.store.script_loaded = false;
    rig.store.refuse_load = Some("NOPERM this user has no permissions to run the 'function|load' command".into());
    let ids: Vec<u32> = (0..30).map(|i| rig.request(&format!("u{i}")).0).collect();
    rig.run_until_quiet();
    assert!(ids.iter().all(|id| rig.host.status(*id) == Some(200)));
    assert_eq!(rig.store.executed, 30);
    assert_eq!((rig.store.loads, rig.store.evals), (1, 1), "one refused load, then one EVAL");
    assert_eq!(rig.host.logs.iter().filter(|(_, l)| l.contains("function library cannot be used (NOPERM")).count(), 1);
    assert_eq!(rig.host.count(Stat::StoreError(FailureKind::NoScript)), 0);
    // From then on, the script by its SHA.
    let (late, _) = rig.request("late");
    rig.run_until_quiet();
    assert_eq!((rig.host.status(late), rig.store.loads, rig.store.evals), (Some(200), 1, 1));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_load_refused_for_now_fails_the_calls_behind_it_and_is_tried_again() {
    let mut rig = Rig::new(seed().failure_mode("deny"));
    rig.store.script_loaded = false;
    rig.store.refuse_load = Some("OOM command not allowed when used memory > 'maxmemory'.".into());
    let ids: Vec<u32> = (0..3).map(|i| rig.request(&format!("u{i}")).0).collect();
    rig.run_until_quiet();
    assert!(ids.iter().all(|id| rig.host.status(*id) == Some(503)), "failure_mode, as an oom");
    assert_eq!(rig.host.count(Stat::StoreError(FailureKind::Oom)), 3);
    assert_eq!((rig.store.executed, rig.store.evals), (0, 0), "still the function: nothing ran");
    // Memory freed: the next request loads the library again and is decided.
    rig.store.refuse_load = None;
    let (late, _) = rig.request("late");
    rig.run_until_quiet();
    assert_eq!((rig.host.status(late), rig.store.executed), (Some(200), 1));
    assert_eq!(rig.host.count(Stat::StoreError(FailureKind::Oom)), 3);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn noscript_sends_the_script_once_and_runs_each_request_once() {
    let mut rig = Rig::new(seed().valkey(r#""invoke": "evalsha""#));
    rig.store.script_loaded = false;
    let ids: Vec<u32> = (0..30).map(|i| rig.request(&format!("u{i}")).0).collect();
    rig.run_until_quiet();
    assert!(ids.iter().all(|id| rig.host.status(*id) == Some(200)));
    assert_eq!(rig.store.executed, 30, "NOSCRIPT ran nothing; each request ran once");
    assert_eq!(rig.store.evals, 1, "one call carried the script; the others found it by its SHA");
    assert_eq!(rig.host.count(Stat::StoreMessages), 2);
    assert_eq!(rig.host.count(Stat::StoreError(FailureKind::NoScript)), 0);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn shadow_rules_admit_report_and_strip_forged_reports() {
    let mut rig = Rig::new(
        plugin().rule_json(r#"{ "name": "trial", "shadow": true, "key": [ { "header": "x-user-id" } ], "limits": [ { "limit": 1, "period": "1h" } ] }"#),
    );
    let (first, _) = rig.request("bob");
    rig.run_until_quiet();
    let (second, _) = rig.request("bob");
    rig.run_until_quiet();
    assert_eq!((rig.host.status(first), rig.host.status(second)), (Some(200), Some(200)));
    assert_eq!(rig.host.admitted[1].1.as_deref(), Some("trial/1h"));
    assert_eq!(rig.host.count(Stat::Rule(0, RuleOutcome::ShadowDenied)), 1);
    assert_eq!(rig.host.count(Stat::CacheHit), 0, "shadow denials are not cached");
    assert!(rig.host.removed_headers.iter().any(|h| h == SHADOW_HEADER));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn the_test_clock_header_is_read_and_never_forwarded() {
    let mut rig = Rig::new(seed().now_header("x-now"));
    for i in 0..6u64 {
        rig.request_with(&[("x-user-id", "carol"), ("x-now", &(5_000 + i).to_string())]);
        rig.run_until_quiet();
    }
    let (id, _) = rig.request_with(&[("x-user-id", "carol"), ("x-now", "8001")]);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(200), "3 s later on the injected clock the burst window has room");
    assert!(rig.host.removed_headers.iter().filter(|h| *h == "x-now").count() >= 7);
}

/// `failure_mode` for each kind of error reply, under `allow` and `deny`.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn error_replies_follow_failure_mode_and_are_counted_by_kind() {
    for (reply, kind) in [
        (&b"-READONLY You can't write against a read only replica.\r\n"[..], FailureKind::ReadOnly),
        (b"-OOM command not allowed\r\n", FailureKind::Oom),
        (b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n", FailureKind::WrongType),
        (b"-BUSY Redis is busy running a script.\r\n", FailureKind::Busy),
        (b"-ERR tollgate: bad now\r\n", FailureKind::Script),
        (b":1\r\n", FailureKind::BadReply),
    ] {
        for mode in ["allow", "deny"] {
            let mut rig = Rig::new(seed().failure_mode(mode));
            let (id, _) = rig.request("dave");
            rig.wake();
            let token = rig.stream();
            rig.host.take_outbox(token);
            rig.message(token, reply);
            let expected = if mode == "allow" { 200 } else { 503 };
            assert_eq!(rig.host.status(id), Some(expected), "{kind:?} under {mode}");
            assert_eq!(rig.host.count(Stat::StoreError(kind)), 1, "{kind:?}");
            assert_eq!(rig.host.count(Stat::FailureMode { allowed: mode == "allow" }), 1);
            assert_eq!(rig.host.count(Stat::UnknownOutcome), 0, "the store answered: nothing may have run");
            assert!(rig.response_headers(id).is_empty(), "no rate-limit headers without a decision");
        }
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn failures_are_logged_once_per_interval() {
    let mut rig = Rig::new(seed());
    for i in 0..20 {
        let (_, _) = rig.request(&format!("e{i}"));
        rig.wake();
        let token = rig.stream();
        rig.host.take_outbox(token);
        rig.message(token, b"-WRONGTYPE wrong kind of value\r\n");
    }
    let warnings = rig.host.logs.iter().filter(|(_, l)| l.contains("WRONGTYPE")).count();
    assert_eq!(warnings, 1);
    rig.now += 10_000;
    rig.request("late");
    let token = rig.stream();
    rig.host.take_outbox(token);
    rig.message(token, b"-WRONGTYPE wrong kind of value\r\n");
    assert_eq!(rig.host.logs.iter().filter(|(_, l)| l.contains("WRONGTYPE")).count(), 2);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_request_that_leaves_while_in_flight_has_its_reply_dropped() {
    let mut rig = Rig::new(seed());
    let (gone, _) = rig.request("gone");
    let (kept, _) = rig.request("kept");
    rig.wake();
    rig.gone(gone);
    rig.run_until_quiet();
    assert_eq!((rig.host.status(gone), rig.host.status(kept)), (None, Some(200)));
    assert_eq!(rig.store.executed, 2, "its call still ran (and its reply was read)");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn at_most_128_requests_are_settled_per_vm_entry() {
    let mut rig = Rig::new(seed().valkey(r#""max_batch": 1024"#).valkey(r#""max_in_flight": 1024"#));
    let ids: Vec<u32> = (0..300).map(|i| rig.request(&format!("v{i}")).0).collect();
    rig.wake();
    let token = rig.stream();
    rig.answer(token);
    assert_eq!(rig.host.settled_this_entry, 128);
    assert_eq!(rig.host.tick, DEFERRED_TICK);
    rig.tick(1);
    assert_eq!(rig.host.settled_this_entry, 128);
    rig.tick(1);
    assert_eq!(rig.host.settled_this_entry, 44);
    assert!(ids.iter().all(|id| rig.host.status(*id) == Some(200)));
    assert_eq!(rig.host.tick, Duration::ZERO);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_request_callback_sends_no_reply_for_another_request() {
    // Envoy pauses the current request for good if a local reply for any
    // request is sent in its callback: deferred denials wait for the tick.
    let mut rig = Rig::new(seed().valkey(r#""max_batch": 1024"#).valkey(r#""max_in_flight": 1024"#));
    let ids: Vec<u32> = (0..300).map(|i| rig.request(&format!("u{}", i % 2)).0).collect();
    rig.wake();
    let token = rig.stream();
    rig.answer(token);
    let deferred = ids.iter().filter(|id| rig.host.status(**id).is_none()).count();
    assert!(deferred > 0, "some settlements were deferred");
    let (late, flow) = rig.request("late");
    assert_eq!(rig.host.foreign_replies, vec![], "deferred denials are not sent in a request's callback");
    assert_eq!(flow, Flow::Pause);
    rig.tick(1);
    rig.tick(1);
    rig.run_until_quiet();
    assert!(ids.iter().all(|id| matches!(rig.host.status(*id), Some(200 | 429))));
    assert_eq!(ids.iter().filter(|id| rig.host.status(**id) == Some(429)).count(), 300 - 10);
    assert_eq!(rig.host.status(late), Some(200));
}
