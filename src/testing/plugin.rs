//! One builder of plugin configuration JSON for every test: the unit tests
//! (`crate::testing`) and the integration tests (`tests/support`, which
//! include this file by path). Plain `std`, no crate types, so both can.
#![allow(dead_code)]

/// A plugin configuration under construction; [`Plugin::json`] renders it.
#[derive(Debug, Clone)]
pub struct Plugin {
    cluster: String,
    valkey: Vec<String>,
    top: Vec<String>,
    rules: Vec<String>,
}

/// A configuration naming the cluster of `envoy/envoy.yaml` (`tollgate_valkey`)
/// and nothing else: add rules and fields.
pub fn plugin() -> Plugin {
    Plugin { cluster: "tollgate_valkey".to_string(), valkey: Vec::new(), top: Vec::new(), rules: Vec::new() }
}

impl Plugin {
    /// `valkey.cluster`, instead of `tollgate_valkey`.
    pub fn cluster(mut self, cluster: &str) -> Plugin {
        self.cluster = cluster.to_string();
        self
    }

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
        let keyed = header.into_iter().fold(rule(name), Rule::header);
        self.with(limits.iter().fold(keyed, |r, &(limit, period)| r.limit(limit, period)))
    }

    /// One more rule.
    pub fn with(self, rule: Rule) -> Plugin {
        self.rule_json(&rule.json())
    }

    /// A rule written as JSON.
    pub fn rule_json(mut self, rule: &str) -> Plugin {
        self.rules.push(rule.to_string());
        self
    }

    /// The configuration as JSON text.
    pub fn json(&self) -> String {
        let cluster = format!(r#""cluster": "{}""#, self.cluster);
        let valkey: Vec<&str> =
            std::iter::once(cluster.as_str()).chain(self.valkey.iter().map(String::as_str)).collect();
        let mut fields = vec![format!(r#""valkey": {{ {} }}"#, valkey.join(", "))];
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

/// A rule under construction; [`Plugin::with`] adds it.
#[derive(Debug, Clone)]
pub struct Rule {
    name: String,
    fields: Vec<String>,
    matching: Vec<String>,
    key: Vec<String>,
    limits: Vec<String>,
}

/// A rule with no match (every request), no key (one shared bucket) and no
/// windows yet.
pub fn rule(name: &str) -> Rule {
    Rule { name: name.to_string(), fields: Vec::new(), matching: Vec::new(), key: Vec::new(), limits: Vec::new() }
}

/// The seed article's rule, as in `envoy/envoy.yaml`: `POST /auth/token`,
/// one bucket per `x-user-id`, 20 per 60s and 5 per 3s.
pub fn seed_rule() -> Rule {
    rule("auth.createToken")
        .path_prefix("/auth/token")
        .methods(&["POST"])
        .header("x-user-id")
        .limit(20, "60s")
        .limit(5, "3s")
}

/// Rule `r{i}` of the large configurations (`tests/host/config_limits.rs`, `tests/live/operations/config_limits.rs`):
/// requests under `/r{i}/`, one bucket per `x-user-id`, five windows from
/// 10 per second to 50,000 per 7 days.
pub fn wide_rule(i: usize) -> Rule {
    let windows = [(10, "1s"), (100, "1m"), (1000, "1h"), (10_000, "1d"), (50_000, "7d")];
    let keyed = rule(&format!("r{i}")).path_prefix(&format!("/r{i}/")).header("x-user-id");
    windows.iter().fold(keyed, |r, &(limit, period)| r.limit(limit, period))
}

impl Rule {
    /// `algorithm`: `sliding_log`, `gcra`, `sliding_window` or `fixed_window`.
    pub fn algorithm(self, algorithm: &str) -> Rule {
        self.field(&format!(r#""algorithm": "{algorithm}""#))
    }

    /// `match.path_prefix`.
    pub fn path_prefix(self, prefix: &str) -> Rule {
        self.matching(&format!(r#""path_prefix": "{prefix}""#))
    }

    /// `match.methods`.
    pub fn methods(self, methods: &[&str]) -> Rule {
        let quoted: Vec<String> = methods.iter().map(|m| format!(r#""{m}""#)).collect();
        self.matching(&format!(r#""methods": [{}]"#, quoted.join(", ")))
    }

    /// One more key part: a request header.
    pub fn header(self, header: &str) -> Rule {
        self.key(&format!(r#"{{ "header": "{header}" }}"#))
    }

    /// One more window.
    pub fn limit(mut self, limit: u64, period: &str) -> Rule {
        self.limits.push(format!(r#"{{ "limit": {limit}, "period": "{period}" }}"#));
        self
    }

    /// One more field of `match`, as JSON (`"path": "/a"`).
    pub fn matching(mut self, field: &str) -> Rule {
        self.matching.push(field.to_string());
        self
    }

    /// One more key part, as JSON (`"method"`, `{ "query": "k" }`).
    pub fn key(mut self, part: &str) -> Rule {
        self.key.push(part.to_string());
        self
    }

    /// One more field of the rule, as JSON (`"shadow": true`, `"cost": 2`).
    pub fn field(mut self, field: &str) -> Rule {
        self.fields.push(field.to_string());
        self
    }

    /// The rule as JSON text.
    pub fn json(&self) -> String {
        let mut fields = vec![format!(r#""name": "{}""#, self.name)];
        fields.extend(self.fields.iter().cloned());
        if !self.matching.is_empty() {
            fields.push(format!(r#""match": {{ {} }}"#, self.matching.join(", ")));
        }
        if !self.key.is_empty() {
            fields.push(format!(r#""key": [ {} ]"#, self.key.join(", ")));
        }
        fields.push(format!(r#""limits": [ {} ]"#, self.limits.join(", ")));
        format!("{{ {} }}", fields.join(", "))
    }
}
