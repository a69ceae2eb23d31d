//! What the worker records about each request for the access log
//! ([`Host::decided`](crate::worker::Host::decided)): who decided, what the
//! request got, and for a decision its windows and the store's round trip,
//! when `response.filter_state` asks for it (off by default).

use crate::testing::{plugin, Plugin};
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{Answer, Decider};

/// The seed rule, without the record.
fn bare() -> Plugin {
    plugin().rule("auth.createToken", Some("x-user-id"), &[(20, "60s"), (5, "3s")])
}

/// The seed rule, its decisions recorded.
fn seed() -> Plugin {
    bare().top(r#""response": { "filter_state": true }"#)
}

fn summary(rig: &Rig, id: u32) -> (Decider, Answer, Vec<String>) {
    let record = rig.host.decision(id).unwrap_or_else(|| panic!("no decision recorded for {id}"));
    (record.decider, record.answer, record.denied_by.clone())
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn store_and_cache_decisions_name_the_denying_window() {
    let mut rig = Rig::new(seed());
    let mut ids = Vec::new();
    for _ in 0..7 {
        let (id, _) = rig.request("alice");
        rig.run_until_quiet();
        ids.push(id);
        rig.now += 10;
    }
    assert_eq!(summary(&rig, ids[0]), (Decider::Store, Answer::Allowed, vec![]));
    let first = rig.host.decision(ids[0]).unwrap();
    assert_eq!(first.rules, ["auth.createToken"]);
    assert_eq!(first.remaining, [("auth.createToken/60s".to_owned(), 19), ("auth.createToken/3s".to_owned(), 4)]);
    assert!(first.store_ms.is_some(), "the store's round trip");
    let denied_by = vec!["auth.createToken/3s".to_owned()];
    assert_eq!(summary(&rig, ids[5]), (Decider::Store, Answer::Denied, denied_by.clone()));
    assert_eq!(summary(&rig, ids[6]), (Decider::Cache, Answer::Denied, denied_by));
    assert_eq!(rig.host.decision(ids[6]).unwrap().store_ms, None);
    assert_eq!(rig.host.decisions.len(), 7, "one record per request");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn failure_mode_and_the_local_limiter_are_recorded() {
    for (mode, status, decider, answer) in [
        ("allow", 200, Decider::FailureMode, Answer::Unchecked),
        ("deny", 503, Decider::FailureMode, Answer::Refused),
        ("local", 200, Decider::Local, Answer::Allowed),
    ] {
        let mut rig = Rig::new(seed().failure_mode(mode));
        rig.host.refuse_open = Some("unreachable".into());
        let (id, _) = rig.request("bob");
        rig.run_until_quiet();
        assert_eq!(rig.host.status(id), Some(status), "{mode}");
        assert_eq!(summary(&rig, id), (decider, answer, vec![]), "{mode}");
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn overload_is_recorded() {
    let mut rig = Rig::new(seed().valkey(r#""max_queue": 1"#).valkey(r#""max_in_flight": 2"#));
    for i in 0..3 {
        rig.request(&format!("u{i}"));
    }
    let (id, _) = rig.request("u3");
    assert_eq!(rig.host.status(id), Some(503));
    assert_eq!(summary(&rig, id), (Decider::Overload, Answer::Refused, vec![]));
    assert_eq!(rig.host.decision(id).unwrap().rules, ["auth.createToken"]);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn by_default_nothing_is_recorded_and_the_answers_stay() {
    let mut rig = Rig::new(bare());
    let mut statuses = Vec::new();
    for _ in 0..7 {
        let (id, _) = rig.request("alice");
        rig.run_until_quiet();
        statuses.push(rig.host.status(id));
        rig.now += 10;
    }
    assert_eq!(statuses[..5], [Some(200); 5], "the store admits five");
    assert_eq!(statuses[5..], [Some(429); 2], "the store, then the cache deny");
    assert!(rig.host.decisions.is_empty(), "no record: {:?}", rig.host.decisions);
    let mut rig = Rig::new(bare().top(r#""response": { "filter_state": false }"#).failure_mode("deny"));
    rig.host.refuse_open = Some("unreachable".into());
    let (id, _) = rig.request("bob");
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(503), "failure_mode: deny");
    assert!(rig.host.decisions.is_empty(), "no record: {:?}", rig.host.decisions);
}
