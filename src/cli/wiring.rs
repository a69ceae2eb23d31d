//! The Envoy wiring a configuration needs, as far as a file shows it: the
//! clusters named by `valkey.cluster`, `valkey.sentinel.cluster` and
//! `valkey.cluster_mode.seeds` exist,
//! and every endpoint of each is an internal listener
//! (`envoy_internal_address.server_listener_name`) that exists and has
//! `internal_listener` — never a network address, which would make the store
//! tunnel reachable from outside.

use serde_json::Value;

/// What the wiring check found for one cluster name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wiring {
    /// Every endpoint is one of these internal listeners.
    Internal(Vec<String>),
    /// A problem, said in full.
    Broken(String),
}

/// The clusters and listeners of Envoy documents (bootstrap `static_resources`
/// and xDS `resources` files).
pub struct Topology<'a> {
    clusters: Vec<&'a Value>,
    listeners: Vec<&'a Value>,
}

impl<'a> Topology<'a> {
    pub fn new(docs: &'a [Value]) -> Topology<'a> {
        let mut clusters = Vec::new();
        let mut listeners = Vec::new();
        for doc in docs {
            if let Some(Value::Array(items)) = doc.pointer("/static_resources/clusters") {
                clusters.extend(items.iter());
            }
            if let Some(Value::Array(items)) = doc.pointer("/static_resources/listeners") {
                listeners.extend(items.iter());
            }
            if let Some(Value::Array(items)) = doc.get("resources") {
                for item in items {
                    match item.get("@type").and_then(Value::as_str) {
                        Some(t) if t.ends_with(".config.cluster.v3.Cluster") => clusters.push(item),
                        Some(t) if t.ends_with(".config.listener.v3.Listener") => listeners.push(item),
                        _ => {}
                    }
                }
            }
        }
        Topology { clusters, listeners }
    }

    /// Whether the documents define any cluster (a listener-only xDS file
    /// cannot show the wiring).
    pub fn has_clusters(&self) -> bool {
        !self.clusters.is_empty()
    }

    fn named<'b>(items: &'b [&'a Value], name: &str) -> Option<&'a Value> {
        items.iter().copied().find(|item| item.get("name").and_then(Value::as_str) == Some(name))
    }

    /// Where cluster `name` leads.
    pub fn check(&self, name: &str) -> Wiring {
        let Some(cluster) = Self::named(&self.clusters, name) else {
            return Wiring::Broken(format!("cluster {name:?} is not defined"));
        };
        let mut addresses = Vec::new();
        if let Some(Value::Array(groups)) = cluster.pointer("/load_assignment/endpoints") {
            for group in groups {
                if let Some(Value::Array(endpoints)) = group.get("lb_endpoints") {
                    addresses.extend(endpoints.iter().filter_map(|e| e.pointer("/endpoint/address")));
                }
            }
        }
        if addresses.is_empty() {
            return Wiring::Broken(format!(
                "cluster {name:?} has no endpoint in load_assignment: it must have one, an internal listener"
            ));
        }
        let mut listeners = Vec::new();
        for address in addresses {
            let Some(listener) =
                address.pointer("/envoy_internal_address/server_listener_name").and_then(Value::as_str)
            else {
                return Wiring::Broken(format!(
                    "cluster {name:?} reaches {}, not an internal listener (envoy_internal_address.server_listener_name)",
                    describe(address)
                ));
            };
            match Self::named(&self.listeners, listener) {
                None => {
                    return Wiring::Broken(format!(
                        "cluster {name:?} reaches internal listener {listener:?}, which is not defined"
                    ))
                }
                Some(l) if l.get("internal_listener").is_none() => {
                    return Wiring::Broken(format!(
                        "cluster {name:?} reaches listener {listener:?}, which has no internal_listener"
                    ))
                }
                Some(_) => listeners.push(listener.to_owned()),
            }
        }
        listeners.dedup();
        Wiring::Internal(listeners)
    }
}

fn describe(address: &Value) -> String {
    match address.get("socket_address") {
        Some(s) => {
            let host = s.get("address").and_then(Value::as_str).unwrap_or("?");
            let port = s.get("port_value").map_or_else(|| "?".to_owned(), Value::to_string);
            format!("the network address {host}:{port}")
        }
        None => format!("the address {address}"),
    }
}

/// `valkey.cluster`, `valkey.sentinel.cluster` and `valkey.cluster_mode.seeds`
/// of a configuration, read
/// loosely (so the wiring is checked even when the configuration is invalid).
pub fn cluster_names(json: &str) -> Vec<(&'static str, String)> {
    let Ok(value) = serde_json::from_str::<Value>(json) else { return Vec::new() };
    let mut out = Vec::new();
    if let Some(name) = value.pointer("/valkey/cluster").and_then(Value::as_str) {
        out.push(("valkey.cluster", name.to_owned()));
    }
    if let Some(name) = value.pointer("/valkey/sentinel/cluster").and_then(Value::as_str) {
        out.push(("valkey.sentinel.cluster", name.to_owned()));
    }
    if let Some(name) = value.pointer("/valkey/cluster_mode/seeds").and_then(Value::as_str) {
        out.push(("valkey.cluster_mode.seeds", name.to_owned()));
    }
    out
}
