//! Unit tests: `algorithm`, `cost`, the exact-product bound and the
//! "window can never bind" check.

use super::{error, rule};
use crate::config::{Algorithm, Config};

fn with(extra: &str, limits: &str) -> String {
    rule(&format!(r#"{{ "name": "r", {extra} "limits": [ {limits} ] }}"#))
}

const SEED: &str = r#"{ "limit": 20, "period": "60s" }, { "limit": 5, "period": "3s" }"#;

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn every_algorithm_parses_and_defaults_apply() {
    let config = Config::from_json(with("", SEED).as_bytes()).unwrap();
    assert_eq!(config.rules[0].algorithm, Algorithm::SlidingLog);
    assert_eq!(config.rules[0].cost.get(), 1);
    for algorithm in Algorithm::ALL {
        let json = with(&format!(r#""algorithm": "{}", "cost": 5,"#, algorithm.name()), SEED);
        let config = Config::from_json(json.as_bytes()).unwrap();
        assert_eq!(config.rules[0].algorithm, algorithm);
        assert_eq!(config.rules[0].cost.get(), 5, "cost == the smallest limit is allowed");
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn bad_algorithm_and_cost() {
    assert_eq!(
        error(&with(r#""algorithm": "token_bucket","#, SEED)),
        "rules[0].algorithm: unknown value \"token_bucket\", expected one of sliding_log, gcra, sliding_window, fixed_window"
    );
    assert_eq!(error(&with(r#""cost": 0,"#, SEED)), "rules[0].cost: must be > 0");
    assert_eq!(error(&with(r#""cost": 1.5,"#, SEED)), "rules[0].cost: must be an integer");
    assert_eq!(
        error(&with(r#""cost": "1","#, SEED)),
        "rules[0].cost: invalid type: string \"1\", expected a JSON number"
    );
    assert_eq!(
        error(&with(r#""cost": 6,"#, SEED)),
        "rules[0].cost: cost 6 is larger than rules[0].limits[1].limit (5): no request could ever be admitted"
    );
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn exact_product_bound_for_gcra_and_sliding_window() {
    // 104249991 × 86400000 = 9007199222400000 <= 2^53; one more is too many.
    let ok = r#"{ "limit": 104249991, "period": "1d" }"#;
    let over = r#"{ "limit": 104249992, "period": "1d" }"#;
    for name in ["gcra", "sliding_window"] {
        let alg = format!(r#""algorithm": "{name}","#);
        assert!(Config::from_json(with(&alg, ok).as_bytes()).is_ok(), "{name}");
        assert_eq!(
            error(&with(&alg, over)),
            format!(
                "rules[0].limits[0]: limit × period = 104249992 × 86400000 ms = 9007199308800000 exceeds 2^53 = \
                 9007199254740992, the largest that {name} computes exactly; lower the limit or the period"
            )
        );
    }
    for name in ["sliding_log", "fixed_window"] {
        let alg = format!(r#""algorithm": "{name}","#);
        assert!(Config::from_json(with(&alg, over).as_bytes()).is_ok(), "{name} has no product");
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn windows_that_can_never_bind_are_named_with_the_reason() {
    let seed = r#"{ "limit": 600, "period": "600s" }, { "limit": 10, "period": "10s" }"#;
    assert_eq!(
        error(&with("", seed)),
        "rules[0].limits[0]: window 600/600s can never bind next to rules[0].limits[1] (10/10s) under sliding_log: \
         any interval of this period spans at most 60 of the other's, so at most 60 × 10 = 600 units are ever \
         admitted in it"
    );
    assert_eq!(
        error(&with(r#""algorithm": "gcra","#, seed)),
        "rules[0].limits[0]: window 600/600s can never bind next to rules[0].limits[1] (10/10s) under gcra: \
         its rate limit/period is not lower; under gcra a longer window binds only with a lower rate"
    );
    // The shorter window made useless by the longer one.
    assert_eq!(
        error(&with("", r#"{ "limit": 5, "period": "60s" }, { "limit": 5, "period": "3s" }"#)),
        "rules[0].limits[1]: window 5/3s can never bind next to rules[0].limits[0] (5/60s) under sliding_log: \
         the other window counts every unit this one counts and admits at most 5 units"
    );
    // Cost changes what a window can hold: with cost 3, 5/3s holds 3 units.
    let costly = r#"{ "limit": 60, "period": "60s" }, { "limit": 5, "period": "3s" }"#;
    assert!(Config::from_json(with("", costly).as_bytes()).is_ok());
    assert!(error(&with(r#""cost": 3,"#, costly)).contains("20 × 3 = 60 units"));
    // 601/600s with 10/10s: the log can bind it, gcra cannot.
    let near = r#"{ "limit": 601, "period": "600s" }, { "limit": 10, "period": "10s" }"#;
    assert!(Config::from_json(with("", near).as_bytes()).is_err());
    let near = r#"{ "limit": 599, "period": "600s" }, { "limit": 10, "period": "10s" }"#;
    for algorithm in Algorithm::ALL {
        let alg = format!(r#""algorithm": "{}","#, algorithm.name());
        assert!(Config::from_json(with(&alg, near).as_bytes()).is_ok(), "{algorithm:?}");
    }
}

/// The README's configuration example stays valid.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn readme_example_parses() {
    let readme = include_str!("../../../README.md");
    let block = readme.split("```json\n").nth(1).and_then(|rest| rest.split("```").next()).unwrap();
    let config = Config::from_json(block.as_bytes()).unwrap();
    assert_eq!(config.rules[1].algorithm, Algorithm::Gcra);
    assert_eq!(config.rules[1].cost.get(), 2);
}
