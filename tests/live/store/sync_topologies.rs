//! Synced rules (`rules[].sync`, docs/sync.md) on the store topologies
//! beyond one Valkey, through a real Envoy of one worker (so that once it
//! has synced a bucket, every request of it is decided on the worker):
//!
//! - Sentinel (`envoy/envoy-sentinel.yaml`): the flushes reach the master
//!   the Sentinels name, whose count is what Envoy admitted; after that
//!   master is killed and its replica promoted, they reach the new master,
//!   the units admitted meanwhile included.
//! - Valkey Cluster of 3 masters (`envoy/envoy-cluster.yaml`): four users,
//!   two of them in one slot, the others on the other masters; each master
//!   gets one flush call per slot per interval, the shared slot's carrying
//!   both buckets, and each master counts what was admitted per user.

use crate::support;

use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;
use support::cluster::ValkeyCluster;
use support::load::{Counts, Load, Plan, Request};
use support::plugin::{plugin, rule, Plugin};
use support::sentinel::{self, topology, MASTER_NAME};
use support::{wait_until, Envoy, Valkey};
use tollgate::store::cluster::key_slot;

const INTERVAL_MS: u64 = 100;

/// `base` with rule `sync` per `x-user-id`, far from its limit, synced
/// every [`INTERVAL_MS`].
fn config(base: Plugin) -> String {
    let sync = format!(r#""sync": {{ "interval": "{INTERVAL_MS}ms" }}"#);
    base.timeout("200ms").with(rule("sync").header("x-user-id").limit(1_000_000, "1h").field(&sync)).json()
}

/// The bucket of `user` (sliding_log: one entry per admitted unit).
fn key(user: &str) -> String {
    format!("tollgate:{{sync:{user}}}:log")
}

fn stat(envoy: &Envoy, name: &str) -> u64 {
    envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
}

/// One request as `user`, which must be admitted by the limiter.
fn admit(envoy: &Envoy, user: &str) {
    let r = envoy.request("GET", "/", &[("x-user-id", user)]);
    assert_eq!((r.status, r.header("ratelimit").is_some()), (200, true), "{user}: {r:?}");
}

/// Sends rounds of one request per user until a whole round is decided on
/// the worker; how many requests each user sent.
fn until_synced(envoy: &Envoy, users: &[&str]) -> u64 {
    let mut rounds = 0;
    wait_until("a round decided on the worker", Duration::from_secs(10), || {
        let before = stat(envoy, "sync.allowed");
        users.iter().for_each(|u| admit(envoy, u));
        rounds += 1;
        stat(envoy, "sync.allowed") - before == users.len() as u64
    });
    rounds
}

/// `n` requests per user, round robin, each decided on the worker.
fn admit_locally(envoy: &Envoy, users: &[&str], n: u64) {
    let before = stat(envoy, "sync.allowed");
    for _ in 0..n {
        users.iter().for_each(|u| admit(envoy, u));
    }
    assert_eq!(stat(envoy, "sync.allowed") - before, n * users.len() as u64, "every request decided on the worker");
}

/// One client on `envoy` sending a request for `user` every `pace`,
/// counted in `counts`.
fn load(counts: &Counts, envoy: &Envoy, user: &str, pace: Duration) -> Load {
    let plan = Plan { pace: Some(pace), keep: false, ..Plan::closed(1, 1_000_000) }.on_answer(counts.on_answer());
    let request = Request::new("GET", "/", &[("x-user-id", user)]);
    Load::start(envoy.port, plan, Arc::new(move |_: usize, _: usize| request.clone()))
}

fn count(node: &Valkey, user: &str) -> u64 {
    node.int(&["ZCARD", &key(user)]) as u64
}

#[test]
fn sentinel_flushes_reach_the_master_and_after_a_failover_the_new_one() {
    let (mut master, replica, sentinels) = topology();
    let base = plugin().valkey(&format!(
        r#""sentinel": {{ "cluster": "tollgate_sentinels", "master_name": "{MASTER_NAME}", "refresh": "5s" }}"#
    ));
    let envoy = sentinel::envoy(&sentinels, &config(base), 1);
    let mut admitted = until_synced(&envoy, &["alice"]);
    admit_locally(&envoy, &["alice"], 40);
    admitted += 40;
    // The flushes reach the master, and it replicates them.
    wait_until("the master and its replica to count every admission", Duration::from_secs(5), || {
        count(&master, "alice") == admitted && count(&replica, "alice") == admitted
    });
    // Requests go on through the failover, one per 20 ms: a bucket with no
    // request for 3 intervals is the store's again (docs/sync.md), and
    // these are decided on the worker from its last view while its flushes
    // fail.
    let local_before = stat(&envoy, "sync.allowed");
    let through = Counts::default();
    let load = load(&through, &envoy, "alice", Duration::from_millis(20));
    let store_requests = stat(&envoy, "store.requests");

    master.stop(); // SIGKILL
    wait_until("a Sentinel to report the replica as master", Duration::from_secs(20), || {
        sentinels.iter().any(|s| s.master_port() == Some(replica.port))
    });
    // Decided on the worker from its last view; flushed to the new master.
    for _ in 0..40 {
        admit(&envoy, "alice");
    }
    load.stop();
    let (sent, kept) = (through.sent(), through.admitted());
    assert_eq!(kept, sent, "every request through the failover admitted with its headers");
    // Decided on the worker, but for the first few: the bucket had no
    // request while the counts were read, more than 3 intervals, and is
    // rejoined (read half an interval later: about 3 requests at this pace).
    let local = stat(&envoy, "sync.allowed") - local_before;
    assert!(local <= 40 + kept && local + 5 >= 40 + kept, "{local} of {} decided on the worker", 40 + kept);
    admitted += 40 + kept;
    wait_until("the new master to count every admission", Duration::from_secs(15), || {
        count(&replica, "alice") == admitted
    });
    println!(
        "sync behind Sentinel: {admitted} admitted, {} decided on the worker, {store_requests} store calls before the \
         failover; flushes {}, sent again {}, dropped {}; Sentinel switches {}",
        stat(&envoy, "sync.allowed"),
        stat(&envoy, "sync.flushes"),
        stat(&envoy, "sync.failures"),
        stat(&envoy, "sync.dropped"),
        stat(&envoy, "sentinel.switches"),
    );
    assert!(stat(&envoy, "sentinel.switches") >= 1, "the worker switched to the new master");
    assert_eq!(stat(&envoy, "sync.dropped"), 0);
}

/// Users `a` and `b` whose buckets share a slot, then `c` and `d` whose
/// buckets are each on another master.
fn users(cluster: &ValkeyCluster) -> [String; 4] {
    let slot = |u: &str| key_slot(key(u).as_bytes());
    let mut seen = std::collections::HashMap::new();
    let (a, b) = (0..).map(|i| format!("u{i}")).find_map(|u| seen.insert(slot(&u), u.clone()).map(|a| (a, u))).unwrap();
    let owner = |u: &str| cluster.owner_port(slot(u));
    let c = (0..).map(|i| format!("c{i}")).find(|u| owner(u) != owner(&a)).unwrap();
    let d = (0..).map(|i| format!("d{i}")).find(|u| owner(u) != owner(&a) && owner(u) != owner(&c)).unwrap();
    [a, b, c, d]
}

/// The `FCALL`s `node` has run.
fn fcalls(node: &Valkey) -> u64 {
    node.info_stat("commandstats", "cmdstat_fcall")
        .and_then(|s| s.strip_prefix("calls=")?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn cluster_masters_get_one_flush_per_slot_per_interval() {
    let cluster = ValkeyCluster::start(3, 2_000);
    let base = plugin().valkey(r#""cluster_mode": { "seeds": "tollgate_valkey_seeds", "refresh": "5s" }"#);
    let envoy = cluster.envoy(&config(base), 1);
    let names = users(&cluster);
    let users: Vec<&str> = names.iter().map(String::as_str).collect();
    let warmup = until_synced(&envoy, &users);
    let owner = |u: &str| cluster.node(cluster.owner_port(key_slot(key(u).as_bytes())));
    // Everything the warm-up sent has landed: counts settle.
    wait_until("the warm-up counted", Duration::from_secs(5), || users.iter().all(|u| count(owner(u), u) == warmup));
    let masters = [owner(users[0]), owner(users[2]), owner(users[3])];
    let calls_before: Vec<u64> = masters.iter().map(|m| fcalls(m)).collect();
    let (flushes_before, keys_before) = (stat(&envoy, "sync.flushes"), stat(&envoy, "sync.keys"));
    let requests_before = stat(&envoy, "store.requests");
    let (decided_before, local_before) = (stat(&envoy, "rule.sync.allowed"), stat(&envoy, "sync.allowed"));
    let started = Instant::now();
    // The buckets had no request while the counts settled: for more than 3
    // intervals, the store's again (docs/sync.md). Rejoined and read: from
    // here on every request is decided on the worker.
    let rejoin = until_synced(&envoy, &users);

    // About a second of requests, every user in every interval.
    let mut rounds = 0;
    while started.elapsed() < Duration::from_secs(1) {
        admit_locally(&envoy, &users, 1);
        rounds += 1;
    }
    let admitted = warmup + rejoin + rounds;
    wait_until("each master to count what was admitted per user", Duration::from_secs(5), || {
        users.iter().all(|u| count(owner(u), u) == admitted)
    });
    let calls = || -> Vec<u64> { masters.iter().zip(&calls_before).map(|(m, b)| fcalls(m) - b).collect() };
    let flushes = || stat(&envoy, "sync.flushes") - flushes_before;
    // Every store call since is a flush (each one run is answered), but for
    // the decisions of the rejoin.
    let by_store = stat(&envoy, "rule.sync.allowed") - decided_before - (stat(&envoy, "sync.allowed") - local_before);
    assert!(by_store <= rejoin * users.len() as u64, "decided by the store only while rejoining: {by_store}");
    wait_until("every flush answered", Duration::from_secs(5), || calls().iter().sum::<u64>() == flushes() + by_store);
    let (calls, flushes, keys) = (calls(), flushes(), stat(&envoy, "sync.keys") - keys_before);
    let intervals = started.elapsed().as_millis() as u64 / INTERVAL_MS;
    println!(
        "sync on a Valkey Cluster: {} requests in {intervals} intervals ({rounds} per user), flushes per master \
         {calls:?} (the first holding 2 buckets of one slot), {keys} keys in {flushes} flushes, {} store calls",
        rounds * users.len() as u64,
        stat(&envoy, "store.requests") - requests_before,
    );
    for (master, n) in masters.iter().zip(&calls) {
        // (Beside its flushes, a master decided the rejoin's first requests
        // of its users: two for the shared slot's master.)
        let most = intervals + 2 + 2 * rejoin;
        assert!((1..=most).contains(n), "master {}: {n} flushes in {intervals} intervals", master.port);
    }
    // The shared slot's flushes carry both buckets, the others one each.
    assert!(keys > flushes && keys <= flushes + calls[0], "{keys} keys in {flushes} flushes");
    let store_calls = stat(&envoy, "store.requests") - requests_before;
    assert_eq!(store_calls, flushes + by_store, "no store call but the flushes (and the rejoin's)");
}
