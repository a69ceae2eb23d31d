//! The operating commands' store client on the topologies the filter
//! supports, through the real binary: a Valkey Cluster of 3 masters (each
//! command sent to its key's master; SCAN on every master), Sentinel (the
//! master asked of the Sentinels, a dead Sentinel skipped), and Redis 7 with
//! TLS and client certificates.

use super::cli_ops::{config_file, tollgate};
use crate::support;

use support::cluster::ValkeyCluster;
use support::sentinel::{topology, MASTER_NAME};
use support::tls::{Certs, Redis};
use tollgate::store::cluster::key_slot;

#[test]
fn cluster_routes_each_bucket_to_its_master_and_scans_them_all() {
    let cluster = ValkeyCluster::start(3, 5_000);
    let file = config_file("cluster");
    let file = file.to_str().unwrap();
    let seed = format!("127.0.0.1:{}", cluster.masters[0].port);
    // Users whose buckets live on each of the three masters.
    let mut users: Vec<(String, u16)> = Vec::new();
    for i in 0.. {
        let user = format!("u{i}");
        let owner = cluster.owner_port(key_slot(format!("tollgate:{{login:{user}}}:log").as_bytes()));
        if !users.iter().any(|(_, p)| *p == owner) {
            users.push((user, owner));
        }
        if users.len() == 3 {
            break;
        }
    }
    for (user, owner) in &users {
        let node = cluster.node(*owner);
        node.cmd(&["ZADD", &format!("tollgate:{{login:{user}}}:log"), "1", "a"]);
        let key = format!("x-user-id={user}");
        let set = ["override", "set", file, "--rule", "login", "--key", &key, "--times", "3", "--cluster", &seed];
        let (code, _, err) = tollgate(&set, &[]);
        assert_eq!((code, err.as_str()), (0, ""), "{user}");
        assert_eq!(node.int(&["HEXISTS", &format!("tollgate:{{login:{user}}}:ovr"), "w3000"]), 1, "on its master");
    }
    let (code, out, err) = tollgate(&["override", "list", file, "--cluster", &seed], &[]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.ends_with("3 overrides (keys under \"tollgate\")\n"), "{out}");
    let one = format!("x-user-id={}", users[2].0);
    let (code, out, _) = tollgate(&["reset", file, "--rule", "login", "--key", &one, "--cluster", &seed], &[]);
    assert_eq!(code, 0);
    assert!(out.ends_with("1 key deleted\n"), "{out}");
    let (code, out, _) = tollgate(&["reset", file, "--rule", "login", "--all-keys", "--cluster", &seed], &[]);
    assert_eq!(code, 0);
    assert!(out.ends_with("2 buckets, 2 keys deleted (pattern tollgate:{login:*}:*)\n"), "{out}");
    for (user, owner) in &users {
        assert_eq!(cluster.node(*owner).int(&["EXISTS", &format!("tollgate:{{login:{user}}}:log")]), 0);
    }
}

#[test]
fn sentinel_finds_the_master() {
    let (master, _replica, sentinels) = topology();
    let file = config_file("sentinel");
    let file = file.to_str().unwrap();
    // A Sentinel that is not there first: the next one answers.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let list = format!("127.0.0.1:{dead},127.0.0.1:{},127.0.0.1:{}", sentinels[0].port, sentinels[1].port);
    let set = ["override", "set", file, "--rule", "login", "--key", "x-user-id=alice", "--limit", "60s=40"];
    let (code, out, err) = tollgate(&[&set[..], &["--sentinel", &list, "--master", MASTER_NAME]].concat(), &[]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.contains("60s window: 40 (configured 20)"), "{out}");
    assert_eq!(master.int(&["HEXISTS", "tollgate:{login:alice}:ovr", "w60000"]), 1);
    let (code, _, err) = tollgate(&[&set[..], &["--sentinel", &list, "--master", "other"]].concat(), &[]);
    assert_eq!(code, 4, "{err}");
    assert!(err.starts_with("tollgate: no Sentinel gave a master: ") && err.contains("\"other\""), "{err}");
}

#[test]
fn tls_with_a_client_certificate() {
    let certs = Certs::generate("cli-tls");
    let redis = Redis::start_tls(&certs);
    let file = config_file("tls");
    let file = file.to_str().unwrap();
    let path = |f: &str| certs.path(f).display().to_string();
    let store = format!("rediss://localhost:{}", redis.tls_port);
    let set =
        ["override", "set", file, "--rule", "login", "--key", "x-user-id=alice", "--times", "2", "--store", &store];
    let tls = ["--tls-ca", &path("ca.crt"), "--tls-cert", &path("client.crt"), "--tls-key", &path("client.key")];
    let (code, _, err) = tollgate(&[&set[..], &tls[..]].concat(), &[]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(redis.cmd(&["HGET", "tollgate:{login:alice}:ovr", "w60000"]).as_bytes(), Some(&b"40"[..]));
    // Without the client certificate the server closes the connection;
    // with the Mozilla roots instead of the test CA the certificate is refused.
    let (code, _, err) = tollgate(&[&set[..], &tls[..2]].concat(), &[]);
    assert_eq!(code, 4, "{err}");
    let (code, _, err) = tollgate(&set, &[]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("TLS handshake failed") && err.contains("UnknownIssuer"), "{err}");
}

/// A slot on the move: while it migrates from one master to another (the
/// map still naming the source), `override set` on a key of it is answered
/// `ASK` by the source and carried out on the target (`ASKING`, then the
/// `MULTI` the write is); `inspect`'s dry run, whose keys are then split
/// between the two (`TRYAGAIN`), is tried again for 2 s and then refused in
/// one line (exit 4); once the slot has moved, the commands reach its new
/// master.
#[test]
fn cluster_commands_follow_a_slot_while_it_moves() {
    let cluster = ValkeyCluster::start(3, 5_000);
    let file = config_file("migrating");
    let file = file.to_str().unwrap();
    let (a, b, c) = (&cluster.masters[0], &cluster.masters[1], &cluster.masters[2]);
    let user = (0..)
        .map(|i| format!("m{i}"))
        .find(|u| cluster.owner_port(key_slot(format!("tollgate:{{login:{u}}}:log").as_bytes())) == a.port)
        .unwrap();
    let slot = key_slot(format!("tollgate:{{login:{user}}}:log").as_bytes());
    let ovr = format!("tollgate:{{login:{user}}}:ovr");
    cluster.begin_migration(slot, a, b);
    let seed = format!("127.0.0.1:{}", c.port);
    let key = format!("x-user-id={user}");
    let set = ["override", "set", file, "--rule", "login", "--key", &key, "--times", "3", "--cluster", &seed];
    let (code, out, err) = tollgate(&set, &[]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    let keys_in = |node: &support::Valkey| node.int(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]);
    assert_eq!((keys_in(a), keys_in(b)), (0, 1), "written on the target");
    // The dry run names the window key (on neither master) and the
    // override (on the target): split keys, TRYAGAIN until the slot moved.
    let inspect = ["inspect", file, "--rule", "login", "--key", &key, "--cluster", &seed, "--json"];
    let (code, _, err) = tollgate(&inspect, &[]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("is being migrated") && err.lines().count() == 1, "{err}");
    cluster.end_migration(slot, a, b);
    let (code, out, err) = tollgate(&inspect, &[]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["windows"][1]["limit"], 15, "the dry run on the new master read the override: {doc:#}");
    assert_eq!(doc["override"]["w3000"], "15");
    let rm = ["override", "rm", file, "--rule", "login", "--key", &key, "--cluster", &seed];
    let (code, out, err) = tollgate(&rm, &[]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert_eq!(b.int(&["EXISTS", &ovr]), 0, "removed on the slot's new master");
}
