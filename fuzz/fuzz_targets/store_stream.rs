//! Arbitrary bytes on a worker's store stream, split anywhere into messages,
//! while requests wait on it: every reply is paired in order, interpreted as
//! a decision or a classified failure, and turned into an answer; garbage
//! resets the stream. Never a panic, and every request ends answered or
//! still held, never lost.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use std::time::Duration;
use tollgate::config::Config;
use tollgate::plan::RequestView;
use tollgate::response::LocalReply;
use tollgate::worker::{Gauge, Host, Level, ResponseHeaders, Stat, Worker};

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let doc = br#"{ "valkey": { "cluster": "c" }, "response": { "headers": ["ratelimit", "x-ratelimit"] },
          "rules": [ { "name": "a", "key": [ { "header": "u" } ], "limits": [ { "limit": 5, "period": "1s" }, { "limit": 20, "period": "60s" } ] },
                     { "name": "b", "shadow": true, "limits": [ { "limit": 5, "period": "3s" } ] } ] }"#;
        Config::from_json(doc).unwrap_or_else(|e| panic!("{e}"))
    })
}

/// A host that opens streams and records what was answered.
#[derive(Default)]
struct Recorder {
    answered: Vec<u32>,
}

impl Host for Recorder {
    fn open_stream(&mut self, _: &str, _: &[(&str, &str)]) -> Result<u32, String> {
        Ok(7)
    }
    fn send(&mut self, _: u32, _: &[u8]) -> Result<(), String> {
        Ok(())
    }
    fn cancel(&mut self, _: u32) {}
    fn admit(&mut self, id: u32, _: Option<&str>) {
        self.answered.push(id);
    }
    fn resume_response(&mut self, _: u32, _: &[(String, String)]) {}
    fn reply(&mut self, id: u32, reply: &LocalReply) {
        assert!(reply.status >= 400);
        self.answered.push(id);
    }
    fn remove_request_header(&mut self, _: &str) {}
    fn count(&mut self, _: Stat, _: u64) {}
    fn gauge(&mut self, _: Gauge, _: i64) {}
    fn record_store_time(&mut self, _: u64) {}
    fn set_tick(&mut self, _: Duration) {}
    fn wake(&mut self) -> bool {
        true
    }
    fn log(&mut self, _: Level, message: &str) {
        assert!(message.len() < 4096);
    }
}

struct Req(u8);

impl RequestView for Req {
    fn header(&self, name: &str) -> Option<Vec<u8>> {
        match name {
            ":method" => Some(b"GET".to_vec()),
            ":path" => Some(b"/".to_vec()),
            "u" => Some(vec![b'a' + self.0 % 3]),
            _ => None,
        }
    }
    fn property(&self, _: &[String]) -> Option<Vec<u8>> {
        None
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&cuts, bytes)) = data.split_first() else { return };
    let mut worker = Worker::new(config().clone());
    let mut host = Recorder::default();
    let now = 1_000_000;
    let ids: Vec<u32> = (1..=4).collect();
    for &id in &ids {
        worker.on_request(&mut host, id, &Req(id as u8), now, ResponseHeaders::default());
    }
    worker.on_wake(&mut host, now);
    // Split the bytes into messages at points chosen by the first byte.
    let step = usize::from(cuts).max(1);
    for (i, chunk) in bytes.chunks(step).enumerate() {
        worker.on_stream_message(&mut host, 7, chunk, now + i as u64);
    }
    // A stall needs the timeout and ten silent ticks (src/worker/link.rs).
    for t in 1..=12 {
        worker.on_tick(&mut host, now + 100 * t);
    }
    host.answered.sort_unstable();
    host.answered.dedup();
    assert_eq!(host.answered, ids, "every request answered once the stream stalls");
});
