//! A rule with `overrides`: its denials are never remembered in the denial
//! cache, so what an operator does to the bucket (an override, a reset)
//! applies to the very next request.

use crate::testing::{plugin, Plugin};
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{Answer, Decider, Stat};

/// The seed rule (5 per 3 s), its decisions recorded, with `overrides` or not.
fn seed(overrides: bool) -> Plugin {
    let rule = crate::testing::rule("auth.createToken")
        .header("x-user-id")
        .limit(20, "60s")
        .limit(5, "3s")
        .field(&format!(r#""overrides": {overrides}"#));
    plugin().with(rule).top(r#""response": { "filter_state": true }"#)
}

const BUCKET: &str = "tollgate:{auth.createToken:alice}:log";

/// Alice's `n` requests, 10 ms apart: who decided each and what it got.
fn requests(rig: &mut Rig, n: usize) -> Vec<(Decider, Answer)> {
    let mut out = Vec::new();
    for _ in 0..n {
        let (id, _) = rig.request("alice");
        rig.run_until_quiet();
        let record = rig.host.decision(id).unwrap_or_else(|| panic!("no decision recorded for {id}"));
        out.push((record.decider, record.answer));
        rig.now += 10;
    }
    out
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_denial_with_an_override_key_is_not_cached_and_a_reset_applies_at_once() {
    let (allowed, denied) = ((Decider::Store, Answer::Allowed), (Decider::Store, Answer::Denied));
    let mut rig = Rig::new(seed(true));
    assert_eq!(requests(&mut rig, 7), [[allowed; 5].as_slice(), &[denied; 2]].concat(), "the store denies each");
    assert_eq!(rig.host.count(Stat::CacheHit), 0);
    // An operator resets the bucket: the next request is the store's again.
    rig.store.model.expire(BUCKET);
    assert_eq!(requests(&mut rig, 1), [allowed]);

    // Without overrides the cache answers until the store's retry time,
    // whatever happened to the bucket.
    let mut rig = Rig::new(seed(false));
    let cached = (Decider::Cache, Answer::Denied);
    assert_eq!(requests(&mut rig, 7), [[allowed; 5].as_slice(), &[denied, cached]].concat());
    rig.store.model.expire(BUCKET);
    assert_eq!(requests(&mut rig, 1), [cached]);
}

/// With the store away (`failure_mode: local`) the local limiter decides a
/// rule with overrides as any other: by the configured limits (it cannot
/// read the override), and its record names no override.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn the_local_limiter_keeps_the_configured_limits() {
    let run = |overrides: bool| {
        let mut rig = Rig::new(seed(overrides).failure_mode("local"));
        rig.host.refuse_open = Some("unreachable".into());
        let answers = requests(&mut rig, 8);
        let plain: Vec<String> = rig.host.decisions.iter().map(|(_, r)| r.plain()).collect();
        (answers, plain)
    };
    let (with, lines) = run(true);
    assert_eq!(with, run(false).0);
    assert!(with.iter().all(|(decider, _)| *decider == Decider::Local), "{with:?}");
    assert!(with.iter().any(|(_, answer)| *answer == Answer::Denied), "{with:?}");
    assert!(lines.iter().all(|l| !l.contains("override")), "{lines:?}");
}
