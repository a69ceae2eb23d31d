//! Floods through a real Envoy and Valkey: 2,048 keep-alive clients, a new
//! user (so a store decision) on every request. A busy proxy is not an
//! outage: the store decides (at least 99 %), anything beyond the worker's
//! bounds is refused explicitly and counted, and nothing is admitted
//! unchecked by `failure_mode`.
//!
//! `TOLLGATE_FLOOD_SECONDS` sets each flood's length (default 5 s in
//! `make test`; `make flood` runs 20 s).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

mod support;

use std::sync::Arc;
use std::time::Duration;
use support::flood::{raise_fd_limit, Class, Flood};
use support::load::Request;
use support::{wait_until, Envoy, EnvoyOptions, Valkey};

const CONNECTIONS: usize = 2_048;

fn seconds() -> u64 {
    std::env::var("TOLLGATE_FLOOD_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5)
}

fn stat(envoy: &Envoy, name: &str) -> u64 {
    envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
}

fn config() -> String {
    r#"{
  "valkey": { "cluster": "tollgate_valkey", "timeout": "100ms" },
  "failure_mode": "allow",
  "rules": [ { "name": "api", "key": [ { "header": "x-user-id" } ], "limits": [ { "limit": 20, "period": "60s" }, { "limit": 5, "period": "3s" } ] } ]
}"#
    .to_string()
}

/// Floods `envoy` with a new user per request for `seconds`.
fn flood(envoy: &Envoy, tag: &'static str, seconds: u64) -> Arc<support::flood::Tally> {
    let request =
        Arc::new(move |t: usize, i: usize| Request::new("GET", "/", &[("x-user-id", &format!("{tag}{t}-{i}"))]));
    let flood = Flood::start(envoy.port, CONNECTIONS, 1_000_000, request);
    wait_until("the flood's duration", Duration::from_secs(seconds + 10), || {
        flood.started.elapsed() >= Duration::from_secs(seconds)
    });
    flood.stop()
}

#[test]
fn a_flood_on_a_healthy_store_is_decided_by_the_store_and_never_admitted_unchecked() {
    raise_fd_limit();
    let seconds = seconds();
    for workers in [1, 2] {
        let valkey = Valkey::start();
        let envoy =
            Envoy::start(&EnvoyOptions { plugin_config: config(), valkey_port: valkey.port, concurrency: workers });
        let tally = flood(&envoy, "f", seconds);
        let total = tally.total();
        println!(
            "flood, {CONNECTIONS} connections, {workers} worker(s), {seconds} s: {}; store.requests {}, overloaded {}, \
             failure_mode {}, resets {}",
            tally.summary(),
            stat(&envoy, "store.requests"),
            stat(&envoy, "overloaded"),
            stat(&envoy, "failure_mode.allowed"),
            stat(&envoy, "stream.resets.stalled") + stat(&envoy, "stream.resets.closed"),
        );
        assert!(total > CONNECTIONS as u64, "the flood ran: {total} answers");
        assert_eq!(tally.count(Class::FailureMode), 0, "nothing admitted unchecked");
        assert_eq!(stat(&envoy, "failure_mode.allowed"), 0);
        assert_eq!(tally.count(Class::Other), 0, "every request answered");
        assert_eq!(stat(&envoy, "overloaded"), tally.count(Class::Overloaded), "every refusal counted");
        assert!(tally.count(Class::Decided) * 100 >= total * 99, "at least 99 % decided by the store");
        support::wait_until("nothing left in flight", Duration::from_secs(10), || {
            stat(&envoy, "stream.in_flight") == 0 && envoy.stat("http.demo.downstream_rq_active") == Some(0)
        });
    }
}
