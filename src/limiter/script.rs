//! The store-side half of the limiter: the Lua script, its SHA-1 (computed once)
//! and the encoding of [`Check`]s into its KEYS/ARGV contract (stated in the
//! header comment of `prelude.lua`).
//!
//! The script is one body: `prelude.lua`, the four algorithm files and
//! `decide.lua`, concatenated, so checks of different algorithms are decided
//! in one atomic call.

use super::Check;
use crate::resp::encode_command;
use std::sync::OnceLock;

/// A Lua script with its SHA-1, as `SCRIPT LOAD` would report it.
#[derive(Debug)]
pub struct Script {
    pub body: &'static str,
    pub sha: String,
}

/// The whole script.
const BODY: &str = concat!(
    include_str!("prelude.lua"),
    include_str!("sliding_log.lua"),
    include_str!("gcra.lua"),
    include_str!("sliding_window.lua"),
    include_str!("fixed_window.lua"),
    include_str!("decide.lua"),
);

/// The transactional multi-window limiter, every algorithm in one script.
pub fn limiter() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        let body = BODY;
        Script { body, sha: sha1_smol::Sha1::from(body).hexdigest() }
    })
}

/// How the script is invoked: by SHA, or with its body after `NOSCRIPT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invocation {
    EvalSha,
    Eval,
}

/// Appends one `EVALSHA`/`EVAL` command deciding all `checks` atomically.
/// `now_ms` overrides the server clock (tests only; `None` = Valkey `TIME`).
pub fn encode_call(out: &mut Vec<u8>, script: &Script, how: Invocation, checks: &[Check], now_ms: Option<u64>) {
    let mut owned: Vec<String> = Vec::with_capacity(2 + checks.len() * 8);
    owned.push(checks.len().to_string());
    owned.extend(checks.iter().map(|c| c.key.clone()));
    owned.push(now_ms.map(|n| n.to_string()).unwrap_or_default());
    for check in checks {
        owned.push(check.algorithm.id().to_string());
        owned.push(check.cost.to_string());
        owned.push(check.windows.len().to_string());
        for w in &check.windows {
            owned.push(w.limit.to_string());
            owned.push(w.period_ms.to_string());
        }
    }
    let (verb, target): (&[u8], &[u8]) = match how {
        Invocation::EvalSha => (b"EVALSHA", script.sha.as_bytes()),
        Invocation::Eval => (b"EVAL", script.body.as_bytes()),
    };
    let mut args: Vec<&[u8]> = Vec::with_capacity(owned.len() + 2);
    args.push(verb);
    args.push(target);
    args.extend(owned.iter().map(|s| s.as_bytes()));
    encode_command(out, &args);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{Algorithm, Window};
    use crate::resp::{decode, Limits, Value};
    use std::num::NonZeroU64;

    fn nz(n: u64) -> NonZeroU64 {
        NonZeroU64::new(n).unwrap()
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn sha_is_the_sha1_of_the_embedded_body() {
        let s = limiter();
        assert_eq!(s.sha.len(), 40);
        assert_eq!(s.sha, sha1_smol::Sha1::from(s.body).hexdigest());
        assert!(s.body.starts_with("-- tollgate"));
        for file in ["ALGORITHMS.log =", "ALGORITHMS.gcra =", "ALGORITHMS.sw =", "ALGORITHMS.fw =", "-- Phase 3"] {
            assert!(s.body.contains(file), "{file}");
        }
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
                ],
                cost: nz(1),
                algorithm: Algorithm::SlidingLog,
            },
            Check {
                rule: 1,
                key: "p:{b}:gcra".into(),
                windows: vec![Window { limit: nz(7), period_ms: nz(250) }],
                cost: nz(2),
                algorithm: Algorithm::Gcra,
            },
        ];
        let mut out = Vec::new();
        encode_call(&mut out, limiter(), Invocation::EvalSha, &checks, Some(1234));
        let (value, used) = decode(&out, &Limits::default()).unwrap();
        assert_eq!(used, out.len());
        let Value::Array(items) = value else { panic!("not an array") };
        let text: Vec<String> =
            items.iter().map(|v| String::from_utf8(v.as_bytes().unwrap().to_vec()).unwrap()).collect();
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
            "2",
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
            windows: vec![Window { limit: nz(1), period_ms: nz(1) }],
            cost: nz(1),
            algorithm: Algorithm::FixedWindow,
        }];
        let mut out = Vec::new();
        encode_call(&mut out, limiter(), Invocation::Eval, &checks, None);
        let (Value::Array(items), _) = decode(&out, &Limits::default()).unwrap() else { panic!("not an array") };
        assert_eq!(items[0].as_bytes().unwrap(), b"EVAL");
        assert_eq!(items[1].as_bytes().unwrap(), limiter().body.as_bytes());
        assert_eq!(items[4].as_bytes().unwrap(), b"");
    }
}
