//! Stage 2: from the raw JSON shape to the validated types.
//!
//! Checks run in document order and the first failure is returned. Every
//! message produced here is listed in the table in the module documentation
//! of [`config`](super).

use std::collections::BTreeMap;
use std::num::NonZeroU64;
use std::time::Duration;

use serde_json::{Number, Value};

use super::binding::useless_window;
use super::duration::{self, DurationError};
use super::error::ConfigError;
use super::keys::key;
use super::matching::matcher;
use super::raw::{Obj, RawConfig, RawLimit, RawRule, RawTesting, RawValkey};
use super::response::response;
use super::{
    Algorithm, Config, FailureMode, Limit, Period, Rule, Testing, ValkeyConfig, DEFAULT_KEY_PREFIX, DEFAULT_TIMEOUT_MS,
    MAX_CLUSTER_BYTES, MAX_LIMIT, MAX_LOG_COST, MAX_NAME_CHARS, MAX_PERIOD_MS, MAX_TIMEOUT_MS, MAX_WINDOWS,
};

/// Spelling of [`MAX_TIMEOUT_MS`] in messages.
const MAX_TIMEOUT_LABEL: &str = "60s";
/// Spelling of [`MAX_PERIOD_MS`] in messages.
const MAX_PERIOD_LABEL: &str = "366d";

const NAME_CHARS: &str = "allowed are A-Z, a-z, 0-9, '.', '_', ':' and '-'";
const DURATION_SYNTAX: &str = "expected <digits><unit> with unit ms, s, m, h or d, or an integer number of seconds";
const HEADER_SYNTAX: &str =
    "expected an HTTP token (letters, digits and !#$%&'*+-.^_`|~), optionally after a leading ':'";

pub(crate) fn fail<T>(path: impl Into<String>, message: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError::new(path, message))
}

pub(crate) fn config(raw: RawConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
    let Obj(valkey_raw) = raw.valkey;
    Ok(Config {
        valkey: valkey(valkey_raw, env)?,
        failure_mode: failure_mode(raw.failure_mode)?,
        rules: rules(raw.rules)?,
        response: response(raw.response)?,
        shadow: raw.shadow.unwrap_or(false),
        denial_cache_keys: match raw.denial_cache {
            None => DEFAULT_DENIAL_CACHE_KEYS,
            Some(Obj(c)) => {
                bounded_count("denial_cache.max_keys", c.max_keys, DEFAULT_DENIAL_CACHE_KEYS, 0, 1_000_000)?
            }
        },
        testing: testing(raw.testing)?,
    })
}

fn valkey(raw: RawValkey, env: &dyn Fn(&str) -> Option<String>) -> Result<ValkeyConfig, ConfigError> {
    let cluster = cluster_name(raw.cluster)?;
    let timeout_ms = match raw.timeout {
        None => DEFAULT_TIMEOUT_MS,
        Some(value) => {
            let (ms, _label) = duration(&value, "valkey.timeout", MAX_TIMEOUT_MS, MAX_TIMEOUT_LABEL)?;
            ms.get()
        }
    };
    let key_prefix = match raw.key_prefix {
        None => DEFAULT_KEY_PREFIX.to_owned(),
        Some(prefix) => name_like("valkey.key_prefix", prefix)?,
    };
    Ok(ValkeyConfig {
        cluster,
        timeout: Duration::from_millis(timeout_ms),
        key_prefix,
        max_in_flight: bounded_count("valkey.max_in_flight", raw.max_in_flight, 1024, 1, 16_384)?,
        max_batch: bounded_count("valkey.max_batch", raw.max_batch, 64, 1, 1024)?,
        max_queue: bounded_count("valkey.max_queue", raw.max_queue, 4096, 0, 100_000)?,
        auth: super::access::auth(raw.username, raw.password_env, env)?,
        sentinel: super::access::sentinel(raw.sentinel)?,
    })
}

/// Default of `denial_cache.max_keys`.
const DEFAULT_DENIAL_CACHE_KEYS: usize = 10_000;

/// An optional count in `min..=max`, `default` when omitted.
fn bounded_count(path: &str, value: Option<u64>, default: usize, min: u64, max: u64) -> Result<usize, ConfigError> {
    match value {
        None => Ok(default),
        Some(n) if n < min => fail(path, format!("must be >= {min}")),
        Some(n) if n > max => fail(path, format!("must be <= {max}")),
        Some(n) => Ok(usize::try_from(n).unwrap_or(default)),
    }
}

fn cluster_name(cluster: String) -> Result<String, ConfigError> {
    envoy_cluster("valkey.cluster", cluster)
}

/// An Envoy cluster name: 1..=255 bytes, no whitespace or control characters.
pub(crate) fn envoy_cluster(path: &str, cluster: String) -> Result<String, ConfigError> {
    if cluster.is_empty() {
        return fail(path, "must not be empty");
    }
    if let Some(c) = cluster.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return fail(
            path,
            format!("invalid character {c:?} in {cluster:?}: whitespace and control characters are not allowed"),
        );
    }
    if cluster.len() > MAX_CLUSTER_BYTES {
        return fail(path, format!("must be at most {MAX_CLUSTER_BYTES} bytes (got {})", cluster.len()));
    }
    Ok(cluster)
}

/// Rule names and the key prefix: 1..=64 characters from `[A-Za-z0-9._:-]`.
fn name_like(path: &str, value: String) -> Result<String, ConfigError> {
    if value.is_empty() {
        return fail(path, "must not be empty");
    }
    if let Some(c) = value.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))) {
        return fail(path, format!("invalid character {c:?} in {value:?}: {NAME_CHARS}"));
    }
    // Only ASCII is left, so bytes are characters.
    if value.len() > MAX_NAME_CHARS {
        return fail(path, format!("must be at most {MAX_NAME_CHARS} characters (got {})", value.len()));
    }
    Ok(value)
}

fn failure_mode(raw: Option<String>) -> Result<FailureMode, ConfigError> {
    match raw.as_deref() {
        None | Some("allow") => Ok(FailureMode::Allow),
        Some("deny") => Ok(FailureMode::Deny),
        Some(other) => fail("failure_mode", format!("unknown value {other:?}, expected one of allow, deny")),
    }
}

fn rules(raw: Vec<Obj<RawRule>>) -> Result<Vec<Rule>, ConfigError> {
    if raw.is_empty() {
        return fail("rules", "must not be empty");
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::with_capacity(raw.len());
    for (i, Obj(rule_raw)) in raw.into_iter().enumerate() {
        let path = format!("rules[{i}].name");
        let name = name_like(&path, rule_raw.name)?;
        if let Some(first) = seen.get(&name) {
            return fail(path, format!("duplicate rule name {name:?} (also rules[{first}].name)"));
        }
        seen.insert(name.clone(), i);
        let matcher = matcher(i, rule_raw.matcher)?;
        let key = key(i, rule_raw.key)?;
        let limits = limits(i, rule_raw.limits)?;
        let algorithm = algorithm(i, rule_raw.algorithm)?;
        let cost = cost(i, rule_raw.cost.as_ref(), algorithm, &limits)?;
        windows_fit(i, algorithm, cost, &limits)?;
        let shadow = rule_raw.shadow.unwrap_or(false);
        let policy_names = limits.iter().map(|l| format!("{name}/{}", l.period.label())).collect();
        out.push(Rule { name, matcher, key, limits, algorithm, cost, shadow, policy_names });
    }
    Ok(out)
}

fn limits(i: usize, raw: Vec<Obj<RawLimit>>) -> Result<Vec<Limit>, ConfigError> {
    let path = format!("rules[{i}].limits");
    if raw.is_empty() {
        return fail(path, "must not be empty");
    }
    if raw.len() > MAX_WINDOWS {
        return fail(path, format!("must have at most {MAX_WINDOWS} windows (got {})", raw.len()));
    }
    let mut out: Vec<Limit> = Vec::with_capacity(raw.len());
    for (j, Obj(window)) in raw.into_iter().enumerate() {
        let limit = limit_count(&format!("{path}[{j}].limit"), &window.limit)?;
        let period_path = format!("{path}[{j}].period");
        let (ms, label) = duration(&window.period, &period_path, MAX_PERIOD_MS, MAX_PERIOD_LABEL)?;
        if let Some((k, earlier)) = out.iter().enumerate().find(|(_, earlier)| earlier.period.ms == ms) {
            let shown =
                if earlier.period.label == label { label } else { format!("{label} = {}", earlier.period.label) };
            return fail(period_path, format!("same period as {path}[{k}].period ({shown})"));
        }
        out.push(Limit { limit, period: Period { ms, label } });
    }
    Ok(out)
}

fn algorithm(i: usize, raw: Option<String>) -> Result<Algorithm, ConfigError> {
    let Some(name) = raw else {
        return Ok(Algorithm::default());
    };
    Algorithm::from_name(&name).map_or_else(
        || {
            let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
            fail(
                format!("rules[{i}].algorithm"),
                format!("unknown value {name:?}, expected one of {}", names.join(", ")),
            )
        },
        Ok,
    )
}

fn cost(i: usize, raw: Option<&Number>, algorithm: Algorithm, limits: &[Limit]) -> Result<NonZeroU64, ConfigError> {
    let path = format!("rules[{i}].cost");
    let Some(number) = raw else {
        return Ok(NonZeroU64::MIN);
    };
    let cost = limit_count(&path, number)?;
    if algorithm == Algorithm::SlidingLog && cost.get() > MAX_LOG_COST {
        return fail(path, format!("must be <= {MAX_LOG_COST} for sliding_log, which stores one entry per unit"));
    }
    if let Some((j, limit)) = limits.iter().enumerate().find(|(_, l)| l.limit < cost) {
        return fail(
            path,
            format!(
                "cost {cost} is larger than rules[{i}].limits[{j}].limit ({}): no request could ever be admitted",
                limit.limit
            ),
        );
    }
    Ok(cost)
}

/// The rule's windows are computable exactly and each of them can bind.
fn windows_fit(i: usize, algorithm: Algorithm, cost: NonZeroU64, limits: &[Limit]) -> Result<(), ConfigError> {
    let show = |l: &Limit| format!("{}/{}", l.limit, l.period.label);
    if algorithm.needs_exact_product() {
        for (j, l) in limits.iter().enumerate() {
            let product = u128::from(l.limit.get()) * u128::from(l.period.ms.get());
            if product > u128::from(crate::limiter::EXACT_PRODUCT_MAX) {
                return fail(
                    format!("rules[{i}].limits[{j}]"),
                    format!(
                        "limit × period = {} × {} ms = {product} exceeds 2^53 = {}, the largest that {} computes \
                         exactly; lower the limit or the period",
                        l.limit,
                        l.period.ms,
                        crate::limiter::EXACT_PRODUCT_MAX,
                        algorithm.name()
                    ),
                );
            }
        }
    }
    if let Some((j, k, reason)) = useless_window(algorithm, cost.get(), limits) {
        let (Some(this), Some(other)) = (limits.get(j), limits.get(k)) else {
            return Ok(());
        };
        return fail(
            format!("rules[{i}].limits[{j}]"),
            format!(
                "window {} can never bind next to rules[{i}].limits[{k}] ({}) under {}: {reason}",
                show(this),
                show(other),
                algorithm.name()
            ),
        );
    }
    Ok(())
}

fn limit_count(path: &str, number: &Number) -> Result<NonZeroU64, ConfigError> {
    if let Some(n) = number.as_u64() {
        return match NonZeroU64::new(n) {
            None => fail(path, "must be > 0"),
            Some(_) if n > MAX_LIMIT => fail(path, format!("must be <= {MAX_LIMIT}")),
            Some(n) => Ok(n),
        };
    }
    // Negative integers and every float (serde_json reads integers too large
    // for a u64 as floats).
    match number.as_f64() {
        Some(f) if f <= 0.0 => fail(path, "must be > 0"),
        Some(f) if f > MAX_LIMIT as f64 => fail(path, format!("must be <= {MAX_LIMIT}")),
        _ => fail(path, "must be an integer"),
    }
}

/// A duration in `(0, max_ms]` and its label (the string as written, or
/// `"<N>s"` for an integer).
pub(crate) fn duration(
    value: &Value,
    path: &str,
    max_ms: u64,
    max_label: &str,
) -> Result<(NonZeroU64, String), ConfigError> {
    let (parsed, label) = match value {
        Value::String(text) => (duration::parse_str(text), text.clone()),
        Value::Number(n) => match n.as_u64() {
            Some(seconds) => (duration::from_seconds(seconds), format!("{seconds}s")),
            None => return invalid_duration(path, &n.to_string()),
        },
        Value::Null => return invalid_duration(path, "null"),
        Value::Bool(b) => return invalid_duration(path, &b.to_string()),
        Value::Array(_) => return invalid_duration(path, "[...]"),
        Value::Object(_) => return invalid_duration(path, "{...}"),
    };
    let ms = match parsed {
        Ok(ms) => ms,
        Err(DurationError::Syntax) => return invalid_duration(path, &format!("{label:?}")),
        Err(DurationError::Overflow) => return fail(path, format!("must be <= {max_label}")),
    };
    match NonZeroU64::new(ms) {
        None => fail(path, "must be > 0"),
        Some(_) if ms > max_ms => fail(path, format!("must be <= {max_label}")),
        Some(ms) => Ok((ms, label)),
    }
}

fn invalid_duration<T>(path: &str, shown: &str) -> Result<T, ConfigError> {
    fail(path, format!("invalid duration {shown}: {DURATION_SYNTAX}"))
}

/// An HTTP field name (RFC 9110 token), or a pseudo-header (`:` + token);
/// returned lowercased.
pub(crate) fn header_name(path: &str, name: &str) -> Result<String, ConfigError> {
    let body = name.strip_prefix(':').unwrap_or(name);
    let is_tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if body.is_empty() || !body.bytes().all(is_tchar) {
        return fail(path, format!("invalid header name {name:?}: {HEADER_SYNTAX}"));
    }
    Ok(name.to_ascii_lowercase())
}

fn testing(raw: Option<Obj<RawTesting>>) -> Result<Testing, ConfigError> {
    let Some(Obj(raw)) = raw else {
        return Ok(Testing::default());
    };
    let now_header = match raw.now_header {
        None => None,
        Some(name) => Some(header_name("testing.now_header", &name)?),
    };
    Ok(Testing { now_header })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn max_labels_match_the_constants() {
        assert_eq!(duration::parse_str(MAX_TIMEOUT_LABEL), Ok(MAX_TIMEOUT_MS));
        assert_eq!(duration::parse_str(MAX_PERIOD_LABEL), Ok(MAX_PERIOD_MS));
    }
}
