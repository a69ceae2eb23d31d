//! The OCI images of `make image` (target/image/{compat,artifact}), pushed with
//! skopeo to a real registry (Debian's `docker-registry`) on loopback, pulled
//! back, unpacked the way Istio's image fetcher does it, compared byte for byte
//! with the built module, and run in a real Envoy that limits a request.
//!
//! The tools are installed by `make image` (scripts/install-image-tools.sh).
//! If one is missing, the test fails; it does not skip.

use crate::support;

use serde_json::Value as Json;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::plugin::plugin;
use support::{free_port, http, repo_root, wasm_path, Bootstrap, Envoy, EnvoyOptions, Valkey};

const VERSION: &str = env!("CARGO_PKG_VERSION");
const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
const WASM_CONFIG: &str = "application/vnd.module.wasm.config.v1+json";
const WASM_LAYER: &str = "application/vnd.module.wasm.content.layer.v1+wasm";
const NOW: &str = "x-tollgate-test-now-ms";

/// The full path of a command, or a failure that says how to install it.
fn require(command: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|dir| dir.join(command)).find(|p| p.is_file()).unwrap_or_else(|| {
        panic!("`{command}` is not installed: run `make image` (scripts/install-image-tools.sh installs it)")
    })
}

fn run(program: &Path, args: &[&str]) -> Output {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{} {} failed:\n{}",
        program.display(),
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// A real registry (CNCF distribution, Debian's `docker-registry`) on a free
/// loopback port, with its config and storage in a scratch directory.
struct Registry {
    port: u16,
    child: Child,
    dir: PathBuf,
}

impl Registry {
    fn start() -> Self {
        let bin = require("docker-registry");
        for _ in 0..5 {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!("tollgate-registry-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let config = format!(
                "version: 0.1\nlog: {{ level: warn }}\nstorage:\n  filesystem: {{ rootdirectory: {} }}\n\
                 http: {{ addr: 127.0.0.1:{port} }}\n",
                dir.join("data").display()
            );
            std::fs::write(dir.join("config.yml"), config).unwrap();
            let log = std::fs::File::create(dir.join("registry.log")).unwrap();
            let child = Command::new(&bin)
                .arg("serve")
                .arg(dir.join("config.yml"))
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap();
            let mut registry = Registry { port, child, dir };
            let start = Instant::now();
            loop {
                if http(port, "GET", "/v2/", &[]).is_ok_and(|r| r.status == 200) {
                    return registry;
                }
                if !matches!(registry.child.try_wait(), Ok(None)) || start.elapsed() > Duration::from_secs(20) {
                    break; // exited (port taken?) or hung: try another port
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("docker-registry did not start on 5 different ports");
    }

    fn reference(&self, repository: &str) -> String {
        format!("docker://127.0.0.1:{}/{repository}:{VERSION}", self.port)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The manifest tagged `tag` in an OCI layout: (digest, parsed manifest).
fn manifest(layout: &Path, tag: &str) -> (String, Json) {
    let index: Json = serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let entry = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .unwrap_or_else(|| panic!("{} has no tag {tag}: {index}", layout.display()));
    let digest = entry["digest"].as_str().unwrap().to_string();
    let bytes = blob(layout, &digest);
    (digest, serde_json::from_slice(&bytes).unwrap())
}

/// A blob of an OCI layout, checked against its digest.
fn blob(layout: &Path, digest: &str) -> Vec<u8> {
    let hex = digest.strip_prefix("sha256:").unwrap();
    let bytes = std::fs::read(layout.join("blobs/sha256").join(hex)).unwrap();
    assert_eq!(sha256_hex(&bytes), hex, "blob {digest} of {} is corrupt", layout.display());
    bytes
}

/// `plugin.wasm` from a pulled compat image, as Istio reads it: the last
/// layer must be an OCI tar+gzip layer holding plugin.wasm. umoci unpacks it.
fn extract_compat(layout: &Path, work: &Path) -> Vec<u8> {
    let (_, manifest) = manifest(layout, VERSION);
    assert_eq!(manifest["annotations"]["module.wasm.image/variant"], "compat", "{manifest}");
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "one COPY, one layer: {manifest}");
    assert_eq!(layers.last().unwrap()["mediaType"], OCI_LAYER_GZIP, "{manifest}");
    let bundle = work.join("bundle");
    let image = format!("{}:{VERSION}", layout.display());
    run(&require("umoci"), &["unpack", "--rootless", "--image", &image, bundle.to_str().unwrap()]);
    std::fs::read(bundle.join("rootfs/plugin.wasm")).unwrap()
}

/// The module from a pulled artifact image, as Istio reads it: exactly two
/// layers, the module being the one of the Wasm content media type.
fn extract_artifact(layout: &Path) -> Vec<u8> {
    let (_, manifest) = manifest(layout, VERSION);
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 2, "Istio's fetcher wants exactly two layers: {manifest}");
    assert_eq!(manifest["config"]["mediaType"], WASM_CONFIG, "{manifest}");
    let config = layers.iter().find(|l| l["mediaType"] == WASM_CONFIG).expect("a runtime config layer");
    let runtime: Json = serde_json::from_slice(&blob(layout, config["digest"].as_str().unwrap())).unwrap();
    assert_eq!(runtime["type"], "envoy_proxy");
    assert_eq!(runtime["config"]["root_ids"], serde_json::json!(["tollgate"]));
    let wasm = layers.iter().find(|l| l["mediaType"] == WASM_LAYER).expect("a Wasm content layer");
    blob(layout, wasm["digest"].as_str().unwrap())
}

fn limited_config() -> String {
    plugin().timeout("1s").rule("pulled", Some("x-user-id"), &[(2, "60s")]).now_header(NOW).json()
}

/// Push both images, pull them back, compare the module, run it.
#[test]
fn images_survive_a_registry_round_trip_and_run_in_envoy() {
    let skopeo = require("skopeo");
    let built = std::fs::read(wasm_path()).expect("the built module (run `make build`)");
    let registry = Registry::start();
    let work = std::env::temp_dir().join(format!("tollgate-packaging-{}-{}", std::process::id(), registry.port));
    let valkey = Valkey::start();

    for (variant, repository) in [("compat", "tollgate"), ("artifact", "tollgate-wasm")] {
        let layout = repo_root().join("target/image").join(variant);
        assert!(layout.join("index.json").is_file(), "{} is missing: run `make image`", layout.display());
        let (local_digest, _) = manifest(&layout, VERSION);
        let remote = registry.reference(repository);
        let source = format!("oci:{}:{VERSION}", layout.display());
        run(&skopeo, &["copy", "--quiet", "--insecure-policy", "--dest-tls-verify=false", &source, &remote]);

        // The registry serves the very manifest that was built.
        let raw = run(&skopeo, &["inspect", "--raw", "--tls-verify=false", &remote]).stdout;
        assert_eq!(format!("sha256:{}", sha256_hex(&raw)), local_digest, "{variant}: manifest changed in the registry");

        let pulled = work.join(variant).join("layout");
        std::fs::create_dir_all(&pulled).unwrap();
        let target = format!("oci:{}:{VERSION}", pulled.display());
        run(&skopeo, &["copy", "--quiet", "--insecure-policy", "--src-tls-verify=false", &remote, &target]);
        let module = match variant {
            "compat" => extract_compat(&pulled, &work.join(variant)),
            _ => extract_artifact(&pulled),
        };
        assert_eq!(sha256_hex(&module), sha256_hex(&built), "{variant}: pulled plugin.wasm differs from the build");
        let module_path = work.join(variant).join("plugin.wasm");
        std::fs::write(&module_path, &module).unwrap();

        // The pulled module limits requests in a real Envoy.
        let options = EnvoyOptions { plugin_config: limited_config(), valkey_port: valkey.port, concurrency: 1 };
        let envoy = Envoy::start_with(&options, Bootstrap::Static, &module_path);
        let user = format!("user-{variant}");
        let statuses: Vec<u16> =
            (0..3).map(|_| envoy.request("GET", "/", &[("x-user-id", &user), (NOW, "1800000000000")]).status).collect();
        assert_eq!(statuses, [200, 200, 429], "{variant}: pulled module did not limit");
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// `make image` wrote the artifact from this very module, and writing it
/// again gives the same manifest digest (nothing depends on time or map order).
#[test]
fn artifact_image_is_reproducible() {
    let tool = repo_root().join("target/debug/examples/oci_artifact");
    assert!(tool.is_file(), "{} is missing: run `make image`", tool.display());
    let layout = repo_root().join("target/image/artifact");
    assert!(layout.join("index.json").is_file(), "{} is missing: run `make image`", layout.display());
    let again = std::env::temp_dir().join(format!("tollgate-artifact-{}-{}", std::process::id(), free_port()));
    let module = wasm_path();
    run(&tool, &[module.to_str().unwrap(), again.to_str().unwrap(), VERSION]);
    assert_eq!(manifest(&again, VERSION).0, manifest(&layout, VERSION).0);
    let _ = std::fs::remove_dir_all(&again);
}
