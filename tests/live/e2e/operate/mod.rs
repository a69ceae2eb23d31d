//! Operating live keys (#42) through the real `tollgate` binary against the
//! Valkey a real Envoy is deciding on at the same moment, on one Valkey, a
//! Valkey Cluster of 3 masters and behind Sentinel: a user locked out by the
//! seed's rule (5 per 3 s AND 20 per 60 s) is inspected (the output names
//! the window that denies, its reset, and the headers the client just got),
//! reset, and admitted on the next request; an override of 10× on one key
//! lets exactly 10× through, across 2 Envoys × 2 workers, while every other
//! key keeps the configured limit; an override that expires stops applying
//! at its `until`, to the ms. Time is injected (`testing.now_header`), so
//! the CLI's dry run is asked at the same time (`inspect --at`).

mod scenario;

use crate::support;

use support::cluster::ValkeyCluster;
use support::plugin::{plugin, seed_rule};
use support::sentinel::{self, topology, Sentinel, MASTER_NAME};
use support::{Envoy, EnvoyOptions, Valkey};
use tollgate::store::cluster::key_slot;

/// Where the state lives, and how Envoy and the CLI reach it.
pub enum Store {
    One(Valkey),
    Cluster(ValkeyCluster),
    Sentinel { _master: Valkey, _replica: Valkey, sentinels: Vec<Sentinel> },
}

pub const NOW: &str = "x-tollgate-test-now-ms";

impl Store {
    /// The seed's rule, open to overrides, with the store's `valkey` fields.
    pub fn plugin_config(&self) -> String {
        let base = plugin().timeout("500ms").failure_mode("deny").now_header(NOW);
        let base = match self {
            Store::One(_) => base,
            Store::Cluster(_) => {
                base.valkey(r#""cluster_mode": { "seeds": "tollgate_valkey_seeds", "refresh": "5s" }"#)
            }
            Store::Sentinel { .. } => base.valkey(&format!(
                r#""sentinel": {{ "cluster": "tollgate_sentinels", "master_name": "{MASTER_NAME}", "refresh": "5s" }}"#
            )),
        };
        base.with(seed_rule().field(r#""overrides": true"#)).json()
    }

    /// An Envoy of 2 workers deciding on this store.
    pub fn envoy(&self) -> Envoy {
        let config = self.plugin_config();
        match self {
            Store::One(v) => {
                let options = EnvoyOptions { plugin_config: config, valkey_port: v.port, concurrency: 2 };
                Envoy::try_start(&options).unwrap_or_else(|log| panic!("envoy did not start:\n{log}"))
            }
            Store::Cluster(c) => c.envoy(&config, 2),
            Store::Sentinel { sentinels, .. } => sentinel::envoy(sentinels, &config, 2),
        }
    }

    /// The CLI's store flags for this store.
    pub fn flags(&self) -> Vec<String> {
        match self {
            Store::One(v) => vec!["--store".into(), format!("redis://127.0.0.1:{}", v.port)],
            Store::Cluster(c) => vec!["--cluster".into(), format!("127.0.0.1:{}", c.masters[0].port)],
            Store::Sentinel { sentinels, .. } => {
                let list: Vec<String> = sentinels.iter().map(|s| format!("127.0.0.1:{}", s.port)).collect();
                vec!["--sentinel".into(), list.join(","), "--master".into(), MASTER_NAME.into()]
            }
        }
    }
}

#[test]
fn operate_live_keys_on_one_valkey() {
    scenario::run(&Store::One(Valkey::start()));
}

#[test]
fn operate_live_keys_on_a_cluster_of_three_masters() {
    let cluster = ValkeyCluster::start(3, 2_000);
    // The scenario's users live on more than one master.
    let masters: std::collections::BTreeSet<u16> = ["alice", "t42", "bob", "dave"]
        .iter()
        .map(|u| cluster.owner_port(key_slot(format!("tollgate:{{auth.createToken:{u}}}:log").as_bytes())))
        .collect();
    println!("the users' buckets are on the masters at ports {masters:?}");
    assert!(masters.len() >= 2, "{masters:?}");
    scenario::run(&Store::Cluster(cluster));
}

#[test]
fn operate_live_keys_behind_sentinel() {
    let (master, replica, sentinels) = topology();
    scenario::run(&Store::Sentinel { _master: master, _replica: replica, sentinels });
}
