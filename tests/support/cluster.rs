//! A real Valkey Cluster on loopback ports for the cluster tests: masters
//! and one replica each, `valkey-server --cluster-enabled yes`, joined by
//! scripts/valkey-cluster-join.sh (the bootstrap `make bench` and compose use
//! too: CLUSTER MEET, ADDSLOTSRANGE, REPLICATE, then `cluster_state:ok` on
//! every node); ready when, beyond that, every replica is in sync (polled,
//! never slept for). Also resharding one slot by hand, and Envoy with
//! `envoy/envoy-cluster.yaml` pointed at the nodes.

use super::envoy::{Bootstrap, Envoy, EnvoyOptions};
use super::load::{send_raw, Request};
use super::{repo_root, wait_until, Valkey};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tollgate::resp::Value;

/// A cluster of `masters.len()` masters, `replicas[i]` replicating `masters[i]`.
pub struct ValkeyCluster {
    pub masters: Vec<Valkey>,
    pub replicas: Vec<Valkey>,
    /// Ports of the nodes killed.
    dead: Vec<u16>,
}

fn text(value: &Value) -> String {
    match value {
        Value::Bulk(b) | Value::Simple(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("expected text, got {other:?}"),
    }
}

/// `field` of `INFO`'s text.
fn info_field(node: &Valkey, section: &str, field: &str) -> Option<String> {
    node.info_stat(section, field)
}

/// `cluster_state` of `CLUSTER INFO` (`ok` or `fail`).
pub fn cluster_state(node: &Valkey) -> Option<String> {
    let info = text(&node.cmd(&["CLUSTER", "INFO"]));
    info.lines().find_map(|l| l.strip_prefix("cluster_state:").map(|s| s.trim().to_string()))
}

impl ValkeyCluster {
    /// `masters` masters, each with one replica; `node_timeout_ms` is
    /// `cluster-node-timeout` (how long before a silent master is failed over).
    pub fn start(masters: usize, node_timeout_ms: u64) -> ValkeyCluster {
        let timeout = node_timeout_ms.to_string();
        // A replica's first sync starts at once (the default waits 5 s for
        // more replicas to share it).
        let args = ["--cluster-enabled", "yes", "--cluster-node-timeout", &timeout, "--repl-diskless-sync-delay", "0"];
        let start = || Valkey::start_with(&args);
        let cluster = ValkeyCluster {
            masters: (0..masters).map(|_| start()).collect(),
            replicas: (0..masters).map(|_| start()).collect(),
            dead: Vec::new(),
        };
        let shards: Vec<String> = (cluster.masters.iter().zip(&cluster.replicas))
            .map(|(master, replica)| format!("127.0.0.1:{},127.0.0.1:{}", master.port, replica.port))
            .collect();
        join(&shards);
        cluster.wait_ok();
        cluster
    }

    /// Every node that runs, masters (as started) first.
    pub fn nodes(&self) -> impl Iterator<Item = &Valkey> {
        self.masters.iter().chain(&self.replicas).filter(|n| !self.dead.contains(&n.port))
    }

    /// Kills (SIGKILL) master `i` as started.
    pub fn kill_master(&mut self, i: usize) {
        self.masters[i].stop();
        self.dead.push(self.masters[i].port);
    }

    /// Every node reports `cluster_state:ok` and every replica is in sync.
    pub fn wait_ok(&self) {
        wait_until("cluster_state:ok on every node, replicas in sync", Duration::from_secs(30), || {
            self.nodes().all(|n| cluster_state(n).as_deref() == Some("ok"))
                && self.replicas.iter().filter(|r| !self.dead.contains(&r.port)).all(|r| {
                    info_field(r, "replication", "master_link_status").as_deref() == Some("up")
                        || info_field(r, "replication", "role").as_deref() == Some("master")
                })
        });
    }

    /// The node serving `slot`, as the first node alive sees it.
    pub fn owner_port(&self, slot: u16) -> u16 {
        let alive = self.nodes().next().unwrap();
        let reply = alive.cmd(&["CLUSTER", "SLOTS"]);
        for range in reply.as_array().unwrap() {
            let items = range.as_array().unwrap();
            let (from, to) = (items[0].as_integer().unwrap(), items[1].as_integer().unwrap());
            if (from..=to).contains(&i64::from(slot)) {
                return items[2].as_array().unwrap()[1].as_integer().unwrap() as u16;
            }
        }
        panic!("no node serves slot {slot}");
    }

    /// The node listening on `port`.
    pub fn node(&self, port: u16) -> &Valkey {
        self.nodes().find(|n| n.port == port).unwrap()
    }

    /// `CLUSTER SETSLOT <slot> IMPORTING` on `to`, `MIGRATING` on `from`.
    pub fn begin_migration(&self, slot: u16, from: &Valkey, to: &Valkey) {
        let slot = slot.to_string();
        let (from_id, to_id) = (text(&from.cmd(&["CLUSTER", "MYID"])), text(&to.cmd(&["CLUSTER", "MYID"])));
        assert_eq!(text(&to.cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id])), "OK");
        assert_eq!(text(&from.cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id])), "OK");
    }

    /// `MIGRATE`s every key of `slot` from `from` to `to`; how many moved.
    pub fn migrate_keys(&self, slot: u16, from: &Valkey, to: &Valkey) -> usize {
        let mut moved = 0;
        loop {
            let keys = from.cmd(&["CLUSTER", "GETKEYSINSLOT", &slot.to_string(), "100"]);
            let keys: Vec<String> = keys.as_array().unwrap().iter().map(text).collect();
            if keys.is_empty() {
                return moved;
            }
            let port = to.port.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            assert_eq!(text(&from.cmd(&args)), "OK");
            moved += keys.len();
        }
    }

    /// `CLUSTER SETSLOT <slot> NODE <to>` on `to`, then `from`, then the
    /// other masters (the order of the cluster tutorial: the target first,
    /// so that no node sends the slot back to the source).
    pub fn end_migration(&self, slot: u16, from: &Valkey, to: &Valkey) {
        let id = text(&to.cmd(&["CLUSTER", "MYID"]));
        let others =
            self.masters.iter().filter(|m| !self.dead.contains(&m.port) && m.port != from.port && m.port != to.port);
        for master in [to, from].into_iter().chain(others) {
            let reply = master.cmd(&["CLUSTER", "SETSLOT", &slot.to_string(), "NODE", &id]);
            assert_eq!(text(&reply), "OK", "SETSLOT NODE on {}", master.port);
        }
    }

    /// Envoy (`envoy/envoy-cluster.yaml`, `concurrency` workers) with
    /// `plugin_config`, its seeds being every node of this cluster.
    pub fn envoy(&self, plugin_config: &str, concurrency: u32) -> Envoy {
        self.envoy_edited(plugin_config, concurrency, &|text| text)
    }

    /// [`ValkeyCluster::envoy`] with the rendered configuration also changed
    /// by `edit` (e.g. the demo upstream's port).
    pub fn envoy_edited(&self, plugin_config: &str, concurrency: u32, edit: &dyn Fn(String) -> String) -> Envoy {
        let options = EnvoyOptions { plugin_config: plugin_config.to_string(), valkey_port: 0, concurrency };
        let ports: Vec<u16> = self.nodes().map(|n| n.port).collect();
        Envoy::try_start_bootstrap_edited(&options, Bootstrap::Cluster, &move |text| edit(seeds(&text, &ports)))
            .unwrap_or_else(|log| panic!("envoy did not start:\n{log}"))
    }
}

/// scripts/valkey-cluster-join.sh with `shards` (`MASTER,REPLICA` each).
fn join(shards: &[String]) {
    let script = repo_root().join("scripts/valkey-cluster-join.sh");
    let out = Command::new("sh").arg(&script).args(shards).output().expect("run sh");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{} {shards:?} failed:\n{said}", script.display());
}

/// The seed endpoints of envoy-cluster.yaml (ports 7000-7002) replaced by
/// one endpoint per port of `ports`.
fn seeds(text: &str, ports: &[u16]) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "- endpoint:" && lines.clone().nth(1).is_some_and(|l| l.contains("port_value: 7000 ")) {
            let indent = &line[..line.len() - line.trim_start().len()];
            for port in ports {
                out.push_str(&format!(
                    "{indent}- endpoint:\n{indent}    address:\n{indent}      socket_address: {{ address: 127.0.0.1, port_value: {port} }}\n"
                ));
            }
            // Skip the three endpoints of the file (3 lines each).
            for _ in 0..8 {
                lines.next();
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    assert!(!out.contains("port_value: 7000 "), "the seed endpoints were not replaced");
    out
}
