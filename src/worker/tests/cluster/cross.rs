//! Requests whose checks hash to several cluster slots: one part per slot
//! group on its master, then an undo where recorded when the request is not
//! admitted. Interleavings, a group denied, a group failing, an undo lost,
//! `MOVED` on one group, a client gone between the steps.

use crate::answer::response::SHADOW_HEADER;
use crate::testing::Plugin;
use crate::worker::tests::cluster::basics::{cluster_base, cluster_rig, key, store_targets};
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{Flow, Stat, CROSS_CACHE_MS};

/// Rule `a` per `x-user-id` (limit `a`), rule `b` per `x-b` (limit `b`);
/// a request without `x-b` matches only `a`.
pub fn two(mode: &str, a: u64, b: u64) -> Plugin {
    cluster_base().failure_mode(mode).rule("a", Some("x-user-id"), &[(a, "1h")]).rule("b", Some("x-b"), &[(b, "1h")])
}

/// The `n`-th user whose bucket under `a` is on master 0 and under `b` on
/// master 1.
pub fn split_user_n(rig: &Rig, n: usize) -> String {
    let cluster = rig.cluster.as_ref().unwrap();
    let on = |k: &str, m: usize| cluster.owner_of(k) == cluster.nodes[m].addr.to_string();
    (0..).map(|i| format!("u{i}")).filter(|u| on(&key("a", u), 0) && on(&key("b", u), 1)).nth(n).unwrap()
}

pub fn split_user(rig: &Rig) -> String {
    split_user_n(rig, 0)
}

pub fn both(rig: &mut Rig, user: &str) -> (u32, Flow) {
    rig.request_with(&[("x-user-id", user), ("x-b", user)])
}

pub fn entries(rig: &Rig, rule: &str, user: &str) -> usize {
    rig.cluster.as_ref().unwrap().data.model.entries(&key(rule, user))
}

/// Undos (`adjust` calls) node `node` ran.
pub fn undos_on(rig: &Rig, node: usize) -> usize {
    rig.cluster.as_ref().unwrap().nodes[node].adjusted
}

/// The store stream to master `m`.
pub fn stream_to(rig: &Rig, m: usize) -> u32 {
    let addr = rig.cluster.as_ref().unwrap().nodes[m].addr.to_string();
    let found = rig.host.opened.iter().rev().find(|(_, _, md)| md.iter().any(|(_, v)| *v == addr));
    found.map(|(t, _, _)| *t).unwrap()
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn admitted_only_if_both_masters_admit_and_a_denial_keeps_nothing() {
    let mut rig = cluster_rig(two("deny", 3, 2), 3);
    let user = split_user(&rig);
    let statuses: Vec<Option<u32>> = (0..3)
        .map(|_| {
            let (id, _) = both(&mut rig, &user);
            rig.run_until_quiet();
            rig.host.status(id)
        })
        .collect();
    assert_eq!(statuses, [Some(200), Some(200), Some(429)]);
    assert_eq!(store_targets(&rig), ["10.0.0.1:6379", "10.0.0.2:6379"], "a part on each master");
    assert_eq!((entries(&rig, "a", &user), entries(&rig, "b", &user)), (2, 2), "a's record of the denial undone");
    assert_eq!(rig.host.count(Stat::ClusterCrossShard), 3);
    assert_eq!((rig.host.count(Stat::ClusterUndo), rig.host.count(Stat::ClusterUndoFailed)), (1, 0));
    assert_eq!(undos_on(&rig, 0), 1, "the undo went to a's master");
    // A request of `a` alone still has the room the denial left.
    let (id, _) = rig.request(&user);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(200));
}

/// The denial reads as one decision of both rules would: the same status,
/// headers and body as on a single store holding both buckets.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn the_denial_is_the_reply_of_one_decision_of_every_check() {
    let rules = |p: Plugin| {
        p.failure_mode("deny").rule("a", Some("x-user-id"), &[(3, "1h")]).rule("b", Some("x-b"), &[(2, "1h")]).rule(
            "c",
            Some("x-user-id"),
            &[(4, "1m"), (9, "2h")],
        )
    };
    let mut cluster = cluster_rig(rules(cluster_base()), 3);
    let mut single = Rig::new(rules(crate::testing::plugin().timeout("200ms")));
    let user = split_user(&cluster);
    for n in 0..3 {
        let (a, _) = both(&mut cluster, &user);
        cluster.run_until_quiet();
        let (b, _) = both(&mut single, &user);
        single.run_until_quiet();
        assert_eq!(cluster.host.status(a), single.host.status(b), "request {n}");
        assert_eq!(cluster.host.reply(a), single.host.reply(b), "request {n}");
        assert_eq!(cluster.response_headers(a), single.response_headers(b), "request {n}");
    }
    assert!(cluster.host.reply(cluster.host.replies[0].0).is_some_and(|r| r.status == 429));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_concurrent_request_meets_the_record_until_the_undo_lands_and_the_denial_waits_for_it() {
    // `a` holds 1 and is full: the next request of both is denied by `a`,
    // after `b` (which holds 1) recorded it.
    let mut rig = cluster_rig(two("deny", 1, 1), 3);
    let user = split_user(&rig);
    let (first, _) = rig.request(&user);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(first), Some(200));
    let (denied, _) = both(&mut rig, &user);
    rig.wake();
    let (m0, m1) = (stream_to(&rig, 0), stream_to(&rig, 1));
    rig.answer(m1);
    assert_eq!(entries(&rig, "b", &user), 1, "b recorded it");
    // A request of `b` alone reaches b's master meanwhile: it meets that
    // record, a denial it would not otherwise get.
    let (spurious, _) = rig.request_with(&[("x-b", &user)]);
    rig.answer(m1);
    assert_eq!(rig.host.status(spurious), Some(429));
    rig.answer(m0);
    assert_eq!(rig.host.status(denied), None, "a denied: the undo of b is on its way, the answer waits for it");
    assert_eq!(undos_on(&rig, 1), 0);
    rig.answer(m1);
    assert_eq!((rig.host.status(denied), undos_on(&rig, 1)), (Some(429), 1), "answered once the undo replied");
    assert_eq!(entries(&rig, "b", &user), 0);
    // The spurious denial is remembered at most CROSS_CACHE_MS.
    rig.now += CROSS_CACHE_MS - 1;
    let (cached, _) = rig.request_with(&[("x-b", &user)]);
    assert_eq!(rig.host.status(cached), Some(429));
    assert_eq!(rig.host.count(Stat::CacheHit), 1);
    rig.now += 1;
    let (after, _) = rig.request_with(&[("x-b", &user)]);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(after), Some(200));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn interleaved_requests_on_shared_buckets_never_admit_over_a_limit() {
    let mut rig = cluster_rig(two("deny", 3, 6), 3);
    let (user, other) = (split_user(&rig), split_user_n(&rig, 1));
    // The slot map is read and both streams open.
    both(&mut rig, &other);
    rig.run_until_quiet();
    let mut ids = Vec::new();
    for round in 0..6 {
        // Three requests of both rules and one of `b` alone arrive together;
        // the masters answer in an order that changes every round.
        for _ in 0..3 {
            ids.push(both(&mut rig, &user).0);
        }
        ids.push(rig.request_with(&[("x-b", &user)]).0);
        rig.wake();
        let (m0, m1) = (stream_to(&rig, 0), stream_to(&rig, 1));
        for _ in 0..4 {
            for token in if round % 2 == 0 { [m0, m1] } else { [m1, m0] } {
                rig.answer(token);
            }
        }
        rig.run_until_quiet();
        rig.now += 1;
    }
    let admitted = |rig: &Rig, ids: &[u32]| ids.iter().filter(|id| rig.host.status(**id) == Some(200)).count();
    assert!(ids.iter().all(|id| rig.host.status(*id).is_some()), "every request answered");
    assert!(admitted(&rig, &ids) <= 3 + 6);
    assert_eq!(entries(&rig, "a", &user), 3);
    assert!(entries(&rig, "b", &user) <= 6);
    assert_eq!(entries(&rig, "a", &user) + entries(&rig, "b", &user), {
        let both: usize = ids.chunks(4).flat_map(|c| &c[..3]).filter(|id| rig.host.status(**id) == Some(200)).count();
        let b_alone = ids.chunks(4).filter(|c| rig.host.status(c[3]) == Some(200)).count();
        2 * both + b_alone
    });
    assert!(rig.host.count(Stat::ClusterUndo) > 0);
}

/// Shadow rules decide as enforced ones, and never deny: a request that
/// one of them would deny passes, reported, and keeps nothing anywhere.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_shadow_denial_passes_and_keeps_nothing() {
    let mut rig = cluster_rig(two("deny", 1, 5).shadow(true), 3);
    let user = split_user(&rig);
    let ids: Vec<u32> = (0..2)
        .map(|_| {
            let (id, _) = both(&mut rig, &user);
            rig.run_until_quiet();
            id
        })
        .collect();
    assert_eq!((rig.host.status(ids[0]), rig.host.status(ids[1])), (Some(200), Some(200)));
    assert_eq!(rig.host.admitted[1].1.as_deref(), Some("a/1h"), "reported in {SHADOW_HEADER}");
    assert_eq!((entries(&rig, "a", &user), entries(&rig, "b", &user)), (1, 1), "b's record of the second undone");
    assert_eq!(rig.host.count(Stat::ClusterUndo), 1);
}
