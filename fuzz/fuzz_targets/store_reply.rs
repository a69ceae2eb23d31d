//! A store call's reply body on arbitrary bytes (the tunnel's 200 body):
//! interpreted as a decision or a classified failure, never a panic; a
//! decision, however absurd its numbers, formats into headers and a body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::num::NonZeroU64;
use std::sync::OnceLock;
use tollgate::config::Config;
use tollgate::limiter::{Check, Window};
use tollgate::store::{interpret, Outcome};
use tollgate::{response, verdict};

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let doc = br#"{ "valkey": { "cluster": "c" }, "response": { "headers": ["ratelimit", "x-ratelimit"] },
          "rules": [ { "name": "a", "limits": [ { "limit": 5, "period": "1s" }, { "limit": 5, "period": "60s" } ] },
                     { "name": "b", "shadow": true, "limits": [ { "limit": 5, "period": "3s" } ] } ] }"#;
        Config::from_json(doc).unwrap_or_else(|e| panic!("{e}"))
    })
}

fuzz_target!(|data: &[u8]| {
    let one = NonZeroU64::MIN;
    let window = |ms| Window { limit: NonZeroU64::new(5).unwrap_or(one), period_ms: NonZeroU64::new(ms).unwrap_or(one) };
    let checks = vec![
        Check { rule: 0, key: "a".into(), windows: vec![window(1_000), window(60_000)], cost: one },
        Check { rule: 1, key: "b".into(), windows: vec![window(3_000)], cost: one },
    ];
    match interpret(Some("200"), data, &checks) {
        Outcome::Decided(d) => {
            assert_eq!(d.windows.len(), 3);
            let config = config();
            let names = response::policy_names(config, &checks, &d);
            let _ = verdict::rule_outcomes(config, &checks, &d);
            let _ = verdict::verdict(config, &checks, &d, &names);
            let _ = response::allowed_headers(config, &checks, &d);
            let reply = response::denied(config, &checks, &d);
            assert!(reply.status >= 400);
        }
        Outcome::Failed(f) => {
            let _ = f.kind().name();
            assert!(f.to_string().len() < 2048);
        }
        Outcome::NoScript => {}
    }
});
