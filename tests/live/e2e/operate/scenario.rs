//! The scenario on one store: lockout, inspect, reset; an override
//! of 10× exactly; an override that expires on time.

use super::{Store, NOW};
use crate::support;

use std::process::Command;
use support::{scratch_dir, Envoy, Response};

const T0: u64 = 1_800_000_000_000;
const RULE: &str = "auth.createToken";

/// The CLI with `args`: (exit code, stdout, stderr).
fn tollgate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate")).args(args).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

struct Run<'a> {
    store: &'a Store,
    file: String,
    envoys: [Envoy; 2],
}

impl Run<'_> {
    /// The CLI: the command's words, the configuration file, `args`' other
    /// flags, then the store's; must exit 0.
    fn cli(&self, args: &[&str]) -> String {
        let flags = self.store.flags();
        let mut all: Vec<&str> = args.to_vec();
        let words = if all.first() == Some(&"override") { 2 } else { 1 };
        all.insert(words, &self.file);
        all.extend(flags.iter().map(String::as_str));
        let (code, out, err) = tollgate(&all);
        assert_eq!(code, 0, "tollgate {all:?}: {err}{out}");
        out
    }

    /// One token request of `user` at injected time `at`, through Envoy `e`.
    fn token(&self, e: usize, user: &str, at: u64) -> Response {
        let at = at.to_string();
        self.envoys[e % 2].request("POST", "/auth/token", &[("x-user-id", user), (NOW, &at)])
    }

    /// `n` requests of `user` at `at`, all at once from 16 threads over
    /// both Envoys: how many were admitted (every other answer a 429).
    fn burst(&self, user: &str, at: u64, n: usize) -> usize {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let statuses: Vec<u16> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..16)
                .map(|_| {
                    s.spawn(|| {
                        let mut got = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            if i >= n {
                                return got;
                            }
                            got.push(self.token(i, user, at).status);
                        }
                    })
                })
                .collect();
            workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
        });
        assert!(statuses.iter().all(|s| *s == 200 || *s == 429), "{user} at {at}: {statuses:?}");
        statuses.iter().filter(|s| **s == 200).count()
    }

    fn inspect(&self, user: &str, at: u64) -> serde_json::Value {
        let key = format!("x-user-id={user}");
        let at = at.to_string();
        let out = self.cli(&["inspect", "--rule", RULE, "--key", &key, "--at", &at, "--json"]);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    }
}

pub fn run(store: &Store) {
    let dir = scratch_dir("operate");
    let file = dir.join("plugin.json");
    std::fs::write(&file, store.plugin_config()).unwrap();
    let run = Run { store, file: file.display().to_string(), envoys: [store.envoy(), store.envoy()] };
    locked_out_inspected_reset_admitted(&run);
    ten_times_for_one_key_exactly(&run);
    an_override_stops_at_its_until(&run);
}

/// Five requests in the same ms fill the 3 s window; the sixth is refused.
/// `inspect` at that time names the 3 s window, its reset, and the very
/// headers the client got; after `reset`, the next request is admitted.
fn locked_out_inspected_reset_admitted(run: &Run) {
    for i in 0..5 {
        assert_eq!(run.token(i, "alice", T0).status, 200);
    }
    let refused = run.token(5, "alice", T0);
    assert_eq!(refused.status, 429);
    let doc = run.inspect("alice", T0);
    let next = &doc["next_request"];
    assert_eq!(next["allowed"], false, "{doc:#}");
    let denying: Vec<&serde_json::Value> =
        doc["windows"].as_array().unwrap().iter().filter(|w| w["retry_ms"].as_u64() > Some(0)).collect();
    assert_eq!(denying.len(), 1, "{doc:#}");
    assert_eq!(denying[0]["policy"], format!("{RULE}/3s"), "the 3 s window denies");
    assert_eq!(denying[0]["reset_ms"], 3_000, "and empties 3 s after the five");
    assert_eq!(denying[0]["remaining"], 0);
    for header in ["ratelimit", "ratelimit-policy", "retry-after"] {
        let said = next["headers"][header].as_str().unwrap_or_else(|| panic!("no {header}: {doc:#}"));
        assert_eq!(Some(said), refused.header(header), "{header}: inspect says what the client got");
    }
    assert!(next["summary"].as_str().unwrap().contains(&format!("{RULE}/3s")), "{doc:#}");
    let at = T0.to_string();
    let text = run.cli(&["inspect", "--rule", RULE, "--key", "x-user-id=alice", "--at", &at]);
    println!("inspect of the locked-out user:\n{text}");
    assert!(text.contains(&format!("next request: denied (429) by {RULE}/3s, retry in 3.0 s")), "{text}");
    let out = run.cli(&["reset", "--rule", RULE, "--key", "x-user-id=alice"]);
    println!("reset: {}", out.trim_end());
    let admitted = run.token(0, "alice", T0);
    assert_eq!(admitted.status, 200, "the next request after the reset: {admitted:?}");
    assert!(admitted.header("ratelimit").unwrap().contains("r=4"), "{admitted:?}");
}

/// `override set --times 10` for t42: 50 per 3 s and 200 per 60 s, counted
/// exactly under bursts of 120 from 16 clients over 2 Envoys × 2 workers,
/// while bob, in the same rule, keeps 5 per 3 s; `rm` brings t42 back.
fn ten_times_for_one_key_exactly(run: &Run) {
    let t = T0 + 100_000;
    run.cli(&["override", "set", "--rule", RULE, "--key", "x-user-id=t42", "--times", "10", "--note", "test"]);
    let listed = run.cli(&["override", "list", "--rule", RULE]);
    assert!(listed.contains("t42") && listed.contains("test"), "{listed}");
    let mut admitted = Vec::new();
    for step in 0..5 {
        admitted.push(run.burst("t42", t + step * 3_000, 120));
    }
    let bob = run.burst("bob", t, 40);
    println!("10x override: t42 admitted per 3 s step {admitted:?} (bursts of 120), bob {bob} of 40");
    assert_eq!(admitted, [50, 50, 50, 50, 0], "50 per 3 s until 200 in 60 s");
    assert_eq!(bob, 5, "only t42's key is overridden");
    let r = run.token(0, "t42", t + 60_000);
    assert_eq!(r.status, 200);
    let policy = r.header("ratelimit-policy").unwrap();
    assert!(policy.contains("q=200") && policy.contains("q=50"), "the limits in force: {policy}");
    run.cli(&["override", "rm", "--rule", RULE, "--key", "x-user-id=t42"]);
    let r = run.token(1, "t42", t + 120_000);
    assert!(r.header("ratelimit-policy").unwrap().contains("q=5;"), "configured again: {r:?}");
}

/// An override until U applies to a request at U - 1 and not at U: ten
/// admitted at U - 1 (50 per 3 s), and the eleventh, at U, refused by the
/// configured 5 per 3 s.
fn an_override_stops_at_its_until(run: &Run) {
    let until = T0 + 200_000;
    let u = until.to_string();
    run.cli(&["override", "set", "--rule", RULE, "--key", "x-user-id=dave", "--times", "10", "--until", &u]);
    for i in 0..10 {
        let r = run.token(i, "dave", until - 1);
        assert_eq!(r.status, 200, "request {i} at until - 1: {r:?}");
    }
    let doc = run.inspect("dave", until - 1);
    assert!(doc["windows"][1]["overridden"] == true && doc["windows"][1]["limit"] == 50, "{doc:#}");
    let late = run.token(0, "dave", until);
    assert_eq!(late.status, 429, "at until the configured limit applies: {late:?}");
    assert!(late.header("ratelimit-policy").unwrap().contains("q=5;"), "{late:?}");
    let doc = run.inspect("dave", until);
    assert_eq!(doc["windows"][1]["overridden"], false, "{doc:#}");
}
