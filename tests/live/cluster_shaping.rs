//! Shaping with several rules on a real Valkey Cluster of 3 masters:
//! two shaped rules tagged by the user are one call and hold a burst as
//! one store would; a request whose buckets span slots (a third rule per
//! tenant) is never held: each slot admits it now or it is denied, its
//! other slot's record undone.

use crate::support;

use std::time::Duration;
use support::plugin::{plugin, rule};
use support::shaping::{burst, log_entries};
use tollgate::store::cluster::key_slot;

#[test]
fn rules_in_one_slot_shape_together_and_a_request_across_slots_is_never_held() {
    let cluster = support::cluster::ValkeyCluster::start(3, 2_000);
    let shape = r#""shape": { "max_delay": "2s" }"#;
    let tagged = r#""hash_tag": 0"#;
    let config = plugin()
        .timeout("500ms")
        .failure_mode("deny")
        .valkey(r#""cluster_mode": { "seeds": "tollgate_valkey_seeds", "refresh": "5s" }"#)
        .with(rule("push").header("x-user-id").algorithm("gcra").limit(5, "1s").field(tagged).field(shape))
        .with(rule("minute").header("x-user-id").limit(100, "1m").field(tagged).field(shape))
        .with(rule("tenant").header("x-tenant").limit(1_000, "1m").field(shape));
    let envoy = cluster.envoy(&config.json(), 1);
    let stat = |name: &str| envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0);
    let minute = |user: &str| format!("tollgate:{{{user}}}:minute:{user}:log");

    // One slot (the user's tag): five at once, five held 200 ms apart.
    let shots = burst(envoy.port, "/push", &[("x-user-id", "alice")], 10, Duration::ZERO);
    assert!(shots.iter().all(|s| s.status == 200), "{shots:?}");
    let held = shots.iter().filter(|s| s.delay_ms.is_some()).count();
    assert!((4..=5).contains(&held), "five held (a stalled machine may admit a sixth at once): {shots:?}");
    assert_eq!(stat("cluster.cross_shard"), 0, "one call per request");
    let owner = cluster.node(cluster.owner_port(key_slot(minute("alice").as_bytes())));
    assert_eq!(log_entries(owner, &minute("alice")).len(), 10, "both rules on the tag's master");

    // Across slots: the tenant's bucket is in another slot than bob's.
    let tenant_key = "tollgate:{tenant:acme}:log";
    assert_ne!(key_slot(tenant_key.as_bytes()), key_slot(minute("bob").as_bytes()));
    let shots = burst(envoy.port, "/push", &[("x-user-id", "bob"), ("x-tenant", "acme")], 10, Duration::ZERO);
    let admitted = shots.iter().filter(|s| s.status == 200).count();
    let denied = shots.iter().filter(|s| s.status == 429).count();
    assert!(shots.iter().all(|s| s.delay_ms.is_none()), "never held: {shots:?}");
    assert_eq!(admitted + denied, 10, "{shots:?}");
    assert!((5..=6).contains(&admitted), "those that fit now: {shots:?}");
    assert_eq!(stat("cluster.cross_shard"), 10);
    let tenant = cluster.node(cluster.owner_port(key_slot(tenant_key.as_bytes())));
    assert_eq!(log_entries(tenant, tenant_key).len(), admitted, "the denied ones' records undone");
    assert_eq!(stat("shape.delayed"), held as u64);
}
