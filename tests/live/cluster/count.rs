//! Counting on the response (`rules[].count`) for requests whose counting
//! rules' buckets are on different masters, through Envoy
//! (`envoy/envoy-cluster.yaml`, one worker) on a real Valkey Cluster of 3
//! masters with replicas, with the demo upstream answering what each
//! request asks for: rule `a` keyed by `x-user-id`, rule `b` keyed by
//! `x-b`, their buckets on different masters, so every request is decided
//! in two steps and settled with one `adjust` per master whose bucket
//! changes. Each bucket is read on the master that owns it.
//!
//! - Failed logins: both rules count only 401s. Successes leave both
//!   buckets empty; each failure is charged on both masters before its
//!   response leaves; the attempt after a rule's limit is denied without
//!   reaching the upstream, and its undo leaves the other master's bucket
//!   exactly as it was, even at the millisecond of that bucket's last
//!   charge.
//! - Reservations: each rule reserves `x-max` and is settled with its own
//!   cost from a response header: after settlement each master's bucket
//!   holds exactly the actual cost (a refund, an extra charge); a
//!   reservation that does not fit one master is undone on the other.
//!   With one rule's cost in the response body, the headers leave with the
//!   state at admission and both masters are settled when the body ends.
//!
//! Time is injected (`testing.now_header`). One worker: a request's parts
//! are always both sent (its streams are open), so undos are exact.

use crate::support;

use std::time::Duration;
use support::cluster::ValkeyCluster;
use support::plugin::{plugin, rule, Plugin};
use support::upstream::{demo_upstream, Upstream};
use support::{http_body, remaining, wait_until, Envoy, Response};
use tollgate::resp::Value;
use tollgate::store::cluster::key_slot;

const NOW: &str = "x-tollgate-now";
const T0: u64 = 1_800_000_000_000;

/// Rules `a` (per `x-user-id`) and `b` (per `x-b`), each with `count` and
/// its windows.
fn config(a: &[(u64, &str)], b: &[(u64, &str)], count: (&str, &str)) -> Plugin {
    let counted = |name: &str, header: &str, limits: &[(u64, &str)], count: &str| {
        let keyed = rule(name).header(header).field(&format!(r#""count": {count}"#));
        limits.iter().fold(keyed, |r, &(limit, period)| r.limit(limit, period))
    };
    plugin()
        .timeout("1s")
        .now_header(NOW)
        .valkey(r#""cluster_mode": { "seeds": "tollgate_valkey_seeds", "refresh": "5s" }"#)
        .failure_mode("deny")
        .top(r#""denial_cache": { "max_keys": 0 }"#)
        .with(counted("a", "x-user-id", a, count.0))
        .with(counted("b", "x-b", b, count.1))
}

fn key(rule: &str, user: &str) -> String {
    format!("tollgate:{{{rule}:{user}}}:log")
}

struct Stack {
    cluster: ValkeyCluster,
    upstream: Upstream,
    envoy: Envoy,
    /// Whose buckets under `a` and `b` are on different masters.
    user: String,
}

fn stack(config: Plugin) -> Stack {
    let cluster = ValkeyCluster::start(3, 2_000);
    let upstream = Upstream::start();
    let port = upstream.port;
    let envoy = cluster.envoy_edited(&config.json(), 1, &move |text| demo_upstream(text, port));
    let owner = |k: &str| cluster.owner_port(key_slot(k.as_bytes()));
    let user = (0..).map(|i| format!("u{i}")).find(|u| owner(&key("a", u)) != owner(&key("b", u))).unwrap();
    Stack { cluster, upstream, envoy, user }
}

impl Stack {
    /// A request of both rules at injected `at`, with `headers` for the
    /// demo upstream.
    fn send(&self, at: u64, headers: &[(&str, &str)]) -> Response {
        let at = at.to_string();
        let mut all = vec![("x-user-id", self.user.as_str()), ("x-b", self.user.as_str()), (NOW, at.as_str())];
        all.extend_from_slice(headers);
        http_body(self.envoy.port, "POST", "/login", &all, b"{}").unwrap()
    }

    /// The master that owns `rule`'s bucket, and the bucket's key.
    fn bucket(&self, rule: &str) -> (&support::Valkey, String) {
        let key = key(rule, &self.user);
        (self.cluster.node(self.cluster.owner_port(key_slot(key.as_bytes()))), key)
    }

    /// Entries of `rule`'s bucket (units), read on its master.
    fn units(&self, rule: &str) -> i64 {
        let (node, key) = self.bucket(rule);
        node.int(&["ZCARD", &key])
    }

    /// Every entry of `rule`'s bucket, `member@score` (the score in ms on
    /// the store's clock), oldest first, read on its master.
    fn entries(&self, rule: &str) -> Vec<String> {
        let (node, key) = self.bucket(rule);
        let reply = node.cmd(&["ZRANGE", &key, "0", "-1", "WITHSCORES"]);
        let text = |v: &Value| match v {
            Value::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("{other:?}"),
        };
        reply.as_array().unwrap().chunks(2).map(|e| format!("{}@{}", text(&e[0]), text(&e[1]))).collect()
    }

    /// The score (ms, the store's clock) of the newest entry of `rule`'s bucket.
    fn newest(&self, rule: &str) -> u64 {
        let entries = self.entries(rule);
        entries.last().and_then(|e| e.rsplit_once('@')).unwrap().1.parse().unwrap()
    }

    fn stat(&self, name: &str) -> u64 {
        self.envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
    }
}

#[test]
fn failed_logins_across_masters_are_charged_on_both_and_a_denial_leaves_the_other_master_unchanged() {
    // `a`: 3 failures per 3 s; `b`: 5 per 60 s. Both count 401s only.
    let only_401 = r#"{ "status": [401] }"#;
    let s = stack(config(&[(3, "3s")], &[(5, "60s")], (only_401, only_401)));
    let full = [("a/3s".to_string(), 3), ("b/60s".to_string(), 5)];
    for i in 0..3 {
        let r = s.send(T0 + i, &[]);
        assert_eq!((r.status, remaining(&r)), (200, full.to_vec()), "a success counts nothing");
    }
    for rule in ["a", "b"] {
        let (node, key) = s.bucket(rule);
        assert_eq!(node.int(&["EXISTS", &key]), 0, "{rule}: nothing recorded on its master");
    }
    for failure in 1..=3u64 {
        let r = s.send(T0 + 10 + failure, &[("x-demo-status", "401")]);
        assert_eq!(r.status, 401, "the upstream's answer reaches the client");
        assert_eq!(
            remaining(&r),
            [("a/3s".to_string(), 3 - failure), ("b/60s".to_string(), 5 - failure)],
            "RateLimit shows the state after this failure"
        );
        // (The response waited for both settlements: `hold_expired` is 0.)
        assert_eq!((s.units("a"), s.units("b")), (failure as i64, failure as i64), "charged on both masters");
    }
    assert_eq!(s.upstream.hits().len(), 6);

    // `a` is full: the next attempt is denied by `a` on the request; `b`'s
    // part (it only checks, recording nothing) is undone, at the very
    // millisecond of `b`'s last charge: the undo must take nothing back.
    let b_before = s.entries("b");
    let r = s.send(s.newest("b"), &[("x-demo-status", "401")]);
    assert_eq!(r.status, 429, "{}", r.body_text());
    assert!(r.body_text().contains("a/3s"), "{}", r.body_text());
    let r = s.send(s.newest("b"), &[]);
    assert_eq!(r.status, 429, "a correct password waits too: checked before the upstream");
    assert_eq!(s.upstream.hits().len(), 6, "denied attempts never reached the upstream");
    assert_eq!(s.entries("b"), b_before, "b's bucket on its master unchanged by the denials");
    assert_eq!(s.units("a"), 3, "a's denials recorded nothing");

    // `a`'s window passes; `b` (60 s) still holds 3. Two more failures fill
    // `b`, and the next is denied by `b`: `a`'s part is undone on its master
    // at the millisecond of `a`'s last charge.
    for failure in 1..=2u64 {
        let r = s.send(T0 + 5_000 + failure, &[("x-demo-status", "401")]);
        assert_eq!(r.status, 401);
        assert_eq!(remaining(&r), [("a/3s".to_string(), 3 - failure), ("b/60s".to_string(), 2 - failure)]);
    }
    assert_eq!((s.units("a"), s.units("b")), (2, 5), "a's old failures left its window");
    let a_before = s.entries("a");
    let r = s.send(s.newest("a"), &[("x-demo-status", "401")]);
    assert_eq!(r.status, 429);
    assert!(r.body_text().contains("b/60s"), "{}", r.body_text());
    assert_eq!(s.entries("a"), a_before, "a's bucket on its master unchanged by b's denial");
    assert_eq!(s.units("b"), 5);
    assert_eq!(s.upstream.hits().len(), 8);

    let stats = [
        "cluster.cross_shard",
        "cluster.undos",
        "cluster.undo_failed",
        "cluster.moved",
        "rule.a.settled",
        "rule.b.settled",
        "rule.a.reserved",
        "rule.b.reserved",
        "rule.a.denied",
        "rule.b.denied",
        "rule.a.settle_failed",
        "rule.b.settle_failed",
        "settle.hold_expired",
        "store.errors",
    ];
    let got: Vec<(&str, u64)> = stats.iter().map(|n| (*n, s.stat(n))).collect();
    println!("11 requests across two masters: {got:?}");
    // Every request was decided in two steps; each denial undone once
    // (straight to the owning master: no MOVED); 5 failures settled on each.
    assert_eq!(got.iter().map(|(_, v)| *v).collect::<Vec<_>>(), [11, 3, 0, 0, 5, 5, 0, 0, 2, 1, 0, 0, 0, 0]);
}

#[test]
fn reservations_across_masters_settle_to_each_rules_actual_cost() {
    // Each rule reserves `x-max` and costs its own response header.
    let tokens =
        |header: &str| format!(r#"{{ "reserve": {{ "header": "x-max" }}, "cost": {{ "header": "{header}" }} }}"#);
    let s = stack(config(&[(100, "1h")], &[(50, "1h")], (&tokens("x-a-used"), &tokens("x-b-used"))));
    let port = s.envoy.port;
    // Held at the upstream: both masters hold the reservation.
    let user = s.user.clone();
    let held = std::thread::spawn(move || {
        let at = T0.to_string();
        let headers = [
            ("x-user-id", user.as_str()),
            ("x-b", user.as_str()),
            (NOW, at.as_str()),
            ("x-max", "30"),
            ("x-demo-hold", "1"),
            ("x-demo-header", "x-a-used=12;x-b-used=7"),
        ];
        http_body(port, "POST", "/v1/embeddings", &headers, b"{}").unwrap()
    });
    wait_until("the upstream has the request", Duration::from_secs(10), || s.upstream.hits().len() == 1);
    assert_eq!((s.units("a"), s.units("b")), (30, 30), "the reservation recorded on both masters");
    s.upstream.release();
    let r = held.join().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(
        remaining(&r),
        [("a/1h".to_string(), 88), ("b/1h".to_string(), 43)],
        "RateLimit shows each rule's state after its settlement"
    );
    assert_eq!((s.units("a"), s.units("b")), (12, 7), "each master holds its rule's actual cost");

    // An extra charge on `a` (reserved 10, used 25), all of `b`'s given back.
    let r = s.send(T0 + 1_000, &[("x-max", "10"), ("x-demo-header", "x-a-used=25;x-b-used=0")]);
    assert_eq!((r.status, remaining(&r)), (200, vec![("a/1h".to_string(), 63), ("b/1h".to_string(), 43)]));
    assert_eq!((s.units("a"), s.units("b")), (37, 7));

    // 45 fits `a` (63 left) but not `b` (43): denied; `a`'s reservation,
    // recorded on its master, is undone there.
    let a_before = s.entries("a");
    let r = s.send(T0 + 2_000, &[("x-max", "45"), ("x-demo-header", "x-a-used=1;x-b-used=1")]);
    assert_eq!(r.status, 429, "{}", r.body_text());
    assert!(r.body_text().contains("b/1h"), "{}", r.body_text());
    assert_eq!(s.entries("a"), a_before, "a's reservation undone, nothing else");
    assert_eq!(s.units("b"), 7);
    assert_eq!(s.upstream.hits().len(), 2, "the denied request never reached the upstream");

    let stats = [
        "cluster.cross_shard",
        "cluster.undos",
        "cluster.undo_failed",
        "cluster.moved",
        "rule.a.reserved",
        "rule.a.settled",
        "rule.a.refunded",
        "rule.b.reserved",
        "rule.b.settled",
        "rule.b.refunded",
        "rule.b.denied",
        "rule.a.settle_failed",
        "rule.b.settle_failed",
        "settle.hold_expired",
        "store.errors",
    ];
    let got: Vec<(&str, u64)> = stats.iter().map(|n| (*n, s.stat(n))).collect();
    println!("3 requests reserving across two masters: {got:?}");
    // Reserved 30 + 10 on each (the denied 45 not counted); a: 12 + 25
    // settled, 18 refunded; b: 7 + 0 settled, 23 + 10 refunded.
    assert_eq!(got.iter().map(|(_, v)| *v).collect::<Vec<_>>(), [3, 1, 0, 0, 40, 37, 18, 40, 7, 33, 1, 0, 0, 0, 0]);
}

/// `b`'s cost is read from the response body (`usage.total_tokens`), `a`'s
/// from a header: the headers leave before the body with the state at
/// admission, and both masters are settled when the body ends.
#[test]
fn a_cost_read_from_the_body_settles_both_masters_when_the_body_ends() {
    let reserve = r#""reserve": { "header": "x-max" }"#;
    let (a, b) = (
        format!(r#"{{ {reserve}, "cost": {{ "header": "x-a-used" }} }}"#),
        format!(r#"{{ {reserve}, "cost": {{ "body": "usage.total_tokens" }} }}"#),
    );
    let s = stack(config(&[(100, "1h")], &[(50, "1h")], (&a, &b)));
    let r = s.send(T0, &[("x-max", "30"), ("x-demo-header", "x-a-used=12"), ("x-demo-usage", "7")]);
    assert_eq!(r.status, 200);
    assert!(r.body_text().contains(r#""total_tokens":7"#), "{}", r.body_text());
    assert_eq!(remaining(&r), [("a/1h".to_string(), 70), ("b/1h".to_string(), 20)], "the state at admission");
    wait_until("both masters settled", Duration::from_secs(5), || (s.units("a"), s.units("b")) == (12, 7));
    // The next response shows the settled state (less its own reservations).
    let r = s.send(T0 + 1_000, &[("x-max", "10"), ("x-demo-header", "x-a-used=25"), ("x-demo-usage", "0")]);
    assert_eq!((r.status, remaining(&r)), (200, vec![("a/1h".to_string(), 78), ("b/1h".to_string(), 33)]));
    wait_until("both masters settled", Duration::from_secs(5), || (s.units("a"), s.units("b")) == (37, 7));
    // (Counted when each master's reply reaches the worker, just after.)
    wait_until("the settlements counted", Duration::from_secs(5), || {
        (s.stat("rule.a.settled"), s.stat("rule.b.refunded")) == (37, 33)
    });
    let stats = ["cluster.cross_shard", "rule.a.settled", "rule.a.refunded", "rule.b.settled", "rule.b.refunded"];
    let got: Vec<u64> = stats.iter().map(|n| s.stat(n)).collect();
    assert_eq!(got, [2, 37, 18, 7, 33]);
    let failed = ["rule.a.settle_failed", "rule.b.settle_failed", "rule.b.cost_fallback", "store.errors"];
    assert_eq!(failed.map(|n| s.stat(n)), [0; 4]);
}
