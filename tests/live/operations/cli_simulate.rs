//! `tollgate simulate` agrees with a real Envoy and Valkey: each trace is
//! replayed through Envoy running the built module (its time injected with
//! `testing.now_header`), the table is read from the real responses, and it
//! must equal the table `simulate` prints for the same trace.

use crate::support;

use support::plugin::{plugin, rule, seed_rule};
use support::{Envoy, EnvoyOptions, Valkey};
use tollgate::cli::simulate::simulate;
use tollgate::cli::table::{render, Row};
use tollgate::cli::trace::{self, Request};
use tollgate::config::Config;

const NOW: &str = "x-tollgate-test-now-ms";
const T0: u64 = 1_800_000_000_000;

/// The seed's rule (as `envoy/envoy.yaml`), with the test clock.
fn seed_config() -> String {
    plugin().timeout("100ms").valkey(r#""key_prefix": "tollgate""#).with(seed_rule()).now_header(NOW).json()
}

/// Two rules of different algorithms deciding the same requests.
fn mixed_config() -> String {
    plugin()
        .with(rule("user").algorithm("gcra").header("x-user-id").limit(10, "10s").limit(3, "1s"))
        .with(rule("route").algorithm("fixed_window").path_prefix("/api").limit(4, "2s"))
        .now_header(NOW)
        .json()
}

/// The table a client of a real Envoy writes down for `requests`.
fn through_envoy(config: &str, requests: &[Request], columns: &[String]) -> String {
    let valkey = Valkey::start();
    let envoy =
        Envoy::start(&EnvoyOptions { plugin_config: config.to_owned(), valkey_port: valkey.port, concurrency: 1 });
    let start = requests.first().map_or(0, |r| r.time_ms);
    let rows: Vec<Row> = requests
        .iter()
        .map(|r| {
            let now = r.time_ms.to_string();
            let mut headers: Vec<(&str, &str)> = r.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            headers.push((NOW, &now));
            let resp = envoy.request(&r.method, &r.path, &headers);
            Row::from_response(r.time_ms - start, u32::from(resp.status), &resp.headers, &resp.body, columns)
        })
        .collect();
    render(columns, &rows)
}

fn simulated(config: &str, requests: &[Request]) -> (Vec<String>, String) {
    let config = Config::from_json(config.as_bytes()).unwrap();
    let (columns, rows) = simulate(&config, requests);
    let table = render(&columns, &rows);
    (columns, table)
}

fn agree(config: &str, requests: &[Request]) -> String {
    let (columns, expected) = simulated(config, requests);
    let actual = through_envoy(config, requests, &columns);
    assert_eq!(actual, expected, "Envoy (left) and simulate (right) disagree");
    expected
}

#[test]
fn the_seed_trace_gives_the_same_table() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cli/seed.csv")).unwrap();
    let table = agree(&seed_config(), &trace::parse(&text).unwrap());
    assert!(
        table.contains("   6 |      0 |    429 |              15 |              0 | auth.createToken/3s\n"),
        "{table}"
    );
}

/// The seed's minute: bursts of 8 every 3 s; the 60s window fills, and calls
/// are answered from the denial cache while it denies.
#[test]
fn a_minute_of_bursts_gives_the_same_table() {
    let mut requests = Vec::new();
    for burst in 0..21u64 {
        for _ in 0..8 {
            requests.push(Request {
                time_ms: T0 + burst * 3_001,
                method: "POST".into(),
                path: "/auth/token".into(),
                headers: vec![("x-user-id".into(), "alice".into())],
                address: None,
            });
        }
    }
    let table = agree(&seed_config(), &requests);
    assert!(
        table.contains("| auth.createToken/60s, auth.createToken/3s\n"),
        "the 60s window denies at some point:\n{table}"
    );
    assert_eq!(table.matches(" 200 |").count(), 25, "20 in the first minute, 5 after its first calls left:\n{table}");
}

/// Two algorithms in one decision, and denials from the cache that report
/// only the denying rule.
#[test]
fn mixed_algorithms_give_the_same_table() {
    let mut requests = Vec::new();
    for (i, at) in [0u64, 0, 0, 0, 0, 400, 999, 1_000, 1_500, 2_000, 2_000, 2_001, 5_000].iter().enumerate() {
        let user = if i % 4 == 3 { "bob" } else { "alice" };
        requests.push(Request {
            time_ms: T0 + at,
            method: "GET".into(),
            path: if i % 5 == 4 { "/other".into() } else { "/api/items".into() },
            headers: vec![("x-user-id".into(), user.into())],
            address: None,
        });
    }
    let table = agree(&mixed_config(), &requests);
    assert!(table.contains(" 429 |"), "{table}");
    assert!(table.contains("route/2s"), "{table}");
}
