//! `failure_mode: local` and `overload`: what a request gets when the store
//! cannot decide it, or the worker cannot take it.

use crate::testing::plugin;
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{Flow, Stat};

fn local(share: &str) -> Rig {
    Rig::new(plugin().failure_mode("local").top(&format!(r#""local_limiter": {{ "share": {share} }}"#)).rule(
        "api",
        Some("x-user-id"),
        &[(10, "1h")],
    ))
}

/// Sends a request and, if it waits, lets the rig settle it: 200 when its
/// own callback let it go on.
fn status(rig: &mut Rig, user: &str) -> Option<u32> {
    let (id, flow) = rig.request(user);
    if flow == Flow::Continue {
        return Some(200);
    }
    rig.run_until_quiet();
    rig.host.status(id)
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn while_the_store_is_down_each_worker_limits_by_its_share_then_the_store_decides_again() {
    let mut rig = local("0.5");
    for _ in 0..8 {
        assert_eq!(status(&mut rig, "known"), Some(200), "the store admits 8 of 10");
    }
    let executed = rig.store.executed;
    // The store goes away: its stream closes, reconnecting is refused.
    let token = rig.stream();
    rig.close(token, 2);
    rig.host.refuse_open = Some("connection refused".into());
    // A bucket the store answered: at most what it said remained (2).
    let known: Vec<Option<u32>> = (0..4).map(|_| status(&mut rig, "known")).collect();
    assert_eq!(known, [200, 200, 429, 429].map(Some));
    // A bucket it never saw: its share of the limit, 5 of 10.
    let unknown: Vec<Option<u32>> = (0..7).map(|_| status(&mut rig, "new")).collect();
    assert_eq!(unknown, [200, 200, 200, 200, 200, 429, 429].map(Some));
    assert_eq!(rig.store.executed, executed, "nothing reached the store");
    assert_eq!((rig.host.count(Stat::Local { allowed: true }), rig.host.count(Stat::Local { allowed: false })), (7, 4));
    assert_eq!(rig.host.count(Stat::FailureMode { allowed: true }), 0);
    // A local denial carries the headers and body of any denial.
    let denial = rig.host.replies.last().map(|(_, r)| r.clone()).unwrap();
    assert!(denial.headers.iter().any(|(k, v)| k == "ratelimit" && v.contains("r=0")), "{denial:?}");
    assert!(String::from_utf8_lossy(&denial.body).contains("api/1h"));
    // The store is back: decisions go to it again.
    rig.host.refuse_open = None;
    for _ in 0..200 {
        rig.tick(5);
        rig.run_until_quiet();
    }
    assert_eq!(rig.store.executed, executed + 1, "what it admitted flushed (tests/synced.rs)");
    assert_eq!(status(&mut rig, "back"), Some(200));
    assert_eq!(rig.store.executed, executed + 2, "decided by the store");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn overload_allow_lets_the_excess_through_and_counts_it() {
    let mut rig = Rig::new(
        plugin().valkey(r#""max_queue": 0"#).valkey(r#""max_in_flight": 1"#).top(r#""overload": "allow""#).rule(
            "api",
            Some("x-user-id"),
            &[(10, "1h")],
        ),
    );
    rig.request("first");
    let (_, flow) = rig.request("second");
    assert_eq!(flow, Flow::Continue, "explicitly asked for: admitted unchecked");
    assert_eq!(rig.host.count(Stat::Overloaded), 1);
}
