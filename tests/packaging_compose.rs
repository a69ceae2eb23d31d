//! `envoy/docker-compose.yml` and its Envoy configs, checked without a Docker
//! engine (tests/compose.rs runs the stack for real):
//! - `envoy/compose/*.yaml` are `envoy/envoy.yaml` and `envoy/envoy-sentinel.yaml`
//!   with exactly the listed edits, so a change to the originals shows up here
//!   and is carried over by `make compose-configs`;
//! - images are pinned to the versions `make tools` installs;
//! - only the Envoys publish ports, on the host's 127.0.0.1, and each mounts
//!   the module where its config's relative `filename` points;
//! - the Sentinel Envoy's cluster names the Sentinel services and their ports.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod support;

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
const LISTEN_EVERYWHERE: [Edit; 2] = [
    edit(
        None,
        "socket_address: { address: 127.0.0.1, port_value: 9901 }",
        "socket_address: { address: 0.0.0.0, port_value: 9901 }",
    ),
    edit(
        None,
        "socket_address: { address: 127.0.0.1, port_value: 10000 }",
        "socket_address: { address: 0.0.0.0, port_value: 10000 }",
    ),
];

/// (original, compose copy, edits beyond [`LISTEN_EVERYWHERE`]).
const CONFIGS: [(&str, &str, &[Edit]); 2] = [
    (
        "envoy/envoy.yaml",
        "envoy/compose/envoy.yaml",
        &[
            edit(Some("valkey"), "type: STATIC", "type: STRICT_DNS"),
            edit(
                Some("valkey"),
                "socket_address: { address: 127.0.0.1, port_value: 6379 }",
                "socket_address: { address: valkey, port_value: 6379 }",
            ),
        ],
    ),
    (
        "envoy/envoy-sentinel.yaml",
        "envoy/compose/envoy-sentinel.yaml",
        &[
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
    for (original, copy, own) in CONFIGS {
        let edits: Vec<&Edit> = LISTEN_EVERYWHERE.iter().chain(own.iter()).collect();
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
        let out = Command::new(bin).arg("--version").output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let (envoy, valkey) = (local(envoy_bin()), local(valkey_bin()));
    for (repository, version) in tags {
        match repository.as_str() {
            "envoyproxy/envoy" => assert!(envoy.contains(&format!("/{version}/")), "{version} vs {envoy}"),
            "valkey/valkey" => assert!(valkey.contains(&format!("v={version} ")), "{version} vs {valkey}"),
            other => panic!("unexpected image {other}"),
        }
    }
}

#[test]
fn only_the_envoys_publish_ports_on_loopback_and_mount_the_module_where_their_config_points() {
    let services = compose()["services"].clone();
    let mut envoys = Vec::new();
    for (name, service) in services.as_object().unwrap() {
        assert!(service.get("network_mode").is_none(), "{name}: the stack has its own network");
        let ports = strings(&service["ports"]);
        if !service["image"].as_str().unwrap().starts_with("envoyproxy/envoy:") {
            assert!(ports.is_empty(), "{name} publishes {ports:?}");
            continue;
        }
        envoys.push(name.clone());
        let targets: Vec<&str> = ports.iter().map(|p| p.rsplit(':').next().unwrap()).collect();
        assert_eq!(targets, ["10000", "9901"], "{name}: the listener and the admin");
        assert!(ports.iter().all(|p| p.starts_with("127.0.0.1:")), "{name}: {ports:?}");

        let command = strings(&service["command"]);
        let config = &command[command.iter().position(|a| a == "-c").unwrap() + 1];
        let volumes = strings(&service["volumes"]);
        let mount = |target: &str| {
            let volume = volumes.iter().find(|v| v.split(':').nth(1) == Some(target));
            let source = volume.unwrap_or_else(|| panic!("{name}: nothing mounted at {target}")).split(':').next();
            repo_root().join("envoy").join(source.unwrap())
        };
        let config_source = mount(config);
        assert_eq!(config_source.parent().unwrap(), repo_root().join("envoy/compose"));
        let text = std::fs::read_to_string(&config_source).unwrap();
        let filename = text.lines().find_map(|l| l.trim().strip_prefix("filename: ")).unwrap();
        let workdir = service["working_dir"].as_str().unwrap();
        assert_eq!(mount(&format!("{workdir}/{filename}")), repo_root().join("envoy/../").join(filename));
    }
    envoys.sort();
    assert_eq!(envoys, ["envoy", "envoy-sentinel"]);
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
