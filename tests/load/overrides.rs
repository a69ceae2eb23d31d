//! A per-key override under a load that outlasts its periods, through two
//! real Envoys of two workers and a real Valkey: `sliding_log` 20 per 2 s,
//! `tollgate override set --times 3` for user `hot` until 5 s after the
//! start (Valkey's clock), and 9.5 s (over four periods) of load whose rate
//! changes while one Envoy goes quiet and comes back: Envoy a alone fast,
//! then b alone slower (a quiet), then both. By the times the requests
//! reached the upstream, `hot` never has more than 60 in any span of a
//! period less the slack between a decision and its arrival while the
//! override holds, nor more than 20 once it has ended; it did get more
//! than 20 in a period before the end (the override applied), and at
//! least half the configured 20 in a period after it (still admitting); `cold`, in the same rule, never more than 20.

use crate::support;

use std::sync::Arc;
use std::time::Duration;
use support::load::{Load, Plan, Request};
use support::plugin::{plugin, rule};
use support::timeline::most_in_any_span;
use support::upstream::{demo_upstream, Upstream};
use support::{scratch_dir, Envoy, EnvoyOptions, Valkey};

const LIMIT: u64 = 20;
const TIMES: u64 = 3;
const PERIOD_MS: u64 = 2_000;
/// A decision's time to its arrival at the upstream, bounded generously.
const SLACK_MS: u64 = 100;

fn envoy(valkey: &Valkey, upstream: &Upstream, config: &str) -> Envoy {
    let options = EnvoyOptions { plugin_config: config.to_string(), valkey_port: valkey.port, concurrency: 2 };
    let port = upstream.port;
    Envoy::try_start_edited(&options, &|text| demo_upstream(text, port)).unwrap()
}

/// `n` requests of `user` from each of `clients` clients, one every `pace_ms`.
fn send(envoy: &Envoy, user: &'static str, clients: usize, n: usize, pace_ms: u64) -> Load {
    let request = move |_: usize, _: usize| Request::new("GET", "/", &[("x-user-id", user)]);
    let plan = Plan { pace: Some(Duration::from_millis(pace_ms)), ..Plan::keep_alive(clients, n) };
    Load::start(envoy.port, plan, Arc::new(request))
}

#[test]
fn an_override_holds_its_limits_and_ends_on_time_under_a_changing_load() {
    let _alone = support::alone();
    let (valkey, upstream) = (Valkey::start(), Upstream::start());
    let config = plugin()
        .timeout("200ms")
        .with(rule("api").header("x-user-id").limit(LIMIT, "2s").field(r#""overrides": true"#))
        .json();
    let (a, b) = (envoy(&valkey, &upstream, &config), envoy(&valkey, &upstream, &config));
    let file = scratch_dir("load-overrides").join("plugin.json");
    std::fs::write(&file, &config).unwrap();
    let until = valkey.time_ms() + 5_000;
    let store = format!("redis://127.0.0.1:{}", valkey.port);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["override", "set", file.to_str().unwrap(), "--rule", "api", "--key", "x-user-id=hot"])
        .args(["--times", &TIMES.to_string(), "--until", &until.to_string(), "--store", &store])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let start = valkey.time_ms();
    // a alone, fast (4 clients at 40/s each, 3 s); cold beside it.
    let (fast, cold) = (send(&a, "hot", 4, 120, 25), send(&a, "cold", 2, 380, 25));
    let fast = fast.join();
    // b alone, slower (2 clients at 20/s, 2.5 s): a goes quiet.
    let slower = send(&b, "hot", 2, 50, 50).join();
    // Both (a back at 80/s, b at 40/s, 4 s), past the override's end.
    let (back, both) = (send(&a, "hot", 2, 160, 25), send(&b, "hot", 2, 80, 50));
    let (back, both, cold) = (back.join(), both.join(), cold.join());
    let ended = valkey.time_ms();
    let hits = upstream.hits();
    let times = |user: &str| {
        let mut t: Vec<u64> = hits.iter().filter(|h| h.header("x-user-id") == Some(user)).map(|h| h.at_ms()).collect();
        t.sort_unstable();
        t
    };
    let (hot, cold_times) = (times("hot"), times("cold"));
    // Arrivals in a span shorter than a period by the slack were decided
    // within one period: before the end (arrived < until) by the raised
    // limits, at or after it (arrived >= until + slack) by the configured.
    let span = PERIOD_MS - SLACK_MS;
    let before: Vec<u64> = hot.iter().copied().filter(|&t| t < until).collect();
    let after: Vec<u64> = hot.iter().copied().filter(|&t| t >= until + SLACK_MS).collect();
    let (most_before, _) = most_in_any_span(&before, span);
    // After the end: spans that start after it (earlier admissions can
    // still be in the first period after), and any span ending after it.
    let late: Vec<u64> = hot.iter().copied().filter(|&t| t >= until + PERIOD_MS).collect();
    let (most_late, _) = most_in_any_span(&late, span);
    let most_after = after.iter().map(|&t| hot.iter().filter(|&&u| u + span > t && u <= t).count()).max().unwrap_or(0);
    let (most_cold, _) = most_in_any_span(&cold_times, span);
    println!(
        "{} s of load: {}; {}; {}; {}; cold {}. hot reached the upstream {} times: most in a {span} ms span {most_before} \
         before the override's end (limit {}), {most_late} in a span after its end + a period, and {most_after} ending \
         after its end (limit {LIMIT}; earlier admissions count); cold most {most_cold}",
        (ended - start) / 1000,
        fast.summary("a 160/s"),
        slower.summary("b 40/s, a quiet"),
        back.summary("a back 80/s"),
        both.summary("b 40/s"),
        cold.summary("cold 80/s"),
        hot.len(),
        LIMIT * TIMES,
    );
    assert!(ended - start >= 4 * PERIOD_MS, "the run lasted four periods: {} ms", ended - start);
    assert!(most_before as u64 <= LIMIT * TIMES, "{most_before} in one period under the override");
    assert!(most_before as u64 > LIMIT, "the override applied: {most_before} in a period");
    assert!(most_after as u64 <= LIMIT, "{most_after} admitted in a period by decisions after the end");
    assert!(most_late as u64 <= LIMIT && most_late as u64 >= LIMIT / 2, "after the end, the configured: {most_late}");
    assert!(most_cold as u64 <= LIMIT, "cold keeps the configured limit: {most_cold}");
}
