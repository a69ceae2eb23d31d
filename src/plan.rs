//! Which rules apply to a request, and the [`Check`]s the store must decide.
//!
//! The request is seen through [`RequestView`], so this is plain Rust tested on
//! the host; the filter implements the trait over Envoy's request headers.

use crate::config::{Config, KeyPart, Match, Rule};
use crate::key::bucket_key;
use crate::limiter::{Check, Window};

/// The request attributes rules can match and key on.
pub trait RequestView {
    /// `:method`.
    fn method(&self) -> Option<Vec<u8>>;
    /// `:path`, including any query string.
    fn path(&self) -> Option<Vec<u8>>;
    /// A request header by lowercase name (pseudo-headers included).
    fn header(&self, name: &str) -> Option<Vec<u8>>;
}

/// The checks for every rule that matches `request` and whose key parts are
/// all present, in configuration order. Empty: the request is not limited.
pub fn plan(config: &Config, request: &dyn RequestView) -> Vec<Check> {
    config
        .rules
        .iter()
        .enumerate()
        .filter(|(_, rule)| matches(&rule.matcher, request))
        .filter_map(|(index, rule)| check_for(config, index, rule, request))
        .collect()
}

fn matches(m: &Match, request: &dyn RequestView) -> bool {
    if !m.methods.is_empty() {
        let Some(method) = request.method() else {
            return false;
        };
        if !m.methods.iter().any(|allowed| allowed.as_bytes() == method.as_slice()) {
            return false;
        }
    }
    if let Some(prefix) = &m.path_prefix {
        let Some(path) = request.path() else {
            return false;
        };
        if !path_only(&path).starts_with(prefix.as_bytes()) {
            return false;
        }
    }
    true
}

/// The path without its query string or fragment.
fn path_only(path: &[u8]) -> &[u8] {
    let end = path.iter().position(|&b| b == b'?' || b == b'#').unwrap_or(path.len());
    path.get(..end).unwrap_or(path)
}

fn check_for(config: &Config, index: usize, rule: &Rule, request: &dyn RequestView) -> Option<Check> {
    let mut values: Vec<Vec<u8>> = Vec::with_capacity(rule.key.len());
    for part in &rule.key {
        match part {
            // A missing key header means the rule does not apply.
            KeyPart::Header(name) => values.push(request.header(name)?),
        }
    }
    let parts: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    Some(Check {
        rule: index,
        // The suffix names the algorithm, so switching a rule's algorithm
        // never reads another algorithm's data.
        key: bucket_key(&config.valkey.key_prefix, &rule.name, &parts, rule.algorithm.id()),
        windows: rule.limits.iter().map(|l| Window { limit: l.limit, period_ms: l.period.ms() }).collect(),
        cost: rule.cost,
        algorithm: rule.algorithm,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Req {
        method: &'static str,
        path: &'static str,
        headers: HashMap<&'static str, &'static [u8]>,
    }

    impl RequestView for Req {
        fn method(&self) -> Option<Vec<u8>> {
            Some(self.method.as_bytes().to_vec())
        }
        fn path(&self) -> Option<Vec<u8>> {
            Some(self.path.as_bytes().to_vec())
        }
        fn header(&self, name: &str) -> Option<Vec<u8>> {
            self.headers.get(name).map(|v| v.to_vec())
        }
    }

    fn req(method: &'static str, path: &'static str, user: Option<&'static [u8]>) -> Req {
        let mut headers = HashMap::new();
        if let Some(u) = user {
            headers.insert("x-user-id", u);
        }
        Req { method, path, headers }
    }

    fn config() -> Config {
        Config::from_json(
            br#"{
              "valkey": { "cluster": "c" },
              "rules": [
                { "name": "auth.createToken",
                  "match": { "path_prefix": "/auth/token", "methods": ["POST"] },
                  "key": [ { "header": "x-user-id" } ],
                  "limits": [ { "limit": 20, "period": "60s" }, { "limit": 5, "period": "3s" } ] },
                { "name": "global", "limits": [ { "limit": 1000, "period": 1 } ] }
              ]
            }"#,
        )
        .unwrap()
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn matching_rule_yields_a_keyed_check_with_every_window() {
        let checks = plan(&config(), &req("POST", "/auth/token?x=1", Some(b"alice")));
        assert_eq!(checks.len(), 2);
        assert_eq!(checks[0].rule, 0);
        assert_eq!(checks[0].key, "tollgate:{auth.createToken:alice}:log");
        let windows: Vec<(u64, u64)> = checks[0].windows.iter().map(|w| (w.limit.get(), w.period_ms.get())).collect();
        assert_eq!(windows, vec![(20, 60_000), (5, 3_000)]);
        assert_eq!(checks[1].key, "tollgate:{global}:log");
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn method_path_and_missing_key_each_skip_the_rule() {
        let c = config();
        let rules = |r: Req| plan(&c, &r).iter().map(|c| c.rule).collect::<Vec<_>>();
        assert_eq!(rules(req("GET", "/auth/token", Some(b"a"))), vec![1]);
        assert_eq!(rules(req("POST", "/auth/tok", Some(b"a"))), vec![1]);
        assert_eq!(rules(req("POST", "/x?/auth/token", Some(b"a"))), vec![1]);
        assert_eq!(rules(req("POST", "/auth/token", None)), vec![1]);
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn users_get_distinct_buckets() {
        let c = config();
        let a = plan(&c, &req("POST", "/auth/token", Some(b"a")));
        let b = plan(&c, &req("POST", "/auth/token", Some(b"b")));
        assert_ne!(a[0].key, b[0].key);
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn algorithm_and_cost_reach_the_check_and_name_the_key() {
        let c = Config::from_json(
            br#"{ "valkey": { "cluster": "c" }, "rules": [
                  { "name": "a", "algorithm": "sliding_window", "cost": 3, "limits": [ { "limit": 5, "period": 1 } ] },
                  { "name": "b", "limits": [ { "limit": 5, "period": 1 } ] } ] }"#,
        )
        .unwrap();
        let checks = plan(&c, &req("GET", "/", None));
        assert_eq!(checks[0].key, "tollgate:{a}:sw");
        assert_eq!((checks[0].algorithm, checks[0].cost.get()), (crate::limiter::Algorithm::SlidingWindow, 3));
        assert_eq!(checks[1].key, "tollgate:{b}:log");
        assert_eq!((checks[1].algorithm, checks[1].cost.get()), (crate::limiter::Algorithm::SlidingLog, 1));
    }
}
