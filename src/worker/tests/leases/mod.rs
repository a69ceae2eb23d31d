//! Concurrency limits (`rules[].concurrency`): leases taken in the
//! decision, ended when a request is gone, renewed while it goes on, never
//! cached as a denial, counted by the local limiter when the store is away.

mod cluster;
mod renewal;

use crate::limiter::{LeaseChange, LeaseOp};
use crate::testing::{plugin, rule, Plugin};
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{Flow, LeaseStat, Stat, TICK};

/// At most `n` of alice's requests in flight (TTL `ttl`), and 100 per minute.
fn limited(n: u64, ttl: &str) -> Plugin {
    let concurrency = format!(r#""concurrency": {{ "limit": {n}, "lease_ttl": "{ttl}" }}"#);
    plugin().with(rule("streams").header("x-user-id").limit(100, "1m").field(&concurrency))
}

const LEASES: &str = "tollgate:{streams:alice}:lease";

/// `n` requests for alice, decided by the store: their ids.
fn requests(rig: &mut Rig, n: usize) -> Vec<u32> {
    let ids = (0..n).map(|_| rig.request("alice")).map(|(id, flow)| (id, assert_eq!(flow, Flow::Pause)).0).collect();
    rig.run_until_quiet();
    ids
}

fn admitted(rig: &Rig, ids: &[u32]) -> Vec<u32> {
    ids.iter().copied().filter(|id| rig.host.admitted.iter().any(|(a, _)| a == id)).collect()
}

fn lease_count(rig: &Rig) -> usize {
    rig.store.model.leases(LEASES).iter().filter(|(_, expiry)| *expiry > rig.now).count()
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn three_in_flight_the_rest_denied_and_an_end_frees_one() {
    let mut rig = Rig::new(limited(3, "30s"));
    let ids = requests(&mut rig, 5);
    let first = admitted(&rig, &ids);
    assert_eq!(first, ids[..3], "the first three hold the leases");
    assert_eq!(lease_count(&rig), 3);
    for denied in &ids[3..] {
        assert_eq!(rig.host.status(*denied), Some(429), "refused at once");
    }
    assert_eq!(rig.host.count(Stat::Lease(LeaseStat::Taken)), 3);
    // The denied ones end nothing; an admitted one's end frees its lease.
    rig.gone(ids[4]);
    rig.gone(ids[0]);
    assert_eq!(rig.host.tick, TICK, "the end goes out at the next entry, at the latest the tick");
    rig.tick(5);
    rig.run_until_quiet();
    assert_eq!(lease_count(&rig), 2);
    assert_eq!(rig.host.count(Stat::Lease(LeaseStat::Released)), 1);
    let next = requests(&mut rig, 2);
    assert_eq!(admitted(&rig, &next), next[..1], "one lease was free, and not cached as denied");
    assert_eq!(lease_count(&rig), 3);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_long_request_keeps_its_lease_by_renewal_and_its_end_frees_it() {
    let mut rig = Rig::new(limited(1, "1s"));
    let long = requests(&mut rig, 1);
    assert_eq!(admitted(&rig, &long), long);
    let first_expiry = rig.store.model.leases(LEASES)[0].1;
    let start = rig.now;
    // Three TTLs, the store answering as the worker sends.
    while rig.now < start + 3_000 {
        rig.tick(50);
        rig.run_until_quiet();
        assert_eq!(lease_count(&rig), 1, "at {} ms the lease is live", rig.now - start);
        let other = requests(&mut rig, 1);
        assert_eq!(rig.host.status(other[0]), Some(429), "a second one waits for the first");
        rig.gone(other[0]);
    }
    let renewed = rig.host.count(Stat::Lease(LeaseStat::Renewed));
    assert!(renewed >= 6, "renewed every third of its TTL: {renewed}");
    assert!(rig.store.model.leases(LEASES)[0].1 >= first_expiry + 2_000, "its expiry moved on");
    rig.gone(long[0]);
    rig.tick(5);
    rig.run_until_quiet();
    assert_eq!(lease_count(&rig), 0, "its end frees it at once");
    let next = requests(&mut rig, 1);
    assert_eq!(admitted(&rig, &next), next);
    assert_eq!(rig.host.count(Stat::Lease(LeaseStat::Expired)), 0);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_client_that_leaves_while_its_call_is_out_ends_its_lease_when_the_reply_lands() {
    let mut rig = Rig::new(limited(1, "30s"));
    let (id, flow) = rig.request("alice");
    assert_eq!(flow, Flow::Pause);
    rig.wake();
    // Its call is on the stream; the client leaves before the reply.
    rig.gone(id);
    rig.tick(5);
    rig.run_until_quiet();
    assert_eq!(lease_count(&rig), 0, "the lease the store recorded was ended");
    let next = requests(&mut rig, 1);
    assert_eq!(admitted(&rig, &next), next);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_unanswered_lease_expires_in_the_store_within_its_ttl() {
    let mut rig = Rig::new(limited(1, "1s"));
    let held = requests(&mut rig, 1);
    assert_eq!(admitted(&rig, &held), held);
    // The worker dies: nothing ends or renews its lease.
    let mut other = Rig::new(limited(1, "1s"));
    other.store = std::mem::take(&mut rig.store);
    other.now = rig.now;
    let denied = requests(&mut other, 1);
    assert_eq!(other.host.status(denied[0]), Some(429));
    other.now += 1_000;
    let next = requests(&mut other, 1);
    assert_eq!(admitted(&other, &next), next, "admitted once the dead worker's lease expired");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn the_local_limiter_counts_what_it_admitted_and_gives_it_back() {
    let local = limited(2, "30s").failure_mode("local").top(r#""local_limiter": { "share": 1.0 }"#);
    let mut rig = Rig::new(local);
    // The store cannot be reached: every stream is refused.
    rig.host.refuse_open = Some("no store".into());
    let local = |rig: &mut Rig| {
        let (id, flow) = rig.request("alice");
        rig.tick(2_000);
        rig.run_until_quiet();
        let admitted = flow == Flow::Continue || rig.host.admitted.iter().any(|(a, _)| *a == id);
        (id, admitted)
    };
    let first: Vec<(u32, bool)> = (0..3).map(|_| local(&mut rig)).collect();
    assert_eq!(first.iter().map(|f| f.1).collect::<Vec<_>>(), [true, true, false], "its share of 2 at once");
    assert_eq!(rig.host.count(Stat::Local { allowed: true }), 2);
    rig.gone(first[0].0);
    assert_eq!(rig.host.count(Stat::Lease(LeaseStat::Released)), 1, "given back to the local limiter");
    assert!(local(&mut rig).1, "the lease given back is taken again");
    assert!(!local(&mut rig).1, "and no more");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn lease_counters_are_registered_for_a_rule_with_a_concurrency_limit() {
    let names: Vec<String> =
        crate::worker::stats::counters(&limited(1, "1s").build()).into_iter().map(|c| c.1).collect();
    for name in ["taken", "released", "renewed", "expired", "failed"] {
        assert!(names.contains(&format!("tollgate.lease.{name}")), "{name}: {names:?}");
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_lease_the_store_lost_is_counted_once_and_renewed_no_more() {
    let mut rig = Rig::new(limited(1, "1s"));
    let long = requests(&mut rig, 1);
    let (id, _) = rig.store.model.leases(LEASES).remove(0);
    // The store loses it (a failover that never received it).
    let end = LeaseOp { key: LEASES.into(), id: id.into(), change: LeaseChange::End };
    rig.store.model.lease(&[end], rig.now);
    for _ in 0..60 {
        rig.tick(50);
        rig.run_until_quiet();
    }
    assert_eq!(rig.host.count(Stat::Lease(LeaseStat::Expired)), 1, "found gone once");
    assert_eq!(rig.host.count(Stat::Lease(LeaseStat::Renewed)), 0);
    let renewals = rig.host.count(Stat::StoreRequests);
    rig.run_for(2_000);
    rig.run_until_quiet();
    assert_eq!(rig.host.count(Stat::StoreRequests), renewals, "no call for a lease the store lost");
    rig.gone(long[0]);
    rig.tick(5);
    rig.run_until_quiet();
    assert_eq!(rig.host.count(Stat::StoreRequests), renewals, "nor an end");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn ends_kept_to_send_again_are_bounded_by_the_queue() {
    let mut rig = Rig::new(limited(1_000, "30s").valkey(r#""max_queue": 8"#));
    let mut held = Vec::new();
    for _ in 0..5 {
        held.extend(requests(&mut rig, 8));
    }
    assert_eq!(lease_count(&rig), 40);
    // The store goes away: its stream closes and never opens again.
    rig.host.refuse_open = Some("no store".into());
    let token = rig.stream();
    rig.close(token, 14);
    for id in held {
        rig.gone(id);
        rig.tick(5);
    }
    rig.run_for(2_000);
    assert!(rig.worker.leases_to_send_again() <= 8, "{}", rig.worker.leases_to_send_again());
    assert!(rig.host.count(Stat::Lease(LeaseStat::Failed)) >= 40);
}
