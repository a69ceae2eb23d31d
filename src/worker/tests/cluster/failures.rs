//! Cluster mode when things break: `CLUSTERDOWN` and `TRYAGAIN`, a master
//! killed and its replica promoted, redirections that cannot be followed.

use crate::store::cluster::key_slot;
use crate::store::FailureKind;
use crate::testing::Plugin;
use crate::worker::tests::cluster::basics::{cluster_plugin, cluster_rig, executed, key, store_targets, user_on};
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{Reset, Stat};

fn hot() -> Plugin {
    cluster_plugin().rule("hot", Some("x-user-id"), &[(1000, "1h")])
}

/// One request of `user`, settled: its status.
fn status(rig: &mut Rig, user: &str) -> Option<u32> {
    let (id, _) = rig.request(user);
    rig.run_until_quiet();
    rig.host.status(id)
}

/// The open store streams to `addr`.
fn streams_to(rig: &Rig, addr: &str) -> Vec<u32> {
    rig.host
        .opened
        .iter()
        .filter(|(t, _, md)| md.iter().any(|(_, v)| v == addr) && !rig.host.cancelled.contains(t))
        .map(|(t, _, _)| *t)
        .collect()
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn clusterdown_and_tryagain_are_store_failures_that_read_the_map_again_soon() {
    let mut rig = cluster_rig(hot(), 3);
    let user = user_on(&rig, "hot", 1);
    assert_eq!(status(&mut rig, &user), Some(200));
    for (reply, n) in [("CLUSTERDOWN The cluster is down", 1), ("TRYAGAIN Multiple keys request during rehashing", 2)] {
        rig.cluster.as_mut().unwrap().nodes[1].forced = Some(reply.into());
        assert_eq!(status(&mut rig, &user), Some(503), "failure_mode deny");
        assert_eq!(rig.host.count(Stat::StoreError(FailureKind::Busy)), n);
        rig.run_for(100);
        rig.run_until_quiet();
        assert_eq!(rig.host.count(Stat::ClusterRefresh), 1 + n, "read again within 100 ms, not after 5 s");
    }
    rig.cluster.as_mut().unwrap().nodes[1].forced = None;
    assert_eq!(status(&mut rig, &user), Some(200));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_killed_master_fails_only_its_own_requests_until_its_replica_is_promoted() {
    let mut rig = cluster_rig(hot(), 3);
    let (lost, kept) = (user_on(&rig, "hot", 0), user_on(&rig, "hot", 1));
    assert_eq!((status(&mut rig, &lost), status(&mut rig, &kept)), (Some(200), Some(200)));
    // Master 0 dies: its stream closes, new streams to it are refused.
    rig.cluster.as_mut().unwrap().nodes[0].down = true;
    for token in streams_to(&rig, "10.0.0.1:6379") {
        rig.close(token, 13);
    }
    assert_eq!(status(&mut rig, &lost), Some(503));
    assert_eq!(status(&mut rig, &kept), Some(200), "the other masters keep deciding");
    assert!(rig.host.count(Stat::ClusterShardFailure) >= 1);
    // Its replica is promoted; the next read of the map finds it (soon: the
    // failures asked for it).
    rig.cluster.as_mut().unwrap().promote(3);
    rig.run_for(200);
    rig.run_until_quiet();
    assert_eq!(status(&mut rig, &lost), Some(200));
    assert_eq!(store_targets(&rig).last().map(String::as_str), Some("10.0.1.1:6379"));
    assert_eq!(executed(&rig, 3), 1, "decided on the promoted replica");
    // The old master is no longer one: nothing goes there again.
    rig.cluster.as_mut().unwrap().nodes[0].down = false;
    let before = store_targets(&rig).len();
    for _ in 0..3 {
        assert_eq!(status(&mut rig, &lost), Some(200));
    }
    assert_eq!(store_targets(&rig).len(), before);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_stream_to_a_node_that_is_no_longer_a_master_is_closed_once_idle() {
    let mut rig = cluster_rig(hot(), 3);
    let user = user_on(&rig, "hot", 2);
    assert_eq!(status(&mut rig, &user), Some(200));
    let old = streams_to(&rig, "10.0.0.3:6379");
    assert_eq!(old.len(), 1);
    // A manual failover: the replica takes over, the old master follows it.
    rig.cluster.as_mut().unwrap().promote(5);
    rig.run_for(5_000);
    rig.run_until_quiet();
    assert_eq!(rig.host.cancelled, old, "the idle stream to the former master is closed");
    assert_eq!(rig.host.count(Stat::StreamReset(Reset::Switched)), 1);
    assert_eq!(status(&mut rig, &user), Some(200));
    assert_eq!(rig.host.count(Stat::ClusterMoved), 0, "the map was read before the next call");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn queued_requests_follow_their_slot_when_the_map_changes() {
    let plugin = crate::testing::plugin()
        .timeout("1s")
        .failure_mode("deny")
        .valkey(r#""max_in_flight": 1, "cluster_mode": { "seeds": "tollgate_valkey_seeds", "refresh": "100ms" }"#)
        .rule("hot", Some("x-user-id"), &[(1000, "1h")]);
    let mut rig = cluster_rig(plugin, 3);
    let user = user_on(&rig, "hot", 0);
    assert_eq!(status(&mut rig, &user), Some(200));
    // One call on master 0's stream, one queued behind it; meanwhile the
    // slot moves to master 1, and the map is read again.
    let (sent, _) = rig.request(&user);
    let (queued, _) = rig.request(&user);
    let slot = key_slot(key("hot", &user).as_bytes());
    let cluster = rig.cluster.as_mut().unwrap();
    cluster.migrating.insert(slot, 1);
    cluster.migrate_keys(slot);
    cluster.finish_migration(slot);
    let (master0, seeds) = (streams_to(&rig, "10.0.0.1:6379")[0], rig.host.opened[0].0);
    rig.run_for(100);
    rig.answer(seeds);
    assert_eq!(rig.host.count(Stat::ClusterRefresh), 2);
    // The queued request went to master 1; the sent one gets MOVED there.
    let master1 = streams_to(&rig, "10.0.0.2:6379")[0];
    rig.answer(master1);
    assert_eq!(rig.host.status(queued), Some(200));
    assert_eq!(rig.host.status(sent), None);
    rig.answer(master0);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(sent), Some(200));
    assert_eq!(rig.host.count(Stat::ClusterMoved), 1, "only the call already on master 0's stream");
    assert_eq!(executed(&rig, 1), 2);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn redirections_that_loop_or_name_a_hostname_fail_the_request() {
    let mut rig = cluster_rig(hot(), 3);
    let user = user_on(&rig, "hot", 0);
    assert_eq!(status(&mut rig, &user), Some(200));
    let slot = key_slot(key("hot", &user).as_bytes());
    let cluster = rig.cluster.as_mut().unwrap();
    cluster.nodes[0].forced = Some(format!("MOVED {slot} 10.0.0.2:6379"));
    cluster.nodes[1].forced = Some(format!("MOVED {slot} 10.0.0.1:6379"));
    assert_eq!(status(&mut rig, &user), Some(503));
    assert_eq!(rig.host.count(Stat::ClusterMoved), 5, "followed five times, then failed");
    assert_eq!(rig.host.count(Stat::StoreError(FailureKind::Other)), 1);
    let cluster = rig.cluster.as_mut().unwrap();
    cluster.nodes[0].forced = Some(format!("MOVED {slot} valkey-2.valkey:6379"));
    cluster.nodes[1].forced = Some(format!("MOVED {slot} valkey-2.valkey:6379"));
    let (id, _) = rig.request(&user);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(503), "a hostname is never followed");
    assert_eq!(rig.host.count(Stat::StoreError(FailureKind::Other)), 2);
    assert!(!store_targets(&rig).iter().any(|t| t.contains("valkey-2")));
}
