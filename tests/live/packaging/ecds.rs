//! Deployment through ECDS (`envoy/envoy-ecds.yaml` with the filter served
//! from `envoy/dynamic/tollgate-filter.yaml`), and the `/stats` that
//! docs/deploy.md tells operators to look at: the filter is loaded, it calls
//! the store, it limits, and a configuration swap (good or bad) shows up.

use crate::support;

use std::time::Duration;
use support::plugin::plugin;
use support::{wait_until, wasm_path, Bootstrap, Envoy, EnvoyOptions, Valkey};

const NOW: &str = "x-tollgate-test-now-ms";
const ECDS: &str = "extension_config_discovery.http_filter.tollgate";

fn config(rule: &str, limit: u64) -> String {
    plugin().timeout("1s").rule(rule, Some("x-user-id"), &[(limit, "60s")]).now_header(NOW).json()
}

fn statuses(envoy: &Envoy, user: &str, n: usize) -> Vec<u16> {
    (0..n).map(|_| envoy.request("GET", "/", &[("x-user-id", user), (NOW, "1800000000000")]).status).collect()
}

fn stat(envoy: &Envoy, name: &str) -> u64 {
    envoy.stat(name).unwrap_or_else(|| panic!("no stat {name}"))
}

#[test]
fn filter_delivered_by_ecds_limits_and_stats_show_it() {
    let mut valkey = Valkey::start();
    let options = EnvoyOptions { plugin_config: config("ecds", 2), valkey_port: valkey.port, concurrency: 1 };
    let envoy = Envoy::start_with(&options, Bootstrap::Ecds, &wasm_path());

    // Loaded: ECDS delivered the filter config and a V8 Wasm VM runs it.
    assert_eq!(stat(&envoy, &format!("{ECDS}.update_success")), 1);
    assert_eq!(stat(&envoy, &format!("{ECDS}.config_fail")), 0);
    assert!(stat(&envoy, "wasm.envoy.wasm.runtime.v8.active") >= 1);

    // Limiting: two pass, the third is answered 429 by the filter.
    assert_eq!(statuses(&envoy, "alice", 3), [200, 200, 429]);
    assert_eq!(stat(&envoy, "http.demo.downstream_rq_2xx"), 2);
    assert_eq!(stat(&envoy, "http.demo.downstream_rq_4xx"), 1);
    // Every decision went to the store on the worker's stream through the
    // tunnel (after one FUNCTION LOAD).
    assert!(stat(&envoy, "wasmcustom.tollgate.store.requests") >= 3);
    assert_eq!(stat(&envoy, "wasmcustom.tollgate.stream.opens"), 1);

    // A new configuration through ECDS applies to new requests.
    envoy.write_dynamic("tollgate-filter.yaml", &config("ecds-swapped", 1));
    wait_until("the ECDS update", Duration::from_secs(20), || envoy.stat(&format!("{ECDS}.update_success")) == Some(2));
    assert_eq!(statuses(&envoy, "bob", 2), [200, 429]);

    // An invalid one is rejected (config_fail) and the previous one keeps limiting.
    envoy.write_dynamic("tollgate-filter.yaml", &config("ecds-bad", 0));
    wait_until("the ECDS rejection", Duration::from_secs(20), || envoy.stat(&format!("{ECDS}.config_fail")) == Some(1));
    assert_eq!(stat(&envoy, &format!("{ECDS}.update_success")), 2);
    assert_eq!(statuses(&envoy, "carol", 2), [200, 429]);

    // Valkey gone: the stream closes, and failure_mode "allow" lets the request pass.
    valkey.stop();
    assert_eq!(statuses(&envoy, "dave", 1), [200]);
    assert!(stat(&envoy, "wasmcustom.tollgate.failure_mode.allowed") >= 1);
}
