//! Sentinel discovery through Envoy (`envoy/envoy-sentinel.yaml`) against
//! real processes: a Valkey master, its replica and three Sentinels. The
//! master is killed (SIGKILL) under steady load; limiting must resume on the
//! promoted replica within 5 s of the promotion, and the over-admission that
//! asynchronous replication allows is measured and bounded.

use crate::support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::load::{self, Load, Plan, Request};
use support::{try_command, wait_until, Bootstrap, Envoy, EnvoyOptions, Valkey};
use tollgate::resp::Value;

const MASTER_NAME: &str = "mymaster";

/// A valkey-server in Sentinel mode with its own writable config file.
struct Sentinel {
    port: u16,
    child: Child,
    dir: PathBuf,
}

impl Sentinel {
    fn start(master_port: u16) -> Sentinel {
        for _ in 0..5 {
            let port = support::free_port();
            let dir = std::env::temp_dir().join(format!("tollgate-sentinel-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let conf = dir.join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                     sentinel failover-timeout {MASTER_NAME} 5000\n",
                    dir.display()
                ),
            )
            .unwrap();
            let mut child = Command::new(support::valkey_bin())
                .arg(&conf)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start valkey-server --sentinel");
            let start = Instant::now();
            loop {
                if matches!(try_command(port, &[b"PING"]), Ok(Value::Simple(s)) if s == b"PONG") {
                    return Sentinel { port, child, dir };
                }
                if !matches!(child.try_wait(), Ok(None)) || start.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("valkey-server --sentinel did not start on 5 different ports");
    }

    fn ask(&self, args: &[&str]) -> Option<Value> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        try_command(self.port, &args).ok()
    }

    /// The master's port as this Sentinel reports it.
    fn master_port(&self) -> Option<u16> {
        let reply = self.ask(&["SENTINEL", "get-master-addr-by-name", MASTER_NAME])?;
        let items = reply.as_array()?.to_vec();
        std::str::from_utf8(items.get(1)?.as_bytes()?).ok()?.parse().ok()
    }

    fn count(&self, what: &str) -> usize {
        self.ask(&["SENTINEL", what, MASTER_NAME]).and_then(|v| v.as_array().map(<[Value]>::len)).unwrap_or(0)
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A master, its replica (in sync) and three Sentinels that see both and
/// each other, so that a failover can be agreed.
fn topology() -> (Valkey, Valkey, Vec<Sentinel>) {
    let master = Valkey::start();
    let replica = Valkey::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    wait_until(
        "the replica to sync",
        Duration::from_secs(15),
        || matches!(replica.cmd(&["INFO", "replication"]), Value::Bulk(t) if String::from_utf8_lossy(&t).contains("master_link_status:up")),
    );
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(master.port)).collect();
    wait_until("the Sentinels to see each other and the replica", Duration::from_secs(20), || {
        sentinels.iter().all(|s| s.count("sentinels") == 2 && s.count("replicas") == 1)
    });
    (master, replica, sentinels)
}

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

/// Envoy with envoy/envoy-sentinel.yaml, its Sentinel ports replaced by ours.
fn envoy(sentinels: &[Sentinel], master_name: &str, limit: u64) -> Envoy {
    let options = EnvoyOptions { plugin_config: plugin_config(master_name, limit), valkey_port: 0, concurrency: 2 };
    let ports: Vec<u16> = sentinels.iter().map(|s| s.port).collect();
    Envoy::try_start_bootstrap_edited(&options, Bootstrap::Sentinel, &move |text| {
        support::replace_ports(&text, &[(26379, ports[0]), (26380, ports[1]), (26381, ports[2])])
    })
    .unwrap_or_else(|log| panic!("envoy did not start:\n{log}"))
}

fn stat(envoy: &Envoy, name: &str) -> u64 {
    envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
}

#[test]
fn unknown_master_name_fails_by_failure_mode_and_counts_lookup_failures() {
    let (_master, _replica, sentinels) = topology();
    let envoy = envoy(&sentinels, "nosuchmaster", 5);
    // A worker asks the Sentinels from its first request on; every request
    // waits at most the timeout for a master, then failure_mode applies.
    for _ in 0..2 {
        let started = Instant::now();
        let r = envoy.request("GET", "/", &[("x-user-id", "alice")]);
        let took = started.elapsed();
        assert_eq!((r.status, r.header("retry-after")), (503, Some("1")));
        assert!(took < Duration::from_millis(200 + 50), "waited {took:?}, bounded by the timeout");
        wait_until("lookups to fail", Duration::from_secs(10), || stat(&envoy, "sentinel.failures") >= 2);
    }
    assert_eq!(stat(&envoy, "store.errors.unavailable"), 2);
    assert_eq!(stat(&envoy, "store.calls"), 0, "no store call without a master");
    assert_eq!(stat(&envoy, "sentinel.switches"), 0);
    assert!(stat(&envoy, "sentinel.lookups") >= stat(&envoy, "sentinel.failures"));
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
