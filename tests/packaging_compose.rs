//! `envoy/docker-compose.yml`, checked without a Docker engine: it runs the
//! Envoy configuration of `make run` (scripts/run.sh) with the same addresses,
//! its images are pinned (Envoy's to the version `make tools` installs), and
//! the `sentinel` profile's commands, run with the local valkey-server, give a
//! master, a replica and three Sentinels that agree on the master.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod support;

use serde::Deserialize;
use serde_json::Value as Json;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::{envoy_bin, free_port, repo_root, try_command, valkey_bin, wait_until};
use tollgate::resp::Value;

fn compose() -> Json {
    let text = std::fs::read_to_string(repo_root().join("envoy/docker-compose.yml")).unwrap();
    Json::deserialize(serde_norway::Deserializer::from_str(&text)).unwrap()
}

fn strings(value: &Json) -> Vec<String> {
    value.as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect()
}

/// The value after `flag` in an argument list.
fn arg_after<'a>(args: &'a [String], flag: &str) -> &'a str {
    let i = args.iter().position(|a| a == flag).unwrap_or_else(|| panic!("no {flag} in {args:?}"));
    &args[i + 1]
}

/// `address: A, port_value: P` of the `valkey` cluster in envoy/envoy.yaml.
fn envoy_valkey_address() -> (String, u16) {
    let text = std::fs::read_to_string(repo_root().join("envoy/envoy.yaml")).unwrap();
    let bootstrap: Json = Json::deserialize(serde_norway::Deserializer::from_str(&text)).unwrap();
    let cluster = bootstrap["static_resources"]["clusters"].as_array().unwrap().iter().find(|c| c["name"] == "valkey");
    let socket = &cluster.expect("a valkey cluster")["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
        ["address"]["socket_address"];
    (socket["address"].as_str().unwrap().to_string(), socket["port_value"].as_u64().unwrap() as u16)
}

#[test]
fn compose_runs_the_envoy_config_of_make_run() {
    let services = compose()["services"].clone();
    let envoy = &services["envoy"];
    assert_eq!(envoy["network_mode"], "host", "host networking keeps envoy.yaml's addresses valid");

    // The config file compose gives Envoy is the one scripts/run.sh gives it.
    let command = strings(&envoy["command"]);
    let in_container = arg_after(&command, "-c");
    let volumes = strings(&envoy["volumes"]);
    let mount = volumes.iter().find(|v| v.split(':').nth(1) == Some(in_container)).expect("the -c file is mounted");
    let source = repo_root().join("envoy").join(mount.split(':').next().unwrap());
    let run_sh = std::fs::read_to_string(repo_root().join("scripts/run.sh")).unwrap();
    let local = run_sh.lines().find_map(|l| l.split(" -c ").nth(1)).unwrap().split_whitespace().next().unwrap();
    assert_eq!(source.canonicalize().unwrap(), repo_root().join(local).canonicalize().unwrap());

    // The module is mounted where envoy.yaml's relative filename resolves.
    let text = std::fs::read_to_string(&source).unwrap();
    let filename = text.lines().find_map(|l| l.trim().strip_prefix("filename: ")).unwrap();
    let workdir = envoy["working_dir"].as_str().unwrap();
    let module_mount = volumes.iter().find(|v| v.split(':').nth(1) == Some(&format!("{workdir}/{filename}")));
    let module_source =
        module_mount.expect("the module is mounted at envoy.yaml's filename").split(':').next().unwrap();
    let mounted = repo_root().join("envoy").join(module_source);
    let mounted = mounted.canonicalize().unwrap_or_else(|e| panic!("{}: {e} (run `make build`)", mounted.display()));
    assert_eq!(mounted, repo_root().join(filename).canonicalize().unwrap());

    // Valkey listens where envoy.yaml's `valkey` cluster points, as in run.sh.
    let (address, port) = envoy_valkey_address();
    let valkey = strings(&services["valkey"]["command"]);
    assert_eq!((arg_after(&valkey, "--bind"), arg_after(&valkey, "--port")), (address.as_str(), &*port.to_string()));
    assert!(run_sh.contains(&format!("--port {port} --bind {address}")), "run.sh runs Valkey at {address}:{port}");
}

#[test]
fn compose_images_are_pinned() {
    let services = compose()["services"].clone();
    for (name, service) in services.as_object().unwrap() {
        let image = service["image"].as_str().unwrap_or_else(|| panic!("{name}: no image"));
        let (_, tag) = image.rsplit_once(':').unwrap_or_else(|| panic!("{name}: {image} has no tag"));
        let version = tag.trim_start_matches('v');
        assert!(version.split('.').count() == 3 && version.split('.').all(|p| p.parse::<u32>().is_ok()), "{image}");
    }
    let envoy_image = services["envoy"]["image"].as_str().unwrap();
    let out = Command::new(envoy_bin()).arg("--version").output().unwrap();
    let local = String::from_utf8_lossy(&out.stdout).into_owned();
    let tag = envoy_image.rsplit_once(":v").unwrap().1;
    assert!(local.contains(&format!("/{tag}/")), "compose runs Envoy {tag}, make tools installs {local}");
}

struct Processes(Vec<Child>);
impl Drop for Processes {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn reply_text(value: &Value) -> String {
    match value {
        Value::Bulk(b) | Value::Simple(b) => String::from_utf8_lossy(b).into_owned(),
        Value::Integer(n) => n.to_string(),
        Value::Array(items) => items.iter().map(reply_text).collect::<Vec<_>>().join(" "),
        other => format!("{other:?}"),
    }
}

fn ask(port: u16, args: &[&str]) -> Option<String> {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    try_command(port, &args).ok().map(|v| reply_text(&v))
}

/// The sentinel profile's own commands, with ports moved to free ones and
/// /tmp to a scratch directory, run with the local valkey-server.
#[test]
fn sentinel_profile_gives_master_replica_and_three_sentinels() {
    let services = compose()["services"].clone();
    let mut names: Vec<&String> = services
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, s)| s["profiles"].as_array().is_some_and(|p| p.contains(&Json::from("sentinel"))))
        .map(|(n, _)| n)
        .collect();
    names.sort();
    assert_eq!(names, ["sentinel-1", "sentinel-2", "sentinel-3", "valkey-replica"]);

    let dir = std::env::temp_dir().join(format!("tollgate-compose-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::os::unix::fs::symlink(valkey_bin(), dir.join("bin/valkey-server")).unwrap();
    let path = format!("{}:{}", dir.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let ports: Vec<(u16, u16)> = [6379, 6380, 26379, 26380, 26381].iter().map(|&p| (p, free_port())).collect();
    let port_of = |p: u16| ports.iter().find(|(from, _)| *from == p).unwrap().1;

    let (master, replica) = (port_of(6379), port_of(6380));
    let wait = Duration::from_secs(30);
    let mut processes = Processes(Vec::new());
    for name in ["valkey", "valkey-replica", "sentinel-1", "sentinel-2", "sentinel-3"] {
        if name == "sentinel-1" {
            // As compose's depends_on: Sentinels start once the pair runs.
            wait_until("the replica's link to the master", wait, || {
                ask(replica, &["INFO", "replication"]).is_some_and(|i| i.contains("master_link_status:up"))
            });
        }
        let mut args = strings(&services[name]["command"]);
        for arg in &mut args {
            // Placeholders first, so a new port is never replaced again.
            for (i, (from, _)) in ports.iter().enumerate() {
                if *arg == from.to_string() {
                    *arg = format!("\u{0}{i}\u{0}");
                }
                *arg = arg.replace(&format!("port {from}\\n"), &format!("port \u{0}{i}\u{0}\\n"));
                *arg = arg.replace(&format!(" {from} "), &format!(" \u{0}{i}\u{0} "));
            }
            for (i, (_, to)) in ports.iter().enumerate() {
                *arg = arg.replace(&format!("\u{0}{i}\u{0}"), &to.to_string());
            }
            *arg = arg.replace("/tmp/sentinel.conf", &dir.join(format!("{name}.conf")).display().to_string());
        }
        let child = Command::new(&args[0])
            .args(&args[1..])
            .env("PATH", &path)
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {args:?}: {e}"));
        processes.0.push(child);
    }

    for sentinel in [port_of(26379), port_of(26380), port_of(26381)] {
        wait_until("a Sentinel that knows the master, the replica and two peers", wait, || {
            ask(sentinel, &["SENTINEL", "get-master-addr-by-name", "tollgate"]) == Some(format!("127.0.0.1 {master}"))
                && ask(sentinel, &["SENTINEL", "replicas", "tollgate"])
                    .is_some_and(|r| r.contains(&replica.to_string()))
                && ask(sentinel, &["SENTINEL", "sentinels", "tollgate"])
                    .is_some_and(|s| s.matches("runid").count() == 2)
        });
    }
    assert_eq!(
        ask(port_of(26379), &["SENTINEL", "ckquorum", "tollgate"]).unwrap_or_default().split(' ').next(),
        Some("OK")
    );
    drop(processes);
    let _ = std::fs::remove_dir_all(&dir);
}
