//! Synced rules (`rules[].sync`) under load, through real Envoys and a real
//! Valkey: three Envoys of two workers share one key (limit 10,000 per 10 s,
//! interval 100 ms) driven well past the limit within one window, so the
//! exact answer is the limit itself: the admissions stay within the bound
//! docs/sync.md states, with few store calls per request; and a Valkey that
//! runs flushes after their worker gave up on them (`DEBUG SLEEP` past
//! `valkey.timeout`: the replies are lost, the flushes sent again), then is
//! killed and restarted (from its AOF) mid-run, counts nothing twice: what
//! the store holds afterwards is exactly what the Envoy admitted.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};
use support::load::{Connection, Counts, Load, Plan, Request};
use support::plugin::{plugin, rule};
use support::{wait_until, Envoy, EnvoyOptions, Valkey};

const LIMIT: u64 = 10_000;

fn config(algorithm: &str, limit: u64, period: &str) -> String {
    plugin()
        .timeout("200ms")
        .with(
            rule("tenant")
                .header("x-tenant")
                .algorithm(algorithm)
                .limit(limit, period)
                .field(r#""sync": { "interval": "100ms" }"#),
        )
        .json()
}

fn stat(envoys: &[Envoy], name: &str) -> u64 {
    envoys.iter().map(|e| e.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)).sum()
}

/// `clients` keep-alive clients on `envoy`, each sending every `pace` for
/// tenant `t1`, counted in `counts`.
fn load(counts: &Counts, envoy: &Envoy, clients: usize, pace: Duration) -> Load {
    let plan =
        Plan { connection: Connection::KeepAlive, pace: Some(pace), keep: false, ..Plan::closed(clients, 1_000_000) }
            .on_answer(counts.on_answer());
    Load::start(envoy.port, plan, Arc::new(|_: usize, _: usize| Request::new("GET", "/", &[("x-tenant", "t1")])))
}

/// `clients` clients per Envoy, each sending every `pace`, for `run`:
/// (answered, admitted).
fn drive(envoys: &[Envoy], clients: usize, pace: Duration, run: Duration) -> (u64, u64) {
    let counts = Counts::default();
    let loads: Vec<Load> = envoys.iter().map(|e| load(&counts, e, clients, pace)).collect();
    let start = Instant::now();
    wait_until("the run", run + Duration::from_secs(5), || start.elapsed() >= run);
    for load in loads {
        load.stop();
    }
    (counts.sent(), counts.admitted())
}

#[test]
fn three_envoys_of_two_workers_share_one_key_within_the_bound() {
    let _alone = support::alone();
    let valkey = Valkey::start();
    let options =
        EnvoyOptions { plugin_config: config("sliding_log", LIMIT, "10s"), valkey_port: valkey.port, concurrency: 2 };
    let envoys: Vec<Envoy> = (0..3).map(|_| Envoy::start(&options)).collect();
    // 3 Envoys x 12 clients every 12 ms: about 3,000 requests a second,
    // for 7 s, within one 10 s window: about twice the limit.
    let (sent, admitted) = drive(&envoys, 12, Duration::from_millis(12), Duration::from_secs(7));
    let stored = || valkey.int(&["ZCARD", "tollgate:{tenant:t1}:log"]) as u64;
    // The last flushes reach the store within a few intervals.
    wait_until("every admission in Valkey", Duration::from_secs(5), || stored() >= admitted);
    let store_calls = stat(&envoys, "store.requests");
    let (flushes, local) =
        (stat(&envoys, "sync.flushes"), stat(&envoys, "sync.allowed") + stat(&envoys, "sync.denied"));
    let over = admitted as f64 / LIMIT as f64 - 1.0;
    println!(
        "sync, 3 Envoys x 2 workers, one key, {LIMIT} per 10 s, interval 100 ms: {sent} sent in 7 s, {admitted} admitted \
         ({:+.2} % against the limit), {local} decided locally, {store_calls} store calls ({:.4} per request, \
         {flushes} flushes), {} entries in Valkey",
        over * 100.0,
        store_calls as f64 / sent as f64,
        stored()
    );
    assert!(sent >= 2 * LIMIT, "the load passes the limit well: {sent}");
    assert!(admitted <= LIMIT + LIMIT / 50, "at most 2 % over: {admitted}");
    assert!(admitted >= LIMIT - LIMIT / 20, "at most 5 % under: {admitted}");
    assert!(store_calls * 20 <= sent, "at most 0.05 store calls per request: {store_calls} for {sent}");
    assert_eq!(stored(), admitted, "the store holds every admission, once");
}

#[test]
fn a_valkey_killed_and_restarted_mid_run_counts_nothing_twice() {
    let _alone = support::alone();
    let mut valkey =
        Valkey::start_with(&["--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "yes"]);
    let options = EnvoyOptions {
        plugin_config: config("fixed_window", 1_000_000_000, "1h"),
        valkey_port: valkey.port,
        concurrency: 2,
    };
    let envoys = vec![Envoy::start(&options)];
    let counts = Counts::default();
    let load = load(&counts, &envoys[0], 8, Duration::from_millis(5));
    let start = Instant::now();
    let at =
        |t: u64| wait_until("the phase", Duration::from_secs(t + 10), || start.elapsed() >= Duration::from_secs(t));
    at(1);
    // Flushes that arrive during the sleep run after it, once their worker
    // has reset the stalled stream (timeout 200 ms): sent again, same token.
    let port = valkey.port;
    support::try_command(port, &[b"DEBUG", b"SLEEP", b"0.6"]).unwrap();
    at(2);
    valkey.stop(); // SIGKILL, flushes on the way lost
    let killed_at = counts.admitted();
    at(4);
    let during = counts.admitted() - killed_at;
    valkey.restart(); // from its AOF: the counts and the flush tokens survive
    at(6);
    load.stop();
    let admitted = counts.admitted();
    let key = "tollgate:{tenant:t1}:fw";
    let stored = || match valkey.cmd(&["HGET", key, "3600000:c"]) {
        tollgate::resp::Value::Bulk(b) => String::from_utf8_lossy(&b).parse::<u64>().unwrap_or(0),
        _ => 0,
    };
    // Every unit admitted reaches the store within a few intervals.
    wait_until("every admitted unit flushed", Duration::from_secs(5), || stored() >= admitted);
    let (failures, dropped) = (stat(&envoys, "sync.failures"), stat(&envoys, "sync.dropped"));
    let duplicates = stat(&envoys, "sync.duplicates");
    println!(
        "sync, Valkey asleep 0.6 s then killed 2 s mid-run (1 Envoy x 2 workers): {} sent, {admitted} admitted ({during} while the store \
         was down), {} stored in Valkey, {failures} flushes failed and were sent again, {duplicates} of them \
         already applied (recorded once), {dropped} dropped",
        counts.sent(),
        stored()
    );
    assert!(during > 0, "the synced rule kept deciding while the store was down");
    assert!(failures > 0, "flushes failed while the store was down");
    assert!(duplicates > 0, "flushes the store ran after their worker gave up were recognised");
    assert_eq!(stored(), admitted, "nothing counted twice, nothing lost");
}
