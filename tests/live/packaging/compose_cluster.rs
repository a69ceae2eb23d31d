//! envoy/docker-compose.yml's `cluster` profile, run for real (the engine and
//! images as in tests/live/packaging/compose.rs: local stand-ins, nothing pulled): three
//! Valkey masters and their replicas joined by `cluster-init`, and
//! `envoy-cluster` reading the slot map from them. The seed's scenario for
//! three users, one on each master: each master holds its user's entries
//! (read there), the others answer `MOVED` for that key; every master has its
//! replica. `docker compose down` leaves nothing behind, also on failure
//! (the project is dropped).

use crate::support;

use std::time::{Duration, Instant};
use support::docker::{engine_and_images, Project};
use support::{admin_get, http, parse_stats, settled, try_command, wait_until, Response, TOLLGATE_STATS};
use tollgate::resp::Value;
use tollgate::store::cluster::key_slot;

const WAIT: Duration = Duration::from_secs(60);
const MASTERS: [(&str, u16); 3] = [("cluster-1", 7000), ("cluster-2", 7001), ("cluster-3", 7002)];
/// The slots cluster-init gives each master.
const RANGES: [(u16, u16); 3] = [(0, 5460), (5461, 10922), (10923, 16383)];

fn key(user: &str) -> String {
    format!("tollgate:{{auth.createToken:{user}}}:log")
}

/// A user whose bucket is in the slots of master `m`.
fn user_on(m: usize) -> String {
    let (from, to) = RANGES[m];
    (0..).map(|i| format!("user{i}")).find(|u| (from..=to).contains(&key_slot(key(u).as_bytes()))).unwrap()
}

fn command(port: u16, args: &[&str]) -> Value {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    try_command(port, &args).unwrap()
}

fn text(v: &Value) -> String {
    match v {
        Value::Bulk(b) | Value::Simple(b) | Value::Error(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    }
}

fn token(port: u16, user: &str) -> Response {
    http(port, "POST", "/auth/token", &[("x-user-id", user)]).unwrap()
}

/// A tollgate stat, settled (`support::envoy::settled`), of the Envoy
/// whose admin port is `admin`.
fn stat(admin: u16, name: &str) -> u64 {
    let read = || parse_stats(&admin_get(admin, &format!("/stats?filter={TOLLGATE_STATS}")).unwrap().body_text());
    settled(read).get(name).copied().unwrap_or(0)
}

#[test]
fn cluster_profile_limits_users_on_every_master() {
    let Some(_engine) = engine_and_images() else { return };
    let started = Instant::now();
    let published: String = MASTERS.iter().map(|(s, p)| format!("  {s}:\n    ports: [\"127.0.0.1::{p}\"]\n")).collect();
    let env = [("TOLLGATE_CLUSTER_PORT", "0"), ("TOLLGATE_CLUSTER_ADMIN_PORT", "0")];
    let mut project = Project::new("cluster", &format!("services:\n{published}"), &env);
    // `up` returns once cluster-init has exited 0 and Envoy started.
    project.ok(&["up", "--detach", "--pull", "never", "envoy-cluster"]);
    let (port, admin) = (project.port("envoy-cluster", 10000), project.port("envoy-cluster", 9901));
    let masters: Vec<u16> = MASTERS.iter().map(|(s, p)| project.port(s, *p)).collect();
    let init = project.logs("cluster-init");
    assert!(init.contains("cluster-init: 3 masters"), "cluster-init:\n{init}");
    wait_until("a decision through the cluster", WAIT, || {
        http(port, "POST", "/auth/token", &[("x-user-id", "warmup")]).is_ok_and(|r| r.header("ratelimit").is_some())
    });
    let up = started.elapsed();

    // Three masters, each with one replica, all connected.
    let nodes = text(&command(masters[0], &["CLUSTER", "NODES"]));
    let connected: Vec<&str> = nodes.lines().filter(|l| l.contains(" connected")).collect();
    assert_eq!(connected.len(), 6, "{nodes}");
    let replicas = connected.iter().filter(|l| l.split(' ').nth(2).is_some_and(|f| f.contains("slave"))).count();
    assert_eq!(replicas, 3, "{nodes}");

    let users: Vec<String> = (0..3).map(user_on).collect();
    for user in &users {
        for call in 1..=5 {
            let r = token(port, user);
            assert_eq!(r.status, 200, "{user}, call {call}: {}", r.body_text());
            assert!(r.header("ratelimit").is_some_and(|h| h.contains("\"auth.createToken/3s\";r=")), "{r:?}");
        }
        let denied = token(port, user);
        assert_eq!(denied.status, 429, "{user}, call 6: {denied:?}");
        assert_eq!(denied.header("content-type"), Some("application/problem+json"));
    }
    // Each user's bucket is on its master, with the 5 admissions only.
    for (m, user) in users.iter().enumerate() {
        for (n, &master) in masters.iter().enumerate() {
            let held = command(master, &["ZCARD", &key(user)]);
            if n == m {
                assert_eq!(held, Value::Integer(5), "{user} on {}", MASTERS[m].0);
            } else {
                assert!(text(&held).starts_with("MOVED "), "{user} on {}: {held:?}", MASTERS[n].0);
            }
        }
    }
    assert_eq!(stat(admin, "wasmcustom.tollgate.rule.auth.createToken.allowed"), 15 + 1);
    assert_eq!(stat(admin, "wasmcustom.tollgate.rule.auth.createToken.denied"), 3);
    assert!(stat(admin, "wasmcustom.tollgate.cluster.refreshes") >= 1);
    assert!(stat(admin, "wasmcustom.tollgate.stream.opens") >= 3, "a stream to each master");
    assert_eq!(stat(admin, "wasmcustom.tollgate.store.errors"), 0);

    let left = project.down();
    assert!(left.is_empty(), "docker compose down left {left:?}");
    println!("compose cluster profile: up and deciding in {up:?}, whole test {:?}", started.elapsed());
}
