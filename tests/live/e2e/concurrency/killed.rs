//! A killed Envoy's leases: nobody ends them, they expire in the store.

use super::*;
use std::time::Duration;
use support::slow::Mark;
use support::timeline::Poller;
use support::wait_until;

/// The lease TTL of the test, in ms.
const TTL_MS: u64 = 2_000;
/// How late after the first expiry B's first admission may come before the
/// test calls it hung: B asks every 20 ms, so it is late by one round trip
/// and one pause on an idle machine; this is a hang detector, not a latency.
const HANG_MS: u64 = 3_000;

/// Envoy A takes 3 leases (3 requests held at the upstream), then is killed
/// (SIGKILL): through Envoy B every request is refused until the first of
/// A's leases expires, and B's first admission reaches the upstream no
/// earlier than that expiry (read from Valkey after the kill) and no later
/// than a hang detector after it; the lease set never holds more than 3.
#[test]
fn a_killed_envoys_leases_expire_within_their_ttl() {
    let valkey = Valkey::start();
    let slow = Slow::start();
    let config = config(&format!(r#"{{ "limit": 3, "lease_ttl": "{}s" }}"#, TTL_MS / 1_000));
    let (a, b) = (start(&valkey, &slow, &config), start(&valkey, &slow, &config));
    let port = valkey.port;
    let most = Poller::start(Duration::from_millis(10), move |most: &mut i64| *most = (*most).max(zcard(port)));
    let held: Vec<_> = (0..3)
        .map(|j| {
            let id = format!("a{j}");
            let c = call(a.port, "GET", "/c/a", &with_key(&id, &[("x-slow-hold", "1")]), b"").unwrap();
            wait_until("it reached the upstream", Duration::from_secs(10), || slow.event(&id, Mark::Start).is_some());
            c
        })
        .collect();
    assert_refused_by_concurrency(&get(b.port, "b-full", &[]).unwrap(), "B while A holds 3");
    assert_eq!(lease_stat(&[&a], "taken"), 3);
    let before = leases(&valkey);
    assert_eq!(before.len(), 3, "A's 3 leases: {before:?}");

    drop(a); // Child::kill: SIGKILL, and waits for it
    let killed_at = valkey.time_ms();
    wait_until("the upstream saw A's connections close", Duration::from_secs(10), || slow.count(Mark::Gone) == 3);
    drop(held);
    let after = leases(&valkey);
    assert_eq!(after.len(), 3, "nobody ended them: {after:?}");
    for ((_, was), (_, is)) in before.iter().zip(&after) {
        assert!(is >= was, "an expiry moved back: {before:?} then {after:?}");
    }
    let expiry = after.iter().map(|l| l.1).min().unwrap();
    assert!(killed_at < expiry, "killed at {killed_at}, after the first expiry {expiry}: the test proves nothing");

    // Through B, every 20 ms until admitted.
    let mut refused = 0;
    let first = loop {
        let id = format!("p{refused}");
        let r = get(b.port, &id, &[]).unwrap();
        if r.status == 200 {
            break id;
        }
        assert_refused_by_concurrency(&r, &id);
        refused += 1;
        assert!(epoch_ms() < expiry + HANG_MS, "still refused {HANG_MS} ms after the first expiry {expiry}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let admitted_at = slow.event(&first, Mark::Start).unwrap().epoch_ms;
    println!(
        "A killed at {killed_at} (Valkey's clock), its leases expiring at {:?}; B refused {refused} times, first \
         admitted at {admitted_at}: {} ms after the first expiry, {} ms after the kill",
        after.iter().map(|l| l.1).collect::<Vec<_>>(),
        admitted_at as i64 - expiry as i64,
        admitted_at - killed_at
    );
    assert!(refused > 0, "B was refused after the kill");
    // The upstream's clock is read after the store decided, on Valkey's
    // clock (ms, truncated: 1 ms of slack).
    assert!(admitted_at + 1 >= expiry, "admitted at {admitted_at}, before the first expiry {expiry}");
    assert!(admitted_at < expiry + HANG_MS, "admitted at {admitted_at}: hung past {expiry} + {HANG_MS} ms");
    assert_eq!(lease_stat(&[&b], "taken"), 1);
    wait_until("B's lease released", Duration::from_secs(10), || lease_stat(&[&b], "released") == 1);
    wait_until("no live lease", Duration::from_secs(10), || live(&valkey) == 0);
    most.read_again(2);
    let most = most.stop();
    println!("the lease set held at most {most}; now {} (expired ones dropped lazily)", zcard(port));
    assert_eq!(most, 3, "never more than 3 leases");
}
