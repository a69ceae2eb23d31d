//! Requests across cluster slots when things break: a group that fails
//! (`failure_mode` decides, records kept only if it admits), a group whose
//! reply never comes (it cannot be undone), an undo lost, `MOVED` on one
//! group, a client gone between the steps.

use crate::store::cluster::key_slot;
use crate::store::FailureKind;
use crate::testing::Plugin;
use crate::worker::tests::cluster::basics::{cluster_rig, key};
use crate::worker::tests::cluster::cross::{both, entries, split_user, split_user_n, stream_to, two};
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{Level, Stat};

/// A rig whose streams to masters 0 and 1 are open, and the split user.
fn warmed(plugin: Plugin) -> (Rig, String) {
    let mut rig = cluster_rig(plugin, 3);
    let user = split_user(&rig);
    let warm = split_user_n(&rig, 1);
    both(&mut rig, &warm);
    rig.run_until_quiet();
    let _ = (stream_to(&rig, 0), stream_to(&rig, 1));
    (rig, user)
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_group_that_fails_is_failure_mode_and_the_others_are_kept_only_if_it_admits() {
    for (mode, status, kept) in [("deny", 503, 0), ("allow", 200, 1), ("local", 200, 1)] {
        let (mut rig, user) = warmed(two(mode, 5, 5));
        rig.cluster.as_mut().unwrap().nodes[1].forced = Some("CLUSTERDOWN The cluster is down".into());
        let id = both(&mut rig, &user).0;
        rig.run_until_quiet();
        assert_eq!(rig.host.status(id), Some(status), "{mode}");
        assert_eq!(entries(&rig, "a", &user), kept, "{mode}: a's record");
        assert_eq!(rig.host.count(Stat::ClusterUndo), 1 - kept as u64, "{mode}");
        assert_eq!(rig.host.count(Stat::StoreError(FailureKind::Busy)), 1, "{mode}: the failed call, once");
        assert_eq!(rig.host.count(Stat::UnknownOutcome), 0, "{mode}: it did not run");
    }
    // A known denial wins over a failure, whatever failure_mode says.
    let (mut rig, user) = warmed(two("allow", 5, 1));
    rig.request_with(&[("x-b", &user)]);
    rig.run_until_quiet();
    rig.cluster.as_mut().unwrap().nodes[0].forced = Some("CLUSTERDOWN The cluster is down".into());
    let id = both(&mut rig, &user).0;
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(429));
    assert_eq!(rig.host.count(Stat::FailureMode { allowed: true }), 0);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_group_whose_reply_never_comes_may_keep_its_record_and_is_counted() {
    let (mut rig, user) = warmed(two("deny", 5, 5));
    let id = both(&mut rig, &user).0;
    let m1 = stream_to(&rig, 1);
    // b's call runs on master 1, but its reply is lost.
    let sent = rig.host.take_outbox(m1);
    let now = rig.now;
    let _ = rig.cluster.as_mut().unwrap().answer(1, m1, &sent, now);
    rig.answer(stream_to(&rig, 0));
    assert_eq!(rig.host.status(id), None);
    // Master 1's stream stalls; the undo of a goes out on master 0's.
    rig.run_for(250);
    assert_eq!(rig.host.status(id), None, "answered after the undo");
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(503), "the stall fails b; failure_mode deny");
    assert_eq!(entries(&rig, "a", &user), 0, "a undone");
    assert_eq!(entries(&rig, "b", &user), 1, "b's record cannot be undone: its time is unknown");
    assert_eq!(rig.host.count(Stat::UnknownOutcome), 1);
    assert_eq!(rig.host.count(Stat::ClusterUndo), 1);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_undo_lost_is_counted_logged_and_the_denial_still_answered() {
    let (mut rig, user) = warmed(two("deny", 5, 1));
    rig.request_with(&[("x-b", &user)]);
    rig.run_until_quiet();
    let id = both(&mut rig, &user).0;
    let (m0, m1) = (stream_to(&rig, 0), stream_to(&rig, 1));
    rig.answer(m1);
    rig.answer(m0);
    // b denied: the undo of a is on master 0's stream, which breaks
    // before the undo reaches the store.
    assert!(!rig.host.take_outbox(m0).is_empty(), "the undo was sent");
    rig.close(m0, 13);
    rig.run_until_quiet();
    let reply = rig.host.reply(id).expect("answered");
    assert_eq!(reply.status, 429);
    assert_eq!((rig.host.count(Stat::ClusterUndo), rig.host.count(Stat::ClusterUndoFailed)), (1, 1));
    assert!(rig
        .host
        .logs
        .iter()
        .any(|(level, l)| *level == Level::Warn && l.contains("an undo across cluster slots failed")));
    assert_eq!(entries(&rig, "a", &user), 1, "the record stays: an over-count of the request's cost");
    // The denial shows a's window with the record given back.
    let ratelimit = reply.headers.iter().find(|(k, _)| k == "ratelimit").map(|(_, v)| v.clone()).unwrap();
    assert!(ratelimit.contains(r#""a/1h";r=5"#), "{ratelimit}");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn moved_on_one_group_is_followed_and_its_undo_goes_where_it_ran() {
    let (mut rig, user) = warmed(two("deny", 5, 1));
    rig.request_with(&[("x-b", &user)]);
    rig.run_until_quiet();
    // a's slot moves to master 2 behind the worker's back.
    let slot = key_slot(key("a", &user).as_bytes());
    let cluster = rig.cluster.as_mut().unwrap();
    cluster.migrating.insert(slot, 2);
    cluster.finish_migration(slot);
    let id = both(&mut rig, &user).0;
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(429));
    assert_eq!(rig.host.count(Stat::ClusterMoved), 1);
    let cluster = rig.cluster.as_ref().unwrap();
    assert_eq!((cluster.nodes[2].executed, cluster.nodes[2].adjusted), (2, 1), "decided, then undone, on master 2");
    assert_eq!(entries(&rig, "a", &user), 0);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_client_gone_between_the_steps_is_never_admitted_and_keeps_nothing() {
    let (mut rig, user) = warmed(two("deny", 5, 5));
    let id = both(&mut rig, &user).0;
    assert!(rig.host.outbox.values().filter(|b| !b.is_empty()).count() >= 2, "both parts sent");
    rig.gone(id);
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), None, "never answered");
    assert_eq!((entries(&rig, "a", &user), entries(&rig, "b", &user)), (0, 0), "both recorded, both undone");
    assert_eq!(rig.host.count(Stat::ClusterUndo), 2);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn parts_wait_for_the_slot_map_at_most_the_timeout_and_a_gone_client_sends_nothing() {
    let mut rig = crate::worker::tests::cluster::basics::cluster_rig(two("deny", 5, 5), 3);
    for n in rig.cluster.as_mut().unwrap().nodes.iter_mut() {
        n.down = true;
    }
    let (waits, _) = both(&mut rig, "u");
    let (gone, _) = both(&mut rig, "v");
    rig.gone(gone);
    rig.run_until_quiet();
    rig.run_for(150);
    assert_eq!(rig.host.status(waits), None, "within the timeout");
    rig.run_for(60);
    assert_eq!(rig.host.status(waits), Some(503));
    assert_eq!(rig.host.count(Stat::StoreError(FailureKind::Unavailable)), 2, "both parts, once each");
    assert_eq!(rig.host.status(gone), None);
    // The map comes: nothing of the gone request is ever sent.
    for n in rig.cluster.as_mut().unwrap().nodes.iter_mut() {
        n.down = false;
    }
    rig.run_for(100);
    rig.run_until_quiet();
    let calls = rig.cluster.as_ref().unwrap().nodes.iter().map(|n| n.executed).sum::<usize>();
    assert_eq!(calls, 0);
    assert_eq!((rig.worker.streams.load().0, rig.worker.crossings.len()), (0, 0), "nothing held");
}
