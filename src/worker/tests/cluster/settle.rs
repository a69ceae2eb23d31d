//! Counting on the response for requests decided across cluster slots: the
//! settlement goes to the master of each changed bucket, at the time its
//! slot recorded; a denial undoes a reservation and owes nothing; an undo
//! never takes back what a check-only rule did not record; records a
//! failed slot's `failure_mode` keeps are settled from what they recorded.

use crate::testing::{rule, Plugin};
use crate::worker::tests::cluster::basics::{cluster_base, cluster_rig, executed};
use crate::worker::tests::cluster::cross::{entries, split_user, undos_on};
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{CountStat, ResponseFlow, Stat};

/// Rule `a` per `x-user-id` (100 per hour) counting on the response as
/// `count` says; rule `b` per `x-b` (`b` per hour).
fn counted(mode: &str, count: &str, b: u64) -> Plugin {
    cluster_base()
        .failure_mode(mode)
        .with(rule("a").header("x-user-id").limit(100, "1h").field(&format!(r#""count": {count}"#)))
        .rule("b", Some("x-b"), &[(b, "1h")])
}

/// Tokens: reserved from `x-max`, the cost from `x-used`.
const TOKENS: &str = r#"{ "reserve": { "header": "x-max" }, "cost": { "header": "x-used" } }"#;

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn send(rig: &mut Rig, user: &str, extra: &[(&str, &str)]) -> u32 {
    let mut headers = vec![("x-user-id", user), ("x-b", user)];
    headers.extend_from_slice(extra);
    let (id, _) = rig.request_with(&headers);
    rig.run_until_quiet();
    id
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_reservation_across_slots_is_settled_on_its_own_master() {
    let mut rig = cluster_rig(counted("deny", TOKENS, 5), 3);
    let user = split_user(&rig);
    let id = send(&mut rig, &user, &[("x-max", "30")]);
    assert_eq!(rig.host.status(id), Some(200));
    assert_eq!((entries(&rig, "a", &user), entries(&rig, "b", &user)), (30, 1), "the reservation recorded");
    assert_eq!(rig.response(id, 200, &[("x-used", "12")]), ResponseFlow::Pause);
    rig.run_until_quiet();
    let resumed = rig.resumed(id).unwrap().to_vec();
    assert_eq!(header(&resumed, "ratelimit"), Some(r#""a/1h";r=88;t=3600, "b/1h";r=4;t=3600"#));
    assert_eq!((entries(&rig, "a", &user), entries(&rig, "b", &user)), (12, 1), "settled at the actual cost");
    assert_eq!([0, 1, 2].map(|n| executed(&rig, n)), [2, 1, 0], "the settlement on a's master only");
    let count = |s| rig.host.count(Stat::Count(0, s));
    assert_eq!((count(CountStat::Reserved), count(CountStat::Settled), count(CountStat::Refunded)), (30, 12, 18));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_denial_across_slots_gives_the_reservation_back_and_owes_nothing() {
    let mut rig = cluster_rig(counted("deny", TOKENS, 1), 3);
    let user = split_user(&rig);
    let first = send(&mut rig, &user, &[("x-max", "30")]);
    assert_eq!(rig.response(first, 200, &[("x-used", "30")]), ResponseFlow::Continue, "nothing to change");
    let denied = send(&mut rig, &user, &[("x-max", "40")]);
    assert_eq!(rig.host.status(denied), Some(429), "b is full");
    assert_eq!(undos_on(&rig, 0), 1, "a's reservation undone");
    assert_eq!(entries(&rig, "a", &user), 30);
    assert!(!rig.worker.owes(denied));
    assert_eq!(rig.response(denied, 429, &[("x-used", "40")]), ResponseFlow::Continue);
    rig.run_until_quiet();
    assert_eq!(entries(&rig, "a", &user), 30, "no settlement");
    assert_eq!(rig.host.count(Stat::Count(0, CountStat::Reserved)), 30, "the denied reservation is not counted");
}

/// A rule counted on its 401s only checks on the request: its slot records
/// nothing, so an undo there changes nothing (the charges of earlier
/// failures, at the same millisecond, stay).
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_undo_never_takes_back_what_a_check_only_rule_did_not_record() {
    let mut rig = cluster_rig(counted("deny", r#"{ "status": [401] }"#, 1), 3);
    let user = split_user(&rig);
    let failed = send(&mut rig, &user, &[]);
    assert_eq!(entries(&rig, "a", &user), 0, "a only checks on the request");
    assert_eq!(rig.response(failed, 401, &[]), ResponseFlow::Pause);
    rig.run_until_quiet();
    assert_eq!(entries(&rig, "a", &user), 1, "the failure charged");
    let denied = send(&mut rig, &user, &[]);
    assert_eq!(rig.host.status(denied), Some(429));
    assert_eq!(rig.host.count(Stat::ClusterUndo), 1);
    assert_eq!(undos_on(&rig, 0), 2, "the settlement, then the undo");
    assert_eq!(entries(&rig, "a", &user), 1, "the charge stays");
}

/// A slot that fails under `failure_mode: allow` lets the request through
/// with the other slot's record kept: the settlement changes that record
/// (from the reservation), it does not charge the cost on top of it.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_kept_record_of_a_request_failure_mode_admitted_is_settled_from_the_reservation() {
    let mut rig = cluster_rig(counted("allow", TOKENS, 5), 3);
    let user = split_user(&rig);
    rig.cluster.as_mut().unwrap().nodes[1].forced = Some("CLUSTERDOWN The cluster is down".into());
    let id = send(&mut rig, &user, &[("x-max", "30")]);
    assert_eq!(rig.host.status(id), Some(200));
    assert_eq!(rig.host.count(Stat::FailureMode { allowed: true }), 1);
    assert_eq!(entries(&rig, "a", &user), 30, "a's record kept");
    assert_eq!(rig.response(id, 200, &[("x-used", "12")]), ResponseFlow::Continue, "no store headers to hold");
    rig.run_until_quiet();
    assert_eq!(entries(&rig, "a", &user), 12);
    let count = |s| rig.host.count(Stat::Count(0, s));
    assert_eq!((count(CountStat::Reserved), count(CountStat::Settled), count(CountStat::Refunded)), (30, 12, 18));
}
