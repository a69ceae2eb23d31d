//! `envoy/docker-compose.yml` and its Envoy configs, checked without a Docker
//! engine (tests/live/packaging/compose.rs runs the stack for real):
//! - `envoy/compose/envoy.yaml`, `envoy/compose/dynamic/listeners.yaml` and
//!   `envoy/compose/envoy-sentinel.yaml` and `envoy/compose/envoy-cluster.yaml`
//!   are `envoy/envoy-dynamic.yaml`, `envoy/dynamic/listeners.yaml`,
//!   `envoy/envoy-sentinel.yaml` and `envoy/envoy-cluster.yaml` with
//!   exactly the listed edits, so a change to the originals shows up here and
//!   is carried over by `make compose-configs`; the LDS listener passes
//!   `envoy --mode validate` with the compose bootstrap;
//! - images are pinned to the versions `make tools` and `make image-tools` install;
//! - only the Envoys (and the registry) publish ports, on the host's 127.0.0.1,
//!   and each Envoy mounts the LDS directory and the module where its config's
//!   relative paths point; the registry profile fetches the crate version's tag;
//! - the Sentinel Envoy's cluster names the Sentinel services and their ports;
//! - the cluster Envoy's seeds are the cluster profile's masters, on the ports
//!   they listen on, and the init joins every node of the profile.

use crate::support;

use serde::Deserialize;
use serde_json::Value as Json;
use std::process::Command;
use support::{envoy_bin, repo_root, valkey_bin};

/// One line edit: `from` becomes `to`, exactly once, within the cluster (or
/// listener) named `scope` when there is one.
struct Edit {
    scope: Option<&'static str>,
    from: &'static str,
    to: &'static str,
}

const fn edit(scope: Option<&'static str>, from: &'static str, to: &'static str) -> Edit {
    Edit { scope, from, to }
}

/// Listening inside a container: on every address, not loopback only.
const ADMIN_EVERYWHERE: Edit = edit(
    None,
    "socket_address: { address: 127.0.0.1, port_value: 9901 }",
    "socket_address: { address: 0.0.0.0, port_value: 9901 }",
);
const LISTENER_EVERYWHERE: Edit = edit(
    None,
    "socket_address: { address: 127.0.0.1, port_value: 10000 }",
    "socket_address: { address: 0.0.0.0, port_value: 10000 }",
);

/// (original, compose copy, edits). The demo Envoy's bootstrap and its LDS
/// file keep their relative paths: compose mounts the LDS directory at
/// /tollgate/envoy/dynamic. The Sentinel Envoy stays static.
const CONFIGS: [(&str, &str, &[Edit]); 4] = [
    (
        "envoy/envoy-dynamic.yaml",
        "envoy/compose/envoy.yaml",
        &[
            ADMIN_EVERYWHERE,
            edit(Some("valkey"), "type: STATIC", "type: STRICT_DNS"),
            edit(
                Some("valkey"),
                "socket_address: { address: 127.0.0.1, port_value: 6379 }",
                "socket_address: { address: valkey, port_value: 6379 }",
            ),
        ],
    ),
    ("envoy/dynamic/listeners.yaml", "envoy/compose/dynamic/listeners.yaml", &[LISTENER_EVERYWHERE]),
    (
        "envoy/envoy-sentinel.yaml",
        "envoy/compose/envoy-sentinel.yaml",
        &[
            ADMIN_EVERYWHERE,
            LISTENER_EVERYWHERE,
            edit(Some("valkey_sentinels"), "type: STATIC", "type: STRICT_DNS"),
            edit(
                Some("valkey_sentinels"),
                "socket_address: { address: 127.0.0.1, port_value: 26379 }",
                "socket_address: { address: sentinel-1, port_value: 26379 }",
            ),
            edit(
                Some("valkey_sentinels"),
                "socket_address: { address: 127.0.0.1, port_value: 26380 }",
                "socket_address: { address: sentinel-2, port_value: 26380 }",
            ),
            edit(
                Some("valkey_sentinels"),
                "socket_address: { address: 127.0.0.1, port_value: 26381 }",
                "socket_address: { address: sentinel-3, port_value: 26381 }",
            ),
        ],
    ),
    (
        "envoy/envoy-cluster.yaml",
        "envoy/compose/envoy-cluster.yaml",
        &[
            ADMIN_EVERYWHERE,
            LISTENER_EVERYWHERE,
            edit(Some("valkey_seeds"), "type: STATIC", "type: STRICT_DNS"),
            edit(
                Some("valkey_seeds"),
                "socket_address: { address: 127.0.0.1, port_value: 7000 }",
                "socket_address: { address: cluster-1, port_value: 7000 }",
            ),
            edit(
                Some("valkey_seeds"),
                "socket_address: { address: 127.0.0.1, port_value: 7001 }",
                "socket_address: { address: cluster-2, port_value: 7001 }",
            ),
            edit(
                Some("valkey_seeds"),
                "socket_address: { address: 127.0.0.1, port_value: 7002 }",
                "socket_address: { address: cluster-3, port_value: 7002 }",
            ),
        ],
    ),
];

/// The leading comment block of a YAML file, and the rest.
fn split_header(text: &str) -> (String, String) {
    let header: Vec<&str> = text.lines().take_while(|l| l.starts_with('#')).collect();
    let body: Vec<&str> = text.lines().skip(header.len()).collect();
    (header.iter().map(|l| format!("{l}\n")).collect(), body.iter().map(|l| format!("{l}\n")).collect())
}

/// The original's body (its header comment dropped) with every edit applied
/// exactly once; an edit that no longer applies once is an error.
fn render(original: &str, edits: &[&Edit]) -> Result<String, String> {
    let (_, body) = split_header(original);
    let mut applied = vec![0usize; edits.len()];
    let mut scope: Option<String> = None;
    let mut out = String::new();
    for line in body.lines() {
        if let Some(name) = line.trim().strip_prefix("- name: ") {
            scope = Some(name.to_string());
        }
        let mut line = line.to_string();
        for (edit, count) in edits.iter().zip(&mut applied) {
            let in_scope = edit.scope.is_none_or(|s| scope.as_deref() == Some(s));
            if in_scope && line.contains(edit.from) {
                line = line.replace(edit.from, edit.to);
                *count += 1;
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    for (edit, count) in edits.iter().zip(applied) {
        if count != 1 {
            return Err(format!("`{}` (in {:?}) matched {count} times, not once", edit.from, edit.scope));
        }
    }
    Ok(out)
}

#[test]
fn compose_envoy_configs_are_the_originals_with_the_listed_edits() {
    let write = std::env::var_os("TOLLGATE_WRITE_COMPOSE_CONFIGS").is_some();
    for (original, copy, edits) in CONFIGS {
        let edits: Vec<&Edit> = edits.iter().collect();
        let text = std::fs::read_to_string(repo_root().join(original)).unwrap();
        let body = render(&text, &edits)
            .unwrap_or_else(|e| panic!("{original} changed shape: {e}; update the edits in this test"));
        let current = std::fs::read_to_string(repo_root().join(copy)).unwrap_or_default();
        let (header, current_body) = split_header(&current);
        if write {
            std::fs::write(repo_root().join(copy), format!("{header}{body}")).unwrap();
            continue;
        }
        assert!(!header.is_empty(), "{copy}: keep the comment at its top that lists the edits");
        assert!(
            current_body == body,
            "{copy} is not {original} with the listed edits: run `make compose-configs`.\nExpected body:\n{body}"
        );
        // The edits are real: the copy differs from the original in each.
        let (_, original_body) = split_header(&text);
        let changed = original_body.lines().zip(body.lines()).filter(|(a, b)| a != b).count();
        assert_eq!(changed, edits.len(), "{copy}: one changed line per edit");
    }
}

#[test]
fn render_refuses_an_edit_that_no_longer_applies() {
    let original = "# header\nclusters:\n  - name: valkey\n    type: STATIC\n  - name: other\n    type: STATIC\n";
    let scoped = edit(Some("valkey"), "type: STATIC", "type: STRICT_DNS");
    assert_eq!(
        render(original, &[&scoped]).unwrap(),
        "clusters:\n  - name: valkey\n    type: STRICT_DNS\n  - name: other\n    type: STATIC\n"
    );
    let everywhere = edit(None, "type: STATIC", "type: STRICT_DNS");
    assert!(render(original, &[&everywhere]).unwrap_err().contains("matched 2 times"));
    let gone = edit(Some("valkey"), "port_value: 6379", "port_value: 1");
    assert!(render(original, &[&gone]).unwrap_err().contains("matched 0 times"));
}

fn compose() -> Json {
    let text = std::fs::read_to_string(repo_root().join("envoy/docker-compose.yml")).unwrap();
    Json::deserialize(serde_norway::Deserializer::from_str(&text)).unwrap()
}

fn strings(value: &Json) -> Vec<String> {
    value.as_array().unwrap_or(&Vec::new()).iter().map(|v| v.as_str().unwrap().to_string()).collect()
}

#[test]
fn compose_images_are_pinned_to_the_local_versions() {
    let services = compose()["services"].clone();
    let mut tags = Vec::new();
    for (name, service) in services.as_object().unwrap() {
        let image = service["image"].as_str().unwrap_or_else(|| panic!("{name}: no image"));
        let (repository, tag) = image.rsplit_once(':').unwrap_or_else(|| panic!("{name}: {image} has no tag"));
        let version = tag.trim_start_matches('v');
        assert!(version.split('.').count() == 3 && version.split('.').all(|p| p.parse::<u32>().is_ok()), "{image}");
        tags.push((repository.to_string(), version.to_string()));
    }
    let local = |bin: std::path::PathBuf| {
        let out = Command::new(&bin).arg("--version").output();
        let out = out.unwrap_or_else(|e| panic!("{}: {e} (make tools, make image-tools)", bin.display()));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let (envoy, valkey) = (local(envoy_bin()), local(valkey_bin()));
    let registry = local("docker-registry".into());
    for (repository, version) in tags {
        match repository.as_str() {
            "envoyproxy/envoy" => assert!(envoy.contains(&format!("/{version}/")), "{version} vs {envoy}"),
            "valkey/valkey" => assert!(valkey.contains(&format!("v={version} ")), "{version} vs {valkey}"),
            "registry" => assert!(registry.contains(&format!(" {version}+")), "{version} vs {registry}"),
            other => panic!("unexpected image {other}"),
        }
    }
}

/// `service`'s volume mounted at `target`: its source, as written.
fn mount_source(name: &str, service: &Json, target: &str) -> String {
    let volumes = strings(&service["volumes"]);
    let volume = volumes.iter().find(|v| v.split(':').nth(1) == Some(target));
    volume.unwrap_or_else(|| panic!("{name}: nothing mounted at {target}")).split(':').next().unwrap().to_string()
}

#[test]
fn only_the_envoys_and_the_registry_publish_ports_on_loopback_and_each_envoy_mounts_what_its_config_names() {
    let services = compose()["services"].clone();
    let mut envoys = Vec::new();
    for (name, service) in services.as_object().unwrap() {
        assert!(service.get("network_mode").is_none(), "{name}: the stack has its own network");
        let ports = strings(&service["ports"]);
        assert!(ports.iter().all(|p| p.starts_with("127.0.0.1:")), "{name}: {ports:?}");
        let targets: Vec<&str> = ports.iter().map(|p| p.rsplit(':').next().unwrap()).collect();
        if name == "registry" {
            assert_eq!(targets, ["5000"], "the registry, for the push from the host");
            continue;
        }
        if !service["image"].as_str().unwrap().starts_with("envoyproxy/envoy:") {
            assert!(ports.is_empty(), "{name} publishes {ports:?}");
            continue;
        }
        envoys.push(name.clone());
        assert_eq!(targets, ["10000", "9901"], "{name}: the listener and the admin");

        let command = strings(&service["command"]);
        let config = &command[command.iter().position(|a| a == "-c").unwrap() + 1];
        let config_source = repo_root().join("envoy").join(mount_source(name, service, config));
        assert_eq!(config_source.parent().unwrap(), repo_root().join("envoy/compose"));
        let text = std::fs::read_to_string(&config_source).unwrap();
        let workdir = service["working_dir"].as_str().unwrap();
        // The LDS directory, where the bootstrap's relative path points.
        if let Some(lds) = text.lines().find_map(|l| l.trim().strip_prefix("path: ")) {
            let (dir, file) = lds.rsplit_once('/').unwrap();
            assert_eq!(mount_source(name, service, &format!("{workdir}/{dir}")), "./compose/dynamic", "{name}");
            assert!(repo_root().join("envoy/compose/dynamic").join(file).exists());
        }
        // The module: the build's file, or (profile registry) the volume
        // that module-fetch fills.
        let filename = text.lines().find_map(|l| l.trim().strip_prefix("filename: ")).unwrap();
        let (dir, file) = filename.rsplit_once('/').unwrap();
        if name == "envoy-registry" {
            assert_eq!(mount_source(name, service, &format!("{workdir}/{dir}")), "module");
            assert_eq!(file, "tollgate.wasm");
            assert_eq!(mount_source("module-fetch", &services["module-fetch"], "/module"), "module");
        } else {
            let source = mount_source(name, service, &format!("{workdir}/{filename}"));
            assert_eq!(repo_root().join("envoy").join(source), repo_root().join("envoy/../").join(filename));
        }
    }
    envoys.sort();
    assert_eq!(envoys, ["envoy", "envoy-cluster", "envoy-registry", "envoy-sentinel"]);
}

#[test]
fn the_registry_profile_fetches_the_tag_that_make_image_builds() {
    let services = compose()["services"].clone();
    let cargo = std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap();
    let version = cargo.lines().find_map(|l| l.strip_prefix("version = \"")?.strip_suffix('"')).unwrap();
    let fetch = &services["module-fetch"];
    assert_eq!(fetch["environment"]["TOLLGATE_MODULE_TAG"], format!("${{TOLLGATE_MODULE_TAG:-{version}}}"));
    assert_eq!(fetch["environment"]["TOLLGATE_REGISTRY"], "http://registry:5000");
    assert_eq!(fetch["image"], services["registry"]["image"], "the registry's image has the shell and wget");
    let needs = &services["envoy-registry"]["depends_on"]["module-fetch"]["condition"];
    assert_eq!(needs, "service_completed_successfully");
}

/// A bootstrap for `envoy --mode validate` (which does not read LDS files):
/// the compose bootstrap with the LDS file's listeners made static.
fn with_static_listeners(bootstrap: &str, lds: &str) -> String {
    let mut boot = Json::deserialize(serde_norway::Deserializer::from_str(bootstrap)).unwrap();
    let lds = Json::deserialize(serde_norway::Deserializer::from_str(lds)).unwrap();
    boot.as_object_mut().unwrap().remove("dynamic_resources").expect("the bootstrap uses LDS");
    let listeners = boot["static_resources"]["listeners"].as_array_mut().unwrap();
    for mut resource in lds["resources"].as_array().unwrap().clone() {
        resource.as_object_mut().unwrap().remove("@type");
        listeners.push(resource);
    }
    boot.to_string()
}

#[test]
fn the_compose_lds_listener_passes_envoy_validate_and_a_bad_limit_is_named() {
    let read = |path: &str| std::fs::read_to_string(repo_root().join(path)).unwrap();
    let (bootstrap, lds) = (read("envoy/compose/envoy.yaml"), read("envoy/compose/dynamic/listeners.yaml"));
    let bad = lds.replace(r#"{ "limit": 5, "period": "3s" }"#, r#"{ "limit": 0, "period": "3s" }"#);
    assert_ne!(bad, lds);
    let dir = support::scratch_dir("compose-validate");
    for (name, listeners, ok) in [("good", &lds, true), ("bad", &bad, false)] {
        let file = dir.join(format!("{name}.json"));
        std::fs::write(&file, with_static_listeners(&bootstrap, listeners)).unwrap();
        let out = Command::new(envoy_bin())
            .args(["--mode", "validate", "--log-level", "error", "-c"])
            .arg(&file)
            .current_dir(repo_root())
            .output()
            .unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.success(), ok, "{name}:\n{said}");
        if !ok {
            assert!(said.contains("rules[0].limits[1].limit: must be > 0"), "{said}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_sentinel_envoy_names_the_sentinel_services_and_their_ports() {
    let services = compose()["services"].clone();
    let text = std::fs::read_to_string(repo_root().join("envoy/compose/envoy-sentinel.yaml")).unwrap();
    let mut found = 0;
    for (name, service) in services.as_object().unwrap() {
        let script = strings(&service["command"]).join(" ");
        let Some(port) = script.split("\"port ").nth(1).and_then(|s| s.split('"').next()) else { continue };
        assert!(script.contains("sentinel monitor tollgate valkey 6379 2"), "{name}: {script}");
        assert!(!script.contains("announce-hostnames yes"), "{name}: tollgate takes IP addresses only");
        let endpoint = format!("socket_address: {{ address: {name}, port_value: {port} }}");
        assert!(text.contains(&endpoint), "envoy-sentinel.yaml lacks {endpoint}");
        found += 1;
    }
    assert_eq!(found, 3, "three Sentinels");
    let replica = strings(&services["valkey-replica"]["command"]).join(" ");
    assert!(replica.contains("--replicaof valkey 6379"), "{replica}");
}

#[test]
fn the_cluster_envoy_seeds_are_the_cluster_masters_and_the_init_joins_every_node() {
    let services = compose()["services"].clone();
    let text = std::fs::read_to_string(repo_root().join("envoy/compose/envoy-cluster.yaml")).unwrap();
    let init = std::fs::read_to_string(repo_root().join("envoy/compose/cluster-init.sh")).unwrap();
    let mut nodes = Vec::new();
    for (name, service) in services.as_object().unwrap() {
        let command = strings(&service["command"]);
        if !command.iter().any(|a| a == "--cluster-enabled") {
            continue;
        }
        assert_eq!(strings(&service["profiles"]), ["cluster"], "{name}");
        let port = &command[command.iter().position(|a| a == "--port").unwrap() + 1];
        assert!(init.contains(&format!("{name}:{port}")), "cluster-init.sh does not join {name}:{port}");
        if !name.contains("replica") {
            let seed = format!("socket_address: {{ address: {name}, port_value: {port} }}");
            assert!(text.contains(&seed), "envoy-cluster.yaml lacks the seed {seed}");
        }
        nodes.push(name.clone());
    }
    assert_eq!(nodes.len(), 6, "3 masters and 3 replicas: {nodes:?}");
    let init_service = &services["cluster-init"];
    assert_eq!(mount_source("cluster-init", init_service, "/cluster-init.sh"), "./compose/cluster-init.sh");
    let mut needs = strings(&init_service["depends_on"]);
    needs.sort();
    assert_eq!(needs, nodes, "cluster-init starts after every node");
    let envoy_needs = &services["envoy-cluster"]["depends_on"]["cluster-init"]["condition"];
    assert_eq!(envoy_needs, "service_completed_successfully", "Envoy starts on a formed cluster");
}
