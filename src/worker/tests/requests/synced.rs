//! Synced rules (`rules[].sync`): decided on the worker after the first
//! sync, flushed every interval, a lost flush sent again and applied once,
//! and what `failure_mode: local` admitted flushed when the store is back.

use crate::testing::{plugin, rule};
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{Flow, Stat, TICK};
use std::time::Duration;

const KEY: &str = "tollgate:{api:a}:log";

fn synced(limit: u64) -> Rig {
    Rig::new(
        plugin().with(rule("api").header("x-user-id").limit(limit, "1h").field(r#""sync": { "interval": "100ms" }"#)),
    )
}

/// Sends a request for user `a`; 200 or the local reply's status.
fn status(rig: &mut Rig) -> Option<u32> {
    let (id, flow) = rig.request("a");
    if flow == Flow::Continue {
        return Some(200);
    }
    rig.run_until_quiet();
    rig.host.status(id)
}

/// Lets `ms` pass, the store answering every flush.
fn sync_for(rig: &mut Rig, ms: u64) {
    for _ in 0..ms / 5 {
        rig.tick(5);
        rig.run_until_quiet();
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn after_its_first_sync_a_bucket_is_decided_on_the_worker_and_flushed() {
    let mut rig = synced(10);
    assert_eq!(status(&mut rig), Some(200), "the first request of a bucket: the store decides");
    assert_eq!(rig.store.executed, 1);
    sync_for(&mut rig, 30);
    assert_eq!(rig.store.executed, 2, "the new bucket joined at once (a flush of nothing)");
    sync_for(&mut rig, 30);
    assert_eq!(rig.store.executed, 3, "and read half an interval later");
    let local: Vec<Option<u32>> = (0..10).map(|_| status(&mut rig)).collect();
    assert_eq!(local[..9], [Some(200); 9], "9 remained, all this worker's: {local:?}");
    assert_eq!(local[9], Some(429), "the 10th is over the limit");
    assert_eq!(rig.store.executed, 3, "no store call per request");
    assert_eq!(
        (rig.host.count(Stat::Synced { allowed: true }), rig.host.count(Stat::Synced { allowed: false })),
        (9, 1)
    );
    sync_for(&mut rig, 100);
    assert_eq!(rig.store.model.entries(KEY), 10, "the flush recorded the 9 in the store");
    assert_eq!(rig.host.count(Stat::SyncFlush), 3, "the join, the read, the flush of the 9");
    let denial = rig.host.replies.last().map(|(_, r)| r.clone()).unwrap();
    assert!(denial.headers.iter().any(|(k, v)| k == "ratelimit" && v.contains("r=0")), "{denial:?}");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_flush_whose_reply_was_lost_is_sent_again_and_applied_once() {
    let mut rig = synced(100);
    status(&mut rig);
    sync_for(&mut rig, 30);
    for _ in 0..3 {
        assert_eq!(status(&mut rig), Some(200));
    }
    // The flush reaches the store, which applies it; its reply is lost.
    for _ in 0..20 {
        rig.tick(5);
        if rig.host.outbox.iter().any(|(_, b)| !b.is_empty()) {
            break;
        }
    }
    let token = rig.stream();
    let sent = rig.host.take_outbox(token);
    assert!(!sent.is_empty(), "a flush was sent");
    rig.store.answer(&sent, rig.now);
    assert_eq!(rig.store.model.entries(KEY), 4);
    rig.close(token, 2);
    assert_eq!(rig.host.count(Stat::SyncFailure), 1);
    // Sent again (same token) on a new stream, an interval later.
    sync_for(&mut rig, 200);
    assert_eq!(rig.store.model.entries(KEY), 4, "applied once");
    assert_eq!(rig.host.count(Stat::SyncDuplicate), 1, "the store knew its token");
    assert!(rig.host.count(Stat::SyncFlush) >= 2, "the resend answered");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_request_that_also_matches_an_exact_rule_is_decided_by_the_store() {
    let mut rig = Rig::new(
        plugin()
            .with(rule("api").header("x-user-id").limit(100, "1h").field(r#""sync": { "interval": "100ms" }"#))
            .with(rule("all").limit(1_000, "1h")),
    );
    for _ in 0..5 {
        assert_eq!(status(&mut rig), Some(200));
        sync_for(&mut rig, 50);
    }
    assert_eq!(rig.host.count(Stat::Synced { allowed: true }), 0, "never decided on the worker");
    assert_eq!(rig.store.model.entries(KEY), 5, "the store recorded each in both rules");
    assert_eq!(rig.store.model.entries("tollgate:{all}:log"), 5);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn what_the_local_limiter_admitted_reaches_the_store_when_it_is_back() {
    let mut rig = Rig::new(plugin().failure_mode("local").top(r#""local_limiter": { "share": 0.5 }"#).rule(
        "api",
        Some("x-user-id"),
        &[(10, "1h")],
    ));
    assert_eq!(status(&mut rig), Some(200));
    let token = rig.stream();
    rig.close(token, 2);
    rig.host.refuse_open = Some("connection refused".into());
    let local: Vec<Option<u32>> = (0..6).map(|_| status(&mut rig)).collect();
    assert_eq!(local, [200, 200, 200, 200, 200, 429].map(Some), "its share of 10: 5");
    assert_eq!(rig.store.model.entries(KEY), 1, "the store saw only the first");
    rig.host.refuse_open = None;
    sync_for(&mut rig, 1_000);
    assert_eq!(rig.store.model.entries(KEY), 6, "the 5 admitted locally were flushed");
    assert_eq!(rig.host.count(Stat::SyncFlush), 1);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_request_another_synced_rule_denies_takes_nothing_from_the_rules_that_fit() {
    let sync = r#""sync": { "interval": "100ms" }"#;
    let mut rig = Rig::new(
        plugin()
            .with(rule("api").header("x-user-id").limit(100, "1h").field(sync))
            .with(rule("all").limit(3, "1h").field(sync)),
    );
    assert_eq!(status(&mut rig), Some(200), "new buckets: the store decides");
    sync_for(&mut rig, 30);
    let local: Vec<Option<u32>> = (0..5).map(|_| status(&mut rig)).collect();
    assert_eq!(local, [Some(200), Some(200), Some(429), Some(429), Some(429)]);
    sync_for(&mut rig, 100);
    // `api` fits every time and is seen first: the three denials took
    // from it and gave back.
    assert_eq!(rig.store.model.entries(KEY), 3, "api: the 3 admitted only");
    assert_eq!(rig.store.model.entries("tollgate:{all}:log"), 3);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn counters_of_requests_close_together_wait_for_the_tick_which_stops_when_quiet() {
    let mut rig = synced(100);
    status(&mut rig);
    sync_for(&mut rig, 200);
    let allowed = |rig: &Rig| rig.host.count(Stat::Synced { allowed: true });
    assert_eq!(rig.host.tick, Duration::from_millis(100), "the sync interval: nothing else runs");
    // Apart by a tick or more: each request reports its own counters.
    for _ in 0..2 {
        rig.now += 5;
        assert_eq!(status(&mut rig), Some(200));
        assert!(!rig.host.unreported, "reported when its callback ended");
    }
    assert_eq!((rig.host.reported_later, rig.host.tick), (0, Duration::from_millis(100)));
    // Two within a tick: the tick runs every 5 ms for the counters after them.
    assert_eq!(status(&mut rig), Some(200));
    assert_eq!((rig.host.reported_later, rig.host.tick), (0, TICK), "the second reported, the tick sped up");
    for n in 1..=3 {
        assert_eq!(status(&mut rig), Some(200));
        assert_eq!(rig.host.reported_later, n);
    }
    assert!(rig.host.unreported, "three requests' counters wait");
    assert_eq!(allowed(&rig), 6, "counted all the same (the fake shows what will be reported)");
    sync_for(&mut rig, 5);
    assert!(!rig.host.unreported, "the tick reported them");
    assert_eq!(rig.host.tick, TICK, "and stays on: they came since the last tick");
    sync_for(&mut rig, 5);
    assert_eq!(rig.host.tick, Duration::from_millis(100), "a tick with nothing to report goes back");
    assert_eq!(status(&mut rig), Some(200));
    assert!(!rig.host.unreported, "a request after the quiet tick reports at once");
}
