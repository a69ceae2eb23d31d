//! The encodings of checks with an override key (`@` and the extra KEYS),
//! and of `peek`.

use super::{arguments, lease_check};
use crate::key::override_key;
use crate::limiter::script::{
    encode_adjust, encode_call, encode_floored_call, encode_peek, encode_shaped_peek, limiter, Invocation,
};
use crate::limiter::{Adjustment, Check};

/// `c` with its bucket's override key.
fn marked(mut c: Check) -> Check {
    c.override_key = Some(override_key(&c.key).into());
    c
}

/// A window check and a lease check of one rule (sharing the override
/// key), then an unmarked rule.
fn checks() -> Vec<Check> {
    vec![
        marked(Check::for_test(0, "p:{a}:log", &[(5, 3_000), (20, 60_000)], 1)),
        marked(lease_check("p:{a}:lease", Some("w1:7"))),
        Check::for_test(1, "q:{a}:log", &[(9, 1_000)], 1),
    ]
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn marked_checks_send_the_marker_and_their_override_keys_after_the_buckets() {
    let mut out = Vec::new();
    encode_call(&mut out, limiter(), Invocation::FCall, &checks(), Some(1234));
    let text = arguments(&out);
    assert_eq!(text[..2], ["FCALL".to_string(), limiter().function.clone()]);
    let expected = [
        "5",
        "p:{a}:log",
        "p:{a}:lease",
        "q:{a}:log",
        "p:{a}:ovr",
        "p:{a}:ovr",
        "1234",
        "@log",
        "1",
        "2",
        "5",
        "3000",
        "20",
        "60000",
        "@lease=w1:7",
        "1",
        "1",
        "3",
        "30000",
        "log",
        "1",
        "1",
        "9",
        "1000",
    ];
    assert_eq!(text[2..], expected);
    // Unmarked: exactly the wire without overrides.
    let plain: Vec<Check> = checks().into_iter().map(|c| Check { override_key: None, ..c }).collect();
    let mut out = Vec::new();
    encode_call(&mut out, limiter(), Invocation::FCall, &plain, Some(1234));
    let text = arguments(&out);
    assert_eq!(text[2..6], ["3", "p:{a}:log", "p:{a}:lease", "q:{a}:log"]);
    assert!(text.iter().all(|a| !a.starts_with('@') && !a.ends_with(":ovr")));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn peek_takes_the_decisions_keys_and_argv() {
    for how in [Invocation::FCall, Invocation::EvalSha, Invocation::Eval] {
        let (mut decide, mut peek) = (Vec::new(), Vec::new());
        encode_call(&mut decide, limiter(), how, &checks(), None);
        encode_peek(&mut peek, limiter(), how, &checks(), None);
        let (decide, peek) = (arguments(&decide), arguments(&peek));
        assert_eq!(decide[0], peek[0]);
        let target = match how {
            Invocation::FCall => &limiter().peek_function,
            Invocation::EvalSha => &limiter().peek_sha,
            Invocation::Eval => limiter().peek_body,
        };
        assert_eq!(&peek[1], target);
        assert_eq!(decide[2..], peek[2..], "{how:?}");
        let (mut shaped, mut shaped_peek) = (Vec::new(), Vec::new());
        encode_floored_call(&mut shaped, limiter(), how, &checks(), (500, 20), Some(9));
        encode_shaped_peek(&mut shaped_peek, limiter(), how, &checks(), (500, 20), Some(9));
        let (shaped, shaped_peek) = (arguments(&shaped), arguments(&shaped_peek));
        assert_eq!(shaped[2..], shaped_peek[2..], "{how:?}");
        assert_eq!(shaped_peek[9], "~500:20");
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn adjustments_carry_the_marker() {
    let adjustments: Vec<Adjustment> = checks().into_iter().map(|check| Adjustment { check, from: 1, to: 0 }).collect();
    let mut out = Vec::new();
    encode_adjust(&mut out, limiter(), Invocation::FCall, &adjustments, 77, Some(80));
    let text = arguments(&out);
    assert_eq!(text[2..10], ["5", "p:{a}:log", "p:{a}:lease", "q:{a}:log", "p:{a}:ovr", "p:{a}:ovr", "80", "77"]);
    assert_eq!(text[10..14], ["@log", "1", "0", "2"]);
    assert!(text.contains(&"@lease=w1:7".to_string()));
    assert_eq!(text.iter().filter(|a| a.starts_with('@')).count(), 2);
}
