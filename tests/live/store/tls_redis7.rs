//! TLS to the store, and Redis 7 compatibility: Envoy's `valkey` cluster with
//! an `envoy.transport_sockets.tls` transport socket (mutual TLS, a
//! self-signed CA made in the test), against Debian's `redis-server` 7 with
//! only its TLS port given to Envoy. The seed scenario runs through it.

use crate::support;

use support::plugin::{plugin, seed_rule};
use support::tls::{tls_transport_socket, with_valkey_transport_socket, Certs, Redis};
use support::{Envoy, EnvoyOptions, Response};
use tollgate::resp::Value;

const NOW: &str = "x-tollgate-test-now-ms";

fn seed_config(failure_mode: &str) -> String {
    plugin().timeout("500ms").failure_mode(failure_mode).with(seed_rule()).now_header(NOW).json()
}

fn envoy_over_tls(redis: &Redis, failure_mode: &str, ca: &std::path::Path, certs: &Certs) -> Envoy {
    let socket = tls_transport_socket(ca, &certs.path("client.crt"), &certs.path("client.key"));
    let options =
        EnvoyOptions { plugin_config: seed_config(failure_mode), valkey_port: redis.tls_port, concurrency: 1 };
    Envoy::try_start_edited(&options, &|text| with_valkey_transport_socket(text, &socket))
        .unwrap_or_else(|log| panic!("envoy did not start:\n{log}"))
}

fn token(envoy: &Envoy, user: &str, now_ms: u64) -> Response {
    envoy.request("POST", "/auth/token", &[("x-user-id", user), (NOW, &now_ms.to_string())])
}

fn remaining(resp: &Response) -> Vec<u64> {
    let header = resp.header("ratelimit").unwrap_or_else(|| panic!("no RateLimit header: {resp:?}"));
    header
        .split(", ")
        .map(|item| item.split(';').find_map(|p| p.strip_prefix("r=")).unwrap().parse().unwrap())
        .collect()
}

#[test]
fn seed_scenario_over_tls_against_redis_7() {
    let certs = Certs::generate("tls");
    let redis = Redis::start_tls(&certs);
    let Value::Bulk(info) = redis.cmd(&["INFO", "server"]) else { panic!("INFO") };
    let info = String::from_utf8(info).unwrap();
    assert!(info.contains("redis_version:7."), "Redis 7 expected:\n{info}");
    let envoy = envoy_over_tls(&redis, "deny", &certs.path("ca.crt"), &certs);
    let t0 = 1_800_000_000_000u64;
    for call in 1..=8u64 {
        let resp = token(&envoy, "alice", t0);
        if call <= 5 {
            assert_eq!(resp.status, 200, "call {call}: {resp:?}");
            assert_eq!(remaining(&resp), [20 - call, 5 - call], "call {call}");
        } else {
            assert_eq!(resp.status, 429, "call {call}");
            assert_eq!(remaining(&resp), [15, 0]);
            assert_eq!(resp.header("retry-after"), Some("3"));
        }
    }
    let zcard = redis.cmd(&["ZCARD", "tollgate:{auth.createToken:alice}:log"]);
    assert_eq!(zcard, Value::Integer(5), "denied calls consumed nothing");
    assert_eq!(token(&envoy, "alice", t0 + 3_000).status, 200, "the 3s window moved on");
    // A missing function on Redis 7 is loaded again too.
    redis.cmd(&["FUNCTION", "FLUSH"]);
    assert_eq!(remaining(&token(&envoy, "alice", t0 + 3_001)), [13, 3]);
    assert_eq!(envoy.stat("wasmcustom.tollgate.store.errors").unwrap_or(0), 0);
    // One TLS connection (one handshake) carried every decision: the worker's stream.
    assert_eq!(envoy.stat("cluster.valkey.ssl.handshake"), Some(1), "the stream went over TLS, once");
    assert!(envoy.stat("wasmcustom.tollgate.store.requests").unwrap_or(0) >= 10);
}

/// A server certificate that the configured CA did not sign: the handshake
/// fails, nothing reaches Redis, and `failure_mode` applies.
#[test]
fn untrusted_server_certificate_is_a_counted_store_failure() {
    let certs = Certs::generate("tls");
    let other = Certs::generate("tls-other");
    let redis = Redis::start_tls(&certs);
    let envoy = envoy_over_tls(&redis, "deny", &other.path("ca.crt"), &certs);
    let resp = token(&envoy, "alice", 1_800_000_000_000);
    assert_eq!((resp.status, resp.header("retry-after")), (503, Some("1")));
    assert_eq!(envoy.stat("wasmcustom.tollgate.store.errors.unavailable"), Some(1));
    assert!(envoy.stat("cluster.valkey.ssl.fail_verify_error").unwrap_or(0) >= 1);
    assert_eq!(redis.cmd(&["DBSIZE"]), Value::Integer(0));
}
