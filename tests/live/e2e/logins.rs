//! Counting only failed logins, through a real Envoy, Valkey and a demo
//! upstream that answers the status a test asks for: 20 per 60 s AND 5 per
//! 3 s counting only 401s. Successful logins never count; the sixth failure
//! within 3 s is denied on the request, without reaching the upstream; the
//! `RateLimit` of a failure shows the state after it was charged; a store
//! that is slow when the response comes delays it by `valkey.timeout` at
//! most. Time is injected (`testing.now_header`), except for that bound,
//! asserted as an order: the response came while the store was still paused.

use crate::support;

use std::time::{Duration, Instant};
use support::plugin::{plugin, rule, Plugin};
use support::upstream::{demo_upstream, Upstream};
use support::{http_body, remaining, wait_until, Envoy, EnvoyOptions, Response, Valkey};

const NOW: &str = "x-tollgate-now";
const T0: u64 = 1_800_000_000_000;
const ALICE: &str = "tollgate:{auth.failedLogins:alice}:log";

fn logins(timeout: &str) -> Plugin {
    plugin().timeout(timeout).now_header(NOW).with(
        rule("auth.failedLogins")
            .path_prefix("/auth/token")
            .methods(&["POST"])
            .header("x-user-id")
            .limit(20, "60s")
            .limit(5, "3s")
            .field(r#""count": { "status": [401] }"#),
    )
}

struct Stack {
    valkey: Valkey,
    upstream: Upstream,
    envoy: Envoy,
}

fn stack(config: Plugin) -> Stack {
    let valkey = Valkey::start();
    let upstream = Upstream::start();
    let options = EnvoyOptions { plugin_config: config.json(), valkey_port: valkey.port, concurrency: 2 };
    let port = upstream.port;
    let envoy = Envoy::try_start_edited(&options, &|text| demo_upstream(text, port)).unwrap();
    Stack { valkey, upstream, envoy }
}

impl Stack {
    /// A login attempt at injected time `at` that the upstream answers
    /// with `status`, credentials in a JSON body.
    fn login(&self, user: &str, status: u16, at: u64) -> Response {
        let (status, at) = (status.to_string(), at.to_string());
        let headers = [("x-user-id", user), ("x-demo-status", status.as_str()), (NOW, at.as_str())];
        let body = format!(r#"{{"user":"{user}","password":"guess"}}"#);
        http_body(self.envoy.port, "POST", "/auth/token", &headers, body.as_bytes()).unwrap()
    }

    fn stat(&self, name: &str) -> u64 {
        self.envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
    }
}

#[test]
fn only_failed_logins_count_and_the_sixth_is_denied_before_the_upstream() {
    // A held response waits for its settlement up to the timeout: long
    // enough here for a loaded machine (the bound has its own test below).
    let s = stack(logins("1s"));
    for i in 0..3 {
        let r = s.login("alice", 200, T0 + i);
        assert_eq!(r.status, 200);
        assert_eq!(remaining(&r), [("auth.failedLogins/60s".into(), 20), ("auth.failedLogins/3s".into(), 5)]);
    }
    for failure in 1..=5u64 {
        let r = s.login("alice", 401, T0 + 10 + failure);
        assert_eq!(r.status, 401, "the upstream's answer reaches the client");
        assert_eq!(
            remaining(&r),
            [("auth.failedLogins/60s".into(), 20 - failure), ("auth.failedLogins/3s".into(), 5 - failure)],
            "RateLimit shows the state after this failure was charged"
        );
    }
    assert_eq!(s.valkey.int(&["ZCARD", ALICE]), 5, "only the failures are recorded");
    let upstream_before = s.upstream.hits().len();
    assert_eq!(upstream_before, 8);
    let sixth = s.login("alice", 401, T0 + 100);
    assert_eq!(sixth.status, 429, "{}", sixth.body_text());
    assert!(sixth.body_text().contains("auth.failedLogins/3s"));
    let again = s.login("alice", 200, T0 + 200);
    assert_eq!(again.status, 429, "even a correct password waits: the attempt is checked before the upstream");
    assert_eq!(s.upstream.hits().len(), upstream_before, "denied attempts never reached the upstream");
    assert_eq!(s.valkey.int(&["ZCARD", ALICE]), 5, "denials record nothing");
    // Successful logins are never limited, however many.
    for i in 0..30 {
        assert_eq!(s.login("bob", 200, T0 + 300 + i).status, 200);
    }
    assert_eq!(s.valkey.int(&["EXISTS", "tollgate:{auth.failedLogins:bob}:log"]), 0);
    // Once the 3 s window has let the failures go, alice may try again. (A
    // failure is charged when its response settles: the injected time of
    // its request plus the real time it took, a few ms; 4 s leaves room.)
    assert_eq!(s.login("alice", 401, T0 + 4_000).status, 401);
    wait_until("the sixth failure charged", Duration::from_secs(5), || s.valkey.int(&["ZCARD", ALICE]) == 6);
    assert_eq!(s.stat("rule.auth.failedLogins.settled"), 6);
    assert_eq!(s.stat("rule.auth.failedLogins.reserved"), 0);
    assert_eq!(s.stat("rule.auth.failedLogins.settle_failed"), 0);
    assert_eq!(s.stat("rule.auth.failedLogins.denied"), 2);
    assert_eq!(s.stat("settle.hold_expired"), 0);
}

/// The store pauses between the decision and the response: the response
/// is held `valkey.timeout` at most, then goes on with the admission's
/// state less its own charge; the settlement counts as failed.
///
/// The pause lasts until the test ends it, after the response: the response
/// came while the store could not answer, so it cannot have waited for the
/// settlement's reply; `settle.hold_expired` says the timeout let it go. Its
/// hold is at least the timeout (a lower bound only an early release breaks)
/// and, as a backstop, not ten times it; the figure is printed.
#[test]
fn a_slow_store_at_response_time_delays_the_response_by_the_timeout_at_most() {
    const TIMEOUT: Duration = Duration::from_millis(150);
    let s = stack(logins("150ms"));
    let port = s.envoy.port;
    let attempt = std::thread::spawn(move || {
        let headers = [("x-user-id", "alice"), ("x-demo-status", "401"), ("x-demo-hold", "1"), (NOW, "1800000000000")];
        http_body(port, "POST", "/auth/token", &headers, b"{}").unwrap()
    });
    wait_until("the upstream has the request", Duration::from_secs(10), || s.upstream.hits().len() == 1);
    // Writes, and so the settlement's FCALL, wait while the pause lasts
    // (the PAUSE itself returns at once); a write pause, unlike `ALL`, ends
    // when `CLIENT UNPAUSE` says so. 60 s: a backstop if the test fails.
    s.valkey.cmd(&["CLIENT", "PAUSE", "60000", "WRITE"]);
    let released = Instant::now();
    s.upstream.release();
    let response = attempt.join().unwrap();
    let held = released.elapsed();
    assert_eq!(s.stat("settle.hold_expired"), 1, "the response went on at the timeout, the store still paused");
    assert_eq!(response.status, 401);
    assert_eq!(
        remaining(&response),
        [("auth.failedLogins/60s".into(), 19), ("auth.failedLogins/3s".into(), 4)],
        "the admission's state less its own failure"
    );
    println!("response held {held:?} by a paused store (valkey.timeout {TIMEOUT:?})");
    assert!(held >= TIMEOUT - Duration::from_millis(10), "held {held:?}: the response waited for the settlement first");
    assert!(held < support::hang_bound(TIMEOUT), "held {held:?}: the response hung");
    wait_until("the settlement counted as failed", Duration::from_secs(5), || {
        s.stat("rule.auth.failedLogins.settle_failed") == 1
    });
    assert_eq!(s.stat("settle.hold_expired"), 1);
    s.valkey.cmd(&["CLIENT", "UNPAUSE"]);
    // After the pause the store decides again (failure_mode allow adds no
    // RateLimit header).
    wait_until("decisions by the store again", Duration::from_secs(10), || {
        s.login("carol", 200, T0).header("ratelimit").is_some()
    });
}
