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
