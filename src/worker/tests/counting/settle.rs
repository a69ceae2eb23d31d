//! Counting on the response, from request to settlement: failed logins
//! charged on their 401s, reservations (fixed, from a header, from the JSON
//! body) settled with the cost a header, a JSON body or an event stream
//! says; held responses and their bound; a store that fails at response
//! time; a response that never comes; the denial cache after a refund;
//! `failure_mode: local`; shadow denials.

use crate::testing::{plugin, rule, Plugin};
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{CountStat, Flow, ResponseFlow, Stat};

const ALICE: &str = "tollgate:{auth.failedLogins:alice}:log";

/// 20 per 60 s and 5 per 3 s per user, counting only 401s.
fn logins() -> Plugin {
    plugin().with(
        rule("auth.failedLogins")
            .header("x-user-id")
            .limit(20, "60s")
            .limit(5, "3s")
            .field(r#""count": { "status": [401] }"#),
    )
}

/// 1000 per minute and 100 per 3 s per tenant, reserving and settling
/// tokens as `count` says.
fn tokens(algorithm: &str, count: &str) -> Plugin {
    plugin().with(
        rule("llm.tokens")
            .header("x-tenant")
            .limit(1000, "1m")
            .limit(100, "3s")
            .algorithm(algorithm)
            .field(&format!(r#""count": {count}"#)),
    )
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// A request admitted by the store.
fn admitted(rig: &mut Rig, headers: &[(&str, &str)]) -> u32 {
    let (id, flow) = rig.request_with(headers);
    assert_eq!(flow, Flow::Pause);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(200), "{headers:?}");
    id
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn failed_logins_are_charged_and_the_sixth_is_denied_on_the_request() {
    let mut rig = Rig::new(logins());
    let alice = [("x-user-id", "alice")];
    for _ in 0..3 {
        let id = admitted(&mut rig, &alice);
        assert_eq!(rig.response(id, 200, &[]), ResponseFlow::Continue, "a success costs nothing: not held");
        rig.now += 10;
    }
    for failure in 1..=5u64 {
        let id = admitted(&mut rig, &alice);
        assert_eq!(rig.response(id, 401, &[]), ResponseFlow::Pause);
        rig.run_until_quiet();
        let resumed = rig.resumed(id).expect("resumed after the settlement").to_vec();
        let expected =
            format!(r#""auth.failedLogins/60s";r={};t=60, "auth.failedLogins/3s";r={};t=3"#, 20 - failure, 5 - failure);
        assert_eq!(header(&resumed, "ratelimit"), Some(expected.as_str()), "the settled state");
        rig.now += 10;
    }
    assert_eq!(rig.store.model.entries(ALICE), 5, "only the failures are recorded");
    let executed = rig.store.executed;
    let (sixth, _) = rig.request_with(&alice);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(sixth), Some(429), "denied before reaching the upstream");
    assert_eq!(rig.response(sixth, 429, &[]), ResponseFlow::Continue, "its own 429 settles nothing");
    assert_eq!(rig.store.executed, executed + 1, "one decision, no settlement");
    // Successful logins are never limited.
    for _ in 0..30 {
        let id = admitted(&mut rig, &[("x-user-id", "bob")]);
        assert_eq!(rig.response(id, 200, &[]), ResponseFlow::Continue);
        rig.now += 1;
    }
    let count = |s| rig.host.count(Stat::Count(0, s));
    assert_eq!((count(CountStat::Reserved), count(CountStat::Settled), count(CountStat::Refunded)), (0, 5, 0));
    assert_eq!(count(CountStat::Failed), 0);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn reservations_from_a_header_settle_with_the_cost_a_header_says() {
    let mut rig = Rig::new(tokens(
        "sliding_log",
        r#"{ "reserve": { "header": "x-max-tokens", "default": 50 }, "cost": { "header": "x-tokens-used" } }"#,
    ));
    let key = "tollgate:{llm.tokens:acme}:log";
    let first = admitted(&mut rig, &[("x-tenant", "acme"), ("x-max-tokens", "30")]);
    assert_eq!(rig.store.model.entries(key), 30, "the reservation is recorded on admission");
    assert_eq!(rig.response(first, 200, &[("x-tokens-used", "12")]), ResponseFlow::Pause);
    rig.run_until_quiet();
    let resumed = rig.resumed(first).unwrap().to_vec();
    assert_eq!(header(&resumed, "ratelimit"), Some(r#""llm.tokens/1m";r=988;t=60, "llm.tokens/3s";r=88;t=3"#));
    assert_eq!(rig.store.model.entries(key), 12, "settled at the actual cost");
    // A reservation above the smallest limit is that limit: 12 + 100 > 100.
    let (big, _) = rig.request_with(&[("x-tenant", "acme"), ("x-max-tokens", "5000")]);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(big), Some(429));
    // No header: the default; no cost in the response: the reservation
    // stands. (The denial of a larger reservation was not remembered.)
    let third = admitted(&mut rig, &[("x-tenant", "acme")]);
    assert_eq!(rig.host.count(Stat::CacheHit), 0);
    assert_eq!(rig.response(third, 200, &[("x-tokens-used", "lots")]), ResponseFlow::Continue);
    assert_eq!(rig.store.model.entries(key), 62);
    let count = |s| rig.host.count(Stat::Count(0, s));
    assert_eq!((count(CountStat::Reserved), count(CountStat::Settled), count(CountStat::Refunded)), (80, 62, 18));
    assert_eq!(count(CountStat::CostFallback), 1);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn body_reservations_settle_with_the_json_body_or_the_last_event() {
    let mut rig = Rig::new(
        tokens("fixed_window", r#"{ "reserve": { "body": "max_tokens" }, "cost": { "body": "usage.total_tokens" } }"#)
            .top(r#""max_body_bytes": 1024"#),
    );
    let tenant = [("x-tenant", "acme")];
    let remaining_3s = |rig: &Rig, id| {
        let headers = rig.response_headers(id);
        let value = header(&headers, "ratelimit").unwrap().to_string();
        value.rsplit("r=").next().unwrap().split(';').next().unwrap().parse::<u64>().unwrap()
    };
    let (first, flow) = rig.request_with(&tenant);
    assert_eq!(flow, Flow::ReadBody);
    assert!(rig.host.outbox.is_empty() && rig.host.wakes == 0, "nothing is decided before the body");
    assert_eq!(rig.request_body(first, br#"{"model":"m","max_tokens":40}"#, true), Flow::Pause);
    rig.run_until_quiet();
    assert_eq!((rig.host.status(first), remaining_3s(&rig, first)), (Some(200), 60));
    let json = [("content-type", "application/json")];
    assert_eq!(rig.response(first, 200, &json), ResponseFlow::ReadBody);
    rig.response_body(first, br#"{"id":"x","usage":{"prompt_tokens":5,"#, false);
    assert!(rig.host.outbox.is_empty(), "settled when the body ends");
    rig.response_body(first, br#""total_tokens":25}}"#, true);
    rig.run_until_quiet();
    // The settled state shows on the next response: 100 - 25 - 30.
    let (second, _) = rig.request_with(&tenant);
    rig.request_body(second, br#"{"max_tokens":30}"#, true);
    rig.run_until_quiet();
    assert_eq!(remaining_3s(&rig, second), 45);
    let sse = [("content-type", "text/event-stream; charset=utf-8")];
    assert_eq!(rig.response(second, 200, &sse), ResponseFlow::ReadBody);
    rig.response_body(second, b"data: {\"delta\":\"a\"}\n\ndata: {\"usage\":{\"total_tok", false);
    rig.response_body(second, b"ens\":7}}\n\ndata: [DONE]\n\n", false);
    rig.response_body(second, b"", true);
    rig.run_until_quiet();
    // A body past max_body_bytes reserves the default (the smallest limit).
    let (third, _) = rig.request_with(&tenant);
    assert!(rig.worker.waiting(third), "waiting for its body");
    rig.request_body(third, &[b' '; 1024], false);
    assert!(rig.worker.waiting(third), "decided on its first bytes: the rest waits with it");
    rig.run_until_quiet();
    assert!(!rig.worker.waiting(third));
    assert_eq!(rig.host.status(third), Some(429), "25 + 7 + 100 > 100");
    assert_eq!(rig.host.count(Stat::BodyTooLarge), 1);
    let count = |s| rig.host.count(Stat::Count(0, s));
    assert_eq!((count(CountStat::Reserved), count(CountStat::Settled), count(CountStat::Refunded)), (70, 32, 38));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_held_response_goes_on_after_the_timeout_with_its_own_change() {
    let mut rig = Rig::new(logins().timeout("100ms"));
    let id = admitted(&mut rig, &[("x-user-id", "alice")]);
    assert_eq!(rig.response(id, 401, &[]), ResponseFlow::Pause);
    let token = rig.stream();
    assert!(!rig.host.outbox.get(&token).is_none_or(Vec::is_empty), "the settlement is on the stream");
    rig.run_for(95);
    assert!(rig.resumed(id).is_none(), "held within the timeout");
    rig.run_for(10);
    let resumed = rig.resumed(id).expect("resumed at the timeout").to_vec();
    assert_eq!(
        header(&resumed, "ratelimit"),
        Some(r#""auth.failedLogins/60s";r=19;t=60, "auth.failedLogins/3s";r=4;t=3"#),
        "the admission's state minus its own charge"
    );
    assert_eq!(rig.host.count(Stat::PauseExpired), 1);
    // The silent stream is stalled as for any call: the settlement may
    // have run, and counts as failed.
    rig.run_for(60);
    assert_eq!(rig.host.cancelled, [token]);
    assert_eq!(rig.host.count(Stat::Count(0, CountStat::Failed)), 1);
    assert_eq!(rig.host.resumed.len(), 1, "resumed once");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_settlement_answered_within_the_hold_is_the_response_headers() {
    let mut rig = Rig::new(logins().timeout("100ms"));
    let id = admitted(&mut rig, &[("x-user-id", "alice")]);
    // Another user's request fills the window meanwhile.
    let other = admitted(&mut rig, &[("x-user-id", "bob")]);
    assert_eq!(rig.response(id, 401, &[]), ResponseFlow::Pause);
    rig.run_for(90);
    rig.run_until_quiet();
    assert!(rig.resumed(id).is_some() && rig.host.count(Stat::PauseExpired) == 0);
    assert_eq!(rig.response(other, 401, &[]), ResponseFlow::Pause);
    rig.run_until_quiet();
    assert_eq!(rig.host.count(Stat::Count(0, CountStat::Settled)), 2);
    assert_eq!(rig.store.model.entries(ALICE), 1);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_store_that_fails_at_response_time_never_fails_the_response() {
    let mut rig = Rig::new(logins());
    let id = admitted(&mut rig, &[("x-user-id", "alice")]);
    let token = rig.stream();
    rig.host.refuse_open = Some("connection refused".into());
    rig.close(token, crate::worker::streams::GRPC_UNAVAILABLE);
    assert_eq!(rig.response(id, 401, &[]), ResponseFlow::Pause);
    rig.wake();
    let resumed = rig.resumed(id).expect("resumed when the settlement failed").to_vec();
    assert!(header(&resumed, "ratelimit").unwrap().ends_with("r=4;t=3"), "{resumed:?}");
    assert_eq!(rig.host.count(Stat::Count(0, CountStat::Failed)), 1);
    assert_eq!(rig.store.model.entries(ALICE), 0, "the store kept what it had");
    // While the store is down, a response is not held at all.
    let (second, flow) = rig.request_with(&[("x-user-id", "alice")]);
    assert_eq!(flow, Flow::Continue, "failure_mode: allow");
    assert_eq!(rig.response(second, 401, &[]), ResponseFlow::Continue);
    assert_eq!(rig.host.count(Stat::Count(0, CountStat::Failed)), 2);
}

/// A settlement the stream refuses holds the response until the worker
/// has failed it: `Hold` promises a resume (a response paused with no
/// resume to come would hang).
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_hold_whose_settlement_the_stream_refuses_is_resumed_when_it_fails() {
    let mut rig = Rig::new(logins());
    let id = admitted(&mut rig, &[("x-user-id", "alice")]);
    rig.host.refuse_send = true;
    assert_eq!(rig.response(id, 401, &[]), ResponseFlow::Pause);
    assert!(rig.resumed(id).is_none(), "held");
    // The stream is lost and opened again; the send is refused again.
    for _ in 0..20 {
        rig.wake();
        rig.tick(5);
    }
    let resumed = rig.resumed(id).expect("resumed").to_vec();
    assert_eq!(rig.host.count(Stat::PauseExpired), 0, "by the failure, not the hold's end");
    assert!(header(&resumed, "ratelimit").unwrap().ends_with("r=4;t=3"), "{resumed:?}");
    assert_eq!(rig.host.resumed.len(), 1, "once");
    assert_eq!(rig.host.count(Stat::Count(0, CountStat::Failed)), 1);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_reservation_whose_response_never_comes_stands() {
    let mut rig = Rig::new(tokens("sliding_log", r#"{ "reserve": { "units": 3 } }"#));
    let id = admitted(&mut rig, &[("x-tenant", "acme")]);
    let executed = rig.store.executed;
    rig.gone(id);
    rig.run_until_quiet();
    assert_eq!(rig.store.executed, executed, "no store call for a request that is gone");
    assert_eq!(rig.store.model.entries("tollgate:{llm.tokens:acme}:log"), 3);
    assert_eq!(rig.response(id, 200, &[]), ResponseFlow::Continue);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_refund_frees_what_the_denial_cache_remembered() {
    let mut rig = Rig::new(tokens(
        "sliding_window",
        r#"{ "reserve": { "header": "x-max-tokens" }, "cost": { "header": "x-tokens-used" } }"#,
    ));
    let full = admitted(&mut rig, &[("x-tenant", "acme"), ("x-max-tokens", "100")]);
    let (denied, _) = rig.request_with(&[("x-tenant", "acme"), ("x-max-tokens", "10")]);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(denied), Some(429));
    rig.response(full, 200, &[("x-tokens-used", "5")]);
    rig.run_until_quiet();
    let after = admitted(&mut rig, &[("x-tenant", "acme"), ("x-max-tokens", "10")]);
    assert_eq!(rig.host.count(Stat::CacheHit), 0, "the refund made the worker forget the denial");
    assert!(rig.host.status(after) == Some(200));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn the_local_limiter_counts_failures_while_the_store_is_down() {
    let mut rig = Rig::new(logins().failure_mode("local"));
    rig.host.refuse_open = Some("connection refused".into());
    let alice = [("x-user-id", "alice")];
    let (first, flow) = rig.request_with(&alice);
    rig.wake();
    rig.run_until_quiet();
    assert_eq!((flow, rig.host.status(first)), (Flow::Pause, Some(200)), "the local limiter admits");
    assert_eq!(rig.response(first, 401, &[]), ResponseFlow::Continue, "not held: the store is down");
    rig.run_until_quiet();
    assert_eq!(rig.host.count(Stat::Count(0, CountStat::Failed)), 1, "the store could not be told");
    // Each worker's allowance of the 5 per 3 s window is 1: the failure used it.
    let (second, _) = rig.request_with(&alice);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(second), Some(429));
    assert_eq!(rig.host.count(Stat::Local { allowed: false }), 1);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_request_a_shadow_rule_would_deny_is_not_settled() {
    let mut rig = Rig::new(
        plugin().with(
            rule("auth.failedLogins")
                .header("x-user-id")
                .limit(1, "60s")
                .field(r#""shadow": true, "count": { "reserve": { "units": 1 } }"#),
        ),
    );
    let first = admitted(&mut rig, &[("x-user-id", "alice")]);
    let second = admitted(&mut rig, &[("x-user-id", "alice")]);
    let executed = rig.store.executed;
    assert_eq!(rig.response(second, 200, &[]), ResponseFlow::Continue, "it recorded nothing to settle");
    assert_eq!(rig.response(first, 200, &[]), ResponseFlow::Continue, "its reservation is its cost");
    assert_eq!(rig.store.executed, executed);
    assert_eq!(rig.store.model.entries(ALICE), 1);
}

/// In cluster mode a settlement goes to the master of its bucket's slot,
/// on that master's stream, like the decision it settles.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn in_cluster_mode_a_settlement_goes_to_the_master_of_its_slot() {
    use crate::worker::tests::cluster::basics::{cluster_plugin, cluster_rig, executed, user_on};
    let config = cluster_plugin()
        .with(rule("auth.failedLogins").header("x-user-id").limit(5, "3s").field(r#""count": { "status": [401] }"#));
    let mut rig = cluster_rig(config, 3);
    let users = [user_on(&rig, "auth.failedLogins", 0), user_on(&rig, "auth.failedLogins", 2)];
    for user in &users {
        let id = admitted(&mut rig, &[("x-user-id", user.as_str())]);
        assert_eq!(rig.response(id, 401, &[]), ResponseFlow::Pause);
        rig.run_until_quiet();
        assert!(header(rig.resumed(id).unwrap(), "ratelimit").unwrap().ends_with("r=4;t=3"));
    }
    assert_eq!([0, 1, 2].map(|n| executed(&rig, n)), [2, 0, 2], "a decision and a settlement on each owner");
    let model = &rig.cluster.as_ref().unwrap().data.model;
    for user in &users {
        assert_eq!(model.entries(&format!("tollgate:{{auth.failedLogins:{user}}}:log")), 1);
    }
    assert_eq!(rig.host.count(Stat::Count(0, CountStat::Settled)), 2);
}
