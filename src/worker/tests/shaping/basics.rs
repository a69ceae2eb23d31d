//! Shaping (`rules[].shape`): admissions held until their slot and released
//! by the tick, the `max_waiting` bound, slots given back by requests that
//! go away, the headers and stats.

use crate::answer::response::{DELAY_HEADER, SERVER_TIMING};
use crate::testing::{plugin, rule, Plugin};
use crate::worker::decision::ruling::RuleOutcome;
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{Flow, ShapeStat, Stat, TICK};
use std::time::Duration;

/// 5 per second per user, held up to 2 s (`max_waiting` if given).
fn shaped(algorithm: &str, max_waiting: Option<u64>) -> Plugin {
    let waiting = max_waiting.map(|m| format!(r#", "max_waiting": {m}"#)).unwrap_or_default();
    let shape = format!(r#""shape": {{ "max_delay": "2s"{waiting} }}"#);
    plugin().with(rule("burst").header("x-user-id").limit(5, "1s").algorithm(algorithm).field(&shape))
}

/// A burst of `n` for alice, answered by the store: the ids.
fn burst(rig: &mut Rig, n: usize) -> Vec<u32> {
    let ids = (0..n).map(|_| rig.request("alice")).map(|(id, flow)| (id, assert_eq!(flow, Flow::Pause)).0).collect();
    rig.run_until_quiet();
    ids
}

fn admitted(rig: &Rig, ids: &[u32]) -> usize {
    ids.iter().filter(|id| rig.host.status(**id) == Some(200)).count()
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn the_burst_is_released_at_the_slots_the_windows_allow() {
    for (algorithm, delays) in [
        ("sliding_log", [1_000; 5].to_vec()),
        ("gcra", [200, 400, 600, 800, 1_000].to_vec()),
        ("fixed_window", [1_000; 5].to_vec()),
        ("sliding_window", [1_200, 1_400, 1_600, 1_800, 2_000].to_vec()),
    ] {
        let mut rig = Rig::new(shaped(algorithm, None));
        let ids = burst(&mut rig, 10);
        assert_eq!(admitted(&rig, &ids), 5, "{algorithm}: five at once");
        assert_eq!(rig.gauges().2, 5, "{algorithm}: five held");
        assert_eq!(rig.host.tick, TICK, "{algorithm}: the tick runs while any is held");
        let start = rig.now;
        let mut released = Vec::new();
        while released.len() < 5 && rig.now < start + 3_000 {
            rig.run_for(5);
            for &(id, delay) in &rig.host.delayed {
                if !released.iter().any(|(r, _, _)| *r == id) {
                    released.push((id, delay, rig.now - start));
                }
            }
        }
        let got: Vec<u64> = released.iter().map(|(_, d, _)| *d).collect();
        assert_eq!(got, delays, "{algorithm}");
        for (id, delay, at) in &released {
            assert!(*at >= *delay && *at < delay + 5, "{algorithm}: released at {at} for {delay}");
            let timing = format!("tollgate-delay;dur={delay}");
            assert!(rig.response_headers(*id).contains(&(SERVER_TIMING.to_string(), timing)), "{algorithm}");
        }
        assert_eq!(rig.host.count(Stat::Shape(ShapeStat::Delayed)), 5);
        assert_eq!(rig.host.shape_delays, delays);
        assert_eq!(rig.host.count(Stat::Rule(0, RuleOutcome::Allowed)), 10);
        assert_eq!(rig.gauges().2, 0);
        rig.run_until_quiet();
        assert_eq!(rig.host.tick, Duration::ZERO, "{algorithm}: nothing held, no tick");
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn beyond_max_delay_is_denied_and_the_client_cannot_forge_the_delay() {
    let mut rig = Rig::new(shaped("sliding_log", None));
    let ids = burst(&mut rig, 16);
    assert_eq!(admitted(&rig, &ids), 5);
    let denied: Vec<u32> = ids.iter().copied().filter(|id| rig.host.status(*id) == Some(429)).collect();
    assert_eq!(denied.len(), 1, "5 now, 5 at +1 s, 5 at +2 s, the 16th beyond");
    assert_eq!(rig.host.count(Stat::Rule(0, RuleOutcome::Denied)), 1);
    assert!(rig.host.removed_headers.iter().any(|h| h == DELAY_HEADER));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_held_request_that_goes_away_gives_its_slot_back() {
    let mut rig = Rig::new(shaped("gcra", None));
    let start = rig.now;
    let ids = burst(&mut rig, 7);
    let (sixth, seventh) = (ids[5], ids[6]);
    assert_eq!(rig.gauges().2, 2);
    rig.gone(seventh);
    rig.tick(5);
    assert_eq!(rig.gauges().2, 1);
    rig.run_until_quiet();
    assert_eq!(rig.host.count(Stat::Shape(ShapeStat::GivenBack)), 1);
    // The next request takes the slot given back (+400 ms), not +600 ms.
    let asked = rig.now - start;
    let (next, _) = rig.request("alice");
    rig.run_until_quiet();
    rig.run_for(1_000);
    let delay = |id| rig.host.delayed.iter().find(|(d, _)| *d == id).map(|(_, ms)| *ms);
    assert_eq!(delay(sixth), Some(200));
    assert_eq!(delay(seventh), None, "gone: never admitted");
    assert_eq!(delay(next), Some(400 - asked));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn max_waiting_refuses_without_a_store_call() {
    let mut rig = Rig::new(shaped("sliding_log", Some(3)));
    let ids: Vec<u32> = (0..8).map(|_| rig.request("alice").0).collect();
    let refused = ids.iter().filter(|id| rig.host.status(**id) == Some(429)).count();
    assert_eq!(refused, 5, "three counted at once: the rest refused at arrival");
    rig.run_until_quiet();
    assert_eq!(rig.store.executed, 3);
    assert_eq!(rig.host.count(Stat::Shape(ShapeStat::Full)), 5);
    let reply = rig.host.reply(ids[7]).unwrap();
    assert!(reply.headers.iter().any(|(k, v)| k == "retry-after" && v == "2"), "{:?}", reply.headers);
    // Decided at once: they no longer count.
    let (id, _) = rig.request("bob");
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(200));
}

/// On a Valkey Cluster (one rule, so one slot per request): the call and
/// the give-back go to the master of the bucket's slot.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn on_a_cluster_each_bucket_is_shaped_by_its_master() {
    use crate::worker::tests::cluster::basics::{cluster_plugin, cluster_rig, executed, user_on};
    let shape = r#""shape": { "max_delay": "2s" }"#;
    let config = cluster_plugin().with(rule("burst").header("x-user-id").limit(5, "1s").algorithm("gcra").field(shape));
    let mut rig = cluster_rig(config, 3);
    let user = user_on(&rig, "burst", 2);
    let ids: Vec<u32> = (0..7).map(|_| rig.request(&user).0).collect();
    rig.run_until_quiet();
    assert_eq!(admitted(&rig, &ids), 5);
    assert_eq!((executed(&rig, 0), executed(&rig, 1), executed(&rig, 2)), (0, 0, 7));
    rig.gone(ids[6]);
    rig.tick(5);
    rig.run_until_quiet();
    assert_eq!(rig.cluster.as_ref().unwrap().nodes[2].adjusted, 1, "given back on its master");
    assert_eq!(rig.host.count(Stat::Shape(ShapeStat::GivenBack)), 1);
    rig.run_for(300);
    assert_eq!(rig.host.delayed.iter().map(|(_, d)| *d).collect::<Vec<_>>(), [200]);
}

/// Behind Sentinel the master is one store: held and released as usual.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn behind_sentinel_the_master_shapes() {
    let sentinel = r#""sentinel": { "cluster": "tollgate_sentinels", "master_name": "mymaster" }"#;
    let shape = r#""shape": { "max_delay": "2s" }"#;
    let config = plugin()
        .failure_mode("deny")
        .valkey(sentinel)
        .with(rule("burst").header("x-user-id").limit(5, "1s").algorithm("gcra").field(shape));
    let mut rig = Rig::new(config);
    rig.store.master = Some("10.0.0.1:6379".into());
    let ids = burst(&mut rig, 6);
    assert_eq!(admitted(&rig, &ids), 5);
    rig.run_for(200);
    assert_eq!(admitted(&rig, &ids), 6);
    assert_eq!(rig.host.delayed.iter().map(|(_, d)| *d).collect::<Vec<_>>(), [200]);
}

/// A request whose client leaves while its shaped call is with the store:
/// the slot the reply gives is given back, and the request stays counted
/// against `max_waiting` until the give-back is answered, so clients that
/// send and reset cannot fill a key's next `max_delay` with slots nobody
/// uses.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_request_gone_while_its_call_is_with_the_store_gives_its_slot_back() {
    const KEY: &str = "tollgate:{burst:alice}:log";
    let mut rig = Rig::new(shaped("sliding_log", Some(6)));
    let ids: Vec<u32> = (0..10).flat_map(|_| burst(&mut rig, 1)).collect();
    assert_eq!(admitted(&rig, &ids), 5, "five now");
    assert_eq!(rig.gauges().2, 5, "five held");
    let (gone, flow) = rig.request("alice");
    assert_eq!(flow, Flow::Pause);
    let stream = rig.stream();
    assert!(!rig.host.outbox.get(&stream).is_none_or(Vec::is_empty), "its call is on the stream");
    rig.gone(gone);
    let (refused, _) = rig.request("alice");
    assert_eq!(rig.host.status(refused), Some(429), "five held and one in flight fill max_waiting 6");
    rig.run_until_quiet();
    assert_eq!(rig.store.model.entries(KEY), 10, "the gone request's slot (+2 s) was given back");
    assert_eq!(rig.host.count(Stat::Shape(ShapeStat::GivenBack)), 1);
    assert_eq!(rig.host.status(gone), None, "never admitted");
    let (next, _) = rig.request("alice");
    rig.run_until_quiet();
    assert_ne!(rig.host.status(next), Some(429), "the give-back answered: counted no more");
    assert_eq!(rig.gauges().2, 6, "the next one is held for the slot given back");
    assert_eq!(rig.store.model.entries(KEY), 11, "the next one took the slot given back");
}

/// A gone request's give-back keeps it counted until the store answers:
/// at most `max_waiting` slots per rule are ever recorded ahead by a worker.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_held_request_gone_stays_counted_until_its_slot_is_given_back() {
    let mut rig = Rig::new(shaped("gcra", Some(3)));
    let ids: Vec<u32> = (0..8).flat_map(|_| burst(&mut rig, 1)).collect();
    assert_eq!(admitted(&rig, &ids), 5, "five now");
    assert_eq!(rig.gauges().2, 3, "three held");
    rig.gone(ids[7]);
    rig.tick(5);
    let stream = rig.stream();
    assert!(!rig.host.outbox.get(&stream).is_none_or(Vec::is_empty), "its give-back is on the stream");
    let (refused, _) = rig.request("alice");
    assert_eq!(rig.host.status(refused), Some(429), "the give-back not answered yet: still full");
    rig.run_until_quiet();
    assert_eq!(rig.host.count(Stat::Shape(ShapeStat::GivenBack)), 1);
    let (next, flow) = rig.request("alice");
    assert_eq!(flow, Flow::Pause, "room again: sent to the store");
    rig.run_until_quiet();
    assert_ne!(rig.host.status(next), Some(429));
}
