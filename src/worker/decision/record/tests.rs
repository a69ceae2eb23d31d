use super::*;
use crate::testing::{seed_decision as decision, seed_setup as setup};

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_store_denial_names_rule_window_remaining_and_round_trip() {
    let (config, checks) = setup();
    let mut record = DecisionRecord::decided(&config, &checks, &decision(2_100), Decider::Store, Answer::Denied);
    record.store_ms = Some(3);
    assert_eq!(
        record.plain(),
        "decider=store answer=denied rules=auth.createToken denied_by=auth.createToken/3s \
         remaining=auth.createToken/60s:15,auth.createToken/3s:0 store_ms=3"
    );
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn undecided_requests_name_their_rules_and_nothing_else() {
    let (config, checks) = setup();
    let record = DecisionRecord::undecided(&config, &checks, Decider::FailureMode, Answer::Unchecked);
    assert_eq!(
        record.plain(),
        "decider=failure_mode answer=unchecked rules=auth.createToken denied_by=- remaining=- store_ms=-"
    );
    let record = DecisionRecord::undecided(&config, &[], Decider::Overload, Answer::Refused);
    assert_eq!(record.plain(), "decider=overload answer=refused rules=- denied_by=- remaining=- store_ms=-");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_rule_checked_twice_is_named_once() {
    let (config, mut checks) = setup();
    checks.push(Check::for_test(0, "k2", &[(20, 60_000), (5, 3_000)], 1));
    let d = decision(0);
    let record = DecisionRecord::decided(&config, &checks, &d, Decider::Cache, Answer::Allowed);
    assert_eq!(record.rules, ["auth.createToken"]);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_record_made_from_the_decision_reads_as_the_record_kept_whole() {
    let (config, mut checks) = setup();
    checks.push(Check::for_test(0, "k2", &[(20, 60_000), (5, 3_000)], 1));
    for (at, store_ms) in [(0, None), (2_100, Some(7))] {
        let d = decision(at);
        for (decider, answer) in [(Decider::Store, Answer::Denied), (Decider::Sync, Answer::Allowed)] {
            let record = Record::Decided { config: &config, checks: &checks, decision: &d, decider, answer, store_ms };
            let whole = record.to_record();
            assert_eq!(record.plain(), whole.plain());
            assert_eq!((whole.rules.len(), whole.store_ms), (1, store_ms));
        }
    }
    let made = Record::Made(DecisionRecord::undecided(&config, &checks, Decider::Overload, Answer::Refused));
    assert_eq!(
        made.plain(),
        "decider=overload answer=refused rules=auth.createToken denied_by=- remaining=- store_ms=-"
    );
}

/// A decision in which an override applied names its rules after
/// `store_ms`, each once, whether the record is kept whole or written from
/// the decision; one without keeps its line as it was.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_override_that_applied_names_its_rules_last() {
    let config = crate::testing::plugin()
        .rule("auth.createToken", None, &[(20, "60s"), (5, "3s")])
        .rule("global", None, &[(100, "1s")])
        .rule("other", None, &[(9, "1s")])
        .build();
    let checks = vec![
        Check::for_test(0, "k", &[(20, 60_000), (5, 3_000)], 1),
        Check::for_test(1, "g", &[(100, 1_000)], 1),
        Check::for_test(2, "o", &[(9, 1_000)], 1),
    ];
    let mut d = decision(0);
    // An override of 200 per minute on the first rule; the 3 s window keeps
    // its configured limit but the check's flag marks both.
    d.windows[0] = WindowOutcome { limit: 200, remaining: 195, overridden: true, ..d.windows[0] };
    d.windows[1].overridden = true;
    d.windows.push(WindowOutcome { check: 1, window: 0, overridden: true, ..crate::testing::window(1, 0, 0) });
    d.windows.push(crate::testing::window(2, 0, 0));
    let record = Record::Decided {
        config: &config,
        checks: &checks,
        decision: &d,
        decider: Decider::Store,
        answer: Answer::Allowed,
        store_ms: Some(1),
    };
    let whole = record.to_record();
    assert_eq!(whole.overridden, ["auth.createToken", "global"]);
    assert_eq!(record.plain(), whole.plain());
    assert!(whole.plain().ends_with(" store_ms=1 override=auth.createToken,global"), "{}", whole.plain());
    assert!(whole.plain().contains("remaining=auth.createToken/60s:195,"), "the limit in force's count");
    // Nothing applied: no field at all.
    let plain = DecisionRecord::decided(&config, &checks, &decision(0), Decider::Store, Answer::Allowed).plain();
    assert!(!plain.contains("override"), "{plain}");
    assert!(DecisionRecord::undecided(&config, &checks, Decider::Overload, Answer::Refused).overridden.is_empty());
}
