//! What the module costs Envoy per request, through a real Envoy whose
//! limiter VM counts it (`TOLLGATE_COUNT_HOST_CALLS=1`, see
//! `src/filter/tally.rs`): host calls, callbacks and buffers on the no-match,
//! denied and allowed paths, pinned so that a change that adds one fails
//! here (the figures are in docs/performance.md, "Where the time goes"); the
//! callbacks the module exports; and a route whose filter is disabled, which
//! never enters the module (docs/deploy.md).

use crate::support;

use std::time::{Duration, Instant};
use support::plugin::{plugin, rule};
use support::{repo_root, wait_until, wasm_path, Envoy, EnvoyOptions, Valkey};

/// The limiter VM's cost counters (`wasmcustom.tollgate.cost.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counters {
    requests: u64,
    host_calls: u64,
    callbacks: u64,
    buffers: u64,
    requests_done: u64,
}

impl Counters {
    /// All five from one read of `/stats`.
    fn read(envoy: &Envoy) -> Option<Counters> {
        let all = envoy.stats(r"^wasmcustom\.tollgate\.cost\.")?;
        let get = |name: &str| all.get(&format!("wasmcustom.tollgate.cost.{name}")).copied();
        Some(Counters {
            requests: get("requests")?,
            host_calls: get("host_calls")?,
            callbacks: get("callbacks")?,
            buffers: get("buffers")?,
            requests_done: get("requests_done")?,
        })
    }
}

/// `envoy/envoy.yaml` rendered, with the limiter's VM counting its cost.
fn counting(text: String) -> String {
    let mut out = String::new();
    let mut in_tollgate = false;
    for line in text.lines() {
        out.push_str(line);
        out.push('\n');
        in_tollgate |= line.trim() == "- name: tollgate";
        if in_tollgate && line.trim() == "vm_config:" {
            let indent = " ".repeat(line.len() - line.trim_start().len() + 2);
            out.push_str(&format!(
                "{indent}environment_variables: {{ key_values: {{ TOLLGATE_COUNT_HOST_CALLS: \"1\" }} }}\n"
            ));
            in_tollgate = false;
        }
    }
    assert!(out.contains("TOLLGATE_COUNT_HOST_CALLS"), "the tollgate filter has a vm_config");
    out
}

fn start(valkey: &Valkey, plugin_config: String, edit: &dyn Fn(String) -> String) -> Envoy {
    let options = EnvoyOptions { plugin_config, valkey_port: valkey.port, concurrency: 1 };
    let envoy = Envoy::try_start_edited(&options, &|text| counting(edit(text))).unwrap();
    wait_until("the cost counters", Duration::from_secs(10), || {
        envoy.stat("wasmcustom.tollgate.cost.requests_done").is_some()
    });
    envoy
}

/// The counters once every request context so far is deleted (a deletion
/// reports `requests_done` after the rest, so they then hold every
/// request's whole cost), read the same twice in a row.
///
/// A callback reports its counts as five increments while `/stats` is read
/// from another thread, so one read can hold some of them and not the
/// others. Before, the counters were read one at a time and a settled state
/// was judged by `callbacks` alone: a tick reporting between the reads of
/// `host_calls` and `callbacks` left the first two host calls short for
/// good, and the next requests were charged 22 host calls for 20 (seen in
/// two CI runs, callbacks exact).
fn settled(envoy: &Envoy) -> Counters {
    let mut last = None;
    let mut settled = None;
    wait_until("every request context deleted", Duration::from_secs(10), || {
        let now = Counters::read(envoy);
        if now.is_some_and(|c| c.requests_done == c.requests) && now == last {
            settled = now;
        }
        last = now;
        settled.is_some()
    });
    settled.unwrap()
}

/// The counters once the worker's tick has stopped: it stays on after the
/// last held request until its own callback (at most two 5 ms ticks), and
/// that callback is no request's cost. Polls until nothing changed for
/// 200 ms: a busy machine can delay a 5 ms tick well past 15 ms, and a tick
/// falling among the requests measured adds its host calls to theirs.
fn quiet(envoy: &Envoy) -> Counters {
    let mut last = settled(envoy);
    let mut since = Instant::now();
    wait_until("the worker's tick to stop", Duration::from_secs(2), || {
        let now = settled(envoy);
        if now != last {
            (last, since) = (now, Instant::now());
        }
        since.elapsed() >= Duration::from_millis(200)
    });
    last
}

/// Host calls, callbacks and buffers of the `n` requests `send` makes.
fn cost(envoy: &Envoy, n: u64, send: impl FnOnce()) -> (u64, u64, u64) {
    let before = quiet(envoy);
    send();
    let after = settled(envoy);
    assert_eq!(after.requests - before.requests, n, "one request context per request");
    (after.host_calls - before.host_calls, after.callbacks - before.callbacks, after.buffers - before.buffers)
}

#[test]
fn host_calls_and_vm_entries_per_request_on_each_path() {
    let valkey = Valkey::start();
    let limited = rule("limited").path_prefix("/limited").header("x-user").limit(1, "1h");
    let envoy = start(&valkey, plugin().timeout("2s").with(limited).json(), &|text| text);
    let get = |path: &str, user: &str| envoy.request("GET", path, &[("x-user", user)]).status;
    // Open the store stream and put user `u` in the denial cache.
    assert_eq!(get("/limited", "u"), 200);
    assert_eq!(get("/limited", "u"), 429);
    let n = 20;

    // No rule matches: the prefilter reads `:path` (one host call, one
    // buffer) and lets it go. Six callbacks: context creation, request
    // headers, response headers, the upstream's response body (its data,
    // then its end) and the context's deletion.
    let no_match = cost(&envoy, n, || (0..n).for_each(|_| assert_eq!(get("/other", "u"), 200)));
    assert_eq!(no_match, (n, 6 * n, n), "(host calls, callbacks, buffers) of {n} unmatched requests");

    // Denied from the denial cache, one at a time and each once the last
    // is settled (so more than a tick apart): `:path` and `x-user` (two
    // buffers), the clock, two counters (rule denied, cache hit) and the
    // local reply (the decision for the access log, a property, is off by
    // default). Five callbacks: the local reply's body comes in one
    // piece. No tick.
    let denied = cost(&envoy, n, || {
        for _ in 0..n {
            assert_eq!(get("/limited", "u"), 429);
            settled(&envoy);
        }
    });
    assert_eq!(denied, (6 * n, 5 * n, 2 * n), "(host calls, callbacks, buffers) of {n} denials from the cache");

    // The same denials all at once: their counters wait for the worker's
    // tick, which reports them for every denial since the last (two host
    // calls) and may set its own period (one). Those that came before the
    // tick ran report their own (two each, one more to start the tick).
    let port = envoy.port;
    let burst = cost(&envoy, n, || {
        let deny = move || support::http(port, "GET", "/limited", &[("x-user", "u")]).unwrap().status;
        let threads: Vec<_> = (0..n).map(|_| std::thread::spawn(deny)).collect();
        assert!(threads.into_iter().all(|t| t.join().unwrap() == 429));
    });
    let ticks = burst.1 - 5 * n;
    println!("{n} denials from the cache at once: {burst:?}, {ticks} ticks");
    assert_eq!(burst.2, 2 * n, "buffers of {n} denials from the cache at once");
    assert!(ticks <= n / 2, "a tick per two denials at most: {burst:?}");
    assert!(
        (4 * n + 2..6 * n).contains(&burst.0),
        "host calls of {n} denials at once: 4 each, and fewer reports than denials ({burst:?})"
    );

    // Admitted by the store, one at a time: 14 host calls (21 before stats
    // were gathered per VM entry, gauges reported from the worker's tick
    // and the tick left on between requests; -1 since the context is no
    // longer given back when an entry ends; +1 with the access log's
    // decision, `response.filter_state`), 7 callbacks and 3 buffers. The
    // request's own callbacks (its headers, the clock, the send and its two
    // counters: one at a time, the tick stops between requests, so they do
    // not wait for it), the stream message of the store's reply (its
    // buffer, the clock, the store-time histogram, the rule's counter and
    // the resume: make the request the effective context, resume) and the
    // two RateLimit headers. A tick that falls
    // within a slow round trip adds a callback and a host call or two, and
    // a request that comes while it is still on leaves its two counters
    // to the reply's entry, hence the ranges.
    let allowed = cost(&envoy, n, || (0..n).for_each(|i| assert_eq!(get("/limited", &format!("user-{i}")), 200)));
    let per_request = |total: u64| total as f64 / n as f64;
    let (host_calls, callbacks, buffers) = (per_request(allowed.0), per_request(allowed.1), per_request(allowed.2));
    println!("per admitted request: {host_calls} host calls, {callbacks} callbacks, {buffers} buffers");
    assert!((12.0..=15.5).contains(&host_calls), "host calls per admitted request: {host_calls} ({allowed:?})");
    assert!((7.0..=8.0).contains(&callbacks), "callbacks per admitted request: {callbacks} ({allowed:?})");
    assert!((3.0..=3.25).contains(&buffers), "buffers per admitted request: {buffers} ({allowed:?})");
}

/// The names of a module's exports.
fn exports(module: &[u8]) -> Vec<String> {
    fn leb(bytes: &[u8], at: &mut usize) -> usize {
        let (mut value, mut shift) = (0usize, 0);
        loop {
            let byte = bytes[*at];
            *at += 1;
            value |= usize::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return value;
            }
            shift += 7;
        }
    }
    assert_eq!(&module[..8], b"\0asm\x01\0\0\0", "a wasm module");
    let mut at = 8;
    while at < module.len() {
        let id = module[at];
        at += 1;
        let size = leb(module, &mut at);
        let end = at + size;
        if id == 7 {
            let mut names = Vec::new();
            for _ in 0..leb(module, &mut at) {
                let len = leb(module, &mut at);
                names.push(String::from_utf8(module[at..at + len].to_vec()).unwrap());
                at += len + 1;
                leb(module, &mut at);
            }
            return names;
        }
        at = end;
    }
    Vec::new()
}

#[test]
fn the_module_exports_only_the_callbacks_it_needs() {
    let module = std::fs::read(wasm_path()).expect("the built module (make build)");
    let mut exported = exports(&module);
    exported.sort();
    let graph = std::fs::read_to_string(repo_root().join("src/filter/exports.json")).unwrap();
    let graph: serde_json::Value = serde_json::from_str(&graph).unwrap();
    let mut kept: Vec<String> =
        graph.as_array().unwrap().iter().map(|n| n["export"].as_str().unwrap().to_owned()).collect();
    kept.sort();
    assert_eq!(exported, kept, "make build keeps exactly the exports of src/filter/exports.json");
    for callback in ["proxy_on_log", "proxy_on_done", "proxy_on_http_call_response"] {
        assert!(!exported.iter().any(|e| e == callback), "{callback} is not exported");
    }
}

/// The routes of the example in docs/deploy.md ("Routes without limits").
fn documented_routes() -> Vec<String> {
    let doc = std::fs::read_to_string(repo_root().join("docs/deploy.md")).unwrap();
    let section = doc.split("## Routes without limits: skip the filter").nth(1).expect("the section");
    let block = section.split("```yaml\n").nth(1).unwrap().split("```").next().unwrap();
    assert!(block.starts_with("routes:\n") && block.contains("disabled: true"), "{block}");
    block.lines().map(str::to_owned).collect()
}

/// The demo listener's routes replaced by `routes` (at the same indent).
fn with_routes(text: String, routes: &[String]) -> String {
    let demo = "                      routes:\n                        - match: { prefix: \"/\" }\n                          route: { cluster: demo_upstream }\n";
    assert_eq!(text.matches(demo).count(), 1, "the demo listener's routes");
    let indented: String = routes.iter().map(|l| format!("                      {l}\n")).collect();
    text.replace(demo, &indented)
}

#[test]
fn a_route_with_the_filter_disabled_never_enters_the_module() {
    let valkey = Valkey::start();
    let routes = documented_routes();
    let everything = rule("everything").header("x-user").limit(1, "1h");
    let envoy = start(&valkey, plugin().timeout("2s").with(everything).json(), &|text| with_routes(text, &routes));
    let get = |path: &str| envoy.request("GET", path, &[("x-user", "u")]).status;
    let before = settled(&envoy);
    for _ in 0..5 {
        assert_eq!(get("/healthz"), 200, "the rule (1 per hour) never sees /healthz");
    }
    let after = settled(&envoy);
    assert_eq!(after, before, "no request to /healthz created a context in the module or called it");
    assert_eq!(get("/"), 200);
    assert_eq!(get("/"), 429, "the filter still limits the other routes");
    assert_eq!(settled(&envoy).requests, before.requests + 2);
}
