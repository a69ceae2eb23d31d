//! A store call's reply body on arbitrary bytes (the tunnel's 200 body):
//! interpreted as a decision or a classified failure, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::num::NonZeroU64;
use tollgate::limiter::{Check, Window};
use tollgate::store::{interpret, Outcome};

fuzz_target!(|data: &[u8]| {
    let one = NonZeroU64::MIN;
    let window = |ms| Window { limit: NonZeroU64::new(5).unwrap_or(one), period_ms: NonZeroU64::new(ms).unwrap_or(one) };
    let checks = vec![
        Check { rule: 0, key: "a".into(), windows: vec![window(1_000), window(60_000)], cost: one },
        Check { rule: 1, key: "b".into(), windows: vec![window(3_000)], cost: one },
    ];
    match interpret(Some("200"), data, &checks) {
        Outcome::Decided(d) => assert_eq!(d.windows.len(), 3),
        Outcome::Failed(f) => {
            let _ = f.kind().name();
            assert!(f.to_string().len() < 2048);
        }
        Outcome::NoScript => {}
    }
});
