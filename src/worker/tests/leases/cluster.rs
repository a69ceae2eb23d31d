//! Concurrency limits on a Valkey Cluster: a lease set lives in its rule's
//! slot; a request across slots is admitted only if every slot's lease set
//! has room, a denied one's leases are taken back, and its end reaches
//! every slot.

use crate::testing::rule;
use crate::worker::tests::cluster::basics::{cluster_base, cluster_rig, key};
use crate::worker::tests::cluster::cross::{both, split_user};
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{LeaseStat, Stat};

/// Live leases of `user` under rule `rule`.
fn leases(rig: &Rig, rule: &str, user: &str) -> usize {
    let lease_key = key(rule, user).replace(":log", ":lease");
    let model = &rig.cluster.as_ref().unwrap().data.model;
    model.leases(&lease_key).iter().filter(|(_, expiry)| *expiry > rig.now).count()
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn across_slots_every_lease_set_must_have_room_and_a_denial_keeps_no_lease() {
    let with = |name: &str, header: &str, n: u64| {
        rule(name).header(header).limit(100, "1h").field(&format!(r#""concurrency": {n}"#))
    };
    let plugin = cluster_base().failure_mode("deny").with(with("a", "x-user-id", 1)).with(with("b", "x-b", 5));
    let mut rig = cluster_rig(plugin, 3);
    let user = split_user(&rig);
    let (first, _) = both(&mut rig, &user);
    rig.run_until_quiet();
    assert!(rig.host.admitted.iter().any(|(id, _)| *id == first));
    assert_eq!((leases(&rig, "a", &user), leases(&rig, "b", &user)), (1, 1));
    let (second, _) = both(&mut rig, &user);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(second), Some(429), "rule a's one lease is taken");
    assert_eq!(leases(&rig, "b", &user), 1, "b's lease of the denied request was taken back");
    rig.gone(second);
    rig.gone(first);
    rig.tick(5);
    rig.run_until_quiet();
    assert_eq!((leases(&rig, "a", &user), leases(&rig, "b", &user)), (0, 0), "the end reached both slots");
    assert_eq!(rig.host.count(Stat::Lease(LeaseStat::Released)), 2);
    assert_eq!(rig.host.count(Stat::Lease(LeaseStat::Taken)), 1, "the denied request took none");
    assert_eq!(rig.host.count(Stat::Lease(LeaseStat::Expired)), 0);
}
