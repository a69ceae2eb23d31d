//! Stage 2: from the document as written ([`super::raw`]) to the validated
//! types.
//!
//! Sections are checked in document order (`valkey`, `failure_mode`, each
//! rule, `response`, `denial_cache`, `max_body_bytes`, `testing`); each reports its first
//! problem, and every section and rule is checked, so one pass finds one
//! error per section and per rule. [`Config::from_json`] returns the first.

use std::collections::BTreeMap;
use std::num::NonZeroU64;
use std::time::Duration;

use serde_json::Number;

use super::access::{auth, cluster_mode, sentinel};
use super::binding::useless_window;
use super::concurrency::concurrency;
use super::count::count;
use super::error::ConfigError;
use super::keys::key;
use super::matching::matcher;
use super::overrides::overrides;
use super::primitives::{bounded_count, duration, envoy_cluster, fail, header_name, limit_count, name_like};
use super::raw::{RawConfig, RawLimit, RawLocalLimiter, RawRule, RawTesting, RawValkey};
use super::response::response;
use super::shaping::shaping;
use super::sync_policy::sync_policy;
use super::{
    Algorithm, Config, FailureMode, Invoke, Limit, LocalLimiterConfig, Overload, Period, Rule, Testing, ValkeyConfig,
    DEFAULT_DENIAL_CACHE_KEYS, DEFAULT_KEY_PREFIX, DEFAULT_LOCAL_KEYS, DEFAULT_LOCAL_SHARE_PPM, DEFAULT_MAX_BATCH,
    DEFAULT_MAX_IN_FLIGHT, DEFAULT_MAX_QUEUE, DEFAULT_TIMEOUT_MS, DENIAL_CACHE_KEYS_BOUNDS, LOCAL_KEYS_BOUNDS,
    MAX_BATCH_BOUNDS, MAX_IN_FLIGHT_BOUNDS, MAX_LOG_COST, MAX_PERIOD_MS, MAX_QUEUE_BOUNDS, MAX_TIMEOUT_MS, MAX_WINDOWS,
};
use super::{
    DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_MESSAGES_IN_FLIGHT, MAX_BODY_BYTES_BOUNDS, MAX_MESSAGES_IN_FLIGHT_BOUNDS,
};
use crate::key::KeyName;
use crate::limiter::Window;

/// Spelling of [`MAX_TIMEOUT_MS`] in messages.
pub(crate) const MAX_TIMEOUT_LABEL: &str = "60s";
/// Spelling of [`MAX_PERIOD_MS`] in messages.
pub(crate) const MAX_PERIOD_LABEL: &str = "366d";

/// The validated configuration, or `None` with the problems in `errors`.
pub(crate) fn config(
    raw: RawConfig,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<ConfigError>,
) -> Option<Config> {
    let valkey = keep(errors, valkey(raw.valkey, env));
    let failure_mode = keep(errors, failure_mode(raw.failure_mode));
    let local_limiter = keep(errors, local_limiter(raw.local_limiter, failure_mode));
    let overload = keep(errors, overload(raw.overload));
    let rules = rules(raw.rules, errors);
    let response = keep(errors, response(raw.response));
    let denial_cache_keys = keep(
        errors,
        bounded_count(
            "denial_cache.max_keys",
            raw.denial_cache.and_then(|c| c.max_keys),
            DEFAULT_DENIAL_CACHE_KEYS,
            DENIAL_CACHE_KEYS_BOUNDS,
        ),
    );
    let max_body_bytes = keep(
        errors,
        bounded_count("max_body_bytes", raw.max_body_bytes, DEFAULT_MAX_BODY_BYTES, MAX_BODY_BYTES_BOUNDS),
    );
    let testing = keep(errors, testing(raw.testing));
    let shadow = raw.shadow.unwrap_or(false);
    if let Some(rules) = &rules {
        keep(errors, shaping_fits(shadow, rules));
    }
    if !errors.is_empty() {
        return None;
    }
    Some(Config {
        valkey: valkey?,
        failure_mode: failure_mode?,
        local_limiter: local_limiter?,
        overload: overload?,
        rules: rules?,
        response: response?,
        shadow,
        denial_cache_keys: denial_cache_keys?,
        max_body_bytes: max_body_bytes?,
        testing: testing?,
    })
}

/// Shaping across sections: not in shadow mode. (On a Valkey Cluster a
/// request whose buckets span slots is held in rounds: see
/// docs/shaping.md, "Across slots".)
fn shaping_fits(shadow: bool, rules: &[Rule]) -> Result<(), ConfigError> {
    let Some(i) = rules.iter().position(|r| r.shaping.is_some()) else { return Ok(()) };
    if shadow {
        return fail("shadow", format!("does not apply with rules[{i}].shape: it would hold requests it never denies"));
    }
    Ok(())
}

/// The value, or `None` with its error recorded.
fn keep<T>(errors: &mut Vec<ConfigError>, result: Result<T, ConfigError>) -> Option<T> {
    result.map_err(|err| errors.push(err)).ok()
}

fn valkey(raw: RawValkey, env: &dyn Fn(&str) -> Option<String>) -> Result<ValkeyConfig, ConfigError> {
    let cluster = envoy_cluster("valkey.cluster", raw.cluster)?;
    let timeout_ms = match raw.timeout {
        None => DEFAULT_TIMEOUT_MS,
        Some(value) => duration(&value, "valkey.timeout", MAX_TIMEOUT_MS, MAX_TIMEOUT_LABEL)?.0.get(),
    };
    let key_prefix = match raw.key_prefix {
        None => DEFAULT_KEY_PREFIX.to_owned(),
        Some(prefix) => name_like("valkey.key_prefix", prefix)?,
    };
    let store = cluster.clone();
    Ok(ValkeyConfig {
        cluster,
        timeout: Duration::from_millis(timeout_ms),
        key_prefix,
        max_in_flight: bounded_count(
            "valkey.max_in_flight",
            raw.max_in_flight,
            DEFAULT_MAX_IN_FLIGHT,
            MAX_IN_FLIGHT_BOUNDS,
        )?,
        max_batch: bounded_count("valkey.max_batch", raw.max_batch, DEFAULT_MAX_BATCH, MAX_BATCH_BOUNDS)?,
        max_messages_in_flight: bounded_count(
            "valkey.max_messages_in_flight",
            raw.max_messages_in_flight,
            DEFAULT_MAX_MESSAGES_IN_FLIGHT,
            MAX_MESSAGES_IN_FLIGHT_BOUNDS,
        )?,
        max_queue: bounded_count("valkey.max_queue", raw.max_queue, DEFAULT_MAX_QUEUE, MAX_QUEUE_BOUNDS)?,
        invoke: invoke(raw.invoke)?,
        auth: auth(raw.username, raw.password_env, env)?,
        cluster_mode: cluster_mode(raw.cluster_mode, &store, raw.sentinel.is_some())?,
        sentinel: sentinel(raw.sentinel)?,
    })
}

fn failure_mode(raw: Option<String>) -> Result<FailureMode, ConfigError> {
    match raw.as_deref() {
        None | Some("allow") => Ok(FailureMode::Allow),
        Some("deny") => Ok(FailureMode::Deny),
        Some("local") => Ok(FailureMode::Local),
        Some(other) => fail("failure_mode", format!("unknown value {other:?}, expected one of allow, deny, local")),
    }
}

fn invoke(raw: Option<String>) -> Result<Invoke, ConfigError> {
    match raw.as_deref() {
        None | Some("fcall") => Ok(Invoke::Fcall),
        Some("evalsha") => Ok(Invoke::Evalsha),
        Some(other) => fail("valkey.invoke", format!("unknown value {other:?}, expected one of fcall, evalsha")),
    }
}

fn overload(raw: Option<String>) -> Result<Overload, ConfigError> {
    match raw.as_deref() {
        None | Some("reject") => Ok(Overload::Reject),
        Some("allow") => Ok(Overload::Allow),
        Some(other) => fail("overload", format!("unknown value {other:?}, expected one of reject, allow")),
    }
}

/// `local_limiter`, which only `failure_mode: local` uses (`mode` is `None`
/// when the failure mode itself was invalid: nothing to compare with).
fn local_limiter(raw: Option<RawLocalLimiter>, mode: Option<FailureMode>) -> Result<LocalLimiterConfig, ConfigError> {
    let Some(raw) = raw else { return Ok(LocalLimiterConfig::default()) };
    if mode.is_some_and(|m| m != FailureMode::Local) {
        return fail("local_limiter", r#"applies only with "failure_mode": "local""#);
    }
    let share_ppm = match raw.share {
        None => DEFAULT_LOCAL_SHARE_PPM,
        Some(number) => match number.as_f64().filter(|x| x.is_finite() && *x > 0.0 && *x <= 1.0) {
            // At least one millionth: a share above 0 never rounds to none.
            Some(x) => ((x * 1_000_000.0).round() as u32).max(1),
            None => return fail("local_limiter.share", format!("must be > 0 and <= 1 (got {number})")),
        },
    };
    let max_keys = bounded_count("local_limiter.max_keys", raw.max_keys, DEFAULT_LOCAL_KEYS, LOCAL_KEYS_BOUNDS)?;
    Ok(LocalLimiterConfig { share_ppm, max_keys })
}

/// Every rule, each checked on its own (a rule's error does not hide the
/// next rule's); `None` when any failed.
fn rules(raw: Vec<RawRule>, errors: &mut Vec<ConfigError>) -> Option<Vec<Rule>> {
    if raw.is_empty() {
        errors.push(ConfigError::new("rules", "must not be empty"));
        return None;
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::with_capacity(raw.len());
    let mut ok = true;
    for (i, rule_raw) in raw.into_iter().enumerate() {
        match rule(i, rule_raw, &mut seen) {
            Ok(rule) => out.push(rule),
            Err(err) => {
                errors.push(err);
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

fn rule(i: usize, raw: RawRule, seen: &mut BTreeMap<String, usize>) -> Result<Rule, ConfigError> {
    let path = format!("rules[{i}].name");
    let name = name_like(&path, raw.name)?;
    if let Some(first) = seen.get(&name) {
        return fail(path, format!("duplicate rule name {name:?} (also rules[{first}].name)"));
    }
    seen.insert(name.clone(), i);
    let matcher = matcher(i, raw.r#match)?;
    let key = key(i, raw.key)?;
    let limits = limits(i, raw.limits)?;
    let algorithm = algorithm(i, raw.algorithm)?;
    let cost_given = raw.cost.is_some();
    let cost = cost(i, raw.cost.as_ref(), algorithm, &limits)?;
    windows_fit(i, algorithm, cost, &limits)?;
    let shadow = raw.shadow.unwrap_or(false);
    let hash_tag = hash_tag(i, raw.hash_tag, key.len())?;
    let count = count(i, raw.count, algorithm, &limits)?;
    if cost_given && count.as_ref().is_some_and(|c| c.cost.is_some()) {
        return fail(
            format!("rules[{i}].cost"),
            format!("does not apply with rules[{i}].count.cost: the response says what a request costs"),
        );
    }
    let sync = sync_policy(i, raw.sync, &limits, count.is_some(), raw.shape.is_some())?;
    let shaping = shaping(i, raw.shape, shadow)?;
    let concurrency = concurrency(i, raw.concurrency, &name, sync.is_some())?;
    let overrides = overrides(i, raw.overrides, sync.is_some())?;
    let policy_names: Vec<String> = limits.iter().map(|l| format!("{name}/{}", l.period.label())).collect();
    let policy_items = limits
        .iter()
        .zip(&policy_names)
        .map(|(l, name)| crate::answer::headers::policy_item(name, l.limit.get(), l.period.ms().get()))
        .collect();
    let key_name = KeyName::new(&name);
    let windows = limits.iter().map(|l| Window { limit: l.limit, period_ms: l.period.ms() }).collect();
    let quoted_names = policy_names.iter().map(|n| crate::answer::headers::sf_string(n)).collect();
    Ok(Rule {
        name,
        matcher,
        key,
        limits,
        algorithm,
        cost,
        shadow,
        hash_tag,
        count,
        shaping,
        sync,
        policy_names,
        policy_items,
        key_name,
        windows,
        quoted_names,
        concurrency,
        overrides,
    })
}

/// `rules[i].hash_tag`: the index of one of the rule's `parts` key parts.
fn hash_tag(i: usize, raw: Option<u64>, parts: usize) -> Result<Option<usize>, ConfigError> {
    let Some(index) = raw else { return Ok(None) };
    let path = format!("rules[{i}].hash_tag");
    match usize::try_from(index).ok().filter(|n| *n < parts) {
        Some(n) => Ok(Some(n)),
        None if parts == 0 => fail(path, "the rule has no key parts to take a hash tag from"),
        None => fail(
            path,
            format!("must be the index of one of the rule's {parts} key parts, 0 to {} (got {index})", parts - 1),
        ),
    }
}

fn limits(i: usize, raw: Vec<RawLimit>) -> Result<Vec<Limit>, ConfigError> {
    let path = format!("rules[{i}].limits");
    if raw.is_empty() {
        return fail(path, "must not be empty");
    }
    if raw.len() > MAX_WINDOWS {
        return fail(path, format!("must have at most {MAX_WINDOWS} windows (got {})", raw.len()));
    }
    let mut out: Vec<Limit> = Vec::with_capacity(raw.len());
    for (j, window) in raw.into_iter().enumerate() {
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

fn testing(raw: Option<RawTesting>) -> Result<Testing, ConfigError> {
    let Some(raw) = raw else {
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
    use super::super::duration::parse_str;
    use super::*;

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn max_labels_match_the_constants() {
        assert_eq!(parse_str(MAX_TIMEOUT_LABEL), Ok(MAX_TIMEOUT_MS));
        assert_eq!(parse_str(MAX_PERIOD_LABEL), Ok(MAX_PERIOD_MS));
    }
}
