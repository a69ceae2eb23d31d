//! The shaping defects of issue #39 through a real Envoy and Valkey, each
//! a test that failed before its fix (run against the module of 5b7ef49:
//! the figures are in the closing note): a request whose client leaves
//! while its call waits for a paused store gives its slot back; a
//! settlement above the reservation of a shaped, counted rule does not
//! rewrite the windows of slots already given; requests waiting for their
//! body count against `max_waiting`.

use crate::support;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};
use support::plugin::{plugin, rule, Plugin};
use support::shaping::{burst, log_entries};
use support::upstream::{buffer_after_tollgate, demo_upstream, Upstream};
use support::{wait_until, Envoy, EnvoyOptions, Valkey};

fn start(config: &Plugin, valkey: &Valkey, upstream: &Upstream, buffered: bool) -> Envoy {
    let options = EnvoyOptions { plugin_config: config.json(), valkey_port: valkey.port, concurrency: 1 };
    let port = upstream.port;
    let edit = move |text: String| {
        let text = demo_upstream(text, port);
        if buffered {
            buffer_after_tollgate(text)
        } else {
            text
        }
    };
    Envoy::try_start_edited(&options, &edit).unwrap()
}

fn stat(envoy: &Envoy, name: &str) -> u64 {
    envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
}

/// Polls `ready` for up to `timeout`: whether it held.
fn soon(timeout: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + timeout;
    while Instant::now() < until {
        if ready() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    ready()
}

/// A request sent on its own connection, whose client gives up later
/// (drops the connection) without reading the answer.
fn send_and_keep(port: u16, path: &str, user: &str) -> TcpStream {
    let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let request = format!("POST {path} HTTP/1.1\r\nhost: localhost\r\nx-user-id: {user}\r\ncontent-length: 0\r\n\r\n");
    client.write_all(request.as_bytes()).unwrap();
    client
}

/// 5 per second, `max_delay` 5 s: 10 requests (5 held), the store paused
/// for 600 ms, an 11th request whose client gives up after 100 ms while
/// its call waits for the store. Before the fix its slot stayed recorded
/// (11 entries, `shape.given_back` 0).
#[test]
fn a_request_gone_while_its_call_waits_for_the_store_gives_its_slot_back() {
    let valkey = Valkey::start();
    let upstream = Upstream::start();
    let shape = r#""shape": { "max_delay": "5s" }"#;
    let config =
        plugin().timeout("2s").failure_mode("deny").with(rule("d3").header("x-user-id").limit(5, "1s").field(shape));
    let envoy = start(&config, &valkey, &upstream, false);
    let key = "tollgate:{d3:alice}:log";
    let port = envoy.port;
    let first = std::thread::spawn(move || burst(port, "/d3", &[("x-user-id", "alice")], 10, Duration::ZERO));
    wait_until("ten recorded", Duration::from_secs(5), || log_entries(&valkey, key).len() == 10);
    valkey.cmd(&["CLIENT", "PAUSE", "600", "ALL"]);
    let client = send_and_keep(envoy.port, "/d3", "alice");
    // Its call reaches the store's connection and waits; the client
    // gives up meanwhile.
    wait_until("its call sent", Duration::from_secs(2), || stat(&envoy, "store.requests") > 10);
    std::thread::sleep(Duration::from_millis(100));
    drop(client);
    let shots = first.join().unwrap();
    assert!(shots.iter().all(|s| s.status == 200), "{shots:?}");
    assert_eq!(shots.iter().filter(|s| s.delay_ms.is_some()).count(), 5, "five held: {shots:?}");
    // After the pause, the store records the 11th at its slot (+2 s)
    // and the worker gives it back.
    // (Read before the 11th's slot, +2 s, after which the key expires.)
    let t0 = log_entries(&valkey, key)[0];
    let back = soon(Duration::from_secs(5), || {
        let given = stat(&envoy, "shape.given_back") == 1 && log_entries(&valkey, key).len() == 10;
        given || valkey_ms(&valkey) >= t0 + 1_900
    }) && stat(&envoy, "shape.given_back") == 1;
    let (entries, given_back) = (log_entries(&valkey, key), stat(&envoy, "shape.given_back"));
    println!("a client gone while the store was paused: {} entries, {given_back} given back", entries.len());
    assert!(back, "its slot given back: {} entries {entries:?}, shape.given_back {given_back}", entries.len());
    assert_eq!(upstream.hits().len(), 10, "the gone request never reached the upstream");
}

/// Valkey's clock, in ms since the epoch.
fn valkey_ms(valkey: &Valkey) -> u64 {
    let tollgate::resp::Value::Array(t) = valkey.cmd(&["TIME"]) else { panic!("TIME") };
    let part = |i: usize| String::from_utf8_lossy(t[i].as_bytes().unwrap()).parse::<u64>().unwrap();
    part(0) * 1_000 + part(1) / 1_000
}

/// Shaped and counted (`fixed_window`, 5 units per second, each request
/// reserving 1). In one second: a request whose response the upstream
/// holds, then 9 more (4 admitted now, 5 held for the next second); then
/// the held response settles 5 units (reserved 1): an extra charge of 4,
/// while the next second holds slots already given. The charge lands with
/// them (that window then counts 5 + 4), so a later burst is placed in the
/// second after. Before the fix it was recorded at now, in the current
/// window, overwriting the next window's count: a later burst went into a
/// window already full.
#[test]
fn a_settlement_above_its_reservation_keeps_the_windows_of_later_slots() {
    let valkey = Valkey::start();
    let upstream = Upstream::start();
    let count = r#""count": { "reserve": { "units": 1 }, "cost": { "header": "x-used" } }"#;
    let shape = r#""shape": { "max_delay": "5s" }"#;
    let config = plugin()
        .timeout("2s")
        .failure_mode("deny")
        .with(rule("d4").header("x-user-id").algorithm("fixed_window").limit(5, "1s").field(count).field(shape));
    let envoy = start(&config, &valkey, &upstream, false);
    let key = "tollgate:{d4:bob}:fw";
    let port = envoy.port;
    // Start early in a second of Valkey's clock: the steps up to the
    // settlement take a few tens of ms.
    wait_until("a new second", Duration::from_secs(3), || valkey_ms(&valkey) % 1_000 < 50);
    let start = valkey_ms(&valkey);
    let held_response = std::thread::spawn(move || {
        let headers = [("x-user-id", "bob"), ("x-demo-hold", "1"), ("x-demo-header", "x-used=5")];
        burst(port, "/d4", &headers, 1, Duration::ZERO)
    });
    wait_until("its request at the upstream", Duration::from_secs(2), || upstream.starts() == 1);
    let one = [("x-user-id", "bob"), ("x-demo-header", "x-used=1")];
    let rest = std::thread::spawn(move || burst(port, "/d4", &one, 9, Duration::ZERO));
    wait_until("five held", Duration::from_secs(2), || stat(&envoy, "shape.delayed") == 5);
    let last_slot: u64 = String::from_utf8_lossy(valkey.cmd(&["HGET", key, "s"]).as_bytes().unwrap()).parse().unwrap();
    let before = valkey_ms(&valkey);
    upstream.release();
    // Settled units: 5 for the held response, 1 for each of the other 9.
    wait_until("all settled", Duration::from_secs(5), || stat(&envoy, "rule.d4.settled") == 14);
    let (held, rest) = (held_response.join().unwrap(), rest.join().unwrap());
    assert!(held[0].status == 200 && rest.iter().all(|s| s.status == 200), "{held:?} {rest:?}");
    assert_eq!(rest.iter().filter(|s| s.delay_ms.is_some()).count(), 5, "{rest:?}");
    // The charge came while the second of the held slots was still ahead.
    assert!(before / 1_000 < last_slot / 1_000, "released {before} before the slots' second {last_slot} ({start})");
    let tollgate::resp::Value::Array(fields) = valkey.cmd(&["HGETALL", key]) else { panic!("HGETALL") };
    let state: Vec<String> =
        fields.iter().map(|f| String::from_utf8_lossy(f.as_bytes().unwrap()).into_owned()).collect();
    let second = burst(envoy.port, "/d4", &one, 3, Duration::ZERO);
    let answered: Vec<u64> = second.iter().map(|s| s.answered_epoch_ms as u64).collect();
    println!(
        "a charge of 4 at a held slot: state {state:?}; a later burst answered at {answered:?}, \
         the slots' second {}",
        last_slot / 1_000
    );
    assert!(second.iter().all(|s| s.status == 200), "{second:?}");
    let after = (last_slot / 1_000 + 1) * 1_000;
    assert!(answered.iter().all(|&a| a >= after), "placed after the full second ({after}): {answered:?}, {state:?}");
}

/// `max_waiting` 2, the reservation read from the body: two requests whose
/// body has not come yet count, and a third is refused at once, without a
/// store call. Before the fix the full rule took the two for requests that
/// had left and let the third through.
#[test]
fn requests_waiting_for_their_body_count_against_max_waiting() {
    let valkey = Valkey::start();
    let upstream = Upstream::start();
    let count = r#""count": { "reserve": { "body": "max_tokens" }, "cost": { "body": "usage.total_tokens" } }"#;
    let shape = r#""shape": { "max_delay": "2s", "max_waiting": 2 }"#;
    let config = plugin()
        .timeout("2s")
        .failure_mode("deny")
        .with(rule("d5").header("x-user-id").limit(100, "1s").field(count).field(shape));
    let envoy = start(&config, &valkey, &upstream, true);
    let body = br#"{"max_tokens": 1}"#;
    let waiting: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut c = TcpStream::connect(("127.0.0.1", envoy.port)).unwrap();
            let head = format!(
                "POST /d5 HTTP/1.1\r\nhost: localhost\r\nx-user-id: carol\r\ncontent-type: application/json\r\n\
                 x-demo-usage: 1\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            c.write_all(head.as_bytes()).unwrap();
            c
        })
        .collect();
    // Both requests' headers reached Envoy (and so the worker) before the
    // third is sent.
    let started = || envoy.stat_now("http.demo.downstream_rq_total").unwrap_or(0);
    wait_until("both started", Duration::from_secs(5), || started() == 2);
    let third = burst(envoy.port, "/d5", &[("x-user-id", "carol")], 1, Duration::ZERO);
    let full = stat(&envoy, "shape.full");
    println!("two waiting for their body: the third got {}, shape.full {full}", third[0].status);
    assert_eq!((third[0].status, full), (429, 1), "the third refused at once: {third:?}");
    for mut c in waiting {
        c.write_all(body).unwrap();
        std::mem::forget(c);
    }
    wait_until("both reached the upstream", Duration::from_secs(5), || upstream.hits().len() == 2);
    assert_eq!(stat(&envoy, "rule.d5.allowed"), 2, "only the two counted were admitted");
}
