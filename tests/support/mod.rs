//! Real processes for the integration tests: a Valkey server and Envoy with the
//! built `tollgate.wasm`, each on free ports, ready when they answer (polled,
//! never slept for), stopped when dropped. Also a tiny HTTP/1.1 client and a
//! RESP client built on the crate's own codec.
#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

pub mod cluster;
pub mod docker;
mod envoy;
pub mod flood;
mod http;
pub mod load;
pub mod netns;
pub mod paced;
#[path = "../../src/testing/plugin.rs"]
pub mod plugin;
pub mod steady;
pub mod tls;
pub mod upstream;
mod valkey;

pub use envoy::{
    demo_plugin_config, render_envoy_config, render_with_module, Bootstrap, Envoy, EnvoyOptions, Extras, Ports,
};
pub use http::{admin_get, http, http_body, remaining, Response};
pub use valkey::{try_command, Valkey};

use std::net::TcpListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tool(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| repo_root().join(default))
}

pub fn envoy_bin() -> PathBuf {
    tool("TOLLGATE_ENVOY", ".tools/bin/envoy")
}

pub fn valkey_bin() -> PathBuf {
    tool("TOLLGATE_VALKEY", ".tools/bin/valkey-server")
}

pub fn wasm_path() -> PathBuf {
    tool("TOLLGATE_WASM", "target/wasm32-wasip1/release/tollgate.wasm")
}

/// A port that was free a moment ago, chosen below the kernel's ephemeral
/// range (32768+) so that outgoing connections cannot take it meanwhile.
/// Starts still retry on "address in use" (another test may pick it too).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
    let _ = STATE.compare_exchange(
        0,
        (u64::from(std::process::id()) << 32 ^ nanos) | 1,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    loop {
        let x = STATE
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |mut x| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                Some(x)
            })
            .unwrap_or(1);
        let port = 20_000 + (x % 12_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Polls `ready` every 20 ms until it holds or `timeout` passes.
pub fn wait_until(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tollgate-{name}-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
