//! Sentinel discovery: the first request starts it, the store stream goes
//! to the master the Sentinels report, and follows it when it moves.

use crate::testing::plugin;
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{Reset, Stat, IDLE_TICK, TICK};
use std::time::Duration;

fn rig() -> Rig {
    let sentinel = r#""sentinel": { "cluster": "tollgate_sentinels", "master_name": "mymaster", "refresh": "5s" }"#;
    let mut rig = Rig::new(plugin().timeout("200ms").failure_mode("deny").valkey(sentinel).rule(
        "hot",
        Some("x-user-id"),
        &[(100, "1h")],
    ));
    rig.store.master = Some("10.0.0.1:6379".into());
    rig
}

/// The metadata of the last store stream opened (the master it goes to).
fn store_target(rig: &Rig) -> Option<String> {
    rig.host
        .opened
        .iter()
        .rev()
        .find(|(_, cluster, _)| cluster == "tollgate_valkey")
        .and_then(|(_, _, md)| md.iter().find(|(k, _)| k == "x-envoy-original-dst-host").map(|(_, v)| v.clone()))
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn nothing_is_asked_before_the_first_request_which_starts_discovery() {
    let mut rig = rig();
    rig.tick(1_000);
    assert!(rig.host.opened.is_empty(), "a root that serves no request (Envoy's main thread) never asks");
    let (id, _) = rig.request("a");
    assert_eq!(rig.host.wakes, 1);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(200));
    assert_eq!(store_target(&rig).as_deref(), Some("10.0.0.1:6379"));
    assert_eq!(rig.host.count(Stat::SentinelLookup), 1);
    rig.tick(5);
    assert_eq!(rig.host.tick, IDLE_TICK, "idle, but lookups fall due every refresh");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn without_a_master_requests_wait_the_timeout_then_fail_and_lookups_retry() {
    let mut rig = rig();
    rig.store.master = None;
    let (id, _) = rig.request("a");
    rig.run_until_quiet();
    assert_eq!(rig.host.count(Stat::SentinelFailure), 1);
    assert_eq!(rig.host.tick, TICK);
    for _ in 0..40 {
        rig.tick(5);
        rig.run_until_quiet();
    }
    assert_eq!(rig.host.status(id), Some(503));
    assert!(rig.host.opened.iter().all(|(_, c, _)| c == "tollgate_sentinels"), "no store stream without a master");
    assert!(rig.host.count(Stat::SentinelLookup) >= 2, "retried after 100 ms");
    assert!(rig.host.logs.iter().any(|(_, l)| l.contains("knows no master")));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_failover_moves_the_store_stream_to_the_new_master() {
    let mut rig = rig();
    let (id, _) = rig.request("a");
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(200));
    let old = rig.host.opened.iter().rev().find(|(_, c, _)| c == "tollgate_valkey").map(|(t, _, _)| *t).unwrap();
    // The master dies: its stream closes, the next lookup (due soon after
    // the failure) reports the promoted replica.
    rig.close(old, 2);
    rig.store.master = Some("10.0.0.2:6379".into());
    rig.tick(100);
    rig.run_until_quiet();
    let (next, _) = rig.request("b");
    rig.run_until_quiet();
    assert_eq!(rig.host.status(next), Some(200));
    assert_eq!(store_target(&rig).as_deref(), Some("10.0.0.2:6379"));
    assert_eq!(rig.host.count(Stat::SentinelSwitch), 1);
    assert!(rig.host.logs.iter().any(|(_, l)| l.contains("moved from 10.0.0.1:6379 to 10.0.0.2:6379")));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_switch_seen_while_the_old_stream_is_open_resets_it() {
    let mut rig = rig();
    rig.request("a");
    rig.run_until_quiet();
    rig.store.master = Some("10.0.0.2:6379".into());
    rig.tick(5_000);
    rig.run_until_quiet();
    assert_eq!(rig.host.count(Stat::StreamReset(Reset::Switched)), 1);
    let (id, _) = rig.request("b");
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(200));
    assert_eq!(store_target(&rig).as_deref(), Some("10.0.0.2:6379"));
    rig.tick(5);
    assert_eq!(rig.host.tick, Duration::from_millis(100));
}

/// The master dies under load: its stream closes, reconnects are refused
/// while the Sentinels still report it, then they report the promoted
/// replica. Requests keep coming every 10 ms; decisions resume on the new
/// master within a second of its promotion.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_killed_master_under_load_is_followed_to_the_promoted_replica() {
    let mut rig = rig();
    rig.request("warm");
    rig.run_until_quiet();
    let old = store_stream(&rig);
    let mut seen: std::collections::HashSet<u32> = rig.host.opened.iter().map(|(t, _, _)| *t).collect();
    let mut dead = vec![old];
    rig.close(old, 13);
    let killed = rig.now;
    let (mut promoted, mut resumed) = (None, None);
    while rig.now - killed < 4_000 {
        if rig.now - killed >= 2_200 && promoted.is_none() {
            rig.store.master = Some("10.0.0.2:6379".into());
            promoted = Some(rig.now);
        }
        let (id, _) = rig.request(&format!("r{}", rig.now));
        for _ in 0..10 {
            rig.wake();
            // New streams to the dead master are refused at once.
            for (token, cluster, md) in rig.host.opened.clone() {
                if seen.insert(token) && cluster == "tollgate_valkey" && md.iter().any(|(_, v)| v == "10.0.0.1:6379") {
                    dead.push(token);
                    rig.close(token, 14);
                }
            }
            let live: Vec<u32> =
                rig.host.outbox.iter().filter(|(t, b)| !b.is_empty() && !dead.contains(t)).map(|(t, _)| *t).collect();
            for token in live {
                rig.answer(token);
            }
        }
        if promoted.is_some() && resumed.is_none() && rig.host.status(id) == Some(200) {
            resumed = Some(rig.now);
        }
        rig.tick(10);
    }
    let (promoted, resumed) = (promoted.unwrap(), resumed.expect("decisions resumed on the new master"));
    assert!(resumed - promoted <= 1_000, "resumed {} ms after the promotion", resumed - promoted);
    assert_eq!(store_target(&rig).as_deref(), Some("10.0.0.2:6379"));
}

/// The token of the last store stream opened.
fn store_stream(rig: &Rig) -> u32 {
    rig.host.opened.iter().rev().find(|(_, c, _)| c == "tollgate_valkey").map(|(t, _, _)| *t).unwrap()
}
