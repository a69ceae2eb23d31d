//! Tests of `reply.rs`.

use super::*;

fn checks() -> Vec<Check> {
    vec![Check::for_test(3, "k", &[(20, 60_000), (5, 3_000)], 1)]
}

fn ints(v: &[i64]) -> Value {
    Value::Array(v.iter().map(|n| Value::Integer(*n)).collect())
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn parses_a_denial_naming_the_window() {
    let d = parse(&ints(&[0, 1000, 15, 59_000, 0, 0, 2_000, 1_500]), &checks()).unwrap();
    assert!(!d.allowed);
    assert_eq!(d.now_ms, 1000);
    let denied: Vec<_> = d.denied_by().collect();
    assert_eq!(denied.len(), 1);
    assert_eq!((denied[0].check, denied[0].window, denied[0].limit), (0, 1, 5));
    assert_eq!(d.retry_after_ms(), 1_500);
    assert_eq!(d.windows[0].remaining, 15);
    assert_eq!(d.most_constrained().map(|w| w.window), Some(1));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn parses_an_admission() {
    let d = parse(&ints(&[1, 7, 19, 60_000, 0, 4, 3_000, 0]), &checks()).unwrap();
    assert!(d.allowed);
    assert_eq!(d.retry_after_ms(), 0);
    assert_eq!(d.windows[1].remaining, 4);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn parses_a_shaped_reply_with_its_delay() {
    let d = parse(&ints(&[1, 7, 19, 60_000, 0, 0, 3_000, 0, 1_200]), &checks()).unwrap();
    assert!(d.allowed);
    assert_eq!(d.delay_ms, 1_200);
    assert_eq!(parse(&ints(&[1, 7, 19, 60_000, 0, 0, 3_000, 0]), &checks()).unwrap().delay_ms, 0);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn rejects_every_malformed_shape() {
    let c = checks();
    assert_eq!(parse(&Value::Integer(1), &c), Err(ReplyError::NotAnArray));
    assert_eq!(parse(&ints(&[1, 7, 19]), &c), Err(ReplyError::WrongLength { expected: 8, got: 3 }));
    let long = ints(&[1, 7, 19, 1, 0, 4, 3_000, 0, 5, 5]);
    assert_eq!(parse(&long, &c), Err(ReplyError::WrongLength { expected: 8, got: 10 }));
    assert_eq!(parse(&ints(&[0, 7, 19, 1, 0, 4, 3_000, 9, 5]), &c), Err(ReplyError::Inconsistent));
    assert_eq!(parse(&ints(&[1, 7, 19, -1, 0, 4, 3_000, 0]), &c), Err(ReplyError::NotANumber { index: 3 }));
    assert_eq!(parse(&ints(&[2, 7, 19, 1, 0, 4, 3_000, 0]), &c), Err(ReplyError::BadAllowedFlag(2)));
    assert_eq!(parse(&ints(&[1, 7, 19, 1, 0, 4, 3_000, 9]), &c), Err(ReplyError::Inconsistent));
    assert_eq!(parse(&ints(&[0, 7, 19, 1, 0, 4, 3_000, 0]), &c), Err(ReplyError::Inconsistent));
    let Value::Array(mut bulk) = ints(&[1, 7, 19, 1, 0, 4, 3_000, 0]) else { panic!("not an array") };
    bulk[2] = Value::Bulk(b"19".to_vec());
    assert_eq!(parse(&Value::Array(bulk), &c), Err(ReplyError::NotANumber { index: 2 }));
}

fn entries() -> Vec<FlushEntry> {
    vec![
        FlushEntry { check: checks().remove(0), units: 3 },
        FlushEntry { check: Check::for_test(4, "o", &[(9, 1_000)], 1), units: 0 },
    ]
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn parses_a_flush_with_its_syncers() {
    let r = parse_flush(&ints(&[0, 7, 15, 59_000, 0, 2, 2_500, 0, 9, 0, 0, 3, 1, 1, 0]), &entries()).unwrap();
    assert!(!r.applied);
    assert!(r.state.allowed);
    assert_eq!(r.state.now_ms, 7);
    assert_eq!(r.state.windows.len(), 3);
    assert_eq!((r.state.windows[2].check, r.state.windows[2].remaining), (1, 9));
    assert_eq!(r.syncers, vec![(3, 1), (1, 0)]);
    assert!(parse_flush(&ints(&[1, 7, 15, 59_000, 0, 2, 2_500, 0, 9, 0, 0, 3, 1, 1, 0]), &entries()).unwrap().applied);
}

fn ops() -> Vec<LeaseOp> {
    use crate::limiter::LeaseChange;
    let op = |id: &str, change| LeaseOp { key: "p:{a}:lease".into(), id: id.into(), change };
    vec![op("a", LeaseChange::End), op("b", LeaseChange::Renew { ttl_ms: 5_000 })]
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn parses_a_lease_reply() {
    let r = parse_lease(&ints(&[1_234, 1, 0]), &ops()).unwrap();
    assert_eq!(r, LeaseReply { now_ms: 1_234, live: vec![true, false] });
    assert_eq!(parse_lease(&ints(&[7]), &[]).unwrap(), LeaseReply { now_ms: 7, live: vec![] });
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn rejects_every_malformed_lease_reply() {
    let o = ops();
    assert_eq!(parse_lease(&Value::Integer(1), &o), Err(ReplyError::NotAnArray));
    assert_eq!(parse_lease(&ints(&[1, 1]), &o), Err(ReplyError::WrongLength { expected: 3, got: 2 }));
    assert_eq!(parse_lease(&ints(&[1, 1, 0, 1]), &o), Err(ReplyError::WrongLength { expected: 3, got: 4 }));
    assert_eq!(parse_lease(&ints(&[1, 2, 0]), &o), Err(ReplyError::BadAllowedFlag(2)));
    assert_eq!(parse_lease(&ints(&[-1, 1, 0]), &o), Err(ReplyError::NotANumber { index: 0 }));
    assert_eq!(parse_lease(&ints(&[5, 1, -1]), &o), Err(ReplyError::NotANumber { index: 2 }));
    assert_eq!(
        parse_lease(&Value::Array(vec![Value::Integer(5), Value::Nil, Value::Integer(1)]), &o),
        Err(ReplyError::NotANumber { index: 1 })
    );
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn rejects_every_malformed_flush_reply() {
    let e = entries();
    let good = [1, 7, 15, 59_000, 0, 2, 2_500, 0, 9, 0, 0, 3, 1, 1, 0];
    let with = |i: usize, v: i64| {
        let mut r = good.to_vec();
        r[i] = v;
        ints(&r)
    };
    assert_eq!(parse_flush(&Value::Integer(1), &e), Err(ReplyError::NotAnArray));
    assert_eq!(parse_flush(&ints(&good[..13]), &e), Err(ReplyError::WrongLength { expected: 15, got: 13 }));
    assert_eq!(parse_flush(&with(0, 2), &e), Err(ReplyError::BadAllowedFlag(2)));
    assert_eq!(parse_flush(&with(4, 5), &e), Err(ReplyError::Inconsistent), "a retry time");
    assert_eq!(parse_flush(&with(12, 3), &e), Err(ReplyError::Inconsistent), "rank 3 of 3");
    assert_eq!(parse_flush(&with(13, 0), &e), Err(ReplyError::Inconsistent), "no syncer");
    assert_eq!(parse_flush(&with(6, -1), &e), Err(ReplyError::NotANumber { index: 6 }));
}

/// A marked check (with an override key) and an unmarked one.
fn marked_checks() -> Vec<Check> {
    let mut marked = Check::for_test(3, "k:{a}:log", &[(20, 60_000), (5, 3_000)], 1);
    marked.override_key = Some("k:{a}:ovr".into());
    vec![marked, Check::for_test(4, "o:{a}:log", &[(9, 1_000)], 1)]
}

/// allowed, now, then the marked check: overridden, (limit, remaining,
/// reset, retry) × 2, then the unmarked one's (remaining, reset, retry).
const MARKED: [i64; 14] = [1, 7, 1, 200, 199, 60_000, 0, 5, 4, 3_000, 0, 8, 1_000, 0];

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn parses_a_marked_check_with_its_limits_in_force() {
    let d = parse(&ints(&MARKED), &marked_checks()).unwrap();
    assert!(d.allowed);
    let w = &d.windows;
    assert_eq!(w.len(), 3);
    assert_eq!((w[0].limit, w[0].overridden, w[0].remaining, w[0].reset_ms), (200, true, 199, 60_000));
    assert_eq!((w[1].limit, w[1].overridden, w[1].remaining, w[1].period_ms), (5, false, 4, 3_000), "as configured");
    assert_eq!((w[2].check, w[2].limit, w[2].overridden, w[2].remaining), (1, 9, false, 8));
    let mut not = MARKED;
    not[2] = 0;
    let d = parse(&ints(&not), &marked_checks()).unwrap();
    assert!(d.windows.iter().all(|w| !w.overridden));
    assert_eq!(d.windows[0].limit, 200, "the limit in force, as the store says");
    let mut shaped = MARKED.to_vec();
    shaped.push(40);
    assert_eq!(parse(&ints(&shaped), &marked_checks()).unwrap().delay_ms, 40);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn rejects_every_malformed_marked_reply() {
    let c = marked_checks();
    let with = |i: usize, v: i64| {
        let mut r = MARKED.to_vec();
        r[i] = v;
        ints(&r)
    };
    assert_eq!(parse(&with(2, 2), &c), Err(ReplyError::BadOverrideFlag { index: 2 }));
    assert_eq!(parse(&with(2, -1), &c), Err(ReplyError::NotANumber { index: 2 }));
    assert_eq!(parse(&with(3, 0), &c), Err(ReplyError::BadLimit { index: 3 }));
    assert_eq!(parse(&with(7, 0), &c), Err(ReplyError::BadLimit { index: 7 }));
    assert_eq!(parse(&with(7, -5), &c), Err(ReplyError::NotANumber { index: 7 }));
    assert_eq!(parse(&with(6, 9), &c), Err(ReplyError::Inconsistent), "a retry time when allowed");
    // The unmarked layout (3 per window, no flag) for a marked check.
    let unmarked = ints(&[1, 7, 199, 60_000, 0, 4, 3_000, 0, 8, 1_000, 0]);
    assert_eq!(parse(&unmarked, &c), Err(ReplyError::WrongLength { expected: 14, got: 11 }));
    assert_eq!(parse(&ints(&MARKED[..13]), &c), Err(ReplyError::WrongLength { expected: 14, got: 13 }));
    let mut long = MARKED.to_vec();
    long.extend([0, 0]);
    assert_eq!(parse(&ints(&long), &c), Err(ReplyError::WrongLength { expected: 14, got: 16 }));
    // An unmarked check given the marked layout.
    let plain: Vec<Check> = c.iter().cloned().map(|k| Check { override_key: None, ..k }).collect();
    assert_eq!(parse(&ints(&MARKED), &plain), Err(ReplyError::WrongLength { expected: 11, got: 14 }));
    assert_eq!(
        ReplyError::BadOverrideFlag { index: 2 }.to_string(),
        "script reply element 2 (an overridden flag) is not 0 or 1"
    );
}

/// A flush's entries are never marked: their reply keeps 3 per window even
/// when a check carries an override key.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_flush_reply_ignores_override_keys() {
    let mut e = entries();
    e[0].check.override_key = Some("k:ovr".into());
    let r = parse_flush(&ints(&[1, 7, 15, 59_000, 0, 2, 2_500, 0, 9, 0, 0, 3, 1, 1, 0]), &e).unwrap();
    assert!(r.state.windows.iter().all(|w| !w.overridden));
}
