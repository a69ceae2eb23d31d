//! Hostile requests through a real Envoy: huge, non-UTF-8, empty and
//! brace-laden key values, a thousand headers, and a value that spells a
//! second RESP command. Keys stay bounded, no value becomes a command, and
//! the wasm VM never panics.

use crate::support;

use std::time::Duration;
use support::load::{send_raw, Request};
use support::plugin::{plugin, rule};
use support::{admin_get, Envoy, EnvoyOptions, Valkey};
use tollgate::resp::Value;

fn config() -> String {
    plugin()
        .timeout("1s")
        .failure_mode("deny")
        .with(rule("hdr").path_prefix("/h").header("x-user-id").limit(1000, "60s"))
        .with(rule("qry").path_prefix("/q").key(r#"{ "query": "u" }"#).limit(1000, "60s"))
        .json()
}

/// Longest possible key of this configuration: `tollgate:{qry:` + a part of
/// at most 64 bytes (longer ones become `#<sha1>`, 41 bytes) + `}:log`.
const MAX_KEY_LEN: usize = "tollgate:{qry:".len() + 64 + "}:log".len();

/// Raises Envoy's own limits on the demo listener (and on the demo upstream,
/// itself an Envoy listener) so that the requests reach the filter and pass:
/// 96 KiB of headers (default 60) and 1,100 headers (default 100).
fn raise_header_limits(config: String) -> String {
    let mut out = String::new();
    for line in config.lines() {
        out.push_str(line);
        out.push('\n');
        if line.trim() == "stat_prefix: demo" || line.trim() == "stat_prefix: demo_upstream" {
            let indent = &line[..line.len() - line.trim_start().len()];
            out.push_str(&format!("{indent}max_request_headers_kb: 96\n"));
            out.push_str(&format!("{indent}common_http_protocol_options: {{ max_headers_count: 1100 }}\n"));
        }
    }
    out
}

fn start(valkey: &Valkey, raised: bool) -> Envoy {
    let options = EnvoyOptions { plugin_config: config(), valkey_port: valkey.port, concurrency: 1 };
    let edit = move |text: String| if raised { raise_header_limits(text) } else { text };
    Envoy::try_start_edited(&options, &edit).unwrap_or_else(|log| panic!("envoy did not start:\n{log}"))
}

fn send(envoy: &Envoy, path: &str, headers: Headers) -> support::Response {
    let request = Request { method: "GET".into(), path: path.into(), headers };
    send_raw(envoy.port, &request, Duration::from_secs(10)).unwrap()
}

type Headers = Vec<(String, Vec<u8>)>;

fn user(value: &[u8]) -> Headers {
    vec![("x-user-id".to_string(), value.to_vec())]
}

/// Every `wasm.*` stat of Envoy (VMs created, active, failed...).
fn wasm_stats(envoy: &Envoy) -> Vec<String> {
    let body = admin_get(envoy.admin_port, "/stats?filter=^wasm%5C.").unwrap().body;
    String::from_utf8(body).unwrap().lines().map(String::from).collect()
}

fn keys(valkey: &Valkey) -> Vec<Vec<u8>> {
    match valkey.cmd(&["KEYS", "*"]) {
        Value::Array(items) => items.into_iter().map(|v| v.as_bytes().unwrap().to_vec()).collect(),
        other => panic!("{other:?}"),
    }
}

fn decided(resp: &support::Response) -> bool {
    resp.status == 200 && resp.header("ratelimit").is_some()
}

/// With Envoy's default limits, Envoy itself answers 431 before the filter
/// runs: a 64 KiB header value, or 1,000 headers.
#[test]
fn envoy_default_limits_reject_first() {
    let valkey = Valkey::start();
    let envoy = start(&valkey, false);
    let huge = send(&envoy, "/h", user(&vec![b'a'; 64 * 1024]));
    assert_eq!(huge.status, 431, "{huge:?}");
    let many: Vec<_> = (0..1000).map(|i| (format!("x-h-{i}"), b"v".to_vec())).collect();
    assert_eq!(send(&envoy, "/h", many).status, 431);
    assert_eq!(valkey.int(&["DBSIZE"]), 0, "the store was never called");
    assert!(decided(&send(&envoy, "/h", user(b"alice"))), "and the filter still works");
}

#[test]
fn hostile_values_give_bounded_keys_and_no_injection() {
    let valkey = Valkey::start();
    let envoy = start(&valkey, true);
    let wasm_before = wasm_stats(&envoy);
    assert!(!wasm_before.is_empty(), "Envoy reports wasm stats");
    valkey.cmd(&["SET", "canary", "still here"]);

    // (request, the bucket key it must create)
    let injection = "/q?u=a%0D%0A*1%0D%0A$8%0D%0AFLUSHALL%0D%0A";
    let mut many: Vec<_> = (0..1000).map(|i| (format!("x-h-{i}"), b"v".to_vec())).collect();
    many.extend(user(b"many-headers"));
    let cases: Vec<(&str, Headers, Option<&str>)> = vec![
        ("/h", user(&vec![b'a'; 64 * 1024]), None), // hashed: checked below
        ("/h", user(b"\xff\xfe caf\xc3\xa9 \x80"), Some("tollgate:{hdr:%FF%FE%20caf%C3%A9%20%80}:log")),
        ("/h", many, Some("tollgate:{hdr:many-headers}:log")),
        ("/h", user(b""), Some("tollgate:{hdr:}:log")),
        ("/h", user(b"{evil}:x}:log"), Some("tollgate:{hdr:%7Bevil%7D%3Ax%7D%3Alog}:log")),
        (injection, vec![], Some("tollgate:{qry:a%0D%0A%2A1%0D%0A%248%0D%0AFLUSHALL%0D%0A}:log")),
        ("/q?u=%00%FF%0A", vec![], Some("tollgate:{qry:%00%FF%0A}:log")),
    ];
    for (i, (path, headers, key)) in cases.into_iter().enumerate() {
        let before = valkey.int(&["DBSIZE"]);
        let resp = send(&envoy, path, headers);
        assert!(decided(&resp), "case {i}: {resp:?}");
        assert_eq!(valkey.int(&["DBSIZE"]), before + 1, "case {i}: exactly one new bucket, nothing else");
        if let Some(key) = key {
            assert_eq!(valkey.int(&["ZCARD", key]), 1, "case {i}: one entry in {key}");
        }
    }
    assert_eq!(valkey.cmd(&["GET", "canary"]), Value::Bulk(b"still here".to_vec()), "no FLUSHALL ran");

    let keys = keys(&valkey);
    let hashed: Vec<_> = keys.iter().filter(|k| k.starts_with(b"tollgate:{hdr:#")).collect();
    assert_eq!(hashed.len(), 1, "the 64 KiB value is hashed: {keys:?}");
    assert_eq!(hashed[0].len(), "tollgate:{hdr:#}:log".len() + 40);
    for key in keys.iter().filter(|k| k.as_slice() != b"canary") {
        assert!(key.len() <= MAX_KEY_LEN, "key of {} bytes: {}", key.len(), String::from_utf8_lossy(key));
        assert!(key.iter().all(|b| b.is_ascii_graphic()), "printable ASCII only: {}", String::from_utf8_lossy(key));
    }
    assert_eq!(wasm_stats(&envoy), wasm_before, "no VM failed or restarted");
    assert!(!envoy.log_text().contains("panicked"), "no panic in the VM");
}
