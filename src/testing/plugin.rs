//! One builder of plugin configuration JSON for every test: the unit tests
//! (`crate::testing`) and the integration tests (`tests/support`, which
//! include this file by path). Plain `std`, no crate types, so both can.
#![allow(dead_code)]

/// A plugin configuration under construction; [`Plugin::json`] renders it.
#[derive(Debug, Clone)]
pub struct Plugin {
    valkey: Vec<String>,
    top: Vec<String>,
    rules: Vec<String>,
}

/// A configuration naming the cluster of `envoy/envoy.yaml` (`tollgate_valkey`)
/// and nothing else: add rules and fields.
pub fn plugin() -> Plugin {
    Plugin { valkey: vec![r#""cluster": "tollgate_valkey""#.to_string()], top: Vec::new(), rules: Vec::new() }
}

impl Plugin {
    /// `valkey.timeout`, e.g. `"100ms"`.
    pub fn timeout(self, timeout: &str) -> Plugin {
        self.valkey(&format!(r#""timeout": "{timeout}""#))
    }

    /// `failure_mode`: `allow`, `deny` or `local`.
    pub fn failure_mode(self, mode: &str) -> Plugin {
        self.top(&format!(r#""failure_mode": "{mode}""#))
    }

    /// Global `shadow`.
    pub fn shadow(self, on: bool) -> Plugin {
        self.top(&format!(r#""shadow": {on}"#))
    }

    /// `testing.now_header`: the request header that sets the clock.
    pub fn now_header(self, header: &str) -> Plugin {
        self.top(&format!(r#""testing": {{ "now_header": "{header}" }}"#))
    }

    /// One more field of `valkey`, as JSON (`"max_queue": 8`).
    pub fn valkey(mut self, field: &str) -> Plugin {
        self.valkey.push(field.to_string());
        self
    }

    /// One more top-level field, as JSON (`"response": {...}`).
    pub fn top(mut self, field: &str) -> Plugin {
        self.top.push(field.to_string());
        self
    }

    /// A rule keyed on one request header (none: one shared bucket), with
    /// windows `(limit, period)`.
    pub fn rule(self, name: &str, header: Option<&str>, limits: &[(u64, &str)]) -> Plugin {
        let key = header.map(|h| format!(r#", "key": [ {{ "header": "{h}" }} ]"#)).unwrap_or_default();
        let limits: Vec<String> =
            limits.iter().map(|(limit, period)| format!(r#"{{ "limit": {limit}, "period": "{period}" }}"#)).collect();
        self.rule_json(&format!(r#"{{ "name": "{name}"{key}, "limits": [ {} ] }}"#, limits.join(", ")))
    }

    /// A rule written as JSON.
    pub fn rule_json(mut self, rule: &str) -> Plugin {
        self.rules.push(rule.to_string());
        self
    }

    /// The configuration as JSON text.
    pub fn json(&self) -> String {
        let mut fields = vec![format!(r#""valkey": {{ {} }}"#, self.valkey.join(", "))];
        fields.extend(self.top.iter().cloned());
        fields.push(format!(
            r#""rules": [
    {}
  ]"#,
            self.rules.join(",\n    ")
        ));
        format!("{{\n  {}\n}}\n", fields.join(",\n  "))
    }
}
