//! End to end through Envoy: one request matching rules of two different
//! algorithms (gcra per user, fixed_window per route) is decided in one store
//! call, all or nothing, with the test clock header.

use crate::support;

use support::plugin::{plugin, rule};
use support::{remaining, Envoy, EnvoyOptions, Response, Valkey};
use tollgate::resp::Value;

const NOW: &str = "x-tollgate-test-now-ms";
const ALICE: &str = "tollgate:{user:alice}:gcra";
const BOB: &str = "tollgate:{user:bob}:gcra";
const ROUTE: &str = "tollgate:{route}:fw";

fn config() -> String {
    plugin()
        .timeout("2s")
        .failure_mode("deny")
        .with(rule("user").algorithm("gcra").header("x-user-id").limit(20, "60s").limit(5, "3s"))
        .with(rule("route").algorithm("fixed_window").path_prefix("/auth/token").limit(8, "10s"))
        .now_header(NOW)
        .json()
}

fn call(envoy: &Envoy, user: &str, now_ms: u64) -> Response {
    let now = now_ms.to_string();
    envoy.request("POST", "/auth/token", &[("x-user-id", user), (NOW, &now)])
}

fn violated(resp: &Response) -> Vec<String> {
    let body: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
    body["violated-policies"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_owned()).collect()
}

fn hash(valkey: &Valkey, key: &str) -> Value {
    valkey.cmd(&["HGETALL", key])
}

#[test]
fn rules_of_two_algorithms_are_decided_in_one_call_all_or_nothing() {
    let valkey = Valkey::start();
    let envoy = Envoy::start(&EnvoyOptions { plugin_config: config(), valkey_port: valkey.port, concurrency: 1 });
    let t0 = 1_800_000_000_000u64; // a multiple of 10 s: the fixed window starts here

    // Alice's gcra burst of 5 passes; the route's fixed window counts 5 of 8.
    for call_no in 1..=5u64 {
        let resp = call(&envoy, "alice", t0);
        assert_eq!(resp.status, 200, "call {call_no}: {resp:?}");
        let r = remaining(&resp);
        let names: Vec<&str> = r.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["user/60s", "user/3s", "route/10s"]);
        assert_eq!((r[1].1, r[2].1), (5 - call_no, 8 - call_no), "call {call_no}");
    }
    let route_after_five = hash(&valkey, ROUTE);

    // Alice's 6th: gcra denies (3s burst spent), so the route consumes nothing.
    let resp = call(&envoy, "alice", t0);
    assert_eq!(resp.status, 429);
    assert_eq!(violated(&resp), ["user/3s"]);
    assert_eq!(resp.header("retry-after"), Some("1"), "one emission interval: 600 ms");
    assert_eq!(remaining(&resp)[2].1, 3);
    assert_eq!(hash(&valkey, ROUTE), route_after_five, "the fixed window was not counted");

    // Bob takes the route's last 3 units.
    for _ in 0..3 {
        assert_eq!(call(&envoy, "bob", t0 + 1).status, 200);
    }
    let bob_after_three = hash(&valkey, BOB);
    let alice_before = hash(&valkey, ALICE);

    // Bob's 4th: the fixed window denies, so bob's gcra TATs do not move.
    let resp = call(&envoy, "bob", t0 + 1);
    assert_eq!(resp.status, 429);
    assert_eq!(violated(&resp), ["route/10s"]);
    assert_eq!(resp.header("retry-after"), Some("10"), "the window ends at t0 + 10 s");
    assert_eq!(remaining(&resp)[1].1, 2, "bob's 3s bucket still holds 2");
    assert_eq!(hash(&valkey, BOB), bob_after_three, "gcra state unchanged on denial");

    // Alice, with gcra room again 1.2 s later, is still held by the route.
    let resp = call(&envoy, "alice", t0 + 1_200);
    assert_eq!(resp.status, 429);
    assert_eq!(violated(&resp), ["route/10s"]);
    assert_eq!(hash(&valkey, ALICE), alice_before);

    // The next fixed window admits again, and both rules count it.
    let resp = call(&envoy, "alice", t0 + 10_000);
    assert_eq!(resp.status, 200);
    assert_eq!(remaining(&resp)[2].1, 7);
    assert_ne!(hash(&valkey, ALICE), alice_before);
    assert_eq!(valkey.int(&["DBSIZE"]), 3, "alice's and bob's gcra buckets and the route's counter");
}
