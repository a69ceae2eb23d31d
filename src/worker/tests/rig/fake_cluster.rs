//! A Valkey Cluster of model stores for the worker's tests: nodes with
//! addresses, a slot map, `CLUSTER SHARDS`, `MOVED` for a slot a node does
//! not serve, `ASK` for a key that already left a slot being migrated,
//! `ASKING`, `TRYAGAIN` for a call whose keys are split by a migration,
//! `CROSSSLOT`, and `FUNCTION LOAD` per node. The data is one
//! [`ModelStore`] (what the buckets hold); each key's node is tracked
//! beside it, so a migration moves keys without copying their state.

use crate::limiter::script::limiter;
use crate::model::store::ModelStore;
use crate::resp::{decode_all, encode_value, Limits, Value};
use crate::store::cluster::key_slot;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

/// One node of the cluster.
#[derive(Debug)]
pub struct Node {
    pub addr: SocketAddr,
    /// The master it replicates, if a replica.
    pub replica_of: Option<usize>,
    /// Whether its function library is loaded.
    pub loaded: bool,
    /// Calls it ran (decisions and adjustments).
    pub executed: usize,
    /// Of those, `adjust` calls (undos).
    pub adjusted: usize,
    /// Killed: its streams are refused.
    pub down: bool,
    /// What it answers every call instead of running it (`CLUSTERDOWN ...`).
    pub forced: Option<String>,
}

/// The cluster.
#[derive(Debug)]
pub struct FakeCluster {
    pub nodes: Vec<Node>,
    /// The node serving each slot.
    pub owner: Vec<usize>,
    /// Slots being migrated: to which node.
    pub migrating: HashMap<u16, usize>,
    /// The node holding each key written so far.
    pub location: HashMap<String, usize>,
    /// Streams whose next command may use an importing slot (`ASKING`).
    asking: HashSet<u32>,
    pub data: ModelStore,
    /// Answer `CLUSTER SHARDS` as a Redis 6 would (unknown subcommand).
    pub no_shards: bool,
    /// Every command a node was sent, by node: (verb, stream).
    pub log: Vec<(usize, String, u32)>,
}

fn text(v: &Value) -> String {
    v.as_bytes().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default()
}

fn error(e: &str) -> Value {
    Value::Error(e.as_bytes().to_vec())
}

fn flat(pairs: Vec<(&str, Value)>) -> Value {
    Value::Array(pairs.into_iter().flat_map(|(k, v)| [Value::Bulk(k.as_bytes().to_vec()), v]).collect())
}

impl FakeCluster {
    /// `masters` masters at 10.0.0.1..., each with one replica at
    /// 10.0.1.1..., the slots split evenly; every library loaded.
    pub fn new(masters: usize) -> FakeCluster {
        let mut nodes = Vec::new();
        for i in 0..masters {
            nodes.push(Node {
                addr: format!("10.0.0.{}:6379", i + 1).parse().unwrap(),
                replica_of: None,
                loaded: true,
                executed: 0,
                adjusted: 0,
                down: false,
                forced: None,
            });
        }
        for i in 0..masters {
            nodes.push(Node {
                addr: format!("10.0.1.{}:6379", i + 1).parse().unwrap(),
                replica_of: Some(i),
                loaded: true,
                executed: 0,
                adjusted: 0,
                down: false,
                forced: None,
            });
        }
        let owner = (0..16384).map(|s| s * masters / 16384).collect();
        FakeCluster {
            nodes,
            owner,
            migrating: HashMap::new(),
            location: HashMap::new(),
            asking: HashSet::new(),
            data: ModelStore::default(),
            no_shards: false,
            log: Vec::new(),
        }
    }

    pub fn node(&self, addr: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.addr.to_string() == addr)
    }

    /// The address of the node serving `key`'s slot.
    pub fn owner_of(&self, key: &str) -> String {
        self.nodes[self.owner[usize::from(key_slot(key.as_bytes()))]].addr.to_string()
    }

    /// `MIGRATE`: the keys of `slot` on its owner move to its target.
    pub fn migrate_keys(&mut self, slot: u16) {
        let (from, to) = (self.owner[usize::from(slot)], self.migrating[&slot]);
        for (key, at) in self.location.iter_mut() {
            if key_slot(key.as_bytes()) == slot && *at == from {
                *at = to;
            }
        }
    }

    /// `SETSLOT <slot> NODE <target>` everywhere: the migration is over.
    pub fn finish_migration(&mut self, slot: u16) {
        if let Some(to) = self.migrating.remove(&slot) {
            self.owner[usize::from(slot)] = to;
        }
    }

    /// Replica `replica` takes over every slot of its master (a failover),
    /// with the master's keys (the replica had them).
    pub fn promote(&mut self, replica: usize) {
        let Some(master) = self.nodes[replica].replica_of.take() else { return };
        self.nodes[master].replica_of = Some(replica);
        for o in self.owner.iter_mut().filter(|o| **o == master) {
            *o = replica;
        }
        for at in self.location.values_mut().filter(|at| **at == master) {
            *at = replica;
        }
    }

    /// The replies of node `node` to every command in `bytes`, sent on stream `token`.
    pub fn answer(&mut self, node: usize, token: u32, bytes: &[u8], now_ms: u64) -> Vec<u8> {
        let mut out = Vec::new();
        for command in decode_all(bytes, &Limits::default()).unwrap() {
            let args = command.as_array().unwrap().to_vec();
            let verb = text(&args[0]).to_ascii_uppercase();
            self.log.push((node, verb.clone(), token));
            let reply = match verb.as_str() {
                "ASKING" => {
                    self.asking.insert(token);
                    encode_value(&mut out, &Value::Simple(b"OK".to_vec()));
                    continue;
                }
                "CLUSTER" => match (text(&args[1]).to_ascii_uppercase().as_str(), self.no_shards) {
                    ("SHARDS", false) => self.shards(),
                    ("SLOTS", _) => self.slots(),
                    _ => error("ERR unknown subcommand 'SHARDS'. Try CLUSTER HELP."),
                },
                "FUNCTION" => {
                    self.nodes[node].loaded = true;
                    Value::Bulk(limiter().function.clone().into_bytes())
                }
                "FCALL" | "EVALSHA" | "EVAL" => self.call(node, token, &args, now_ms),
                _ => self.data.run(&args, now_ms),
            };
            self.asking.remove(&token);
            encode_value(&mut out, &reply);
        }
        out
    }

    fn call(&mut self, node: usize, token: u32, args: &[Value], now_ms: u64) -> Value {
        if let Some(e) = &self.nodes[node].forced {
            return error(e);
        }
        let n: usize = text(&args[2]).parse().unwrap();
        let keys: Vec<String> = args[3..3 + n].iter().map(text).collect();
        let slot = key_slot(keys[0].as_bytes());
        if keys.iter().any(|k| key_slot(k.as_bytes()) != slot) {
            return error("CROSSSLOT Keys in request don't hash to the same slot");
        }
        let owner = self.owner[usize::from(slot)];
        let here = keys.iter().filter(|k| self.location.get(*k) == Some(&node)).count();
        let importing = self.migrating.get(&slot) == Some(&node) && self.asking.contains(&token);
        if owner != node && !importing {
            return error(&format!("MOVED {slot} {}", self.nodes[owner].addr));
        }
        if let (true, Some(&to)) = (owner == node, self.migrating.get(&slot)) {
            if here == 0 {
                return error(&format!("ASK {slot} {}", self.nodes[to].addr));
            }
        }
        if self.migrating.contains_key(&slot) && here != keys.len() && (owner == node || n > 1) {
            return error("TRYAGAIN Multiple keys request during rehashing of slot");
        }
        if text(&args[0]).eq_ignore_ascii_case("FCALL") && !self.nodes[node].loaded {
            return error("ERR Function not found");
        }
        let reply = self.data.run(args, now_ms);
        if !reply.is_error() {
            self.nodes[node].executed += 1;
            let target = text(&args[1]);
            let script = limiter();
            if [&script.adjust_function, &script.adjust_sha, script.adjust_body].iter().any(|t| **t == target) {
                self.nodes[node].adjusted += 1;
            }
            for key in keys {
                self.location.insert(key, node);
            }
        }
        reply
    }

    /// The slot ranges `(first, last)` node `i` serves.
    fn ranges(&self, i: usize) -> Vec<(i64, i64)> {
        let mut ranges = Vec::new();
        let mut slot = 0;
        while slot < self.owner.len() {
            if self.owner[slot] != i {
                slot += 1;
                continue;
            }
            let start = slot;
            while slot < self.owner.len() && self.owner[slot] == i {
                slot += 1;
            }
            ranges.push((start as i64, slot as i64 - 1));
        }
        ranges
    }

    /// `CLUSTER SLOTS`: per range, its first and last slot and its master.
    fn slots(&self) -> Value {
        let mut out = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            for (first, last) in self.ranges(i) {
                let node = Value::Array(vec![
                    Value::Bulk(n.addr.ip().to_string().into_bytes()),
                    Value::Integer(i64::from(n.addr.port())),
                ]);
                out.push(Value::Array(vec![Value::Integer(first), Value::Integer(last), node]));
            }
        }
        Value::Array(out)
    }

    /// `CLUSTER SHARDS`: per master, its slot ranges, itself and its replicas.
    fn shards(&self) -> Value {
        let mut shards = Vec::new();
        for (i, master) in self.nodes.iter().enumerate().filter(|(_, n)| n.replica_of.is_none()) {
            let ranges: Vec<Value> =
                self.ranges(i).into_iter().flat_map(|(a, b)| [Value::Integer(a), Value::Integer(b)]).collect();
            let node = |n: &Node, role: &str| {
                flat(vec![
                    ("port", Value::Integer(i64::from(n.addr.port()))),
                    ("ip", Value::Bulk(n.addr.ip().to_string().into_bytes())),
                    ("role", Value::Bulk(role.as_bytes().to_vec())),
                    ("health", Value::Bulk(b"online".to_vec())),
                ])
            };
            let mut nodes = vec![node(master, "master")];
            nodes.extend(self.nodes.iter().filter(|n| n.replica_of == Some(i)).map(|n| node(n, "replica")));
            shards.push(flat(vec![("slots", Value::Array(ranges)), ("nodes", Value::Array(nodes))]));
        }
        Value::Array(shards)
    }
}
