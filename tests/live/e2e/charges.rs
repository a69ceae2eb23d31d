//! What a store killed under load leaves charged, through a real Envoy.
//!
//! Valkey runs with `appendfsync always`: it appends every write to its AOF
//! before it sends any reply, so after a SIGKILL and a restart from the AOF
//! the store holds exactly the scripts that ran, whether or not their reply
//! got out. Every request has a bucket of its own, so each bucket's entry
//! count says whether that request was charged, and how often.
//!
//! What must hold: no request is charged twice (nothing that may have run is
//! ever sent again); every admitted request is charged; and a request that
//! was charged but refused (its reply was lost with the store) is counted in
//! `store.unknown_outcome`, the failures whose call may have run.

use crate::support;

use std::sync::Arc;
use support::load::{Load, Plan, Request};
use support::plugin::plugin;
use support::{Envoy, EnvoyOptions, Valkey};
use tollgate::resp::Value;

const ROUNDS: usize = 3;
const THREADS: usize = 16;
const PER_THREAD: usize = 40;

fn config() -> String {
    plugin().timeout("200ms").failure_mode("deny").rule("api", Some("x-user-id"), &[(5, "1h")]).json()
}

fn stat(envoy: &Envoy, name: &str) -> u64 {
    envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
}

fn user(round: usize, thread: usize, index: usize) -> String {
    format!("r{round}-t{thread}-i{index}")
}

/// Entries in the bucket of `user` (0: never charged).
fn entries(valkey: &Valkey, user: &str) -> i64 {
    match valkey.cmd(&["ZCARD", &format!("tollgate:{{api:{user}}}:log")]) {
        Value::Integer(n) => n,
        other => panic!("ZCARD: {other:?}"),
    }
}

#[test]
fn a_store_killed_under_load_charges_no_request_twice_and_counts_what_may_be_charged() {
    let mut valkey = Valkey::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let envoy = Envoy::start(&EnvoyOptions { plugin_config: config(), valkey_port: valkey.port, concurrency: 2 });
    let (mut admitted, mut charged_refused, mut refused) = (0, 0, 0);
    for round in 0..ROUNDS {
        let request = Arc::new(move |t, i| Request::new("GET", "/", &[("x-user-id", &user(round, t, i))]));
        let load = Load::start(envoy.port, Plan::closed(THREADS, PER_THREAD), request);
        load.wait_answered(THREADS * PER_THREAD / 3);
        valkey.stop(); // SIGKILL, with calls in flight
        let report = load.join();
        valkey.restart(); // from the AOF: every script that ran, replied or not
        assert!(report.errors().is_empty(), "every request answered: {:?}", report.errors());
        for s in &report.samples {
            let n = entries(&valkey, &user(round, s.thread, s.index));
            assert!(n <= 1, "{s:?}: charged {n} times");
            match (s.status(), s.decided()) {
                (Some(200), true) => {
                    admitted += 1;
                    assert_eq!(n, 1, "an admitted request is charged: {s:?}");
                }
                (Some(503), false) => {
                    refused += 1;
                    charged_refused += usize::from(n == 1);
                }
                other => panic!("deny mode, a bucket per request: {other:?} for {s:?}"),
            }
        }
    }
    let unknown = stat(&envoy, "store.unknown_outcome") as usize;
    println!(
        "store killed {ROUNDS} times under load: {admitted} admitted, {refused} refused (503), of which \
         {charged_refused} charged; store.unknown_outcome {unknown}; errors: timeout {}, unavailable {}, not_resp {}",
        stat(&envoy, "store.errors.timeout"),
        stat(&envoy, "store.errors.unavailable"),
        stat(&envoy, "store.errors.not_resp"),
    );
    assert!(admitted > 0 && refused > 0, "the kills fell inside the load");
    assert!(
        charged_refused <= unknown,
        "{charged_refused} refused requests were charged, only {unknown} failures may have run"
    );
}
