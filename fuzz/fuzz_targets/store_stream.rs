//! Arbitrary bytes on a worker's store stream, split anywhere into messages,
//! while requests wait on it: every reply is paired in order, interpreted as
//! a decision or a classified failure, and turned into an answer; garbage
//! resets the stream. Never a panic, and every request ends answered or
//! still held, never lost.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate::config::Config;
use tollgate::model::host::{FakeRequest, RecordingHost};
use tollgate::worker::{ResponseHeaders, Worker};

thread_local! {
    // Per thread: a configuration shares its rules' windows by `Rc`.
    static CONFIG: Config = {
        let doc = br#"{ "valkey": { "cluster": "c" }, "response": { "headers": ["ratelimit", "x-ratelimit"] },
          "rules": [ { "name": "a", "key": [ { "header": "u" } ], "limits": [ { "limit": 5, "period": "1s" }, { "limit": 20, "period": "60s" } ] },
                     { "name": "b", "shadow": true, "limits": [ { "limit": 5, "period": "3s" } ] } ] }"#;
        Config::from_json(doc).unwrap_or_else(|e| panic!("{e}"))
    };
}

fuzz_target!(|data: &[u8]| {
    let Some((&cuts, bytes)) = data.split_first() else { return };
    let mut worker = Worker::new(CONFIG.with(Config::clone));
    let mut host = RecordingHost::default();
    let now = 1_000_000;
    let ids: Vec<u32> = (1..=4).collect();
    for &id in &ids {
        let user = char::from(b'a' + id as u8 % 3).to_string();
        worker.on_request(&mut host, id, &FakeRequest::new(&[("u", &user)]), now, ResponseHeaders::default());
    }
    worker.on_wake(&mut host, now);
    // Split the bytes into messages at points chosen by the first byte.
    let step = usize::from(cuts).max(1);
    // Each message goes to the stream opened last.
    for (i, chunk) in bytes.chunks(step).enumerate() {
        let stream = host.last_stream().unwrap_or(0);
        worker.on_stream_message(&mut host, stream, chunk, now + i as u64);
    }
    // A stall needs the timeout and ten silent ticks (src/worker/link.rs).
    for t in 1..=12 {
        worker.on_tick(&mut host, now + 100 * t);
    }
    assert!(host.replies.iter().all(|(_, reply)| reply.status >= 400), "only refusals are local replies");
    assert!(host.logs.iter().all(|(_, message)| message.len() < 4096), "log lines are bounded");
    let mut answered: Vec<u32> =
        host.admitted.iter().map(|(id, _)| *id).chain(host.replies.iter().map(|(id, _)| *id)).collect();
    answered.sort_unstable();
    answered.dedup();
    assert_eq!(answered, ids, "every request answered once the stream stalls");
});
