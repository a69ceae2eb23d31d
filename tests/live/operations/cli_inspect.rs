//! `tollgate inspect` through the real binary against a real Valkey whose
//! state the limiter's own Function wrote: the leases in flight of a rule
//! with a concurrency limit, the turn a shaped rule would give, a user with
//! a read-only ACL (the dry run is `FCALL_RO` of a `no-writes` function),
//! and a server where the filter never loaded its library (`EVAL_RO` of the
//! script: the CLI loads nothing, and writes nothing).

use crate::support;

use super::cli_ops::tollgate;
use support::plugin::{plugin, rule};
use support::{scratch_dir, Valkey};
use tollgate::cli::{bucket, inspect, load, parse};
use tollgate::limiter::script::{encode_call, encode_load, encode_shaped_call, limiter, Invocation};
use tollgate::limiter::Check;
use tollgate::resp::{decode, Limits, Value};

fn config_json() -> String {
    plugin()
        .with(
            rule("api")
                .header("x-tenant")
                .field(r#""concurrency": { "limit": 4 }"#)
                .field(r#""overrides": true"#)
                .limit(100, "1m"),
        )
        .with(rule("slow").header("x-user-id").field(r#""shape": { "max_delay": "5s" }"#).limit(1, "1s"))
        .json()
}

/// Sends `bytes` (one encoded command) to `valkey`.
fn send(valkey: &Valkey, bytes: &[u8]) -> Value {
    let (command, _) = decode(bytes, &Limits::default()).unwrap();
    let args: Vec<&[u8]> = command.as_array().unwrap().iter().map(|a| a.as_bytes().unwrap()).collect();
    support::try_command(valkey.port, &args).unwrap()
}

/// The checks of `rule` for `part=value`, as inspect (and planning) makes them,
/// the lease check given `lease_id`.
fn checks(file: &std::path::Path, rule: &str, part: (&str, &str), lease_id: &str) -> Vec<Check> {
    let found = load(file).unwrap();
    let config = parse(&found.configs[0]).unwrap();
    let pairs = [(part.0.to_owned(), part.1.to_owned())];
    let b = bucket::resolve(&config, rule, &pairs).unwrap();
    let mut checks = inspect::checks(&b);
    for c in &mut checks {
        if c.lease.is_some() {
            c.lease = Some(lease_id.into());
        }
    }
    checks
}

#[test]
fn inspect_shows_leases_turns_and_runs_read_only() {
    let valkey = Valkey::start();
    let file = scratch_dir("cli-inspect").join("plugin.json");
    std::fs::write(&file, config_json()).unwrap();
    let file_s = file.display().to_string();
    let store = format!("redis://127.0.0.1:{}", valkey.port);
    let mut out = Vec::new();
    encode_load(&mut out, limiter());
    assert!(!send(&valkey, &out).is_error());
    // Two requests of tenant t1 in flight: two leases.
    for id in ["req-1", "req-2"] {
        let mut out = Vec::new();
        encode_call(&mut out, limiter(), Invocation::FCall, &checks(&file, "api", ("x-tenant", "t1"), id), None);
        assert_eq!(send(&valkey, &out).as_array().unwrap()[0], Value::Integer(1));
    }
    let dump = |v: &Valkey| v.cmd(&["DUMP", "tollgate:{api:t1}:lease"]);
    let before = dump(&valkey);
    let (code, text, err) =
        tollgate(&["inspect", &file_s, "--rule", "api", "--key", "x-tenant=t1", "--store", &store], &[]);
    println!("{text}");
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("leases in flight: 2 of 4"), "{text}");
    assert!(text.contains("req-1") && text.contains("req-2") && text.matches("(live)").count() == 2, "{text}");
    assert!(text.contains("next request: admitted"), "{text}");
    assert_eq!(dump(&valkey), before, "the dry run took no lease");

    // A user who may only read (and run the no-writes function, whose
    // commands are reads and TIME).
    valkey.cmd(&["ACL", "SETUSER", "ro", "on", ">pw", "~*", "+@read", "+time", "+fcall_ro"]);
    let ro = format!("redis://ro:pw@127.0.0.1:{}", valkey.port);
    let args = ["inspect", &file_s, "--rule", "api", "--key", "x-tenant=t1", "--store", &ro];
    let (code, text, err) = tollgate(&args, &[]);
    assert_eq!(code, 0, "a read-only user inspects: {err}");
    assert!(text.contains("leases in flight: 2 of 4"), "{text}");
    // Without TIME, the function's first command, the ACL refuses: exit 5.
    valkey.cmd(&["ACL", "SETUSER", "ro", "-time"]);
    let (code, _, err) = tollgate(&args, &[]);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("the dry run") && err.contains("time"), "{err}");

    // A shaped rule: two admitted (the second at its turn 1 s on), the next
    // one's turn 2 s after now.
    for _ in 0..2 {
        let mut out = Vec::new();
        let c = checks(&file, "slow", ("x-user-id", "sam"), "-");
        encode_shaped_call(&mut out, limiter(), Invocation::FCall, &c, 5_000, None);
        assert_eq!(send(&valkey, &out).as_array().unwrap()[0], Value::Integer(1));
    }
    let args = ["inspect", &file_s, "--rule", "slow", "--key", "x-user-id=sam", "--store", &store, "--json"];
    let (code, text, err) = tollgate(&args, &[]);
    assert_eq!(code, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let delay = doc["next_request"]["delay_ms"].as_u64().unwrap();
    println!("the shaped rule's next turn: in {delay} ms");
    assert!(doc["next_request"]["allowed"] == true && (1_000..=2_000).contains(&delay), "{doc:#}");

    // A server the filter never loaded its library on: EVAL_RO of the script.
    let fresh = Valkey::start();
    let store = format!("redis://127.0.0.1:{}", fresh.port);
    let (code, text, err) =
        tollgate(&["inspect", &file_s, "--rule", "api", "--key", "x-tenant=t1", "--store", &store], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("next request: admitted") && text.contains("leases in flight: 0 of 4"), "{text}");
    assert_eq!(fresh.cmd(&["FUNCTION", "LIST"]), Value::Array(vec![]), "the CLI loaded no code");
    assert_eq!(fresh.int(&["DBSIZE"]), 0, "and wrote nothing");
}
