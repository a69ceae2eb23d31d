//! The worker's admitted path on the host: one request that one rule
//! matches (two windows, keyed on a header), decided by the store and
//! admitted. By stage, each through the public API the worker uses for it:
//! `plan` (rules matched, key built), `key` (the bucket key alone),
//! `encode` (the `FCALL`), `decode` (the reply read and interpreted),
//! `respond` (policy names, the `RateLimit` headers and the access log's
//! record), and `whole`: the same request through a [`Worker`], from its
//! headers to its response headers, with the store's reply replayed.
//! `synced`: the same rule synced (`sync`), one request decided on the
//! worker from its view, its headers to its response headers. The host
//! makes the access log's text of every decision, as Envoy's does.
//!
//! `cargo bench --bench admitted_path` (or `make bench-host`) times it with
//! divan. With `ADMITTED_PATH_STAGE=<stage>` and `ADMITTED_PATH_ITERS=<n>`
//! it instead runs that stage `n` times in `measured_loop`, for an
//! instruction count (`scripts/bench/admitted_cost.py` runs it under callgrind,
//! for this tree and a baseline).
//!
//! Only the public API that existed before this bench is used, so the same
//! file measures an older tree too. It also builds for wasm32-wasip1, as
//! the example `admitted_path_wasm` (without divan: `scripts/bench/v8_profile.py`
//! runs a stage under node's V8).

use std::hint::black_box;
use std::time::Duration;
use tollgate::answer::response::{allowed_headers_of, LocalReply};
use tollgate::config::Config;
use tollgate::key::rule_key;
use tollgate::limiter::script::{encode_call, limiter, Invocation};
use tollgate::limiter::Check;
use tollgate::model::host::{FakeRequest, FakeResponse};
use tollgate::model::store::ModelStore;
use tollgate::plan::plan;
use tollgate::resp::{decode, Limits, Value};
use tollgate::store::{interpret_reply, Outcome};
use tollgate::worker::{Answer, Decider, Flow, Gauge, Host, Level, Record, ResponseHeaders, Stat, Worker};

const CONFIG: &str = r#"{
  "valkey": { "cluster": "tollgate_valkey" },
  "rules": [{
    "name": "auth.createToken",
    "match": { "path_prefix": "/" },
    "key": [ { "header": "x-user-id" } ],
    "limits": [ { "limit": 1000000000, "period": "60s" }, { "limit": 100000000, "period": "3s" } ]
  }]
}"#;

const NOW_MS: u64 = 1_700_000_000_000;

/// The host as Envoy is to the worker, doing nothing but keep what was
/// sent: the bench measures the worker, not a recording.
#[derive(Default)]
struct Quiet {
    sent: Vec<u8>,
    admitted: u32,
}

impl Host for Quiet {
    fn open_stream(&mut self, _cluster: &str, _metadata: &[(&str, &str)]) -> Result<u32, String> {
        Ok(1)
    }
    fn send(&mut self, _stream: u32, bytes: &[u8]) -> Result<(), String> {
        self.sent.extend_from_slice(bytes);
        Ok(())
    }
    fn cancel(&mut self, _stream: u32) {}
    fn admit(&mut self, _id: u32, _shadow_denied: Option<&str>) {
        self.admitted += 1;
    }
    fn admit_delayed(&mut self, id: u32, shadow_denied: Option<&str>, _delay_ms: u64) {
        self.admit(id, shadow_denied);
    }
    fn reply(&mut self, _id: u32, _reply: &LocalReply) {}
    fn decided(&mut self, _id: u32, record: &Record<'_>) {
        black_box(record.plain());
    }
    fn resume_response(&mut self, _id: u32, _headers: &[tollgate::answer::response::Header]) {}
    fn remove_request_header(&mut self, _name: &str) {}
    fn count(&mut self, _stat: Stat, _by: u64) {}
    fn gauge(&mut self, _gauge: Gauge, _delta: i64) {}
    fn record_store_time(&mut self, _ms: u64) {}
    fn record_shape_delay(&mut self, _ms: u64) {}
    fn set_tick(&mut self, _period: Duration) {}
    fn wake(&mut self) -> bool {
        true
    }
    fn log(&mut self, _level: Level, _message: &str) {}
}

/// Everything the stages need, made once.
struct Fixture {
    config: Config,
    request: FakeRequest,
    checks: Vec<Check>,
    call: Vec<u8>,
    reply: Vec<u8>,
    decided: Value,
}

impl Fixture {
    /// The fixture, or the process ends with why not (no panics here).
    fn new() -> Fixture {
        Fixture::make().unwrap_or_else(|e| {
            eprintln!("admitted_path: {e}");
            std::process::exit(1)
        })
    }

    fn make() -> Result<Fixture, String> {
        let config = Config::from_json(CONFIG.as_bytes()).map_err(|e| format!("the bench's config: {e}"))?;
        let request = FakeRequest::new(&[("x-user-id", "alice")]);
        let checks = plan(&config, &request).checks;
        let mut call = Vec::new();
        encode_call(&mut call, limiter(), Invocation::FCall, &checks, None);
        let reply = ModelStore::default().answer(&call, NOW_MS);
        let decided = decode(&reply, &Limits::default()).map_err(|e| format!("the reply: {e:?}"))?.0;
        Ok(Fixture { config, request, checks, call, reply, decided })
    }
}

/// A worker with its store stream open and idle, and the store's reply to
/// one decision, to replay.
struct Path {
    worker: Worker,
    host: Quiet,
    reply: Vec<u8>,
    next_id: u32,
}

impl Path {
    fn new(fixture: &Fixture) -> Path {
        let mut path =
            Path { worker: Worker::new(fixture.config.clone()), host: Quiet::default(), reply: Vec::new(), next_id: 0 };
        // The first request opens the stream from the worker's own entry.
        path.next_id += 1;
        let flow =
            path.worker.on_request(&mut path.host, path.next_id, &fixture.request, NOW_MS, ResponseHeaders::default());
        assert_eq!(flow, Flow::Pause, "the first request waits for the store");
        path.worker.on_wake(&mut path.host, NOW_MS);
        let sent = std::mem::take(&mut path.host.sent);
        let reply = ModelStore::default().answer(&sent, NOW_MS);
        path.worker.on_stream_message(&mut path.host, 1, &reply, NOW_MS);
        path.reply = fixture.reply.clone();
        path.worker.on_gone(&mut path.host, path.next_id, NOW_MS);
        assert_eq!(path.host.admitted, 1, "the first request is admitted");
        path
    }

    /// One admitted request: its headers, the call sent at once, the reply,
    /// the response's headers with the decision's, the context gone.
    fn admit(&mut self, request: &FakeRequest, response: &FakeResponse) -> usize {
        self.next_id += 1;
        let reply = Some(self.reply.as_slice());
        one_request(&mut self.worker, &mut self.host, (self.next_id, request, response), NOW_MS, reply)
    }
}

/// Request `id` from its headers to its response's headers (with the
/// store's `reply` to it replayed, if it goes to the store), the context
/// gone: the number of headers the decision added.
fn one_request(
    worker: &mut Worker,
    host: &mut Quiet,
    (id, request, response): (u32, &FakeRequest, &FakeResponse),
    now: u64,
    reply: Option<&[u8]>,
) -> usize {
    let headers = ResponseHeaders::default();
    worker.on_request(host, id, request, now, headers.clone());
    if let Some(reply) = reply {
        host.sent.clear();
        worker.on_stream_message(host, 1, reply, now);
    }
    if worker.owes(id) {
        worker.on_response(host, id, response, now);
    }
    let added = std::mem::take(&mut *headers.borrow_mut()).len();
    worker.on_gone(host, id, now);
    added
}

/// [`CONFIG`]'s rule, synced every 100 ms.
fn synced_config() -> String {
    CONFIG.replacen(r#""limits""#, r#""sync": { "interval": "100ms" }, "limits""#, 1)
}

/// A worker whose synced rule has a view of the bucket: requests are
/// decided on the worker, no store call.
struct SyncedPath {
    worker: Worker,
    host: Quiet,
    store: ModelStore,
    next_id: u32,
}

impl SyncedPath {
    fn new(request: &FakeRequest) -> SyncedPath {
        let config = Config::from_json(synced_config().as_bytes()).unwrap_or_else(|e| {
            eprintln!("admitted_path: the synced config: {e}");
            std::process::exit(1)
        });
        let mut path = SyncedPath {
            worker: Worker::new(config),
            host: Quiet::default(),
            store: ModelStore::default(),
            next_id: 0,
        };
        // The first request goes to the store; the bucket is read soon
        // after, on a tick (5 ms apart, as the worker asks).
        path.next_id += 1;
        path.worker.on_request(&mut path.host, path.next_id, request, NOW_MS, ResponseHeaders::default());
        for step in 0..200 {
            let now = NOW_MS + step * 5;
            path.worker.on_tick(&mut path.host, now);
            path.worker.on_wake(&mut path.host, now);
            path.answer(now);
        }
        path.worker.on_gone(&mut path.host, path.next_id, NOW_MS);
        path.next_id += 1;
        let flow = path.worker.on_request(&mut path.host, path.next_id, request, NOW_MS + 1_000, Default::default());
        assert!(flow == Flow::Continue && path.host.sent.is_empty(), "admitted on the worker, no store call");
        path.worker.on_gone(&mut path.host, path.next_id, NOW_MS);
        path
    }

    /// Replies to whatever the worker sent.
    fn answer(&mut self, now: u64) {
        while !self.host.sent.is_empty() {
            let sent = std::mem::take(&mut self.host.sent);
            let reply = self.store.answer(&sent, now);
            self.worker.on_stream_message(&mut self.host, 1, &reply, now);
        }
    }

    /// One request decided on the worker, its response, the context gone.
    fn admit(&mut self, request: &FakeRequest, response: &FakeResponse) -> usize {
        self.next_id += 1;
        one_request(&mut self.worker, &mut self.host, (self.next_id, request, response), NOW_MS + 1_000, None)
    }
}

fn plan_stage(f: &Fixture) -> usize {
    plan(&f.config, &f.request).checks.len()
}

/// The key as planning makes it, from the rule's name encoded once.
fn key_stage(f: &Fixture) -> String {
    let rule = f.config.rules.first().map(|r| &r.key_name);
    rule.map_or_else(String::new, |name| rule_key("tollgate", name, &[b"alice"], None, "log"))
}

fn encode_stage(f: &Fixture, out: &mut Vec<u8>) -> usize {
    out.clear();
    encode_call(out, limiter(), Invocation::FCall, &f.checks, None);
    out.len()
}

fn decode_stage(f: &Fixture) -> bool {
    let Ok((value, _)) = decode(&f.reply, &Limits::default()) else { return false };
    matches!(interpret_reply(&value, &f.checks), Outcome::Decided(_))
}

fn respond_stage(f: &Fixture) -> usize {
    let Outcome::Decided(decision) = interpret_reply(&f.decided, &f.checks) else { return 0 };
    let headers = allowed_headers_of(&f.config, &f.checks, &decision);
    let (config, checks) = (&f.config, &f.checks[..]);
    let (decider, answer, decision) = (Decider::Store, Answer::Allowed, &decision);
    // As the filter's host makes it.
    black_box(Record::Decided { config, checks, decision, decider, answer, store_ms: Some(1) }.plain());
    headers.len()
}

/// The divan benches, one per stage (host only: the wasm example runs
/// `measured_loop`, without divan).
#[cfg(not(target_family = "wasm"))]
mod stages {
    use super::*;

    #[divan::bench(name = "plan")]
    fn plan_(bencher: divan::Bencher) {
        let f = Fixture::new();
        bencher.bench_local(|| plan_stage(black_box(&f)));
    }

    #[divan::bench]
    fn key(bencher: divan::Bencher) {
        let f = Fixture::new();
        bencher.bench_local(|| key_stage(black_box(&f)));
    }

    #[divan::bench]
    fn encode(bencher: divan::Bencher) {
        let f = Fixture::new();
        let mut out = Vec::with_capacity(f.call.len());
        bencher.bench_local(|| encode_stage(black_box(&f), &mut out));
    }

    #[divan::bench(name = "decode")]
    fn decode_(bencher: divan::Bencher) {
        let f = Fixture::new();
        bencher.bench_local(|| decode_stage(black_box(&f)));
    }

    #[divan::bench]
    fn respond(bencher: divan::Bencher) {
        let f = Fixture::new();
        bencher.bench_local(|| respond_stage(black_box(&f)));
    }

    #[divan::bench]
    fn whole(bencher: divan::Bencher) {
        let f = Fixture::new();
        let mut path = Path::new(&f);
        let response = FakeResponse::new(200, &[]);
        bencher.bench_local(|| path.admit(black_box(&f.request), &response));
    }

    #[divan::bench]
    fn synced(bencher: divan::Bencher) {
        let f = Fixture::new();
        let mut path = SyncedPath::new(&f.request);
        let response = FakeResponse::new(200, &[]);
        bencher.bench_local(|| path.admit(black_box(&f.request), &response));
    }
}

/// Runs `stage` `iters` times: the only function callgrind counts
/// (`--toggle-collect`), so setup (`synced`'s included) is left out.
#[inline(never)]
fn measured_loop(
    stage: &str,
    iters: u64,
    f: &Fixture,
    (path, mut synced): (&mut Path, Option<&mut SyncedPath>),
    out: &mut Vec<u8>,
) -> usize {
    let response = FakeResponse::new(200, &[]);
    let mut sum = 0;
    for _ in 0..iters {
        sum += match stage {
            "plan" => plan_stage(black_box(f)),
            "key" => key_stage(f).len(),
            "encode" => encode_stage(black_box(f), out),
            "decode" => usize::from(decode_stage(black_box(f))),
            "respond" => respond_stage(black_box(f)),
            "synced" => synced.as_mut().map_or(0, |s| s.admit(black_box(&f.request), &response)),
            _ => path.admit(black_box(&f.request), &response),
        };
    }
    sum
}

pub fn main() {
    let stage = std::env::var("ADMITTED_PATH_STAGE").ok();
    let iters = std::env::var("ADMITTED_PATH_ITERS").ok().and_then(|n| n.parse().ok());
    match (stage, iters) {
        (Some(stage), Some(iters)) => {
            let f = Fixture::new();
            let mut path = Path::new(&f);
            let mut synced = (stage == "synced").then(|| SyncedPath::new(&f.request));
            let mut out = Vec::with_capacity(f.call.len());
            black_box(measured_loop(&stage, iters, &f, (&mut path, synced.as_mut()), &mut out));
        }
        #[cfg(not(target_family = "wasm"))]
        _ => divan::main(),
        #[cfg(target_family = "wasm")]
        _ => eprintln!("admitted_path: set ADMITTED_PATH_STAGE and ADMITTED_PATH_ITERS"),
    }
}
