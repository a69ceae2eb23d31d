//! Cluster mode: the slot map read from the seeds, one stream per master,
//! `MOVED` and `ASK`, checks on several slots, and the wait for a map.

use crate::store::cluster::key_slot;
use crate::testing::{plugin, Plugin};
use crate::worker::tests::rig::fake::Rig;
use crate::worker::tests::rig::fake_cluster::FakeCluster;
use crate::worker::{Stat, IDLE_TICK, TICK};

pub const SEEDS: &str = "tollgate_valkey_seeds";

/// Cluster mode with the seeds of `SEEDS`, without a failure mode.
pub fn cluster_base() -> Plugin {
    plugin().timeout("200ms").valkey(&format!(r#""cluster_mode": {{ "seeds": "{SEEDS}" }}"#))
}

/// Cluster mode, `failure_mode: deny`.
pub fn cluster_plugin() -> Plugin {
    cluster_base().failure_mode("deny")
}

/// A rig on a fake cluster of `masters` masters (each with a replica).
pub fn cluster_rig(plugin: Plugin, masters: usize) -> Rig {
    let mut rig = Rig::new(plugin);
    rig.cluster = Some(FakeCluster::new(masters));
    rig
}

/// The bucket key of user `user` under rule `rule` (one key part).
pub fn key(rule: &str, user: &str) -> String {
    format!("tollgate:{{{rule}:{user}}}:log")
}

/// A user whose bucket under `rule` is on master `master`.
pub fn user_on(rig: &Rig, rule: &str, master: usize) -> String {
    let cluster = rig.cluster.as_ref().unwrap();
    let addr = cluster.nodes[master].addr.to_string();
    (0..).map(|i| format!("u{i}")).find(|u| cluster.owner_of(&key(rule, u)) == addr).unwrap()
}

/// The masters the worker's store streams were opened to, in order.
pub fn store_targets(rig: &Rig) -> Vec<String> {
    rig.host
        .opened
        .iter()
        .filter(|(_, c, _)| c == "tollgate_valkey")
        .map(|(_, _, md)| md.iter().find(|(k, _)| k == "x-envoy-original-dst-host").unwrap().1.clone())
        .collect()
}

pub fn executed(rig: &Rig, node: usize) -> usize {
    rig.cluster.as_ref().unwrap().nodes[node].executed
}

fn hot() -> Plugin {
    cluster_plugin().rule("hot", Some("x-user-id"), &[(2, "1h")])
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn the_first_request_reads_the_slot_map_then_each_master_gets_its_own_stream() {
    let mut rig = cluster_rig(hot(), 3);
    rig.tick(1_000);
    assert!(rig.host.opened.is_empty(), "a root that serves no request never asks");
    let users: Vec<String> = (0..3).map(|m| user_on(&rig, "hot", m)).collect();
    let ids: Vec<u32> = users.iter().map(|u| rig.request(u).0).collect();
    rig.run_until_quiet();
    assert!(ids.iter().all(|id| rig.host.status(*id) == Some(200)));
    assert_eq!(rig.host.opened[0].1, SEEDS, "the map is read first, on the seed stream");
    assert_eq!(store_targets(&rig), ["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"]);
    assert_eq!((executed(&rig, 0), executed(&rig, 1), executed(&rig, 2)), (1, 1, 1));
    assert_eq!(rig.host.count(Stat::ClusterRefresh), 1);
    assert!(rig.host.logs.iter().any(|(_, l)| l.contains("cluster slot map: 16384 of 16384 slots on 3 masters")));
    // Exact per bucket, on every master; streams are kept.
    for _ in 0..2 {
        let ids: Vec<u32> = users.iter().map(|u| rig.request(u).0).collect();
        rig.run_until_quiet();
        let statuses: Vec<Option<u32>> = ids.iter().map(|id| rig.host.status(*id)).collect();
        assert!(statuses.iter().all(|s| *s == statuses[0]), "{statuses:?}");
    }
    let last: Vec<u32> = users.iter().map(|u| rig.request(u).0).collect();
    rig.run_until_quiet();
    assert!(last.iter().all(|id| rig.host.status(*id) == Some(429)));
    assert_eq!(rig.host.opened.len(), 4, "one seed stream and one per master, kept");
    // The three denials came at once: their counters wait for a tick,
    // which stays on once more in case more come.
    rig.tick(5);
    assert_eq!(rig.host.tick, TICK);
    rig.tick(5);
    assert_eq!(rig.host.tick, IDLE_TICK, "idle, but the map is read again every refresh");
    rig.run_for(5_000);
    rig.run_until_quiet();
    assert_eq!(rig.host.count(Stat::ClusterRefresh), 2);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn moved_updates_the_map_and_the_call_goes_to_the_new_master() {
    let mut rig = cluster_rig(hot(), 3);
    let user = user_on(&rig, "hot", 0);
    rig.request(&user);
    rig.run_until_quiet();
    // The slot moves to master 1 behind the worker's back (keys included).
    let slot = key_slot(key("hot", &user).as_bytes());
    let cluster = rig.cluster.as_mut().unwrap();
    cluster.migrating.insert(slot, 1);
    cluster.migrate_keys(slot);
    cluster.finish_migration(slot);
    let (moved, _) = rig.request(&user);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(moved), Some(200));
    assert_eq!(rig.host.count(Stat::ClusterMoved), 1);
    assert_eq!((executed(&rig, 0), executed(&rig, 1)), (1, 1));
    // The map was updated: the next call goes straight to master 1, and the
    // limit counts both decisions.
    let (third, _) = rig.request(&user);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(third), Some(429));
    assert_eq!(rig.host.count(Stat::ClusterMoved), 1);
    // And the whole map is read again soon, not after `refresh`.
    rig.run_for(150);
    rig.run_until_quiet();
    assert_eq!(rig.host.count(Stat::ClusterRefresh), 2);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn ask_is_followed_once_after_asking_without_changing_the_map() {
    let mut rig = cluster_rig(cluster_plugin().rule("hot", Some("x-user-id"), &[(3, "1h")]), 3);
    let user = user_on(&rig, "hot", 0);
    rig.request(&user);
    rig.run_until_quiet();
    let slot = key_slot(key("hot", &user).as_bytes());
    let cluster = rig.cluster.as_mut().unwrap();
    cluster.migrating.insert(slot, 2);
    cluster.migrate_keys(slot);
    let (asked, _) = rig.request(&user);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(asked), Some(200));
    assert_eq!(rig.host.count(Stat::ClusterAsk), 1);
    assert_eq!(executed(&rig, 2), 1);
    // On master 2's stream, ASKING came right before the call.
    let log = &rig.cluster.as_ref().unwrap().log;
    let at = log.iter().position(|(node, verb, _)| *node == 2 && verb == "ASKING").expect("ASKING sent");
    assert_eq!((log[at + 1].0, log[at + 1].1.as_str(), log[at + 1].2), (2, "FCALL", log[at].2));
    // The map did not change: the next call asks master 0 again, and is
    // sent on.
    let (again, _) = rig.request(&user);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(again), Some(200));
    assert_eq!(rig.host.count(Stat::ClusterAsk), 2);
    assert_eq!(rig.host.count(Stat::ClusterMoved), 0);
    // The migration ends: master 0 answers MOVED; the limit of 3 held
    // across the move.
    rig.cluster.as_mut().unwrap().finish_migration(slot);
    let (last, _) = rig.request(&user);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(last), Some(429));
    assert_eq!(rig.host.count(Stat::ClusterMoved), 1);
    assert_eq!(rig.host.count(Stat::ClusterAsk), 2);
    assert_eq!((executed(&rig, 0), executed(&rig, 2)), (1, 3));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn checks_sharing_a_hash_tag_are_decided_in_one_call() {
    // Tagged by the user, both buckets share a slot: one call decides both.
    let tagged = cluster_plugin()
        .rule_json(r#"{ "name": "a", "key": [ { "header": "x-user-id" } ], "hash_tag": 0, "limits": [ { "limit": 3, "period": "1h" } ] }"#)
        .rule_json(r#"{ "name": "b", "key": [ { "header": "x-user-id" }, "method" ], "hash_tag": 0, "limits": [ { "limit": 2, "period": "1h" } ] }"#);
    let mut rig = cluster_rig(tagged, 3);
    let statuses: Vec<Option<u32>> = (0..3)
        .map(|_| {
            let (id, _) = rig.request("alice");
            rig.run_until_quiet();
            rig.host.status(id)
        })
        .collect();
    assert_eq!(statuses, [Some(200), Some(200), Some(429)], "b's limit of 2 binds, a consumed nothing on the denial");
    assert_eq!((0..3).map(|n| executed(&rig, n)).sum::<usize>(), 3, "one call per request");
    assert_eq!(rig.host.count(Stat::ClusterCrossShard), 0);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn requests_wait_for_the_slot_map_at_most_the_timeout() {
    let mut rig = cluster_rig(hot(), 3);
    for n in rig.cluster.as_mut().unwrap().nodes.iter_mut() {
        n.down = true;
    }
    let (id, _) = rig.request("a");
    rig.run_until_quiet();
    rig.run_for(150);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), None, "within the timeout");
    rig.run_for(60);
    assert_eq!(rig.host.status(id), Some(503));
    assert!(rig.host.count(Stat::ClusterRefreshFailure) >= 2, "retried every 100 ms");
    assert!(store_targets(&rig).is_empty(), "no store stream without a map");
    assert!(rig.host.logs.iter().any(|(_, l)| l.contains("no slot map from the cluster's seeds yet")));
    // The seeds come back: the map is read, and requests are decided.
    for n in rig.cluster.as_mut().unwrap().nodes.iter_mut() {
        n.down = false;
    }
    rig.run_for(100);
    rig.run_until_quiet();
    let (id, _) = rig.request("a");
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(200));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn the_function_library_is_loaded_on_each_master_that_lacks_it() {
    let mut rig = cluster_rig(hot(), 3);
    rig.cluster.as_mut().unwrap().nodes[1].loaded = false;
    let users: Vec<String> = (0..3).map(|m| user_on(&rig, "hot", m)).collect();
    let ids: Vec<u32> = users.iter().map(|u| rig.request(u).0).collect();
    rig.run_until_quiet();
    assert!(ids.iter().all(|id| rig.host.status(*id) == Some(200)));
    let loads: Vec<usize> =
        rig.cluster.as_ref().unwrap().log.iter().filter(|(_, v, _)| v == "FUNCTION").map(|(n, _, _)| *n).collect();
    assert_eq!(loads, [1], "only master 1 lacked it");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_server_without_cluster_shards_is_asked_cluster_slots() {
    let mut rig = cluster_rig(hot(), 3);
    rig.cluster.as_mut().unwrap().no_shards = true;
    let user = user_on(&rig, "hot", 2);
    let (id, _) = rig.request(&user);
    rig.run_until_quiet();
    rig.run_for(100);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(200));
    assert_eq!(store_targets(&rig), ["10.0.0.3:6379"]);
    let asked: Vec<String> = rig.cluster.as_ref().unwrap().log.iter().map(|(_, v, _)| v.clone()).collect();
    assert_eq!(asked[..2], ["CLUSTER", "CLUSTER"], "SHARDS, then SLOTS");
    assert_eq!(rig.host.count(Stat::ClusterRefreshFailure), 0, "not a failure");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn auth_goes_first_on_the_seed_stream_and_on_every_master_stream() {
    let config = hot().valkey(r#""password_env": "PW""#).build_with_env(&[("PW", "s3cret")]);
    let mut rig = Rig::with_config(config);
    let mut cluster = FakeCluster::new(3);
    cluster.data.password = Some("s3cret".into());
    rig.cluster = Some(cluster);
    let users: Vec<String> = (0..3).map(|m| user_on(&rig, "hot", m)).collect();
    let ids: Vec<u32> = users.iter().map(|u| rig.request(u).0).collect();
    rig.run_until_quiet();
    assert!(ids.iter().all(|id| rig.host.status(*id) == Some(200)));
    let log = &rig.cluster.as_ref().unwrap().log;
    for (token, _, _) in &rig.host.opened {
        let first = log.iter().find(|(_, _, t)| t == token).map(|(_, v, _)| v.as_str());
        assert_eq!(first, Some("AUTH"), "stream {token}");
    }
    // A wrong password: the map cannot be read, requests fail by failure_mode.
    let config = hot().valkey(r#""password_env": "PW""#).build_with_env(&[("PW", "wrong")]);
    let mut rig = Rig::with_config(config);
    let mut cluster = FakeCluster::new(3);
    cluster.data.password = Some("s3cret".into());
    rig.cluster = Some(cluster);
    let (id, _) = rig.request("a");
    rig.run_until_quiet();
    rig.run_for(200);
    assert_eq!(rig.host.status(id), Some(503));
    assert!(rig.host.count(Stat::ClusterRefreshFailure) >= 1);
    assert!(rig.host.logs.iter().any(|(_, l)| l.contains("WRONGPASS")), "{:?}", rig.host.logs);
}
