//! Tests of `script.rs`: the code as built, the encodings, the reply
//! classifiers; the lease sets' encodings in [`lease`].

mod lease;
mod overrides;

use super::*;
use crate::limiter::{Adjustment, Algorithm, Window};
use crate::resp::{decode, Limits, Value};
use std::num::NonZeroU64;

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap()
}

/// The arguments of the one command `out` holds, as text (every byte of
/// `out` read).
pub(super) fn arguments(out: &[u8]) -> Vec<String> {
    let (Value::Array(items), used) = decode(out, &Limits::default()).unwrap() else { panic!("not an array") };
    assert_eq!(used, out.len());
    items.iter().map(|v| String::from_utf8(v.as_bytes().unwrap().to_vec()).unwrap()).collect()
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn sha_is_the_sha1_of_the_embedded_body() {
    let s = limiter();
    assert_eq!(s.sha.len(), 40);
    assert_eq!(s.sha, sha1_smol::Sha1::from(s.body).hexdigest());
    assert!(s.body.starts_with("-- tollgate"));
    for file in [
        "MAKE_ALGORITHM.log =",
        "MAKE_ALGORITHM.gcra =",
        "MAKE_ALGORITHM.sw =",
        "MAKE_ALGORITHM.fw =",
        "local function make_lease(",
        "local function decide(",
        "local function adjust(",
        "local function flush(",
        "local function lease(",
    ] {
        assert!(s.body.contains(file), "{file}");
    }
    // Whole-line comments are left out (build.rs); code lines are kept.
    let comments = s.body.lines().filter(|l| l.trim_start().starts_with("--")).count();
    assert_eq!(comments, 1, "only the first line, which names the sources");
    assert!(s.body.ends_with("\nreturn decide(KEYS, ARGV, true)\n"));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn the_library_holds_the_same_definitions_under_a_versioned_name() {
    let s = limiter();
    let hash = sha1_smol::Sha1::from(library("@NAME@")).hexdigest();
    assert_eq!(s.function, format!("tollgate_{}", &hash[..12]));
    let header = format!("#!lua name={}\n", s.function);
    let footer = format!(
        "redis.register_function('{0}', decide)\nredis.register_function('{0}_adjust', adjust)\n\
         redis.register_function('{0}_flush', flush)\nredis.register_function('{0}_lease', lease)\n\
         redis.register_function{{function_name='{0}_peek', callback=peek, flags={{'no-writes'}}}}\n",
        s.function
    );
    let definitions = s.body.strip_suffix("return decide(KEYS, ARGV, true)\n").unwrap();
    assert_eq!(s.library, format!("{header}{definitions}{footer}"));
    assert_eq!(s.adjust_function, format!("{}_adjust", s.function));
    assert_eq!(s.adjust_body.strip_suffix("return adjust(KEYS, ARGV, true)\n"), Some(definitions));
    assert_eq!(s.flush_function, format!("{}_flush", s.function));
    assert_eq!(s.flush_body.strip_suffix("return flush(KEYS, ARGV, true)\n"), Some(definitions));
    assert_eq!(s.flush_sha, sha1_smol::Sha1::from(s.flush_body).hexdigest());
    assert_eq!(s.lease_function, format!("{}_lease", s.function));
    assert_eq!(s.lease_body.strip_suffix("return lease(KEYS, ARGV, true)\n"), Some(definitions));
    assert_eq!(s.lease_sha, sha1_smol::Sha1::from(s.lease_body).hexdigest());
    assert_eq!(s.peek_function, format!("{}_peek", s.function));
    assert_eq!(s.peek_body.strip_suffix("return peek(KEYS, ARGV, true)\n"), Some(definitions));
    assert_eq!(s.peek_sha, sha1_smol::Sha1::from(s.peek_body).hexdigest());
    // Any change to the code changes the name.
    let changed = library("@NAME@").replacen("-- tollgate", "-- Tollgate", 1);
    assert_ne!(sha1_smol::Sha1::from(changed).hexdigest()[..12], hash[..12]);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn fcall_names_the_function_and_load_carries_the_library() {
    let checks = vec![Check::for_test(0, "k", &[(5, 3_000)], 1)];
    let mut out = Vec::new();
    encode_call(&mut out, limiter(), Invocation::FCall, &checks, None);
    let (Value::Array(items), _) = decode(&out, &Limits::default()).unwrap() else { panic!("not an array") };
    let text: Vec<&[u8]> = items.iter().map(|v| v.as_bytes().unwrap()).collect();
    let expected: [&[u8]; 9] = [b"FCALL", limiter().function.as_bytes(), b"1", b"k", b"", b"log", b"1", b"1", b"5"];
    assert_eq!(text[..9], expected);
    assert_eq!(text[9], b"3000");

    let mut out = Vec::new();
    encode_load(&mut out, limiter());
    let (Value::Array(items), used) = decode(&out, &Limits::default()).unwrap() else { panic!("not an array") };
    assert_eq!(used, out.len());
    let text: Vec<&[u8]> = items.iter().map(|v| v.as_bytes().unwrap()).collect();
    assert_eq!(text, [&b"FUNCTION"[..], b"LOAD", b"REPLACE", limiter().library.as_bytes()]);
    assert!(is_loaded(&Value::Bulk(limiter().function.as_bytes().to_vec()), limiter()));
    assert!(!is_loaded(&Value::Bulk(b"tollgate_000000000000".to_vec()), limiter()));
    assert!(!is_loaded(&Value::Error(b"NOPERM this user has no permissions".to_vec()), limiter()));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn refused_functions_are_told_from_other_errors() {
    // The texts of Valkey 9 and Redis 7 (NOPERM), Redis 7 and 6 (unknown command).
    for refused in [
        &b"NOPERM User u has no permissions to run the 'fcall' command"[..],
        b"NOPERM User u has no permissions to run the 'function|load' command",
        b"ERR unknown command 'FCALL', with args beginning with: 'tollgate_1' ",
        b"ERR unknown command `FUNCTION`, with args beginning with: `LOAD`, ",
    ] {
        assert!(is_fcall_refused(&Value::Error(refused.to_vec())), "{}", String::from_utf8_lossy(refused));
    }
    for other in [
        &b"NOPERM No permissions to access a key"[..],
        b"NOPERM User u has no permissions to run the 'zadd' command",
        b"ERR Function not found",
        b"ERR unknown command 'FOO', with args beginning with: 'fcall' ",
    ] {
        assert!(!is_fcall_refused(&Value::Error(other.to_vec())), "{}", String::from_utf8_lossy(other));
    }
    assert!(!is_fcall_refused(&Value::Bulk(b"NOPERM 'fcall'".to_vec())));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn missing_code_is_told_from_other_errors() {
    // The exact replies of Valkey 9.1 and Redis 7.0.
    for missing in [
        &b"NOSCRIPT No matching script."[..],
        b"NOSCRIPT No matching script. Please use EVAL.",
        b"ERR Function not found",
    ] {
        assert!(is_missing(&Value::Error(missing.to_vec())), "{}", String::from_utf8_lossy(missing));
    }
    for other in [
        &b"ERR tollgate: bad now"[..],
        b"ERR Function not found in the test",
        b"NOPERM User limiter has no permissions to run the 'fcall' command",
        b"ERR unknown command 'FUNCTION', with args beginning with: 'LOAD'",
        b"READONLY You can't write against a read only replica.",
    ] {
        assert!(!is_missing(&Value::Error(other.to_vec())), "{}", String::from_utf8_lossy(other));
    }
    assert!(!is_missing(&Value::Bulk(b"ERR Function not found".to_vec())));
    assert!(!is_missing(&Value::Integer(0)));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn encodes_keys_then_argv_in_contract_order() {
    let checks = vec![
        Check {
            rule: 0,
            key: "p:{a:u}:log".into(),
            windows: vec![
                Window { limit: nz(20), period_ms: nz(60_000) },
                Window { limit: nz(5), period_ms: nz(3_000) },
            ]
            .into(),
            cost: nz(1),
            algorithm: Algorithm::SlidingLog,
            check_only: false,
            lease: None,
            override_key: None,
        },
        Check {
            rule: 1,
            key: "p:{b}:gcra".into(),
            windows: vec![Window { limit: nz(7), period_ms: nz(250) }].into(),
            cost: nz(2),
            algorithm: Algorithm::Gcra,
            check_only: true,
            lease: None,
            override_key: None,
        },
    ];
    let mut out = Vec::new();
    encode_call(&mut out, limiter(), Invocation::EvalSha, &checks, Some(1234));
    let text = arguments(&out);
    let sha = limiter().sha.clone();
    let expected = [
        "EVALSHA",
        &sha,
        "2",
        "p:{a:u}:log",
        "p:{b}:gcra",
        "1234",
        "log",
        "1",
        "2",
        "20",
        "60000",
        "5",
        "3000",
        "gcra",
        "?2",
        "1",
        "7",
        "250",
    ];
    assert_eq!(text, expected);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn eval_carries_the_body_and_empty_now_means_server_time() {
    let checks = vec![Check {
        rule: 0,
        key: "k".into(),
        windows: vec![Window { limit: nz(1), period_ms: nz(1) }].into(),
        cost: nz(1),
        algorithm: Algorithm::FixedWindow,
        check_only: false,
        lease: None,
        override_key: None,
    }];
    let mut out = Vec::new();
    encode_call(&mut out, limiter(), Invocation::Eval, &checks, None);
    let (Value::Array(items), _) = decode(&out, &Limits::default()).unwrap() else { panic!("not an array") };
    assert_eq!(items[0].as_bytes().unwrap(), b"EVAL");
    assert_eq!(items[1].as_bytes().unwrap(), limiter().body.as_bytes());
    assert_eq!(items[4].as_bytes().unwrap(), b"");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_flush_sends_buckets_syncer_sets_token_key_then_its_argv() {
    use crate::limiter::{Flush, FlushEntry};
    let entries = vec![
        FlushEntry { check: Check::for_test(0, "p:{a}:log", &[(20, 60_000), (5, 3_000)], 1), units: 3 },
        FlushEntry {
            check: crate::testing::check(Algorithm::Gcra, 1, "p:{a}:r:gcra", &[(7, 250)], 1),
            units: u64::MAX,
        },
    ];
    let flush =
        Flush { entries, token: "t1".into(), syncer: "w".into(), horizon_ms: 5_000, token_key: "p:{a}:flush:w".into() };
    for (how, target) in [
        (Invocation::FCall, &limiter().flush_function),
        (Invocation::EvalSha, &limiter().flush_sha),
        (Invocation::Eval, &limiter().flush_body.to_string()),
    ] {
        let mut out = Vec::new();
        encode_flush(&mut out, limiter(), how, &flush, Some(1234));
        let text = arguments(&out);
        assert_eq!(&text[1], target);
        let expected = [
            "5",
            "p:{a}:log",
            "p:{a}:r:gcra",
            "p:{a}:log:syncers",
            "p:{a}:r:gcra:syncers",
            "p:{a}:flush:w",
            "1234",
            "t1",
            "w",
            "5000",
            "log",
            "3",
            "2",
            "20",
            "60000",
            "5",
            "3000",
            "gcra",
            "4294967296",
            "1",
            "7",
            "250",
        ];
        assert_eq!(text[2..], expected);
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_adjustment_sends_keys_now_and_time_then_each_change() {
    let adjustments = vec![
        Adjustment { check: Check::for_test(0, "p:{a}:log", &[(20, 60_000), (5, 3_000)], 1), from: 1, to: 0 },
        Adjustment {
            check: crate::testing::check(Algorithm::Gcra, 1, "p:{a}:r:gcra", &[(7, 250)], 1),
            from: 2,
            to: u64::MAX,
        },
    ];
    for (how, target, now, now_arg) in [
        (Invocation::FCall, &limiter().adjust_function, Some(1234), "1234"),
        (Invocation::EvalSha, &limiter().adjust_sha, None, ""),
        (Invocation::Eval, &limiter().adjust_body.to_string(), Some(0), "0"),
    ] {
        let mut out = b"before".to_vec();
        encode_adjust(&mut out, limiter(), how, &adjustments, 987_654, now);
        let text = arguments(out.strip_prefix(b"before").unwrap());
        assert_eq!(&text[1], target);
        let expected = [
            "2",
            "p:{a}:log",
            "p:{a}:r:gcra",
            now_arg,
            "987654",
            "log",
            "1",
            "0",
            "2",
            "20",
            "60000",
            "5",
            "3000",
            "gcra",
            "2",
            "4294967296",
            "1",
            "7",
            "250",
        ];
        assert_eq!(text[2..], expected);
    }
}

/// The decision's command, spelled as the arguments' strings and encoded by
/// `encode_command`: what `encode_call` wrote before it wrote in place.
fn spelled(how: Invocation, checks: &[Check], delay: Option<u64>, now: Option<u64>) -> Vec<u8> {
    let (verb, target): (&str, &str) = match how {
        Invocation::EvalSha => ("EVALSHA", &limiter().sha),
        Invocation::Eval => ("EVAL", limiter().body),
        Invocation::FCall => ("FCALL", &limiter().function),
    };
    let mut args = vec![verb.to_string(), target.to_string(), checks.len().to_string()];
    args.extend(checks.iter().map(|c| c.key.clone()));
    args.push(now.map(|n| n.to_string()).unwrap_or_default());
    args.extend(delay.map(|d| format!("~{d}")));
    for c in checks {
        args.push(match &c.lease {
            Some(id) => format!("lease={id}"),
            None => c.algorithm.id().to_string(),
        });
        args.push(if c.check_only { format!("?{}", c.cost) } else { c.cost.to_string() });
        args.push(c.windows.len().to_string());
        for w in c.windows.iter() {
            args.extend([w.limit.to_string(), w.period_ms.to_string()]);
        }
    }
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let mut out = Vec::new();
    encode_command(&mut out, &args);
    out
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_decision_is_written_in_place_byte_for_byte() {
    let mut second = Check::for_test(3, "tollgate:{b:ü}:gcra", &[(u64::MAX, 1), (7, 86_400_000)], 1_000_000);
    second.check_only = true;
    let checks = [Check::for_test(0, "k", &[(5, 3_000)], 1), second, lease_check("k:lease", Some(&"x".repeat(64)))];
    for how in [Invocation::FCall, Invocation::EvalSha, Invocation::Eval] {
        for (delay, now) in [(None, None), (Some(0), Some(1234)), (Some(u64::MAX), None)] {
            for checks in [&checks[..1], &checks[..2], &checks[..]] {
                let mut out = b"before".to_vec();
                match delay {
                    Some(d) => encode_shaped_call(&mut out, limiter(), how, checks, d, now),
                    None => encode_call(&mut out, limiter(), how, checks, now),
                }
                let mut expected = b"before".to_vec();
                expected.extend(spelled(how, checks, delay, now));
                assert_eq!(out, expected);
            }
        }
    }
}

/// A lease check as the planner makes it: `id` its lease id, one window
/// (limit, TTL).
pub(super) fn lease_check(key: &str, id: Option<&str>) -> Check {
    let mut c = crate::testing::check(Algorithm::Lease, 2, key, &[(3, 30_000)], 1);
    c.lease = id.map(Into::into);
    c
}
