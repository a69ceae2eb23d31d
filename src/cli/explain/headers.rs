//! The headers a client of one rule sees, from the pure model and the
//! filter's own response builders: a first request, then requests at once
//! (each still in flight, holding its lease) until one is denied.

use crate::answer::response;
use crate::config::{Config, Rule};
use crate::limiter::model::Model;
use crate::limiter::{Algorithm, Check, Window};
use std::num::NonZeroU64;
use std::rc::Rc;

/// When the example requests happen: the start of a day, so that aligned
/// windows (`fixed_window`, `sliding_window`) start there too.
const T0: u64 = 20_833 * 86_400_000;
/// Bursts replayed through the model at most (larger ones are described).
const MAX_REPLAYED_BURST: u64 = 10_000;

/// The rule's checks, as planning makes them: its windows, then its lease
/// set, with the lease id of request `n`.
fn checks(index: usize, rule: &Rule, n: u64) -> Vec<Check> {
    let mut checks = vec![Check {
        rule: index,
        key: "explain".to_owned(),
        windows: rule.limits.iter().map(|l| Window { limit: l.limit, period_ms: l.period.ms() }).collect(),
        cost: rule.cost,
        algorithm: rule.algorithm,
        check_only: false,
        lease: None,
        override_key: None,
    }];
    if let Some(c) = &rule.concurrency {
        checks.push(Check {
            rule: index,
            key: "explain:lease".to_owned(),
            windows: Rc::clone(&c.window),
            cost: NonZeroU64::MIN,
            algorithm: Algorithm::Lease,
            check_only: false,
            lease: Some(Rc::from(format!("explain-{n}"))),
            override_key: None,
        });
    }
    checks
}

pub(super) fn headers(config: &Config, index: usize, rule: &Rule) -> String {
    let checks = checks(index, rule, 1);
    let mut model = Model::new();
    let first = model.decide(&checks, T0);
    let mut out = String::from("  a client sees, for a request matching only this rule:\n");
    let admitted = response::allowed_headers(config, &response::policy_names(config, &checks, &first), &first);
    out.push_str("    first request: 200");
    out.push_str(&if admitted.is_empty() { " (no rate-limit headers)\n".to_owned() } else { "\n".to_owned() });
    for (k, v) in admitted {
        out.push_str(&format!("      {k}: {v}\n"));
    }
    let leases = rule.concurrency.as_ref().map_or(u64::MAX, |c| c.limit.get());
    let burst = rule.limits.iter().map(|l| l.limit.get() / rule.cost.get()).min().unwrap_or(0).min(leases);
    if burst >= MAX_REPLAYED_BURST {
        out.push_str(&format!("    (a burst of {burst} is not replayed here)\n"));
        return out;
    }
    for n in 2..=burst + 1 {
        let checks = self::checks(index, rule, n);
        let decision = model.decide(&checks, T0);
        if decision.allowed {
            continue;
        }
        let denied: Vec<String> = response::policy_names(config, &checks, &decision)
            .iter()
            .zip(&decision.windows)
            .filter(|(_, w)| w.denied())
            .map(|(name, _)| (*name).to_owned())
            .collect();
        if rule.shadow || config.shadow {
            out.push_str(&format!(
                "    request {n} at once: 200, shadow mode (would be denied by {})\n",
                denied.join(", ")
            ));
            break;
        }
        let reply = response::denied(config, &response::policy_names(config, &checks, &decision), &decision);
        out.push_str(&format!("    request {n} at once: {} (denied by {})\n", reply.status, denied.join(", ")));
        for (k, v) in &reply.headers {
            out.push_str(&format!("      {k}: {v}\n"));
        }
        if !reply.body.is_empty() {
            out.push_str(&format!("      body: {}\n", String::from_utf8_lossy(&reply.body).trim_end()));
        }
        break;
    }
    out
}
