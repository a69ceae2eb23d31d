//! Holding a shaped request across slots (docs/shaping.md, "Across
//! slots"), on a fake cluster of three masters: a burst against two shaped
//! rules on different masters is held, each request released when every
//! slot records it, at the same time on both, one request in rounds at a
//! time; past `max_delay` it is denied and undone; a held request that goes
//! away gives back every slot; a parked one that goes away is dropped.

use crate::testing::{rule, Plugin};
use crate::worker::tests::cluster::basics::{cluster_base, cluster_rig, key};
use crate::worker::tests::cluster::cross::{both, split_user};
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{ShapeStat, Stat};

const SHAPE: &str = r#""shape": { "max_delay": "2s" }"#;

/// `a`: 5 per second per `x-user-id`; `b`: 2 per second per `x-b`; both
/// shaped up to 2 s.
fn two_shaped() -> Plugin {
    cluster_base()
        .failure_mode("deny")
        .with(rule("a").header("x-user-id").limit(5, "1s").field(SHAPE))
        .with(rule("b").header("x-b").limit(2, "1s").field(SHAPE))
}

fn times(rig: &Rig, rule: &str, user: &str) -> Vec<u64> {
    rig.cluster.as_ref().unwrap().data.model.entry_times(&key(rule, user))
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_burst_across_slots_is_held_until_every_slot_records_it() {
    let mut rig = cluster_rig(two_shaped(), 3);
    let user = split_user(&rig);
    let start = rig.now;
    let ids: Vec<u32> = (0..7).map(|_| both(&mut rig, &user).0).collect();
    rig.run_until_quiet();
    let now: Vec<u32> = ids.iter().copied().filter(|id| rig.host.status(*id) == Some(200)).collect();
    assert_eq!(now.len(), 2, "b's two fit now");
    assert_eq!(rig.gauges().2, 4, "four held");
    let denied: Vec<u32> = ids.iter().copied().filter(|id| rig.host.status(*id) == Some(429)).collect();
    assert_eq!(denied.len(), 1, "b's third second is past max_delay");
    // Every slot records each request at its release: the same times in a and b.
    let at = |ms: u64| start + ms;
    let expected = vec![at(0), at(0), at(1_000), at(1_000), at(2_000), at(2_000)];
    assert_eq!(times(&rig, "b", &user), expected);
    assert_eq!(times(&rig, "a", &user), expected, "a moved to b's slots");
    // One at a time (parked behind the one in rounds): a moves for the
    // third and fifth; the fourth and sixth are placed behind a's last slot.
    assert_eq!(rig.host.count(Stat::Shape(ShapeStat::Moved)), 2);
    assert_eq!(rig.host.count(Stat::Shape(ShapeStat::GaveUp)), 0);
    rig.run_for(2_100);
    let mut delays: Vec<u64> = rig.host.delayed.iter().map(|(_, d)| *d).collect();
    delays.sort_unstable();
    assert_eq!(delays, [1_000, 1_000, 2_000, 2_000], "released at the slots");
    assert!(ids.iter().all(|id| rig.host.status(*id).is_some()));
    assert_eq!(rig.host.count(Stat::Shape(ShapeStat::Delayed)), 4);
    assert_eq!(
        rig.host.count(Stat::Shape(ShapeStat::GivenBack)) as usize,
        rig.host.count(Stat::Shape(ShapeStat::Moved)) as usize
    );
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_held_request_across_slots_that_goes_away_gives_back_every_slot() {
    let mut rig = cluster_rig(two_shaped(), 3);
    let user = split_user(&rig);
    let start = rig.now;
    let ids: Vec<u32> = (0..3).map(|_| both(&mut rig, &user).0).collect();
    rig.run_until_quiet();
    assert_eq!(rig.gauges().2, 1);
    let held = ids.iter().copied().find(|id| rig.host.status(*id).is_none()).unwrap();
    assert_eq!(times(&rig, "a", &user), [start, start, start + 1_000]);
    let given = rig.host.count(Stat::Shape(ShapeStat::GivenBack));
    rig.gone(held);
    rig.tick(5);
    rig.run_until_quiet();
    assert_eq!(rig.host.count(Stat::Shape(ShapeStat::GivenBack)), given + 2, "one per slot");
    assert_eq!(times(&rig, "a", &user), [start, start]);
    assert_eq!(times(&rig, "b", &user), [start, start]);
    rig.run_for(1_100);
    assert!(rig.host.delayed.is_empty());
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_parked_request_that_goes_away_is_dropped_and_the_next_starts() {
    let mut rig = cluster_rig(two_shaped(), 3);
    let user = split_user(&rig);
    let start = rig.now;
    let ids: Vec<u32> = (0..3).map(|_| both(&mut rig, &user).0).collect();
    // The first is in rounds; the second and third are parked behind it.
    rig.gone(ids[1]);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(ids[0]), Some(200));
    assert_eq!(rig.host.status(ids[1]), None, "gone, never decided");
    assert_eq!(rig.host.status(ids[2]), Some(200));
    assert_eq!(times(&rig, "a", &user), [start, start]);
    assert_eq!(times(&rig, "b", &user), [start, start]);
}
