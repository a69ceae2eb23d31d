//! From the store's [`Decision`] to what happens to the request, with shadow
//! mode applied, and what each matching rule counts.
//!
//! The store decides as if every rule were enforced (so a shadow rule consumes
//! quota exactly as it would when enforced, and turning enforcement on changes
//! nothing else). A denial is then only carried out if at least one window
//! that denied belongs to an enforced rule; otherwise the request passes and
//! the would-be denial is reported.

use crate::config::Config;
use crate::limiter::{Check, Decision};

/// What the filter does with the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Forward the request. `shadow_denied` lists the policies (`rule/period`)
    /// that would have denied it; empty unless shadow mode saved it.
    Admit { shadow_denied: Vec<String> },
    /// Answer the configured denial.
    Deny,
}

/// How one matching rule saw the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleOutcome {
    /// Every window of the rule had room.
    Allowed,
    /// A window of the (enforced) rule denied.
    Denied,
    /// A window of the rule denied, but the rule (or the whole filter) is in
    /// shadow mode.
    ShadowDenied,
}

/// Whether a check's rule is in shadow mode (globally or on its own).
pub fn is_shadow(config: &Config, check: &Check) -> bool {
    config.shadow || config.rules.get(check.rule).is_some_and(|r| r.shadow)
}

/// The outcome of every check, in check order, as `(rule index, outcome)`.
pub fn rule_outcomes(config: &Config, checks: &[Check], decision: &Decision) -> Vec<(usize, RuleOutcome)> {
    checks
        .iter()
        .enumerate()
        .map(|(i, check)| {
            let denied = decision.windows.iter().any(|w| w.check == i && w.denied());
            let outcome = match (denied, is_shadow(config, check)) {
                (false, _) => RuleOutcome::Allowed,
                (true, false) => RuleOutcome::Denied,
                (true, true) => RuleOutcome::ShadowDenied,
            };
            (check.rule, outcome)
        })
        .collect()
}

/// The verdict for a decided request.
pub fn verdict(config: &Config, checks: &[Check], decision: &Decision, policy_names: &[&str]) -> Verdict {
    if decision.allowed {
        return Verdict::Admit { shadow_denied: Vec::new() };
    }
    let enforced_denial = decision.denied_by().any(|w| checks.get(w.check).is_some_and(|c| !is_shadow(config, c)));
    if enforced_denial {
        return Verdict::Deny;
    }
    let shadow_denied = decision
        .windows
        .iter()
        .zip(policy_names)
        .filter(|(w, _)| w.denied())
        .map(|(_, name)| (*name).to_owned())
        .collect();
    Verdict::Admit { shadow_denied }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::WindowOutcome;

    fn config(global: bool, a_shadow: bool) -> Config {
        let json = format!(
            r#"{{ "valkey": {{ "cluster": "c" }}, "shadow": {global},
                "rules": [ {{ "name": "a", "shadow": {a_shadow}, "limits": [ {{ "limit": 1, "period": 1 }} ] }},
                           {{ "name": "b", "limits": [ {{ "limit": 9, "period": 1 }} ] }} ] }}"#
        );
        Config::from_json(json.as_bytes()).unwrap()
    }

    fn checks() -> Vec<Check> {
        (0..2).map(|rule| Check::for_test(rule, &format!("k{rule}"), &[(1, 1_000)], 1)).collect()
    }

    /// Rule a (check 0) denies, rule b has room.
    fn a_denies() -> Decision {
        let w = |check, retry_ms| WindowOutcome {
            check,
            window: 0,
            limit: 1,
            period_ms: 1_000,
            remaining: 0,
            reset_ms: 500,
            retry_ms,
        };
        Decision { allowed: false, now_ms: 0, windows: vec![w(0, 500), w(1, 0)] }
    }

    fn names() -> Vec<&'static str> {
        vec!["a/1s", "b/1s"]
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn an_enforced_denial_denies() {
        let c = config(false, false);
        assert_eq!(verdict(&c, &checks(), &a_denies(), &names()), Verdict::Deny);
        assert_eq!(
            rule_outcomes(&c, &checks(), &a_denies()),
            vec![(0, RuleOutcome::Denied), (1, RuleOutcome::Allowed)]
        );
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn a_shadow_rule_reports_but_admits() {
        let c = config(false, true);
        assert_eq!(
            verdict(&c, &checks(), &a_denies(), &names()),
            Verdict::Admit { shadow_denied: vec!["a/1s".into()] }
        );
        assert_eq!(rule_outcomes(&c, &checks(), &a_denies())[0], (0, RuleOutcome::ShadowDenied));
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn global_shadow_admits_everything() {
        let c = config(true, false);
        assert!(matches!(verdict(&c, &checks(), &a_denies(), &names()), Verdict::Admit { .. }));
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn an_admission_is_an_admission() {
        let c = config(false, false);
        let mut d = a_denies();
        d.allowed = true;
        d.windows[0].retry_ms = 0;
        assert_eq!(verdict(&c, &checks(), &d, &names()), Verdict::Admit { shadow_denied: vec![] });
    }
}
