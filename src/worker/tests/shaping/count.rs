//! Shaping with counting on the response, and with several rules on a
//! Valkey Cluster: a reservation recorded at its slot, held until then and
//! settled there; a held request that goes away gives its reservation back
//! and settles nothing; rules in one slot shaped together; a request across
//! slots placed now or denied, never held.

use crate::answer::response::SERVER_TIMING;
use crate::testing::{rule, Plugin};
use crate::worker::tests::cluster::basics::{cluster_base, cluster_rig, executed};
use crate::worker::tests::cluster::cross::{entries, split_user};
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{CountStat, Flow, ResponseFlow, ShapeStat, Stat};

const SHAPE: &str = r#""shape": { "max_delay": "2s" }"#;

/// 10 units per second per tenant, each request reserving 2 and settled by
/// its response's `x-used`, held up to 2 s.
fn counted() -> Plugin {
    let count = r#""count": { "reserve": { "units": 2 }, "cost": { "header": "x-used" } }"#;
    crate::testing::plugin().with(rule("tokens").header("x-tenant").limit(10, "1s").field(count).field(SHAPE))
}

/// A burst of `n` for acme, answered by the store: the ids.
fn burst(rig: &mut Rig, n: usize) -> Vec<u32> {
    let ids: Vec<u32> = (0..n).map(|_| rig.request_with(&[("x-tenant", "acme")]).0).collect();
    rig.run_until_quiet();
    ids
}

fn released(rig: &Rig, id: u32) -> Option<u64> {
    rig.host.delayed.iter().find(|(d, _)| *d == id).map(|(_, ms)| *ms)
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_reservation_is_held_until_its_slot_and_settled_there() {
    let mut rig = Rig::new(counted());
    let start = rig.now;
    let ids = burst(&mut rig, 10);
    let now: Vec<u32> = ids.iter().copied().filter(|id| rig.host.status(*id) == Some(200)).collect();
    assert_eq!(now.len(), 5, "5 reservations of 2 fill the second");
    assert_eq!(rig.gauges().2, 5, "the other five are held");
    for &id in &now {
        assert_eq!(rig.response(id, 200, &[("x-used", "1")]), ResponseFlow::Pause);
    }
    rig.run_until_quiet();
    rig.run_for(1_010);
    for &id in &ids[5..] {
        assert_eq!(released(&rig, id), Some(1_000), "released at its slot");
        assert_eq!(rig.response(id, 200, &[("x-used", "1")]), ResponseFlow::Pause);
    }
    rig.run_until_quiet();
    for &id in &ids[5..] {
        let resumed = rig.resumed(id).expect("resumed after its settlement");
        let timing = (SERVER_TIMING.to_string(), "tollgate-delay;dur=1000".to_string());
        assert!(resumed.contains(&timing), "the settled headers keep the delay: {resumed:?}");
    }
    let mut settled = rig.store.adjusted.clone();
    settled.sort_unstable();
    let expected: Vec<(u64, u64, u64)> = [(start, 2, 1); 5].into_iter().chain([(start + 1_000, 2, 1); 5]).collect();
    assert_eq!(settled, expected, "each settled at the time of its record");
    assert_eq!(rig.host.count(Stat::Count(0, CountStat::Reserved)), 20);
    assert_eq!(rig.host.count(Stat::Count(0, CountStat::Settled)), 10);
    assert_eq!(rig.host.count(Stat::Count(0, CountStat::Refunded)), 10);
    // 1 unit each at its slot; the first five have left the window.
    assert_eq!(rig.store.model.entries("tollgate:{tokens:acme}:log"), 5);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_held_reservation_whose_client_leaves_is_given_back_once_and_never_settled() {
    let mut rig = Rig::new(counted());
    let start = rig.now;
    let ids = burst(&mut rig, 6);
    let gone = ids[5];
    assert_eq!(rig.gauges().2, 1);
    rig.gone(gone);
    rig.tick(5);
    rig.run_until_quiet();
    assert_eq!(rig.store.adjusted, [(start + 1_000, 2, 0)], "its reservation taken back from its slot");
    assert_eq!(rig.host.count(Stat::Shape(ShapeStat::GivenBack)), 1);
    rig.run_for(1_500);
    assert_eq!(released(&rig, gone), None);
    assert_eq!(rig.response(gone, 200, &[("x-used", "1")]), ResponseFlow::Continue, "owes nothing");
    rig.run_until_quiet();
    assert_eq!(rig.store.adjusted.len(), 1, "no settlement after the give-back");
    assert_eq!(rig.host.count(Stat::Count(0, CountStat::Settled)), 0);
    assert_eq!(rig.store.model.entries("tollgate:{tokens:acme}:log"), 10, "the five admitted at once only");
}

/// Two shaped rules tagged by the user: one slot, one call, one slot given.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn rules_in_one_slot_are_shaped_together_on_a_cluster() {
    let config = cluster_base()
        .failure_mode("deny")
        .with(rule("a").header("x-user-id").limit(5, "1s").algorithm("gcra").field(r#""hash_tag": 0"#).field(SHAPE))
        .with(rule("b").header("x-user-id").limit(100, "1m").field(r#""hash_tag": 0"#).field(SHAPE));
    let mut rig = cluster_rig(config, 3);
    let ids: Vec<u32> = (0..7).map(|_| rig.request("alice").0).collect();
    rig.run_until_quiet();
    let at_once = ids.iter().filter(|id| rig.host.status(**id) == Some(200)).count();
    assert_eq!(at_once, 5);
    assert_eq!(rig.host.count(Stat::ClusterCrossShard), 0, "one call per request");
    assert_eq!((0..3).map(|n| executed(&rig, n)).sum::<usize>(), 7);
    rig.run_for(450);
    let delays: Vec<u64> = rig.host.delayed.iter().map(|(_, d)| *d).collect();
    assert_eq!(delays, [200, 400]);
}

/// Rule `a` shaped (5 per second) per `x-user-id`, rule `b` per `x-b`: a
/// request with both has buckets on two masters.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_request_across_slots_is_placed_now_or_denied_never_held() {
    let config = cluster_base()
        .failure_mode("deny")
        .with(rule("a").header("x-user-id").limit(5, "1s").algorithm("gcra").field(SHAPE))
        .with(rule("b").header("x-b").limit(100, "1m"));
    let mut rig = cluster_rig(config, 3);
    let user = split_user(&rig);
    // Alone, `a` holds a sixth request until +200 ms.
    let alone: Vec<u32> = (0..6).map(|_| rig.request(&user).0).collect();
    rig.run_until_quiet();
    assert_eq!(rig.gauges().2, 1);
    // Across slots the same key has no room now: denied, `b` undone.
    let (across, flow) = rig.request_with(&[("x-user-id", &user), ("x-b", &user)]);
    assert_eq!(flow, Flow::Pause);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(across), Some(429), "not held behind the slot given at +200 ms");
    assert_eq!(rig.host.count(Stat::ClusterCrossShard), 1);
    assert_eq!(entries(&rig, "b", &user), 0, "its record in b undone");
    assert_eq!(rig.host.count(Stat::Shape(ShapeStat::Delayed)), 1, "only the request of a alone");
    rig.run_for(1_300);
    assert!(alone.iter().all(|id| rig.host.status(*id) == Some(200)));
    // Once a's slots have passed, a request across slots fits now.
    let (later, _) = rig.request_with(&[("x-user-id", &user), ("x-b", &user)]);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(later), Some(200));
    assert_eq!(rig.host.count(Stat::Shape(ShapeStat::Delayed)), 1, "never held");
    assert_eq!(entries(&rig, "b", &user), 1);
}

/// Requests waiting for their body (the reservation is in it) count
/// against `max_waiting` like any other: a full rule must not take them for
/// requests that left and let more through.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn requests_waiting_for_their_body_count_against_max_waiting() {
    let count = r#""count": { "reserve": { "body": "max_tokens" }, "cost": { "body": "usage.total_tokens" } }"#;
    let shape = r#""shape": { "max_delay": "2s", "max_waiting": 2 }"#;
    let mut rig = Rig::new(
        crate::testing::plugin().with(rule("tokens").header("x-tenant").limit(10, "1s").field(count).field(shape)),
    );
    let acme = [("x-tenant", "acme")];
    let (a, flow_a) = rig.request_with(&acme);
    let (b, flow_b) = rig.request_with(&acme);
    assert_eq!((flow_a, flow_b), (Flow::ReadBody, Flow::ReadBody), "both wait for their body");
    let (c, _) = rig.request_with(&acme);
    assert_eq!(rig.host.status(c), Some(429), "two counted: the third is refused");
    assert_eq!(rig.host.count(Stat::Shape(ShapeStat::Full)), 1);
    for id in [a, b] {
        rig.request_body(id, br#"{"max_tokens": 1}"#, true);
    }
    rig.run_until_quiet();
    assert_eq!(rig.store.executed, 2, "only the two counted reached the store");
}
