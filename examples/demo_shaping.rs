//! `make demo-shaping`: shaping instead of rejecting. Starts Valkey and
//! Envoy with `envoy/envoy.yaml` and one rule per algorithm, each shaping
//! (5 per second per user, `max_delay` 2 s), fires a burst of 10 requests
//! at once for one user against each (and 16 against the log), prints the
//! seed-style table (time sent, time released, status, delay) and stops.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;
use support::shaping::burst;
use support::{Envoy, EnvoyOptions, Valkey};

/// One shaping rule per algorithm, by the path prefix it matches: 5 per
/// second per user, held up to 2 s.
const ALGORITHMS: [(&str, &str); 4] =
    [("log", "sliding_log"), ("gcra", "gcra"), ("fw", "fixed_window"), ("sw", "sliding_window")];

/// The plugin configuration: rule `push.<prefix>` for each of [`ALGORITHMS`].
fn rules() -> String {
    let rules: Vec<String> = ALGORITHMS
        .iter()
        .map(|(prefix, algorithm)| {
            format!(
                r#"{{ "name": "push.{prefix}", "match": {{ "path_prefix": "/{prefix}/" }},
      "key": [ {{ "header": "x-user-id" }} ], "algorithm": "{algorithm}",
      "limits": [ {{ "limit": 5, "period": "1s" }} ], "shape": {{ "max_delay": "2s" }} }}"#
            )
        })
        .collect();
    format!(r#"{{ "valkey": {{ "cluster": "tollgate_valkey" }}, "rules": [ {} ] }}"#, rules.join(", "))
}

fn main() {
    let valkey = Valkey::start();
    let options = EnvoyOptions { plugin_config: rules(), valkey_port: valkey.port, concurrency: 1 };
    let envoy = Envoy::start(&options);
    let bursts = [
        ("sliding_log", "/log/push", 10),
        ("gcra", "/gcra/push", 10),
        ("fixed_window", "/fw/push", 10),
        ("sliding_window", "/sw/push", 10),
        ("sliding_log", "/log/push", 16),
    ];
    for (algorithm, path, n) in bursts {
        println!("\n{n} requests at once for alice — 5 per second, shape.max_delay 2s, {algorithm}\n");
        println!(
            "{:>4} | {:>9} | {:>13} | {:>6} | delay (Server-Timing)",
            "call", "sent (ms)", "released (ms)", "status"
        );
        println!("{}", "-".repeat(62));
        let user = format!("alice-{n}");
        let shots = burst(envoy.port, path, &[("x-user-id", &user)], n, Duration::ZERO);
        let mut order: Vec<usize> = (0..shots.len()).collect();
        order.sort_by(|&a, &b| {
            (shots[a].status != 200)
                .cmp(&(shots[b].status != 200))
                .then(shots[a].answered_ms.total_cmp(&shots[b].answered_ms))
        });
        for (call, i) in order.into_iter().enumerate() {
            let s = &shots[i];
            let delay = s.delay_ms.map(|d| format!("{d} ms")).unwrap_or_else(|| "-".into());
            let released = if s.status == 200 { format!("{:.0}", s.answered_ms) } else { "-".into() };
            println!("{:>4} | {:>9.0} | {:>13} | {:>6} | {delay}", call + 1, s.sent_ms, released, s.status);
        }
        std::thread::sleep(Duration::from_millis(2_100));
    }
    println!("\nThe log admits five now and five when the first five leave the window; gcra one per");
    println!("emission interval (200 ms); fixed_window at the next window; sliding_window as the");
    println!("previous window's weight falls. Beyond max_delay: 429, nothing recorded.");
}
