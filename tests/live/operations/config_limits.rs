//! The 1,000-rule configuration of tests/host/config_limits.rs, loaded by a real
//! Envoy against a real Valkey.

use crate::support;

use std::time::Instant;
use support::plugin::{plugin, wide_rule};
use support::{Envoy, EnvoyOptions, Valkey};

/// A real Envoy loads the 1,000-rule configuration (4,000 rule counters per
/// worker) and decides with the last rule's five windows.
#[test]
fn envoy_loads_a_thousand_rules() {
    let valkey = Valkey::start();
    let start = Instant::now();
    let thousand_rules = (0..1000).fold(plugin(), |p, i| p.with(wide_rule(i))).json();
    let envoy = Envoy::start(&EnvoyOptions { plugin_config: thousand_rules, valkey_port: valkey.port, concurrency: 2 });
    println!("Envoy ready with 1,000 rules in {:?}", start.elapsed());
    let resp = envoy.request("GET", "/r999/x", &[("x-user-id", "alice")]);
    assert_eq!(resp.status, 200);
    let policy = resp.header("ratelimit-policy").unwrap();
    assert_eq!(policy.matches("\"r999/").count(), 5, "{policy}");
    assert_eq!(valkey.int(&["ZCARD", "tollgate:{r999:alice}:log"]), 1);
    assert_eq!(envoy.request("GET", "/elsewhere", &[("x-user-id", "alice")]).header("ratelimit"), None);
    assert_eq!(envoy.stat("wasmcustom.tollgate.rule.r999.allowed"), Some(1));
}
