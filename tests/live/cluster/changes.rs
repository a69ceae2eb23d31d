//! A Valkey Cluster that changes under load, through Envoy
//! (`envoy/envoy-cluster.yaml`), 3 masters each with a replica, started by
//! the test: the slot of a hot key resharded to another master (`CLUSTER
//! SETSLOT ... MIGRATING/IMPORTING`, `MIGRATE`, `SETSLOT ... NODE`), and the
//! master of a hot key killed (SIGKILL) until its replica is promoted.

use crate::support;

use std::time::{Duration, Instant};
use support::cluster::{cluster_state, ValkeyCluster};
use support::load::{self, Load, Plan, Request};
use support::plugin::plugin;
use support::{wait_until, Envoy};
use tollgate::store::cluster::key_slot;

const HOT_KEY: &str = "tollgate:{hot:hot}:log";

fn config(limit: usize) -> String {
    plugin()
        .timeout("200ms")
        .valkey(r#""cluster_mode": { "seeds": "tollgate_valkey_seeds", "refresh": "5s" }"#)
        .failure_mode("deny")
        .rule("hot", Some("x-user-id"), &[(limit as u64, "1h")])
        .json()
}

fn stat(envoy: &Envoy, name: &str) -> u64 {
    envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
}

/// Load on the hot key: 4 clients, each at most one request per millisecond
/// (while a master is down, requests fail in microseconds) and at most
/// `per_client` requests.
fn hot_load(envoy: &Envoy, per_client: usize) -> Load {
    let hot = load::repeat(Request::new("GET", "/", &[("x-user-id", "hot")]));
    Load::start(envoy.port, Plan::paced(4, per_client, Duration::from_millis(1)), hot)
}

#[test]
fn resharding_the_slot_of_a_hot_key_under_load_fails_nothing_and_admits_exactly_the_limit() {
    const LIMIT: usize = 1500;
    let cluster = ValkeyCluster::start(3, 2_000);
    let envoy = cluster.envoy(&config(LIMIT), 2);
    let slot = key_slot(HOT_KEY.as_bytes());
    let from = cluster.node(cluster.owner_port(slot));
    let to = cluster.masters.iter().find(|m| m.port != from.port).unwrap();

    let load = hot_load(&envoy, 20_000);
    wait_until("the first admissions", Duration::from_secs(20), || load.admitted() >= 100);
    cluster.begin_migration(slot, from, to);
    let began = load.admitted();
    wait_until("admissions while the slot is migrating", Duration::from_secs(20), || load.admitted() >= began + 100);
    assert_eq!(cluster.migrate_keys(slot, from, to), 1, "the hot key moved");
    // Until the slot is the target's, the source answers ASK for the key.
    // Read at once: the hot key's limit is reached within a few hundred ms.
    let asked = || envoy.stat_now("wasmcustom.tollgate.cluster.ask").unwrap_or(0);
    wait_until("calls asked to the target", Duration::from_secs(20), || asked() >= 10);
    cluster.end_migration(slot, from, to);
    let ended = Instant::now();
    wait_until("denials on the target", Duration::from_secs(30), || load.count_after(ended, 429) >= 50);
    let outcomes = load.stop().all_answered();

    let admitted = outcomes.iter().filter(|o| o.status() == Some(200)).count();
    let undecided: Vec<_> = outcomes.iter().filter(|o| !o.decided()).collect();
    let stored = to.int(&["ZCARD", HOT_KEY]);
    println!(
        "resharding: {} requests, {admitted} admitted of limit {LIMIT}; ASK followed {}, MOVED followed {}, \
         slot map reads {}, store errors {}; {stored} entries on the target",
        outcomes.len(),
        stat(&envoy, "cluster.ask"),
        stat(&envoy, "cluster.moved"),
        stat(&envoy, "cluster.refreshes"),
        stat(&envoy, "store.errors"),
    );
    assert!(undecided.is_empty(), "every request decided by the store: {} were not", undecided.len());
    assert_eq!(stat(&envoy, "store.errors"), 0, "no request failed");
    assert_eq!(admitted, LIMIT, "exactly the limit admitted across the move");
    assert_eq!(stored, LIMIT as i64, "the target holds every admission");
    let moved = from.cmd(&["EXISTS", HOT_KEY]).error_kind().map(str::to_owned);
    assert_eq!(moved.as_deref(), Some("MOVED"), "the source no longer serves the slot");
    assert!(stat(&envoy, "cluster.moved") >= 1, "the source answered MOVED once the slot was the target's");
}

#[test]
fn a_killed_master_is_replaced_by_its_replica_and_limiting_resumes_within_seconds() {
    const LIMIT: usize = 1000;
    let mut cluster = ValkeyCluster::start(3, 1_000);
    let envoy = cluster.envoy(&config(LIMIT), 2);
    let slot = key_slot(HOT_KEY.as_bytes());
    let port = cluster.owner_port(slot);
    let index = cluster.masters.iter().position(|m| m.port == port).unwrap();
    let replica_port = cluster.replicas[index].port;

    let load = hot_load(&envoy, 15_000);
    wait_until("half the limit admitted", Duration::from_secs(20), || load.admitted() >= LIMIT / 2);
    let admitted_before_kill = load.admitted();
    let killed_at = Instant::now();
    cluster.kill_master(index);
    let replica = cluster.node(replica_port);
    wait_until("the replica to be promoted", Duration::from_secs(20), || {
        replica.info_stat("replication", "role").as_deref() == Some("master")
            && cluster_state(replica).as_deref() == Some("ok")
    });
    let promoted_at = Instant::now();
    wait_until("denials on the new master", Duration::from_secs(20), || load.count_after(promoted_at, 429) >= 50);
    let outcomes = load.stop().all_answered();

    let resumed_at = outcomes.iter().find(|o| o.at > promoted_at && o.decided()).map(|o| o.at).unwrap();
    let resumed_after = resumed_at.saturating_duration_since(promoted_at);
    let admitted = outcomes.iter().filter(|o| o.status() == Some(200) && o.decided()).count();
    let undecided_200 = outcomes.iter().filter(|o| o.status() == Some(200) && !o.decided()).count();
    let failed = outcomes.iter().filter(|o| o.status() == Some(503)).count();
    let stored = replica.int(&["ZCARD", HOT_KEY]) as usize;
    let over = admitted.saturating_sub(LIMIT);
    let unknown = stat(&envoy, "store.unknown_outcome") as usize;
    println!(
        "cluster failover: {} requests; {admitted_before_kill} admitted before the kill; promotion {:?} after \
         the kill; limiting resumed {resumed_after:?} after the promotion; 503 during the switch: {failed}; \
         admitted {admitted} of limit {LIMIT} (over-admission {over}); entries on the new master {stored} \
         (lost with the old master: {}); failures that may have run {unknown}; slot map reads {}, read failures {}, \
         master stream failures {}, MOVED {}",
        outcomes.len(),
        promoted_at - killed_at,
        admitted.saturating_sub(stored),
        stat(&envoy, "cluster.refreshes"),
        stat(&envoy, "cluster.refresh_failures"),
        stat(&envoy, "cluster.shard_failures"),
        stat(&envoy, "cluster.moved"),
    );
    assert_eq!(undecided_200, 0, "deny mode: nothing passes undecided");
    // A hang detector, documented as the promise (docs/reliability.md): the
    // runs measured resumed under 100 ms after the promotion, thirty times
    // less, and the slot map's own refresh (5 s) is further off.
    assert!(resumed_after <= Duration::from_secs(3), "limiting resumed {resumed_after:?} after the promotion");
    // What the new master holds is the limit: it admitted only what fit on
    // top of what it had replicated. A request whose call may have run but
    // whose reply never came (the connection lost with the killed master)
    // is answered 503 yet may count.
    assert_eq!(stored, LIMIT, "the new master holds exactly the limit");
    assert!(admitted + unknown >= LIMIT, "admitted {admitted}, {unknown} failures that may have run");
    // Documented bound (docs/reliability.md): at most 1% of the limit is
    // lost with the killed master (replication on loopback lags by ms).
    assert!(over <= LIMIT / 100, "over-admission {over} beyond 1% of {LIMIT}");
    assert!(stat(&envoy, "cluster.shard_failures") >= 1);
}
