//! The Istio manifests of `envoy/istio/`, checked without a mesh: they parse,
//! carry what the Istio CRDs require (istio/istio
//! manifests/charts/base/files/crd-all.gen.yaml, istio/api protos), the
//! WasmPlugin's pluginConfig is the demo configuration and passes tollgate's
//! parser, and the EnvoyFilter's Envoy fragments, in a bootstrap next to a
//! stand-in for the cluster Istio builds from the ServiceEntry, pass
//! `envoy --mode validate` and then limit requests in a running Envoy.

use crate::support;

use serde_json::{json, Value as Json};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::manifests::{is_dns1123, one_of, yaml_documents};
use support::{demo_plugin_config, envoy_bin, free_port, http, repo_root, wasm_path, Valkey};

const NOW: &str = "x-tollgate-test-now-ms";

/// Every YAML document of every file in envoy/istio/, as JSON values.
fn manifests() -> Vec<(String, Json)> {
    let mut out = Vec::new();
    let mut files: Vec<_> =
        std::fs::read_dir(repo_root().join("envoy/istio")).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for path in files.into_iter().filter(|p| p.extension().is_some_and(|e| e == "yaml")) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        out.extend(yaml_documents(&path).into_iter().map(|doc| (name.clone(), doc)));
    }
    out
}

fn manifest(kind: &str) -> Json {
    let mut found = manifests().into_iter().filter(|(_, m)| m["kind"] == kind);
    let (_, m) = found.next().unwrap_or_else(|| panic!("no {kind} in envoy/istio/"));
    assert!(found.next().is_none(), "more than one {kind}");
    m
}

#[test]
fn every_manifest_has_what_its_crd_requires() {
    let all = manifests();
    let kinds: Vec<&str> = all.iter().map(|(_, m)| m["kind"].as_str().unwrap_or("")).collect();
    assert_eq!(kinds.len(), 3, "{kinds:?}");
    for (file, m) in &all {
        let api = match m["kind"].as_str() {
            Some("WasmPlugin") => "extensions.istio.io/v1alpha1",
            Some("EnvoyFilter") => "networking.istio.io/v1alpha3",
            Some("ServiceEntry") => "networking.istio.io/v1",
            other => panic!("{file}: unexpected kind {other:?}"),
        };
        assert_eq!(m["apiVersion"], api, "{file}");
        assert!(is_dns1123(m["metadata"]["name"].as_str().unwrap_or("")), "{file}: metadata.name");
        assert!(m["spec"].is_object(), "{file}: spec is required");
    }

    let wasm = &manifest("WasmPlugin")["spec"];
    let url = wasm["url"].as_str().expect("spec.url is required");
    assert!(url.starts_with("oci://"), "{url}");
    let tag = url.rsplit_once(':').map(|(_, t)| t).unwrap();
    assert_eq!(tag, env!("CARGO_PKG_VERSION"), "the image tag is the crate version");
    one_of(&wasm["phase"], &["AUTHN", "AUTHZ", "STATS"], "phase");
    one_of(&wasm["failStrategy"], &["FAIL_CLOSE", "FAIL_OPEN", "FAIL_RELOAD"], "failStrategy");
    one_of(&wasm["imagePullPolicy"], &["IfNotPresent", "Always"], "imagePullPolicy");
    one_of(&wasm["type"], &["HTTP"], "type");
    assert!(wasm["priority"].is_i64(), "priority is an int32");
    assert!(wasm["pluginConfig"].is_object(), "pluginConfig is an object");
    assert_eq!(wasm["pluginName"], "tollgate", "the module's root context");
    for m in wasm["match"].as_array().unwrap() {
        one_of(&m["mode"], &["CLIENT", "SERVER", "CLIENT_AND_SERVER"], "match[].mode");
    }
    let targeting = ["selector", "targetRef", "targetRefs"].iter().filter(|k| wasm.get(**k).is_some()).count();
    assert!(targeting <= 1, "only one of selector, targetRef, targetRefs");

    let filter = &manifest("EnvoyFilter")["spec"];
    assert_eq!(filter["workloadSelector"]["labels"], wasm["selector"]["matchLabels"], "same workloads as the plugin");
    let patches = filter["configPatches"].as_array().expect("configPatches is required");
    assert!(!patches.is_empty());
    for p in patches {
        one_of(&p["applyTo"], &["LISTENER", "CLUSTER", "EXTENSION_CONFIG"], "applyTo (listeners, clusters, the shim)");
        one_of(&p["match"]["context"], &["ANY", "SIDECAR_INBOUND", "SIDECAR_OUTBOUND", "GATEWAY"], "match.context");
        one_of(&p["patch"]["operation"], &["ADD"], "patch.operation");
        assert!(p["patch"]["value"]["name"].is_string(), "a named Envoy object: {p}");
    }

    let entry = &manifest("ServiceEntry")["spec"];
    assert!(!entry["hosts"].as_array().expect("hosts is required").is_empty());
    one_of(&entry["location"], &["MESH_EXTERNAL", "MESH_INTERNAL"], "location");
    one_of(&entry["resolution"], &["NONE", "STATIC", "DNS", "DNS_ROUND_ROBIN"], "resolution");
    for port in entry["ports"].as_array().unwrap() {
        assert!((1..=65535).contains(&port["number"].as_u64().unwrap()), "ports[].number");
        assert!(port["name"].as_str().is_some_and(|n| !n.is_empty()), "ports[].name is required");
        one_of(&port["protocol"], &["TCP", "TLS"], "ports[].protocol (Valkey speaks TCP)");
    }
}

#[test]
fn plugin_config_is_the_demo_config_and_parses() {
    let config = &manifest("WasmPlugin")["spec"]["pluginConfig"];
    let demo: Json = serde_json::from_str(&demo_plugin_config()).unwrap();
    assert_eq!(config, &demo, "pluginConfig differs from envoy/envoy.yaml's configuration");
    // Istio passes pluginConfig to the filter as a JSON string.
    let bytes = serde_json::to_vec(config).unwrap();
    if let Err(e) = tollgate::config::Config::from_json(&bytes) {
        panic!("tollgate rejects pluginConfig: {e}");
    }
}

/// The cluster Istio builds from the ServiceEntry: its name, host and port.
fn service_entry_clusters() -> Vec<(String, String, u64)> {
    let entry = &manifest("ServiceEntry")["spec"];
    let mut out = Vec::new();
    for host in entry["hosts"].as_array().unwrap() {
        for port in entry["ports"].as_array().unwrap() {
            let (host, number) = (host.as_str().unwrap(), port["number"].as_u64().unwrap());
            out.push((format!("outbound|{number}||{host}"), host.to_string(), number));
        }
    }
    out
}

/// A bootstrap holding every EnvoyFilter patch value, the internal listener
/// extension Istio's bootstrap registers, the ServiceEntry clusters (`stand_in`
/// maps them to an address, None leaves them out) and `extra_listeners`.
fn bootstrap(admin_port: u16, stand_in: Option<(&str, u16)>, extra_listeners: Vec<Json>) -> Json {
    let patches = manifest("EnvoyFilter")["spec"]["configPatches"].as_array().unwrap().clone();
    let values = |kind: &str| -> Vec<Json> {
        patches.iter().filter(|p| p["applyTo"] == kind).map(|p| p["patch"]["value"].clone()).collect()
    };
    // What istio-agent makes of the shim's extension config: served over
    // ECDS with the module fetched from the registry into a local file. The
    // test inlines it, with the built module, where the listener asks for it.
    let extensions = values("EXTENSION_CONFIG");
    let mut listeners = values("LISTENER");
    for listener in &mut listeners {
        inline_extension_configs(listener, &extensions);
    }
    listeners.extend(extra_listeners);
    let mut clusters = values("CLUSTER");
    if let Some((address, port)) = stand_in {
        for (name, host, number) in service_entry_clusters() {
            // Istio makes a STRICT_DNS cluster for a DNS ServiceEntry; a test
            // run points the stand-in at a local Valkey instead.
            let (kind, address, port) = if address.is_empty() {
                ("STRICT_DNS", host, number)
            } else {
                ("STATIC", address.to_string(), u64::from(port))
            };
            clusters.push(json!({
                "name": name, "type": kind, "connect_timeout": "1s",
                "load_assignment": { "cluster_name": name, "endpoints": [ { "lb_endpoints": [ { "endpoint": { "address":
                    { "socket_address": { "address": address, "port_value": port } } } } ] } ] }
            }));
        }
    }
    json!({
        "admin": { "address": { "socket_address": { "address": "127.0.0.1", "port_value": admin_port } } },
        "bootstrap_extensions": [ { "name": "envoy.bootstrap.internal_listener", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.bootstrap.internal_listener.v3.InternalListener",
            "buffer_size_kb": 64 } } ],
        "static_resources": { "listeners": listeners, "clusters": clusters }
    })
}

/// Replaces every filter that asks for an extension config (`config_discovery`)
/// by that config, its remote module by the built one.
fn inline_extension_configs(value: &mut Json, extensions: &[Json]) {
    match value {
        Json::Object(map) if map.contains_key("config_discovery") => {
            let name = map["name"].clone();
            let found = extensions.iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("no extension {name}"));
            let mut typed = found["typed_config"].clone();
            let remote = &typed["config"]["vm_config"]["code"]["remote"]["http_uri"]["uri"];
            assert_eq!(remote, &manifest("WasmPlugin")["spec"]["url"], "the shim comes from the WasmPlugin's image");
            typed["config"]["vm_config"]["code"] = json!({ "local": { "filename": wasm_path() } });
            *value = json!({ "name": name, "typed_config": typed });
        }
        Json::Object(map) => map.values_mut().for_each(|v| inline_extension_configs(v, extensions)),
        Json::Array(items) => items.iter_mut().for_each(|v| inline_extension_configs(v, extensions)),
        _ => {}
    }
}

fn write_bootstrap(name: &str, bootstrap: &Json) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("tollgate-istio-{}-{name}.json", std::process::id()));
    std::fs::write(&path, serde_json::to_vec_pretty(bootstrap).unwrap()).unwrap();
    path
}

fn validate(path: &std::path::Path) -> (bool, String) {
    let out = Command::new(envoy_bin())
        .args(["--mode", "validate", "--log-level", "error", "-c"])
        .arg(path)
        .output()
        .expect("run envoy (make tools)");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

#[test]
fn envoy_filter_patches_pass_envoy_validate() {
    let names: Vec<String> = service_entry_clusters().into_iter().map(|(n, _, _)| n).collect();
    let patches = serde_json::to_string(&manifest("EnvoyFilter")).unwrap();
    for name in &names {
        assert!(patches.contains(name), "the tunnel routes to Istio's ServiceEntry cluster {name}");
    }
    let plugin_cluster = manifest("WasmPlugin")["spec"]["pluginConfig"]["valkey"]["cluster"].clone();
    assert!(patches.contains(&format!("\"name\":{plugin_cluster}")), "the EnvoyFilter adds {plugin_cluster}");

    let path = write_bootstrap("validate", &bootstrap(9901, Some(("", 0)), Vec::new()));
    let (ok, output) = validate(&path);
    assert!(ok, "envoy --mode validate rejected the EnvoyFilter fragments:\n{output}");

    // Without the ServiceEntry's cluster the tunnel's route is unresolved,
    // and validate says so: the check above really checks the fragments.
    let path = write_bootstrap("validate-missing", &bootstrap(9901, None, Vec::new()));
    let (ok, output) = validate(&path);
    assert!(!ok && output.contains("unknown cluster"), "expected an unknown-cluster error:\n{output}");
}

/// The listener Istio generates around a WasmPlugin, reduced to what matters:
/// the Wasm filter (pluginName as root_id, pluginConfig as a JSON string) in
/// front of a router that answers 200.
fn app_listener(port: u16, plugin_config: &Json) -> Json {
    let spec = &manifest("WasmPlugin")["spec"];
    json!({
        "name": "app", "address": { "socket_address": { "address": "127.0.0.1", "port_value": port } },
        "filter_chains": [ { "filters": [ { "name": "envoy.filters.network.http_connection_manager", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": "app",
            "route_config": { "virtual_hosts": [ { "name": "app", "domains": ["*"], "routes": [
                { "match": { "prefix": "/" }, "direct_response": { "status": 200 } } ] } ] },
            "http_filters": [
                { "name": "tollgate", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
                    "config": { "name": "tollgate", "root_id": spec["pluginName"],
                        "vm_config": { "runtime": "envoy.wasm.runtime.v8",
                            "code": { "local": { "filename": wasm_path() } } },
                        "configuration": { "@type": "type.googleapis.com/google.protobuf.StringValue",
                            "value": serde_json::to_string(plugin_config).unwrap() } } } },
                { "name": "envoy.filters.http.router", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router" } } ] } } ] } ]
    })
}

struct Process(Child);
impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn envoy_filter_patches_carry_store_calls_in_a_running_envoy() {
    let valkey = Valkey::start();
    let mut plugin_config = manifest("WasmPlugin")["spec"]["pluginConfig"].clone();
    plugin_config["testing"] = json!({ "now_header": NOW });
    for _attempt in 0..5 {
        let (admin, port) = (free_port(), free_port());
        let config = bootstrap(admin, Some(("127.0.0.1", valkey.port)), vec![app_listener(port, &plugin_config)]);
        let path = write_bootstrap(&format!("run-{port}"), &config);
        let child = Command::new(envoy_bin())
            .arg("-c")
            .arg(&path)
            .args(["--use-dynamic-base-id", "--concurrency", "1", "--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut envoy = Process(child);
        let start = Instant::now();
        while !http(admin, "GET", "/ready", &[]).is_ok_and(|r| r.status == 200) {
            if !matches!(envoy.0.try_wait(), Ok(None)) || start.elapsed() > Duration::from_secs(30) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !matches!(envoy.0.try_wait(), Ok(None)) {
            continue; // a port was taken meanwhile: try fresh ones
        }
        let headers = [("x-user-id", "istio"), (NOW, "1800000000000")];
        let statuses: Vec<u16> = (0..6).map(|_| http(port, "POST", "/auth/token", &headers).unwrap().status).collect();
        assert_eq!(statuses, [200, 200, 200, 200, 200, 429], "the demo's 5 per 3s, through Istio's tunnel");
        let _ = std::fs::remove_file(&path);
        return;
    }
    panic!("envoy did not start with the Istio fragments on 5 port pairs");
}
