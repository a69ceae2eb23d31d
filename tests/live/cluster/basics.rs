//! Valkey Cluster through Envoy (`envoy/envoy-cluster.yaml`) against a real
//! cluster of 3 masters, each with a replica, started by the test: the
//! seed's scenario with users on every master, exact admission under
//! concurrency from 2 Envoys × 2 workers, and requests whose rules span
//! slots (two steps; one call with a shared `hash_tag`). Requests across
//! slots under load: `tests/live/cluster/cross.rs`.

use crate::support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use support::cluster::ValkeyCluster;
use support::load::{Load, Plan, Request};
use support::plugin::{plugin, rule, seed_rule, Plugin};
use support::{remaining, wait_until, Envoy};
use tollgate::store::cluster::key_slot;

const NOW: &str = "x-tollgate-test-now-ms";

fn cluster_plugin(failure_mode: &str) -> Plugin {
    plugin()
        .timeout("200ms")
        .valkey(r#""cluster_mode": { "seeds": "tollgate_valkey_seeds", "refresh": "5s" }"#)
        .failure_mode(failure_mode)
}

fn stat(envoy: &Envoy, name: &str) -> u64 {
    envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
}

fn seed_key(user: &str) -> String {
    format!("tollgate:{{auth.createToken:{user}}}:log")
}

/// One user per master whose seed bucket that master serves.
fn users_per_master(cluster: &ValkeyCluster, key: impl Fn(&str) -> String) -> Vec<(String, u16)> {
    let mut found: Vec<(String, u16)> = Vec::new();
    for i in 0.. {
        let user = format!("user{i}");
        let port = cluster.owner_port(key_slot(key(&user).as_bytes()));
        if !found.iter().any(|(_, p)| *p == port) {
            found.push((user, port));
        }
        if found.len() == cluster.masters.len() {
            return found;
        }
    }
    panic!("no user on every master")
}

fn zcard(cluster: &ValkeyCluster, port: u16, key: &str) -> i64 {
    cluster.node(port).int(&["ZCARD", key])
}

fn fcalls(cluster: &ValkeyCluster, port: u16) -> u64 {
    let field = cluster.node(port).info_stat("commandstats", "cmdstat_fcall").unwrap_or_default();
    field.split(',').find_map(|kv| kv.strip_prefix("calls=")).and_then(|n| n.parse().ok()).unwrap_or(0)
}

#[test]
fn the_seed_scenario_with_users_on_all_three_masters() {
    let cluster = ValkeyCluster::start(3, 2_000);
    let envoy = cluster.envoy(&cluster_plugin("deny").now_header(NOW).with(seed_rule()).json(), 1);
    let users = users_per_master(&cluster, seed_key);
    let t0 = 1_800_000_000_000u64.to_string();
    for (user, port) in &users {
        let table: Vec<(u16, u64, u64)> = (0..8)
            .map(|_| {
                let r = envoy.request("POST", "/auth/token", &[("x-user-id", user), (NOW, &t0)]);
                let left = remaining(&r);
                (r.status, left[0].1, left[1].1)
            })
            .collect();
        assert_eq!(
            table,
            [
                (200, 19, 4),
                (200, 18, 3),
                (200, 17, 2),
                (200, 16, 1),
                (200, 15, 0),
                (429, 15, 0),
                (429, 15, 0),
                (429, 15, 0)
            ],
            "{user} on master {port}"
        );
        assert_eq!(zcard(&cluster, *port, &seed_key(user)), 5, "{user}: the denied calls consumed nothing");
    }
    for (_, port) in &users {
        assert!(fcalls(&cluster, *port) >= 1, "master {port} decided its user's calls");
    }
    assert_eq!(stat(&envoy, "stream.opens"), 3, "one store stream per master");
    assert!(stat(&envoy, "cluster.refreshes") >= 1);
    assert_eq!(stat(&envoy, "cluster.moved") + stat(&envoy, "cluster.cross_shard"), 0);
    assert_eq!(stat(&envoy, "store.errors"), 0);
}

#[test]
fn exact_admission_under_concurrency_for_keys_on_every_master() {
    const LIMIT: usize = 40;
    let cluster = ValkeyCluster::start(3, 2_000);
    let config = cluster_plugin("deny").rule("hot", Some("x-user-id"), &[(LIMIT as u64, "1h")]).json();
    let envoys = [cluster.envoy(&config, 2), cluster.envoy(&config, 2)];
    let users = users_per_master(&cluster, |u| format!("tollgate:{{hot:{u}}}:log"));
    let names: Vec<String> = users.iter().map(|(u, _)| u.clone()).collect();
    // 4 clients per Envoy, each cycling over the three users.
    let loads: Vec<Load> = envoys
        .iter()
        .map(|envoy| {
            let names = names.clone();
            let request = move |thread: usize, i: usize| {
                Request::new("GET", "/", &[("x-user-id", names[(thread + i) % names.len()].as_str())])
            };
            Load::start(envoy.port, Plan::keep_alive(4, 150), Arc::new(request))
        })
        .collect();
    for load in &loads {
        wait_until("every request answered", Duration::from_secs(60), || load.answered() == 4 * 150);
    }
    // A client's i-th request was for user (thread + i) % 3.
    let mut admitted: HashMap<&str, usize> = HashMap::new();
    let (mut total, mut undecided) = (0, 0);
    for load in loads {
        for a in load.stop().samples {
            let user = names[(a.thread + a.index) % names.len()].as_str();
            total += 1;
            let r = a.response.as_ref().expect("every request is answered");
            undecided += usize::from(!a.decided());
            if r.status == 200 {
                *admitted.entry(user).or_default() += 1;
            }
        }
    }
    println!("{total} requests from 2 Envoys x 2 workers; admitted per user {admitted:?}");
    assert_eq!(undecided, 0, "every request decided by the store");
    for (user, port) in &users {
        assert_eq!(admitted.get(user.as_str()), Some(&LIMIT), "{user} on master {port}: exactly the limit");
        assert_eq!(zcard(&cluster, *port, &format!("tollgate:{{hot:{user}}}:log")), LIMIT as i64);
    }
    for envoy in &envoys {
        assert_eq!(stat(envoy, "store.errors"), 0);
    }
}

#[test]
fn rules_on_two_masters_are_decided_in_two_steps_and_a_shared_hash_tag_in_one_call() {
    let cluster = ValkeyCluster::start(3, 2_000);
    // failure_mode allow: a known denial does not depend on it.
    let untagged = cluster_plugin("allow")
        .with(rule("minute").header("x-user-id").limit(5, "1m"))
        .with(rule("hour").header("x-user-id").limit(3, "1h"));
    let envoy = cluster.envoy(&untagged.json(), 1);
    let key = |rule: &str, user: &str| format!("tollgate:{{{rule}:{user}}}:log");
    let owner = |k: &str| cluster.owner_port(key_slot(k.as_bytes()));
    let user = (0..).map(|i| format!("u{i}")).find(|u| owner(&key("minute", u)) != owner(&key("hour", u))).unwrap();
    let (minute, hour) = (key("minute", &user), key("hour", &user));
    let responses: Vec<_> = (0..4).map(|_| envoy.request("GET", "/", &[("x-user-id", &user)])).collect();
    let statuses: Vec<u16> = responses.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 200, 200, 429], "hour's limit of 3 binds");
    assert_eq!(zcard(&cluster, owner(&minute), &minute), 3, "the denial left minute's bucket unchanged");
    assert_eq!(zcard(&cluster, owner(&hour), &hour), 3);
    assert_eq!(remaining(&responses[3]), [("minute/1m".to_string(), 2), ("hour/1h".to_string(), 0)]);
    assert_eq!(stat(&envoy, "cluster.cross_shard"), 4);
    assert_eq!((stat(&envoy, "cluster.undos"), stat(&envoy, "cluster.undo_failed")), (1, 0));
    assert_eq!(stat(&envoy, "store.errors"), 0);
    drop(envoy);
    for master in &cluster.masters {
        master.cmd(&["FLUSHALL"]);
    }

    let tagged = cluster_plugin("deny")
        .with(rule("minute").header("x-user-id").field(r#""hash_tag": 0"#).limit(3, "1m"))
        .with(rule("path").header("x-user-id").key(r#""path""#).field(r#""hash_tag": 0"#).limit(2, "1h"));
    let envoy = cluster.envoy(&tagged.json(), 1);
    let statuses: Vec<u16> = (0..3).map(|_| envoy.request("GET", "/a", &[("x-user-id", "alice")]).status).collect();
    assert_eq!(statuses, [200, 200, 429]);
    let port = cluster.owner_port(key_slot(b"alice"));
    assert_eq!(zcard(&cluster, port, "tollgate:{alice}:minute:alice:log"), 2, "the denial consumed nothing");
    assert_eq!(zcard(&cluster, port, "tollgate:{alice}:path:alice:%2Fa:log"), 2);
    assert_eq!(stat(&envoy, "cluster.cross_shard"), 0);
    let keys: Vec<i64> = cluster.masters.iter().map(|n| n.int(&["DBSIZE"])).collect();
    assert_eq!(keys.iter().sum::<i64>(), 2, "both buckets, on one master: {keys:?}");
}
