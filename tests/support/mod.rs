//! What the tests of `tests/live` and `tests/load` share (and the examples
//! that include it by path): real processes (Valkey, Envoy with the built
//! `tollgate.wasm`, a Valkey Cluster, Docker Compose projects, network
//! namespaces), each on free ports, ready when they answer (polled, never
//! slept for), stopped when dropped; clients (HTTP/1.1, RESP on the crate's
//! own codec); the one load generator ([`load`]); the differential harness
//! (the Lua limiter next to the pure model, [`differential`]). The host
//! tests (`tests/host`) must not use it: they start no process.
#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

pub mod cluster;
pub mod differential;
pub mod docker;
mod envoy;
mod http;
pub mod load;
pub mod manifests;
pub mod netns;
#[path = "../../src/testing/plugin.rs"]
pub mod plugin;
pub mod props;
pub mod sentinel;
pub mod shaping;
pub mod slow;
mod stats;
pub mod timeline;
pub mod tls;
pub mod upstream;
mod valkey;
pub mod valkey_stats;

pub use envoy::{
    demo_plugin_config, render_envoy_config, render_with_module, Bootstrap, Envoy, EnvoyOptions, Extras, Ports,
};
pub use http::{admin_get, body_later, http, http_body, remaining, BodyLater, Response};
pub use stats::{parse_stats, settled, TOLLGATE_STATS};
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
/// range (32768+) so that outgoing connections cannot take it meanwhile, and
/// never handed out twice in this process: two ports of one Envoy (listener
/// and upstream, say) are always distinct, or Envoy would refuse its own
/// configuration ("duplicate address") instead of failing to bind.
/// Starts still retry on "address in use" (another process may pick it too).
pub fn free_port() -> u16 {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;
    static STATE: AtomicU64 = AtomicU64::new(0);
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
    let _ = STATE.compare_exchange(
        0,
        (u64::from(std::process::id()) << 32 ^ nanos) | 1,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    let mut given = GIVEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let given = given.get_or_insert_with(HashSet::new);
    assert!(given.len() < 10_000, "this test process asked for 10,000 ports");
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
        let placeholder = (26_379..=26_381).contains(&port); // envoy-sentinel.yaml's Sentinels
        if !placeholder && !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
}

/// `text` with each `port_value: FROM` of `map` made `port_value: TO`, each
/// line changed at most once: a port written by one pair is never rewritten
/// by a later one (a free port may equal a placeholder of the template).
pub fn replace_ports(text: &str, map: &[(u16, u16)]) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let hit = map.iter().find_map(|&(from, to)| {
            let needle = format!("port_value: {from}");
            let at = line.find(&needle)?;
            let rest = &line[at + needle.len()..];
            (!rest.starts_with(|c: char| c.is_ascii_digit())).then_some((at, needle.len(), to))
        });
        match hit {
            Some((at, len, to)) => {
                out.push_str(&line[..at]);
                out.push_str(&format!("port_value: {to}"));
                out.push_str(&line[at + len..]);
            }
            None => out.push_str(line),
        }
    }
    out
}

/// Held by a heavy load (a flood, a steady load measured) for its whole
/// test: two loads at once on two cores would measure each other. Their
/// binary (`tests/load`) runs one test at a time as well; this holds when a
/// filter or `--test-threads` says otherwise.
pub fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ONE_LOAD_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_LOAD_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A hang detector for a wait the plugin bounds by `bound` (a
/// `valkey.timeout`, a reconnect backoff, a shaping tick): ten times it, and
/// at least 2 s. Not a latency figure: a busy machine stretches such a wait
/// by milliseconds, so only a request the plugin forgot (left waiting for a
/// store that never answers, or for a timer that never fires) runs past it.
/// A test asserts why a wait ended (an order, a counter) and prints how long
/// it took; this bound is only its backstop (docs/testing.md, "Timing").
pub fn hang_bound(bound: Duration) -> Duration {
    (bound * 10).max(Duration::from_secs(2))
}

/// Polls `ready` every 20 ms until it holds (true) or `timeout` passes
/// (false): for a test that prints what it found before asserting it.
pub fn poll_until(timeout: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if ready() {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
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
