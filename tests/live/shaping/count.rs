//! Shaping with counting on the response, through a real Envoy and Valkey on
//! an injected clock (`testing.now_header`, so the slots are exact): each
//! request reserves 2 units (of 10 per second) and its response
//! (`x-tokens-used: 1`) settles 1. A burst of 10: five at once, five held to
//! their slots (the log's at +1 s, `sliding_window`'s 200 ms apart) and, on
//! the real clock, answered no earlier than their send plus their delay;
//! after the responses Valkey holds each held request's settled unit at its
//! slot.

use crate::support;

use std::time::Duration;
use support::plugin::{plugin, rule, Plugin};
use support::shaping::{assert_held_for_their_delays, burst, log_entries, quantile, Shot};
use support::upstream::{demo_upstream, Upstream};
use support::{wait_until, Envoy, EnvoyOptions, Valkey};

/// The injected clock's header, and the burst's time on it: 300 ms into a
/// second.
const NOW: &str = "x-now-ms";
const AT: u64 = 1_800_000_000_300;

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
        .now_header(NOW)
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
    let at = AT.to_string();
    // The upstream holds every response until the ten are decided: the
    // first five's settlements (each gives a unit back) cannot reach the
    // store before the last decision, however the machine spreads the
    // burst (once, under load, one did, and the held slots moved).
    let headers = [
        ("x-user-id", "alice"),
        ("x-max-tokens", "2"),
        ("x-demo-header", "x-tokens-used=1"),
        ("x-demo-hold", "1"),
        (NOW, at.as_str()),
    ];
    let delayed = || envoy.stat_now("wasmcustom.tollgate.shape.delayed").unwrap_or(0);
    // The held five's delays: the log's when the first five leave its
    // window (+1 s); `sliding_window`'s each 200 ms from the next window's
    // start, as the previous window's weight falls by a fifth (2 units),
    // the last one when the window after begins.
    for (algorithm, expected) in [("log", [1_000; 5]), ("sw", [900, 1_100, 1_300, 1_500, 1_700])] {
        let (starts, held) = (upstream.starts(), delayed());
        let shots = std::thread::scope(|scope| {
            let shots = scope.spawn(|| burst(envoy.port, &format!("/{algorithm}/x"), &headers, 10, Duration::ZERO));
            wait_until("the ten decided: five at the upstream, five held", Duration::from_secs(10), || {
                upstream.starts() == starts + 5 && delayed() == held + 5
            });
            upstream.set_open(true);
            shots.join().unwrap()
        });
        upstream.set_open(false);
        assert!(shots.iter().all(|s| s.status == 200), "{algorithm}: {shots:?}");
        let held: Vec<_> = shots.iter().filter(|s| s.delay_ms.is_some()).collect();
        assert_eq!(held.len(), 5, "{algorithm}: five reservations of 2 fit now, five held {shots:?}");
        let mut delays: Vec<u64> = held.iter().filter_map(|s| s.delay_ms).collect();
        delays.sort_unstable();
        assert_eq!(delays, expected, "{algorithm}: held to their slots: {shots:?}");
        assert_held_for_their_delays(&shots);
        let mut after: Vec<f64> = shots.iter().filter_map(Shot::after_its_delay_ms).collect();
        println!(
            "{algorithm}: held {delays:?} ms; answered after send + delay: p50 {:.1} ms, max {:.1} ms",
            quantile(&mut after, 0.5),
            quantile(&mut after, 1.0)
        );
        let hang = support::hang_bound(Duration::from_millis(5)).as_secs_f64() * 1e3;
        assert!(after.iter().all(|a| *a < hang), "{algorithm}: a release hung: {after:.1?}");
        wait_until("settled", Duration::from_secs(10), || stat(&format!("rule.{algorithm}.settled")) == 10);
        assert_eq!(stat(&format!("rule.{algorithm}.refunded")), 10, "{algorithm}");
        if algorithm == "log" {
            // The held five's slot (the first five have left the window):
            // one settled unit each, at the slot (a settlement at another
            // time would find no reservation there to take 1 back from).
            let slots = log_entries(&valkey, "tollgate:{log:alice}:log");
            assert_eq!(slots, [AT + 1_000; 5], "one settled unit per held request, at its slot");
        }
    }
    assert_eq!(stat("shape.delayed"), 10);
}
