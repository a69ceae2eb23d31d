//! The lease sets' encodings: `lease=<id>` in decisions and adjustments,
//! and the `lease` call.

use super::{arguments, lease_check};
use crate::limiter::script::{encode_adjust, encode_call, encode_lease, encode_shaped_call, limiter, Invocation};
use crate::limiter::{Adjustment, Check};

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_lease_check_is_sent_as_lease_and_its_id() {
    let mut only = lease_check("p:{a}:c:lease", Some("w1:req.42_x-y"));
    only.check_only = true;
    let checks = [Check::for_test(0, "p:{a}:log", &[(5, 3_000)], 1), lease_check("p:{a}:lease", Some("w1:7")), only];
    let mut out = Vec::new();
    encode_call(&mut out, limiter(), Invocation::FCall, &checks, Some(1234));
    let text = arguments(&out);
    let expected = [
        "3",
        "p:{a}:log",
        "p:{a}:lease",
        "p:{a}:c:lease",
        "1234",
        "log",
        "1",
        "1",
        "5",
        "3000",
        "lease=w1:7",
        "1",
        "1",
        "3",
        "30000",
        "lease=w1:req.42_x-y",
        "?1",
        "1",
        "3",
        "30000",
    ];
    assert_eq!(text[2..], expected);
    // Shaped, the same arguments after the delay.
    let mut shaped = Vec::new();
    encode_shaped_call(&mut shaped, limiter(), Invocation::FCall, &checks[1..2], 500, Some(9));
    assert_eq!(arguments(&shaped)[4..], ["9", "~500", "lease=w1:7", "1", "1", "3", "30000"]);
    // Without an id: plain `lease`, which the script refuses.
    let mut out = Vec::new();
    encode_call(&mut out, limiter(), Invocation::EvalSha, &[lease_check("k", None)], None);
    assert_eq!(arguments(&out)[5..], ["lease", "1", "1", "3", "30000"]);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_adjustment_of_a_lease_names_its_id() {
    let adjustments = vec![
        Adjustment { check: lease_check("p:{a}:lease", Some("id-1")), from: 1, to: 0 },
        Adjustment { check: Check::for_test(0, "p:{a}:log", &[(5, 3_000)], 1), from: 1, to: 0 },
        Adjustment { check: lease_check("p:{a}:b:lease", None), from: 0, to: 1 },
    ];
    let mut out = Vec::new();
    encode_adjust(&mut out, limiter(), Invocation::Eval, &adjustments, 77, Some(80));
    let text = arguments(&out);
    assert_eq!(text[1], limiter().adjust_body);
    let expected = [
        "3",
        "p:{a}:lease",
        "p:{a}:log",
        "p:{a}:b:lease",
        "80",
        "77",
        "lease=id-1",
        "1",
        "0",
        "1",
        "3",
        "30000",
        "log",
        "1",
        "0",
        "1",
        "5",
        "3000",
        "lease",
        "0",
        "1",
        "1",
        "3",
        "30000",
    ];
    assert_eq!(text[2..], expected);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_lease_call_sends_keys_now_then_op_and_id_per_lease() {
    use crate::limiter::{LeaseChange, LeaseOp};
    let op = |key: &str, id: &str, change| LeaseOp { key: key.into(), id: id.into(), change };
    let ops = vec![
        op("p:{a}:lease", "w1:7", LeaseChange::End),
        op("p:{a}:lease", "w1:8", LeaseChange::Renew { ttl_ms: 30_000 }),
        op("p:{a}:c:lease", "w1:8", LeaseChange::Renew { ttl_ms: 0 }),
    ];
    for (how, target, now, now_arg) in [
        (Invocation::FCall, &limiter().lease_function, Some(1234), "1234"),
        (Invocation::EvalSha, &limiter().lease_sha, None, ""),
        (Invocation::Eval, &limiter().lease_body.to_string(), Some(0), "0"),
    ] {
        let mut out = b"before".to_vec();
        encode_lease(&mut out, limiter(), how, &ops, now);
        let text = arguments(out.strip_prefix(b"before").unwrap());
        assert_eq!(&text[1], target);
        let expected =
            ["3", "p:{a}:lease", "p:{a}:lease", "p:{a}:c:lease", now_arg, "-", "w1:7", "+30000", "w1:8", "+0", "w1:8"];
        assert_eq!(text[2..], expected);
    }
    let mut out = Vec::new();
    encode_lease(&mut out, limiter(), Invocation::FCall, &[], Some(5));
    assert_eq!(arguments(&out)[2..], ["0", "5"]);
}
