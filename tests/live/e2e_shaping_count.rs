//! Shaping with counting on the response, through a real Envoy and Valkey on
//! their real clocks: each request reserves 2 units (of 10 per second) and
//! its response (`x-tokens-used: 1`) settles 1. A burst of 10: five at
//! once, five held and released in the order of their slots (the log's at
//! +1 s, `sliding_window`'s 200 ms apart); after the responses
//! Valkey holds each held request's settled unit at its slot.

use crate::support;

use std::time::Duration;
use support::plugin::{plugin, rule, Plugin};
use support::shaping::{burst, log_entries};
use support::upstream::{demo_upstream, Upstream};
use support::{wait_until, Envoy, EnvoyOptions, Valkey};

/// `/log/` and `/sw/`: 10 units per second per user, a reservation of 2
/// settled by the response's `x-tokens-used`, held up to 2 s.
fn config() -> Plugin {
    let count =
        r#""count": { "reserve": { "header": "x-max-tokens", "default": 2 }, "cost": { "header": "x-tokens-used" } }"#;
    let shape = r#""shape": { "max_delay": "2s" }"#;
    let counted = |name: &str, algorithm: &str| {
        rule(name).path_prefix(&format!("/{name}/")).header("x-user-id").algorithm(algorithm).limit(10, "1s")
    };
    plugin()
        .timeout("2s")
        .failure_mode("deny")
        .with(counted("log", "sliding_log").field(count).field(shape))
        .with(counted("sw", "sliding_window").field(count).field(shape))
}

#[test]
fn a_counted_burst_is_held_in_slot_order_and_settled_at_the_slots() {
    let valkey = Valkey::start();
    let upstream = Upstream::start();
    let options = EnvoyOptions { plugin_config: config().json(), valkey_port: valkey.port, concurrency: 1 };
    let port = upstream.port;
    let envoy = Envoy::try_start_edited(&options, &|text| demo_upstream(text, port)).unwrap();
    let stat = |name: &str| envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0);
    let headers = [("x-user-id", "alice"), ("x-max-tokens", "2"), ("x-demo-header", "x-tokens-used=1")];
    for algorithm in ["log", "sw"] {
        let shots = burst(envoy.port, &format!("/{algorithm}/x"), &headers, 10, Duration::ZERO);
        assert!(shots.iter().all(|s| s.status == 200), "{algorithm}: {shots:?}");
        let held: Vec<_> = shots.iter().filter(|s| s.delay_ms.is_some()).collect();
        assert_eq!(held.len(), 5, "{algorithm}: five reservations of 2 fit now, five held {shots:?}");
        // Released in the order of their slots (the log's five share one;
        // sent at once, they reached the store a few ms apart).
        let mut by_answer = held.clone();
        by_answer.sort_by(|a, b| a.answered_epoch_ms.total_cmp(&b.answered_epoch_ms));
        let delays: Vec<u64> = by_answer.iter().filter_map(|s| s.delay_ms).collect();
        assert!(delays.windows(2).all(|p| p[0] <= p[1] + 5), "{algorithm}: released out of order: {delays:?}");
        if algorithm == "sw" {
            // Its slot: when it was sent plus its delay (the delay alone
            // counts from its arrival, and under the suite's load the ten
            // sent at once arrived up to 70 ms apart).
            let slots: Vec<f64> = by_answer.iter().filter_map(|s| Some(s.sent_ms + s.delay_ms? as f64)).collect();
            assert!(slots.windows(2).all(|p| p[1] >= p[0] + 150.0), "sw: slots 200 ms apart: {slots:.1?} {delays:?}");
        }
        wait_until("settled", Duration::from_secs(10), || stat(&format!("rule.{algorithm}.settled")) == 10);
        assert_eq!(stat(&format!("rule.{algorithm}.refunded")), 10, "{algorithm}");
        if algorithm == "log" {
            // The held five's slot (the first five have left the window):
            // one settled unit each, at the slot (a settlement at another
            // time would find no reservation there to take 1 back from).
            let slots = log_entries(&valkey, "tollgate:{log:alice}:log");
            // (Each +1 s after one of the first five: a few ms apart.)
            assert_eq!(slots.len(), 5, "{slots:?}");
            assert!(slots[4] - slots[0] < 50, "{slots:?}");
            let answered: Vec<f64> = by_answer.iter().map(|s| s.answered_epoch_ms).collect();
            for (at, slot) in answered.iter().zip(&slots) {
                let late = at - *slot as f64;
                assert!((0.0..200.0).contains(&late), "released {late:.1} ms after its slot: {slots:?} {answered:?}");
            }
        }
    }
    assert_eq!(stat("shape.delayed"), 10);
}
