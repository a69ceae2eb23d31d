//! The main case: `concurrency: 3`, two Envoys of two workers, 200
//! requests at once for one key held at the upstream.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::slow::Mark;
use support::wait_until;

/// Requests, and the client threads that send them (each one at a time).
const REQUESTS: usize = 200;
const CLIENTS: usize = 32;

/// One answered request of the burst.
struct Answer {
    i: usize,
    response: std::io::Result<Response>,
    at: Instant,
}

/// 200 requests for one key through two Envoys of two workers each, every
/// one held at the upstream until released: exactly 3 reach it, the 197
/// others are answered 429 while those 3 are still held (they cannot have
/// waited for them), by the concurrency limit; the upstream never has more
/// than 3 in flight; released, the 3 are answered 200 and their ends empty
/// the lease set (long before the 30 s TTL), after which 3 new requests are
/// admitted and a 4th refused again.
#[test]
fn two_envoys_admit_three_at_once_and_refuse_the_rest_at_once() {
    let valkey = Valkey::start();
    let slow = Slow::start();
    let config = config("3");
    let (a, b) = (start(&valkey, &slow, &config), start(&valkey, &slow, &config));
    let ports = [a.port, b.port];
    let (next, began) = (Arc::new(AtomicUsize::new(0)), Instant::now());
    let answers: Arc<Mutex<Vec<Answer>>> = Arc::default();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (next, answers) = (next.clone(), answers.clone());
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= REQUESTS {
                        return;
                    }
                    let response = get(ports[i % 2], &format!("a{i}"), &[("x-slow-hold", "1")]);
                    answers.lock().unwrap().push(Answer { i, response, at: Instant::now() });
                })
                .unwrap()
        })
        .collect();
    let answered = || answers.lock().unwrap().len();
    // A backstop only: the 3 held are never released before this.
    let all_but_3 = support::poll_until(Duration::from_secs(60), || answered() >= REQUESTS - 3);
    assert!(all_but_3, "{} answered in 60 s, {} in flight at the upstream", answered(), slow.in_flight());
    let released_at = Instant::now();
    let took = released_at - began;
    let held_leases = leases(&valkey);
    let (in_flight, starts) = (slow.in_flight(), slow.count(Mark::Start));
    let (stored, logged) = (held_leases.len(), valkey.int(&["ZCARD", &log_key()]));
    let early = answered();
    slow.release_all();
    for client in clients {
        client.join().unwrap();
    }
    let answers = std::mem::take(&mut *answers.lock().unwrap());
    let status = |a: &Answer| a.response.as_ref().map_or(0, |r| r.status);
    let refused: Vec<&Answer> = answers.iter().filter(|a| status(a) == 429).collect();
    let admitted: Vec<&Answer> = answers.iter().filter(|a| status(a) == 200).collect();
    println!(
        "{REQUESTS} requests: {} admitted, {} refused ({early} answered in {took:?}, before the release), upstream \
         max in flight {}, lease set {stored} while held: {held_leases:?}",
        admitted.len(),
        refused.len(),
        slow.max_in_flight()
    );
    assert_eq!((in_flight, starts), (3, 3), "exactly 3 reached the upstream while held");
    assert_eq!(early, REQUESTS - 3, "the others were all answered before the release");
    assert_eq!((admitted.len(), refused.len()), (3, REQUESTS - 3), "3 admitted, the rest 429");
    assert!(refused.iter().all(|a| a.at < released_at), "every 429 came before the release");
    assert!(admitted.iter().all(|a| a.at > released_at), "the 3 were answered after it");
    for a in &refused {
        assert_refused_by_concurrency(a.response.as_ref().unwrap(), &format!("request {}", a.i));
    }
    println!("a refusal's headers: {:?}", refused[0].response.as_ref().unwrap().headers);
    assert_eq!(stored, 3, "3 leases while held");
    assert_eq!(logged, 3, "the window counted the 3 admitted only: a refusal is atomic");

    // Their ends empty the set, long before the leases' expiry.
    let expiry = held_leases.iter().map(|l| l.1).min().unwrap();
    wait_until("the 3 leases ended", Duration::from_secs(10), || zcard(valkey.port) == 0);
    let ended_at = valkey.time_ms();
    assert!(ended_at < expiry, "ended at {ended_at}, the first expiry {expiry}: ended, not expired");

    // New requests are admitted again: 3 held (each reaching the upstream
    // before the next is sent), a 4th refused while they are.
    let held: Vec<_> = (0..3)
        .map(|j| {
            let id = format!("b{j}");
            let c = call(ports[j % 2], "GET", "/c/b", &with_key(&id, &[("x-slow-hold", "1")]), b"").unwrap();
            wait_until("it reached the upstream", Duration::from_secs(10), || slow.event(&id, Mark::Start).is_some());
            c
        })
        .collect();
    assert_eq!(slow.in_flight(), 3);
    let fourth = get(ports[1], "b3", &[("x-slow-hold", "1")]).unwrap();
    assert_refused_by_concurrency(&fourth, "the 4th");
    slow.release_all();
    for c in held {
        assert_eq!(c.finish().unwrap().status, 200);
    }
    wait_until("the lease set empty again", Duration::from_secs(10), || zcard(valkey.port) == 0);

    let timeline = slow.timeline();
    let most = timeline.iter().map(|e| e.in_flight).max().unwrap_or(0);
    assert_eq!((most, slow.max_in_flight()), (3, 3), "never more than 3 in flight at the upstream");
    assert_eq!(slow.count(Mark::Start), 6, "the refused ones never reached it");
    assert_eq!(slow.count(Mark::Gone), 0);
    assert_eq!(lease_stat(&[&a, &b], "taken"), 6);
    wait_until("6 releases counted", Duration::from_secs(10), || lease_stat(&[&a, &b], "released") == 6);
    assert_eq!(lease_stat(&[&a, &b], "failed"), 0);
}
