use super::*;
use crate::testing::{plugin, window};

fn config(global: bool, a_shadow: bool) -> Config {
    plugin()
        .shadow(global)
        .rule_json(&format!(
            r#"{{ "name": "a", "shadow": {a_shadow}, "key": [ {{ "header": "x-user-id" }} ],
              "limits": [ {{ "limit": 1, "period": 1 }} ] }}"#
        ))
        .rule_json(r#"{ "name": "b", "limits": [ { "limit": 9, "period": 1 } ] }"#)
        .build()
}

fn checks() -> Vec<Check> {
    (0..2).map(|rule| Check::for_test(rule, &format!("k{rule}"), &[(1, 1_000)], 1)).collect()
}

/// Rule a (check 0) denies for 500 ms, rule b has room.
fn a_denies() -> Decision {
    Decision { allowed: false, now_ms: 0, windows: vec![window(0, 0, 500), window(1, 0, 0)], delay_ms: 0 }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_enforced_denial_denies_and_is_remembered_from_the_arrival() {
    let c = config(false, false);
    let ruling = respond(&c, &checks(), &a_denies(), 10_000);
    assert_eq!(ruling.rules, vec![(0, RuleOutcome::Denied), (1, RuleOutcome::Allowed)]);
    let Action::Deny(reply) = &ruling.action else { panic!("{ruling:?}") };
    assert_eq!(reply.status, 429);
    assert_eq!(ruling.denials.len(), 1);
    let d = &ruling.denials[0];
    assert_eq!((d.key.as_str(), d.until_ms, d.windows[0].check), ("k0", 10_500, 0));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_shadow_rule_reports_but_admits_and_is_not_remembered() {
    let c = config(false, true);
    let ruling = respond(&c, &checks(), &a_denies(), 0);
    assert_eq!(ruling.rules[0], (0, RuleOutcome::ShadowDenied));
    assert!(ruling.denials.is_empty());
    let Action::Admit { shadow_denied, headers } = &ruling.action else { panic!("{ruling:?}") };
    assert_eq!(shadow_denied.as_deref(), Some("a/1s"));
    assert_eq!(headers.len(), 2, "RateLimit-Policy and RateLimit on the admitted response");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn global_shadow_admits_everything() {
    let c = config(true, false);
    let ruling = respond(&c, &checks(), &a_denies(), 0);
    assert!(matches!(ruling.action, Action::Admit { shadow_denied: Some(_), .. }), "{ruling:?}");
    assert_eq!(ruling.rules, vec![(0, RuleOutcome::ShadowDenied), (1, RuleOutcome::Allowed)]);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_admission_is_an_admission() {
    let c = config(false, false);
    let d = Decision { allowed: true, now_ms: 0, windows: vec![window(0, 0, 0), window(1, 0, 0)], delay_ms: 0 };
    let ruling = respond(&c, &checks(), &d, 0);
    assert!(matches!(&ruling.action, Action::Admit { shadow_denied: None, .. }), "{ruling:?}");
    assert!(ruling.denials.is_empty());
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn the_cache_denies_enforced_buckets_with_the_remembered_windows() {
    let c = config(false, false);
    let mut cache = DenialCache::new(10);
    let ruling = respond(&c, &checks(), &a_denies(), 1_000);
    remember(&mut cache, ruling.denials, 1_000);
    let (hit, record) = deny_from_cache(&c, &checks(), &mut cache, 1_200).expect("a cache denial");
    assert_eq!((record.decider.name(), record.answer.name()), ("cache", "denied"));
    assert_eq!(hit.rules, vec![(0, RuleOutcome::Denied)]);
    let Action::Deny(reply) = hit.action else { panic!("not a denial") };
    let retry = reply.headers.iter().find(|(k, _)| k == "retry-after").map(|(_, v)| v.as_str());
    assert_eq!(retry, Some("1"), "300 ms left, rounded up");
    assert!(deny_from_cache(&c, &checks(), &mut cache, 1_500).is_none(), "at until the store decides again");
    // A shadow rule's bucket is never served from the cache.
    let shadow = config(false, true);
    let mut cache = DenialCache::new(10);
    cache.insert("k0", 5_000, 0, vec![window(0, 0, 500)]);
    assert!(deny_from_cache(&shadow, &checks(), &mut cache, 100).is_none());
}

/// A check with an override key (a rule with `overrides`) is never
/// remembered as denied, nor looked up: an override or a reset applies to
/// the next request.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_denial_with_an_override_key_is_not_remembered() {
    let c = config(false, false);
    let mut marked = checks();
    marked[0].override_key = Some(std::rc::Rc::from(crate::key::override_key("k0")));
    let ruling = respond(&c, &marked, &a_denies(), 1_000);
    assert_eq!(ruling.rules, vec![(0, RuleOutcome::Denied), (1, RuleOutcome::Allowed)]);
    assert!(matches!(ruling.action, Action::Deny(_)), "denied all the same: {ruling:?}");
    assert!(ruling.denials.is_empty(), "{:?}", ruling.denials);
    let mut cache = DenialCache::new(10);
    cache.insert("k0", 5_000, 0, vec![window(0, 0, 500)]);
    assert!(deny_from_cache(&c, &marked, &mut cache, 100).is_none(), "not looked up");
    assert!(deny_from_cache(&c, &checks(), &mut cache, 100).is_some(), "the same bucket unmarked is");
}
