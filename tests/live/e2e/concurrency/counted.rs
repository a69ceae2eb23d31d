//! A concurrency limit on a rule counted on the response (`count`): the
//! lease is taken whatever the request reserves.

use super::*;
use std::time::Duration;
use support::slow::Mark;
use support::upstream::buffer_after_tollgate;
use support::wait_until;

/// `concurrency` 2 with 1000 tokens per minute reserved from `max_tokens`
/// of the body (200, more than the 2 leases: a reservation is clamped to a
/// check's smallest limit, and must not reach the lease check) and settled
/// with the usage of the stream's last event (30): while two streams are
/// held, their leases and reservations are in Valkey and a third request
/// is refused by the lease set (charging nothing); at their end the leases
/// go, the reservations settle to 30 each, and the next request is
/// admitted; no store call failed.
#[test]
fn a_counted_rules_requests_take_their_leases() {
    let valkey = Valkey::start();
    let slow = Slow::start();
    let count = r#""count": { "reserve": { "body": "max_tokens" }, "cost": { "body": "usage.total_tokens" } }"#;
    let conc = rule(RULE).path_prefix("/c/").header("x-api-key").limit(1000, "1m").field(count);
    let config = plugin().timeout("2s").with(conc.field(r#""concurrency": 2"#)).json();
    let options = EnvoyOptions { plugin_config: config, valkey_port: valkey.port, concurrency: 2 };
    let port = slow.port;
    let envoy = Envoy::try_start_edited(&options, &|text| buffer_after_tollgate(demo_upstream(text, port))).unwrap();
    let body = br#"{"model":"demo","max_tokens":200,"stream":true}"#;
    let complete = |id: &str, demo: &[(&str, &str)]| {
        let mut headers = with_key(id, &[("content-type", "application/json"), ("x-slow-tokens", "30")]);
        headers.extend_from_slice(demo);
        call(envoy.port, "POST", "/c/complete", &headers, body).unwrap()
    };

    let streams: Vec<_> = ["s1", "s2"]
        .into_iter()
        .map(|id| {
            let mut stream = complete(id, &[("x-slow-sse", "50"), ("x-slow-hold", "1")]);
            assert_eq!(stream.head().unwrap().status, 200);
            stream
        })
        .collect();
    let (held, reserved) = (leases(&valkey), valkey.int(&["ZCARD", &log_key()]));
    let third = complete("s3", &[]).finish().unwrap();
    let errors = envoy.stat("wasmcustom.tollgate.store.errors").unwrap_or(0);
    println!("held: {held:?}, {reserved} tokens reserved, {errors} store errors; the third: {}", third.status);
    assert_eq!(held.len(), 2, "the streams' leases ({errors} store errors)");
    assert_eq!(reserved, 400, "their reservations");
    assert_refused_by_concurrency(&third, "a third while they stream");
    assert_eq!(valkey.int(&["ZCARD", &log_key()]), 400, "the refusal charged nothing");
    assert!(slow.event("s3", Mark::Start).is_none(), "the refused one never reached the upstream");

    slow.release_all();
    for stream in streams {
        assert!(stream.finish().unwrap().body_text().ends_with("data: [DONE]\n\n"));
    }
    wait_until("their leases ended", Duration::from_secs(10), || zcard(valkey.port) == 0);
    wait_until("settled to their usage", Duration::from_secs(10), || valkey.int(&["ZCARD", &log_key()]) == 60);
    assert_eq!(complete("s4", &[]).finish().unwrap().status, 200, "the next is admitted");
    assert_eq!(envoy.stat("wasmcustom.tollgate.store.errors"), Some(0));
    assert_eq!(lease_stat(&[&envoy], "taken"), 3);
}
