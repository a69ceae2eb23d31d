//! Sentinel discovery through Envoy (`envoy/envoy-sentinel.yaml`) against
//! real processes: a Valkey master, its replica and three Sentinels. The
//! master is killed (SIGKILL) under steady load; limiting must resume on the
//! promoted replica within 5 s of the promotion, and the over-admission that
//! asynchronous replication allows is measured and bounded.

use crate::support;

use std::time::{Duration, Instant};
use support::load::{self, Load, Plan, Request};
use support::sentinel::{self, topology, Sentinel, MASTER_NAME};
use support::{wait_until, Envoy};
use tollgate::resp::Value;

fn plugin_config(master_name: &str, limit: u64) -> String {
    format!(
        r#"{{
  "valkey": {{ "cluster": "tollgate_valkey", "timeout": "200ms",
              "sentinel": {{ "cluster": "tollgate_sentinels", "master_name": "{master_name}", "refresh": "5s" }} }},
  "failure_mode": "deny",
  "rules": [ {{ "name": "hot", "key": [ {{ "header": "x-user-id" }} ],
               "limits": [ {{ "limit": {limit}, "period": "1h" }} ] }} ]
}}"#
    )
}

fn envoy(sentinels: &[Sentinel], master_name: &str, limit: u64) -> Envoy {
    sentinel::envoy(sentinels, &plugin_config(master_name, limit), 2)
}

fn stat(envoy: &Envoy, name: &str) -> u64 {
    envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
}

#[test]
fn unknown_master_name_fails_by_failure_mode_and_counts_lookup_failures() {
    let (_master, _replica, sentinels) = topology();
    let envoy = envoy(&sentinels, "nosuchmaster", 5);
    // A worker asks the Sentinels from its first request on; every request
    // waits at most the timeout for a master, then failure_mode applies:
    // answered with no master ever known (so not by a store), and not hung
    // (a detector ten times the timeout; the time is printed).
    for _ in 0..2 {
        let started = Instant::now();
        let r = envoy.request("GET", "/", &[("x-user-id", "alice")]);
        let took = started.elapsed();
        println!("no master: 503 after {took:?} (timeout 200 ms)");
        assert_eq!((r.status, r.header("retry-after")), (503, Some("1")));
        assert!(took < support::hang_bound(Duration::from_millis(200)), "waited {took:?}: it hung");
        wait_until("lookups to fail", Duration::from_secs(10), || stat(&envoy, "sentinel.failures") >= 2);
    }
    assert_eq!(stat(&envoy, "store.errors.unavailable"), 2);
    assert_eq!(stat(&envoy, "store.messages"), 0, "no store call without a master");
    assert_eq!(stat(&envoy, "sentinel.switches"), 0);
    // From one read: both move while lookups keep failing.
    let all = envoy.settled_stats();
    let get = |name: &str| all.get(&format!("wasmcustom.tollgate.sentinel.{name}")).copied().unwrap_or(0);
    assert!(get("lookups") >= get("failures"), "{all:?}");
}

#[test]
fn limiting_resumes_on_the_promoted_replica_after_the_master_is_killed() {
    const LIMIT: usize = 1000;
    let (mut master, replica, sentinels) = topology();
    let envoy = envoy(&sentinels, MASTER_NAME, LIMIT as u64);
    wait_until("the first decision", Duration::from_secs(10), || {
        envoy.request("GET", "/", &[("x-user-id", "warmup")]).header("ratelimit").is_some()
    });
    assert!(stat(&envoy, "sentinel.lookups") >= 1);

    // Steady load on one bucket: 4 threads, each at most one request per
    // millisecond (while the store is down, requests fail in microseconds:
    // unpaced, the load would be over before the promotion) and at most
    // 15,000 requests each.
    let hot = load::repeat(Request::new("GET", "/", &[("x-user-id", "hot")]));
    let load = Load::start(envoy.port, Plan::paced(4, 15_000, Duration::from_millis(1)), hot);

    wait_until("half the limit admitted", Duration::from_secs(20), || load.admitted() >= LIMIT / 2);
    let admitted_before_kill = load.admitted();
    let killed_at = Instant::now();
    master.stop(); // SIGKILL
    wait_until("a Sentinel to report the replica as master", Duration::from_secs(20), || {
        sentinels.iter().any(|s| s.master_port() == Some(replica.port))
    });
    let promoted_at = Instant::now();
    // Keep the load on until the limit binds again on the new master.
    wait_until("denials on the new master", Duration::from_secs(20), || load.count_after(promoted_at, 429) >= 50);
    let outcomes = load.stop().all_answered();
    let resumed_at = outcomes
        .iter()
        .filter(|o| o.at > promoted_at && o.decided())
        .map(|o| o.at)
        .min()
        .expect("decisions after the promotion");
    let resumed_after = resumed_at.saturating_duration_since(promoted_at);
    let total_admitted = outcomes.iter().filter(|o| o.status() == Some(200) && o.decided()).count();
    let undecided_200 = outcomes.iter().filter(|o| o.status() == Some(200) && !o.decided()).count();
    let failed = outcomes.iter().filter(|o| o.status() == Some(503)).count();
    let stored = match replica.cmd(&["ZCARD", "tollgate:{hot:hot}:log"]) {
        Value::Integer(n) => n as usize,
        other => panic!("{other:?}"),
    };
    let over = total_admitted.saturating_sub(LIMIT);
    println!(
        "failover: {} requests; {admitted_before_kill} admitted before the kill; promotion {:?} after the kill; \
         limiting resumed {resumed_after:?} after the promotion; 503 during the switch: {failed}; \
         admitted {total_admitted} of limit {LIMIT} (over-admission {over}); entries on the new master {stored} \
         (lost with the old master: {}); failures that may have run {} (timeouts {}); lookups {}, lookup failures {}, \
         switches {}",
        outcomes.len(),
        promoted_at - killed_at,
        total_admitted.saturating_sub(stored),
        stat(&envoy, "store.unknown_outcome"),
        stat(&envoy, "store.errors.timeout"),
        stat(&envoy, "sentinel.lookups"),
        stat(&envoy, "sentinel.failures"),
        stat(&envoy, "sentinel.switches"),
    );
    assert_eq!(undecided_200, 0, "deny mode: nothing passes undecided");
    // A hang detector, documented as the promise (docs/reliability.md): the
    // runs measured resumed 134 to 158 ms after the promotion, thirty times
    // less. A busy machine adds milliseconds; a worker that never looks the
    // master up again after its failures would not resume at all.
    assert!(resumed_after <= Duration::from_secs(5), "limiting resumed {resumed_after:?} after the promotion");
    assert_eq!(stat(&envoy, "sentinel.switches"), 2, "each of the 2 workers switched once");
    // The limit binds on the new master: what it admitted on top of the limit
    // is exactly what the old master admitted and never replicated.
    // A request whose call may have run but whose reply never came back (a
    // timeout, or the connection lost with the killed master after its
    // script wrote and replicated) is answered 503 yet may count against the
    // limit: admitted + such failures reach the limit.
    let unknown = stat(&envoy, "store.unknown_outcome") as usize;
    assert!(total_admitted + unknown >= LIMIT, "admitted {total_admitted}, {unknown} failures that may have run");
    assert_eq!(stored, LIMIT, "the new master holds exactly the limit");
    // Documented bound (docs/reliability.md): at most 1% of the limit is lost
    // with the killed master (replication on loopback lags by milliseconds).
    assert!(over <= LIMIT / 100, "over-admission {over} beyond 1% of {LIMIT}");
    assert_eq!(envoy.stat("http.demo.downstream_rq_active"), Some(0));
}
