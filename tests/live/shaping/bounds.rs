//! The bounds of shaping that issue #39 broke, through a real Envoy (one
//! worker) and Valkey on their real clocks:
//!
//! - a shaped request whose client leaves while its call is with the store
//!   (Valkey paused) gives back the slot the reply names, and never reaches
//!   the upstream;
//! - with `count`, a settlement above the reservation on a key with slots
//!   ahead is charged at the bucket's last slot: the later window keeps its
//!   count (`fixed_window`) or its entries and TTL (`sliding_log`), and a
//!   second burst is never placed into a window over its limit;
//! - requests waiting for their body (a reservation read from it) count
//!   against `max_waiting`: a third is refused at once.
//!
//! Each test failed against the module built before the fixes; the figures
//! are printed (`-- --nocapture`).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::load::{send_raw, Request};
use support::plugin::{plugin, rule, Plugin};
use support::shaping::{assert_within, burst, log_entries, Shot};
use support::upstream::{buffer_after_tollgate, demo_upstream, Upstream};
use support::{body_later, http_body, poll_until, wait_until, Envoy, EnvoyOptions, Valkey};
use tollgate::resp::Value;

/// 5 per second per user, held up to 5 s: `/gone/` (`sliding_log`);
/// `/fw/` and `/log/` reserve 1 unit and settle the response's
/// `x-tokens-used`. `/body/` reserves the request body's `max_tokens` (10
/// per second per tenant), `max_waiting` 2.
fn config() -> Plugin {
    let count = r#""count": { "reserve": { "units": 1 }, "cost": { "header": "x-tokens-used" } }"#;
    let shape = r#""shape": { "max_delay": "5s" }"#;
    let per_user = |name: &str, algorithm: &str| {
        rule(name).path_prefix(&format!("/{name}/")).header("x-user-id").algorithm(algorithm)
    };
    let body = r#""count": { "reserve": { "body": "max_tokens" }, "cost": { "header": "x-tokens-used" } }"#;
    plugin()
        .timeout("2s")
        .failure_mode("deny")
        .with(per_user("gone", "sliding_log").limit(5, "1s").field(shape))
        .with(per_user("fw", "fixed_window").limit(5, "1s").field(count).field(shape))
        .with(per_user("log", "sliding_log").limit(5, "1s").field(count).field(shape))
        .with(
            rule("body")
                .path_prefix("/body/")
                .header("x-tenant")
                .limit(10, "1s")
                .field(body)
                .field(r#""shape": { "max_delay": "2s", "max_waiting": 2 }"#),
        )
}

/// One worker; with `buffered`, Envoy's buffer filter after tollgate.
fn start(valkey: &Valkey, upstream: &Upstream, buffered: bool) -> Envoy {
    let options = EnvoyOptions { plugin_config: config().json(), valkey_port: valkey.port, concurrency: 1 };
    let port = upstream.port;
    let edit = move |text| {
        let text = demo_upstream(text, port);
        if buffered {
            buffer_after_tollgate(text)
        } else {
            text
        }
    };
    Envoy::try_start_edited(&options, &edit).unwrap()
}

/// A tollgate stat, once settled.
fn stat(envoy: &Envoy, name: &str) -> u64 {
    envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
}

/// A tollgate stat from one read, for polls.
fn stat_now(envoy: &Envoy, name: &str) -> u64 {
    envoy.stat_now(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
}

/// The machine's clock (Valkey's `TIME`), in ms since the Unix epoch.
fn epoch_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64() * 1e3
}

/// The log's entries of `key`: member, then score (ms on Valkey's clock).
fn records(valkey: &Valkey, key: &str) -> BTreeMap<String, u64> {
    let Value::Array(items) = valkey.cmd(&["ZRANGE", key, "0", "-1", "WITHSCORES"]) else { panic!("no log") };
    let text = |v: &Value| String::from_utf8_lossy(v.as_bytes().unwrap()).into_owned();
    items.chunks(2).map(|p| (text(&p[0]), text(&p[1]).parse().unwrap())).collect()
}

/// Scripts Valkey has run (`FCALL` and `EVALSHA`, either invocation path).
fn scripts_run(valkey: &Valkey) -> u64 {
    let calls = |field: &str| {
        let stat = valkey.info_stat("commandstats", field).unwrap_or_default();
        stat.split(',').find_map(|p| p.strip_prefix("calls=")?.parse().ok()).unwrap_or(0)
    };
    calls("cmdstat_fcall") + calls("cmdstat_evalsha")
}

/// `fixed_window`'s hash of `key`: (window index, its count, field `s`),
/// zeros when the key is gone.
fn counter(valkey: &Valkey, key: &str) -> (u64, u64, u64) {
    let Value::Array(items) = valkey.cmd(&["HGETALL", key]) else { panic!("no hash") };
    let text = |v: &Value| String::from_utf8_lossy(v.as_bytes().unwrap()).into_owned();
    let fields: BTreeMap<String, u64> = items.chunks(2).map(|p| (text(&p[0]), text(&p[1]).parse().unwrap())).collect();
    let ending = |suffix: &str| fields.iter().find(|(k, _)| k.ends_with(suffix)).map_or(0, |(_, v)| *v);
    (ending(":k"), ending(":c"), fields.get("s").copied().unwrap_or(0))
}

/// #39's first run: 10 at once against 5 per second (5 held), Valkey
/// paused 600 ms, an 11th whose client gives up after 100 ms. Before the
/// fix its slot stayed recorded (11 entries, nothing given back).
#[test]
fn a_client_gone_while_its_call_is_with_the_store_gives_its_slot_back() {
    let valkey = Valkey::start();
    let upstream = Upstream::start();
    let envoy = start(&valkey, &upstream, false);
    let (key, port, user) = ("tollgate:{gone:carol}:log", envoy.port, [("x-user-id", "carol")]);
    // Ten at once: five now, five held for +1 s.
    let first = std::thread::spawn(move || burst(port, "/gone/x", &[("x-user-id", "carol")], 10, Duration::ZERO));
    wait_until("the ten recorded", Duration::from_secs(5), || log_entries(&valkey, key).len() == 10);
    // The store runs nothing for 600 ms (within the 2 s timeout): the 11th's
    // call waits in it (its slot will be +2 s), and its client gives up
    // after 100 ms.
    let calls = scripts_run(&valkey);
    valkey.cmd(&["CLIENT", "PAUSE", "600", "ALL"]);
    let gone = send_raw(port, &Request::new("POST", "/gone/x", &user), Duration::from_millis(100));
    // Once the pause ends the 11th's call runs (its slot recorded), and its
    // reply comes back: the slot is to be given back. (Read well before the
    // key's TTL, a period after that slot, would drop every entry.)
    wait_until("the 11th's call run", Duration::from_secs(5), || scripts_run(&valkey) > calls);
    let settled = poll_until(Duration::from_millis(1_500), || {
        stat_now(&envoy, "shape.given_back") >= 1 && log_entries(&valkey, key).len() == 10
    });
    let slots = log_entries(&valkey, key);
    let given_back = stat(&envoy, "shape.given_back");
    let first = first.join().unwrap();
    let held = first.iter().filter(|s| s.delay_ms.is_some()).count();
    let hits = upstream.hits().len();
    // Five more: with the 11th's slot (the 6th entry + 1 s) free again, each
    // takes one of the held five's slots + 1 s; had it stayed recorded, the
    // fifth would wait until the 6th entry + 2 s.
    let next = burst(port, "/gone/x", &user, 5, Duration::ZERO);
    let all = log_entries(&valkey, key);
    let taken: Vec<u64> = all.iter().copied().filter(|&s| s > slots[9]).collect();
    let delays: Vec<Option<u64>> = next.iter().map(|s| s.delay_ms).collect();
    let bound = slots[9] + 1_000;
    println!(
        "gone mid-call: settled {settled}, {} entries in the log {slots:?}, shape.given_back {given_back}, upstream hits {hits}, the 11th: {:?}",
        slots.len(),
        gone.as_ref().map(|r| r.status)
    );
    println!(
        "the next five: delays {delays:?} ms, entries after the first ten {taken:?}, at most {bound} (with the slot kept, the fifth at {})",
        slots[5] + 2_000
    );
    assert!(gone.is_err(), "the 11th was held, not answered within 100 ms: {gone:?}");
    assert!(first.iter().all(|s| s.status == 200) && held == 5, "five now, five held: {first:?}");
    assert_eq!(slots.len(), 10, "the gone request's slot given back: {slots:?}");
    assert_eq!(given_back, 1);
    assert_eq!((stat(&envoy, "shape.full"), stat(&envoy, "store.errors")), (0, 0), "decided by the store");
    assert_eq!(hits, 10, "the gone request never reached the upstream");
    assert!(next.iter().all(|s| s.status == 200), "{next:?}");
    assert_eq!(taken.len(), 5, "{all:?}");
    assert!(taken.iter().all(|&s| s <= bound), "the given-back slot taken: {taken:?} (bound {bound})");
    assert_within(&all, 5, 1_000);
    assert_eq!(upstream.hits().len(), 15, "the next five reached the upstream, the gone one never");
}

/// What one run of [`overcharge`] saw: the admitted requests (the
/// overcharged one, the first burst, the second), and the key's state
/// before and after the settlement, when the second burst came, and at the
/// end.
struct Run<S> {
    w0: u64,
    settled_at: f64,
    shots: Vec<Shot>,
    second: Vec<Shot>,
    before: S,
    after: S,
    kept: S,
    last: S,
}

/// Early in a second of Valkey's clock, request A of user `dave` on
/// `/<name>/` (reserves 1) reaches the upstream, which holds it; a burst of
/// 6 then fills the window (A and four now) and places two in the next
/// second. A's response then settles 3 (an extra charge of 2) while those
/// slots are ahead. Once a TTL the charge had set from now would have run
/// out (1 s), a second burst of 5. `snap` reads the key's state.
fn overcharge<S: std::fmt::Debug>(name: &str, snap: impl Fn(&Valkey) -> S) -> Run<S> {
    let valkey = Valkey::start();
    let upstream = Upstream::start();
    let envoy = start(&valkey, &upstream, false);
    let (port, path) = (envoy.port, format!("/{name}/x"));
    wait_until("the start of a second", Duration::from_secs(3), || epoch_ms() % 1_000.0 < 150.0);
    let w0 = (epoch_ms() / 1_000.0) as u64;
    let a_path = path.clone();
    let a = std::thread::spawn(move || {
        let headers = [("x-user-id", "dave"), ("x-demo-hold", "1"), ("x-demo-header", "x-tokens-used=3")];
        burst(port, &a_path, &headers, 1, Duration::ZERO)
    });
    wait_until("A at the upstream", Duration::from_secs(5), || upstream.starts() == 1);
    let b_path = path.clone();
    let first = std::thread::spawn(move || burst(port, &b_path, &[("x-user-id", "dave")], 6, Duration::ZERO));
    wait_until("four sent on, two held", Duration::from_secs(5), || {
        upstream.starts() == 5 && stat_now(&envoy, "shape.waiting") == 2
    });
    let before = snap(&valkey);
    upstream.release();
    let mut shots = a.join().unwrap();
    // The four settled 1 each (no call), A 3.
    wait_until("A settled", Duration::from_secs(5), || stat_now(&envoy, &format!("rule.{name}.settled")) >= 7);
    let settled_at = epoch_ms();
    let after = snap(&valkey);
    wait_until("a period after the settlement", Duration::from_secs(3), || epoch_ms() > settled_at + 1_100.0);
    let kept = snap(&valkey);
    let second = burst(port, &path, &[("x-user-id", "dave")], 5, Duration::ZERO);
    shots.extend(first.join().unwrap());
    let last = snap(&valkey);
    shots.extend(second.iter().cloned());
    let released: Vec<(Option<u64>, f64)> = shots.iter().map(|s| (s.delay_ms, s.answered_epoch_ms)).collect();
    println!("{name}: second {w0}, settled at {settled_at:.0}; released (delay, at) {released:.0?}");
    println!("{name}: state before the settlement {before:?}\n  after {after:?}\n  kept {kept:?}\n  last {last:?}");
    assert!(shots.iter().all(|s| s.status == 200), "{name}: all admitted: {shots:?}");
    // (Setup: the charge came well before the held slots, so that the
    // second burst comes while they still count.)
    assert!(settled_at < ((w0 + 1) * 1_000 - 300) as f64, "(setup) settled too late: the machine stalled");
    Run { w0, settled_at, shots, second, before, after, kept, last }
}

/// `fixed_window`: the charge counts in the stored later window (before
/// #39 it overwrote it with now's, and set the TTL from now), and no
/// aligned second releases more than the limit.
#[test]
fn an_extra_charge_keeps_fixed_windows_later_window() {
    let key = "tollgate:{fw:dave}:fw";
    let run = overcharge("fw", |v| (counter(v, key), v.int(&["PEXPIRETIME", key])));
    let w1 = run.w0 + 1;
    let ((k0, c0, s0), _) = run.before;
    let ((k1, c1, s1), expires) = run.after;
    let (kept, last) = (run.kept.0, run.last.0);
    let mut per_second: BTreeMap<u64, u64> = BTreeMap::new();
    for shot in &run.shots {
        *per_second.entry((shot.answered_epoch_ms / 1_000.0) as u64).or_default() += 1;
    }
    println!("fw: requests released per second {per_second:?}");
    assert_eq!((k0, c0), (w1, 2), "the first burst's two held in the next second (slot {s0})");
    assert_eq!((k1, c1), (w1, 4), "the later window keeps its count and takes the charge of 2");
    assert!(s1 >= w1 * 1_000 && expires >= (s1 + 1_000) as i64, "lives a period after the last slot {s1}: {expires}");
    assert_eq!((kept.0, kept.1), (w1, 4), "still counted when the second burst comes");
    assert_eq!((last.0, last.1), (w1 + 1, 4), "one of the second burst fits the later window, four the next");
    for (second, n) in &per_second {
        let charged = if *second == w1 { 2 } else { 0 };
        assert!(n + charged <= 5, "second {second}: {n} released + {charged} charged: {per_second:?}");
    }
    // A held request's slot: the start of a second, at least its delay after
    // it was sent (the store's now is later), less than a second after that.
    for shot in run.shots.iter().filter(|s| s.delay_ms.is_some()) {
        let earliest = shot.sent_epoch_ms.floor() as u64 + shot.delay_ms.unwrap_or(0);
        let slot = earliest.div_ceil(1_000) * 1_000;
        let at = shot.answered_epoch_ms;
        assert!(at >= slot as f64 && at < (slot + 1_000) as f64, "released at {at:.1}, its slot {slot}: {shot:?}");
    }
}

/// `sliding_log`: the charge's entries land at the bucket's last slot (not
/// now), the key lives a period after it, the later entries are still
/// there for the second burst, and no window ending at one of its slots
/// holds more than the limit (what Valkey recorded, expired or not).
#[test]
fn an_extra_charge_lands_at_the_logs_last_slot() {
    let key = "tollgate:{log:dave}:log";
    let run = overcharge("log", |v| (records(v, key), v.int(&["PEXPIRETIME", key])));
    let ((before, _), (after, expires), (kept, _), (last, _)) = (&run.before, &run.after, &run.kept, &run.last);
    let last_slot = before.values().copied().max().unwrap_or(0);
    // The entries the settlement added.
    let is_charge = |m: &String| after.contains_key(m) && !before.contains_key(m);
    let charged: Vec<u64> = after.iter().filter(|(m, _)| is_charge(m)).map(|(_, s)| *s).collect();
    let later: BTreeSet<&String> = after.iter().filter(|(_, s)| **s as f64 > run.settled_at).map(|(m, _)| m).collect();
    let mut recorded = before.clone();
    for snapshot in [after, kept, last] {
        recorded.extend(snapshot.iter().map(|(m, s)| (m.clone(), *s)));
    }
    let second: Vec<u64> = last.iter().filter(|(m, _)| !kept.contains_key(*m)).map(|(_, s)| *s).collect();
    let fullest = second.iter().map(|&s| recorded.values().filter(|&&r| r + 1_000 > s && r <= s).count()).max();
    println!(
        "log: last slot {last_slot}, charged at {charged:?}, expires {expires}, {} later entries, {} kept; second burst at {second:?}, fullest window {fullest:?}",
        later.len(),
        later.iter().filter(|m| kept.contains_key(**m)).count()
    );
    assert_eq!(charged, [last_slot, last_slot], "the charge of 2 at the last slot, not now");
    let newest = after.values().copied().max().unwrap_or(0);
    assert!(*expires >= (newest + 1_000) as i64, "lives a period after its newest entry {newest}: {expires}");
    assert_eq!(later.len(), 4, "the two held and the charge lie ahead: {after:?}");
    assert!(later.iter().all(|m| kept.contains_key(*m)), "still recorded for the second burst: {kept:?}");
    assert_eq!(second.len(), 5, "{last:?}");
    assert!(fullest.is_some_and(|n| n <= 5), "a window of the second burst's slots over 5: {recorded:?}");
    // Released in order no earlier than the slots: the k-th release at or
    // after the k-th request's slot (every entry but the charge's).
    let mut slots: Vec<u64> = recorded.iter().filter(|(m, _)| !is_charge(m)).map(|(_, s)| *s).collect();
    slots.sort_unstable();
    let mut answered: Vec<f64> = run.shots.iter().map(|s| s.answered_epoch_ms).collect();
    answered.sort_by(f64::total_cmp);
    assert_eq!(slots.len(), answered.len(), "one entry per admitted request: {slots:?}");
    for (at, slot) in answered.iter().zip(&slots) {
        assert!(*at >= *slot as f64, "released at {at:.1} before slot {slot}: {slots:?} {answered:.1?}");
    }
    let waited = run.second.iter().filter(|s| s.delay_ms.is_some()).count();
    assert!(waited >= 4, "four of the second burst wait for the held two and the charge to leave: {:?}", run.second);
}

/// `max_waiting` 2 on one worker: two requests whose bodies (their
/// reservation) have not come fill it, and a third is refused at arrival.
/// Before the fix a full rule took the two for gone and forgot them: the
/// third went through, and all three reached the store.
#[test]
fn requests_waiting_for_their_body_count_against_max_waiting() {
    let valkey = Valkey::start();
    let upstream = Upstream::start();
    let envoy = start(&valkey, &upstream, true);
    let headers = [("x-tenant", "erin"), ("content-type", "application/json")];
    let body = br#"{"max_tokens":1}"#;
    let waiting: Vec<_> = (0..2).map(|_| body_later(envoy.port, "POST", "/body/x", &headers, body).unwrap()).collect();
    // Both heads decoded (on one worker, the third's comes after them).
    wait_until("two requests open", Duration::from_secs(5), || {
        envoy.stat_now("http.demo.downstream_rq_active") == Some(2)
    });
    let third = http_body(envoy.port, "POST", "/body/x", &headers, body).unwrap();
    let full = stat(&envoy, "shape.full");
    let answers: Vec<u16> = waiting.into_iter().map(|w| w.send().unwrap().status).collect();
    let entries = log_entries(&valkey, "tollgate:{body:erin}:log");
    let reserved = stat(&envoy, "rule.body.reserved");
    let hits = upstream.hits().len();
    println!(
        "waiting for their body: the third {} (retry-after {:?}) while both waited, shape.full {full}; then {answers:?}; {} entries in Valkey, reserved {reserved}, upstream hits {hits}",
        third.status,
        third.header("retry-after"),
        entries.len()
    );
    assert_eq!(third.status, 429, "max_waiting 2 counted: the third refused at once");
    assert_eq!(third.header("retry-after"), Some("2"), "the rule's max_delay");
    assert_eq!(full, 1);
    assert_eq!(answers, [200, 200]);
    assert_eq!((entries.len(), reserved), (2, 2), "only the two counted reached the store");
    assert_eq!(hits, 2);
}
