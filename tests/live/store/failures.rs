//! Store failures under load through a real Envoy: Valkey refusing
//! connections, stopped mid-load, not answering (a blackholed port,
//! `DEBUG SLEEP`, `CLIENT PAUSE`) and restarted with its scripts and keys gone.
//!
//! Every request is timed on its own; each test prints its figures (run with
//! `-- --nocapture`). What it asserts is why each request ended (its status,
//! the error counters by kind: refused at once, or timed out on a stalled
//! stream), that none went unanswered, and, as a hang detector only, that
//! none took ten times `valkey.timeout`: a figure such as "timeout + 50 ms"
//! measures the machine as much as the filter.

use crate::support;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;
use support::load::{self, Load, Plan, Report, Request};
use support::{Envoy, EnvoyOptions, Valkey};

const TIMEOUT_MS: u64 = 100;
/// A worker's longest reconnect backoff (docs/reliability.md).
const BACKOFF: Duration = Duration::from_millis(800);
const THREADS: usize = 4;

/// One rule: 5 per minute per `x-user-id`.
fn config(failure_mode: &str) -> String {
    format!(
        r#"{{
  "valkey": {{ "cluster": "tollgate_valkey", "timeout": "{TIMEOUT_MS}ms" }},
  "failure_mode": "{failure_mode}",
  "rules": [ {{ "name": "api", "key": [ {{ "header": "x-user-id" }} ],
               "limits": [ {{ "limit": 5, "period": "60s" }} ] }} ]
}}"#
    )
}

fn envoy(valkey_port: u16, failure_mode: &str) -> Envoy {
    Envoy::start(&EnvoyOptions { plugin_config: config(failure_mode), valkey_port, concurrency: 2 })
}

/// Each request has a user of its own: the store, when it answers, admits it.
fn unique_users(tag: &'static str) -> Arc<load::RequestFn> {
    Arc::new(move |t, i| Request::new("GET", "/", &[("x-user-id", &format!("{tag}-{t}-{i}"))]))
}

fn stat(envoy: &Envoy, name: &str) -> u64 {
    envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
}

/// Every request was answered; none hung. The slowest is printed (on a
/// quiet machine a little over the 100 ms timeout); the bound asserted is a
/// hang detector, ten times the timeout, that a busy machine does not
/// reach. Why each request ended is asserted by the tests' counters.
fn assert_bounded(report: &Report, what: &str) {
    println!("{}", report.summary(what));
    assert!(report.errors().is_empty(), "{what}: requests without a response: {:?}", report.errors());
    let max = report.max_latency();
    let hang = support::hang_bound(Duration::from_millis(TIMEOUT_MS));
    assert!(max < hang, "{what}: slowest request took {max:?}: it hung (detector {hang:?})");
}

/// With `failure_mode: allow`, a request the store did not decide passed
/// without rate-limit headers; with `deny` it got 503 and `Retry-After: 1`.
fn assert_failure_mode(report: &Report, failure_mode: &str) -> usize {
    let mut failed = 0;
    for s in &report.samples {
        if s.decided() {
            assert_eq!(s.status(), Some(200), "{s:?}");
            continue;
        }
        failed += 1;
        match failure_mode {
            "allow" => assert_eq!(s.status(), Some(200), "{s:?}"),
            _ => {
                assert_eq!(s.status(), Some(503), "{s:?}");
                assert_eq!(s.header("retry-after"), Some("1"), "{s:?}");
            }
        }
    }
    failed
}

/// Nothing is left waiting inside Envoy once the load is over.
fn assert_nothing_pending(envoy: &Envoy) {
    support::wait_until("no request left active", Duration::from_secs(10), || {
        envoy.stat("http.demo.downstream_rq_active") == Some(0)
            && envoy.stat("wasmcustom.tollgate.stream.in_flight").unwrap_or(0) == 0
    });
}

/// The store decides again on every worker (a worker's reconnect backoff is
/// at most 800 ms, and each worker reconnects on its own; the time is
/// printed, and the deadline, ten times the backoff, only detects a worker
/// that never reconnects), and limits exactly. Each probe is a new
/// connection, which the kernel spreads over the workers (`SO_REUSEPORT`):
/// 16 decided in a row leave a worker still failing over a chance of 2^-15.
fn assert_resumes(envoy: &Envoy, user: &str) {
    let start = std::time::Instant::now();
    support::wait_until("limiting to resume on every worker", support::hang_bound(BACKOFF), || {
        (0..16).all(|_| envoy.request("GET", "/", &[("x-user-id", "probe")]).header("ratelimit").is_some())
    });
    println!("{user}: limiting resumed on every worker {} ms after the store came back", start.elapsed().as_millis());
    assert_limiting(envoy, user);
}

/// Limiting works again: a fresh user gets exactly 5 of 6.
fn assert_limiting(envoy: &Envoy, user: &str) {
    let statuses: Vec<u16> = (0..6).map(|_| envoy.request("GET", "/", &[("x-user-id", user)]).status).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429], "limiting for {user}");
}

#[test]
fn refused_connections_follow_failure_mode_and_recover() {
    for mode in ["allow", "deny"] {
        let mut valkey = Valkey::start();
        valkey.stop(); // its port now refuses connections
        let envoy = envoy(valkey.port, mode);
        let report = load::run(envoy.port, Plan::closed(THREADS, 25), unique_users("refused"));
        assert_bounded(&report, &format!("refused ({mode})"));
        let failed = assert_failure_mode(&report, mode);
        assert_eq!(failed, report.samples.len(), "nothing can be decided");
        assert_eq!(stat(&envoy, &format!("failure_mode.{}", if mode == "allow" { "allowed" } else { "denied" })), 100);
        assert_eq!(stat(&envoy, "store.errors.unavailable"), 100);
        assert_eq!(stat(&envoy, "store.errors"), 100);
        assert_nothing_pending(&envoy);
        valkey.restart();
        assert_resumes(&envoy, "after-refused");
    }
}

#[test]
fn valkey_stopped_mid_load_then_back() {
    let mut valkey = Valkey::start();
    let envoy = envoy(valkey.port, "deny");
    let load = Load::start(envoy.port, Plan::closed(THREADS, 60), unique_users("mid"));
    load.wait_answered(60);
    valkey.stop();
    let report = load.join();
    assert_bounded(&report, "stopped mid-load (deny)");
    let failed = assert_failure_mode(&report, "deny");
    assert!(failed > 0, "some requests met the outage");
    assert!(report.decided() >= 60, "requests before the outage were decided");
    assert_eq!(stat(&envoy, "failure_mode.denied"), failed as u64);
    assert_eq!(stat(&envoy, "store.errors"), failed as u64);
    assert_nothing_pending(&envoy);

    // Back: the same Envoy decides again by itself (its next stream, within
    // the reconnect backoff), then under load.
    valkey.restart();
    assert_resumes(&envoy, "after-stop");
    let errors = stat(&envoy, "store.errors");
    let report = load::run(envoy.port, Plan::closed(THREADS, 20), unique_users("back"));
    assert_bounded(&report, "back after the stop (deny)");
    assert_eq!(report.decided(), 80, "every request is decided again");
    assert_eq!(stat(&envoy, "store.errors"), errors, "no new failure");
}

/// A store that accepts connections and never answers: the stream stalls,
/// the requests on it get `failure_mode` at the timeout, and while the
/// worker backs off before the next stream, requests fail at once.
#[test]
fn blackholed_port_is_bounded_by_the_timeout_and_recovers() {
    let mut valkey = Valkey::start();
    valkey.stop();
    // Accepts connections and never reads them, until dropped.
    let blackhole = TcpListener::bind(("127.0.0.1", valkey.port)).unwrap();
    blackhole.set_nonblocking(true).unwrap();
    let envoy = envoy(valkey.port, "allow");
    let report = load::run(envoy.port, Plan::closed(THREADS, 15), unique_users("blackhole"));
    assert_bounded(&report, "blackholed (allow)");
    assert_eq!(assert_failure_mode(&report, "allow"), 60);
    assert_eq!(stat(&envoy, "failure_mode.allowed"), 60);
    let (timeouts, unavailable) = (stat(&envoy, "store.errors.timeout"), stat(&envoy, "store.errors.unavailable"));
    println!("blackholed: {timeouts} timed out on a stalled stream, {unavailable} failed fast while it was down");
    assert!(timeouts >= 1 && timeouts + unavailable == 60, "{timeouts} + {unavailable}");
    assert!(stat(&envoy, "stream.resets.stalled") >= 1, "the stream was declared stalled");
    assert_nothing_pending(&envoy);
    drop(blackhole);
    valkey.restart();
    assert_resumes(&envoy, "after-blackhole");
}

#[test]
fn debug_sleep_requests_time_out_then_limiting_resumes() {
    let valkey = Valkey::start_with(&["--enable-debug-command", "yes"]);
    let envoy = envoy(valkey.port, "allow");
    assert_limiting(&envoy, "before-sleep");
    let port = valkey.port;
    let sleeper = std::thread::spawn(move || support::try_command(port, &[b"DEBUG", b"SLEEP", b"1.5"]));
    // The server is asleep once it stops answering PING on a new connection.
    support::wait_until("DEBUG SLEEP to start", Duration::from_secs(5), || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        std::io::Write::write_all(&mut s, b"PING\r\n").unwrap();
        std::io::Read::read(&mut s, &mut [0u8; 16]).is_err()
    });
    let report = load::run(envoy.port, Plan::closed(THREADS, 4), unique_users("asleep"));
    sleeper.join().unwrap().unwrap();
    assert_bounded(&report, "DEBUG SLEEP (allow)");
    let failed = assert_failure_mode(&report, "allow");
    assert!(failed >= 12, "requests during the sleep got failure_mode: {failed}");
    // Those on the stream time out when it stalls; those while the worker
    // backs off before the next stream fail at once.
    let (timeouts, unavailable) = (stat(&envoy, "store.errors.timeout"), stat(&envoy, "store.errors.unavailable"));
    assert!(timeouts >= 1 && (timeouts + unavailable) as usize == failed, "{timeouts} + {unavailable}");
    assert_nothing_pending(&envoy);
    assert_resumes(&envoy, "after-sleep");
}

/// `CLIENT PAUSE ALL`: Valkey still accepts and reads connections but runs no
/// command. The stream's commands get no reply: the stream stalls, its
/// requests get `failure_mode` at the timeout (`timeout`), and requests
/// while the worker backs off fail at once (`unavailable`).
#[test]
fn client_pause_fails_within_the_timeout_then_limiting_resumes() {
    let valkey = Valkey::start();
    let envoy = envoy(valkey.port, "deny");
    assert_limiting(&envoy, "before-pause");
    valkey.cmd(&["CLIENT", "PAUSE", "3000", "ALL"]);
    let report = load::run(envoy.port, Plan::closed(THREADS, 10), unique_users("paused"));
    assert_bounded(&report, "CLIENT PAUSE ALL (deny)");
    let failed = assert_failure_mode(&report, "deny");
    assert_eq!(failed, 40, "no call is decided while paused");
    let (timeouts, unavailable) = (stat(&envoy, "store.errors.timeout"), stat(&envoy, "store.errors.unavailable"));
    assert!(timeouts >= 1 && timeouts + unavailable == 40, "{timeouts} + {unavailable}");
    assert!(stat(&envoy, "stream.resets.stalled") >= 1);
    assert_nothing_pending(&envoy);
    valkey.cmd(&["CLIENT", "UNPAUSE"]);
    assert_resumes(&envoy, "after-pause");
}

/// A restart loses the limiter's code and every key: no request fails (the
/// worker loads the function library again) and decisions start from the
/// new state.
/// The local denial cache is off here: with it, denials the store gave before
/// the restart are kept until their retry time (see docs/performance.md), and
/// `restart_keeps_cached_denials_until_their_retry_time` shows that.
#[test]
fn restart_loses_scripts_and_keys_but_no_request_fails() {
    let mut valkey = Valkey::start();
    let no_cache = config("deny").replace(r#""failure_mode""#, r#""denial_cache": { "max_keys": 0 }, "failure_mode""#);
    let envoy = Envoy::start(&EnvoyOptions { plugin_config: no_cache, valkey_port: valkey.port, concurrency: 2 });
    let shared: Arc<load::RequestFn> = Arc::new(|_, _| Request::new("GET", "/", &[("x-user-id", "shared")]));
    for phase in ["before restart", "after restart"] {
        let report = load::run(envoy.port, Plan::closed(THREADS, 10), Arc::clone(&shared));
        println!("{}", report.summary(phase));
        assert!(report.errors().is_empty());
        assert_eq!((report.count(200), report.count(429)), (5, 35), "{phase}: exactly the limit, from fresh state");
        assert_eq!(report.decided(), 40, "{phase}: every request decided");
        assert_eq!(valkey.int(&["ZCARD", "tollgate:{api:shared}:log"]), 5);
        valkey.restart();
        assert_eq!(valkey.int(&["DBSIZE"]), 0, "the restart lost every key");
    }
    assert_eq!(stat(&envoy, "store.errors"), 0, "NOSCRIPT after the restart is not a failure");
}

/// With the local denial cache (the default), a restart does not free a
/// bucket the store had denied: the proxy keeps denying it until the retry
/// time the store gave, and never admits more than the limit meanwhile.
#[test]
fn restart_keeps_cached_denials_until_their_retry_time() {
    let mut valkey = Valkey::start();
    let envoy = Envoy::start(&EnvoyOptions { plugin_config: config("deny"), valkey_port: valkey.port, concurrency: 1 });
    let get = |user: &str| envoy.request("GET", "/", &[("x-user-id", user)]);
    for _ in 0..5 {
        assert_eq!(get("cached").status, 200);
    }
    assert_eq!(get("cached").status, 429);
    valkey.restart();
    assert_eq!(get("cached").status, 429, "still denied from the cache");
    assert_eq!(valkey.int(&["DBSIZE"]), 0, "without asking the store");
    assert_eq!(get("fresh").status, 200, "other buckets are decided by the new store");
}
