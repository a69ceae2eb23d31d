//! `tollgate inspect FILE --rule R --key part=value... --store ADDR [--json]`:
//! what the store holds for one bucket and what its next request would get.
//!
//! Per window, the numbers come from the limiter's own dry run (`peek`, the
//! decision run without recording: [`peek`]); beside them the raw state
//! read directly: the lease set (lease ids and expiries), a synced rule's
//! syncer set (syncers and expiries) and the override hash. The verdict's
//! headers are the filter's own ([`crate::answer::response`]), as `explain`
//! shows them.

pub mod show;

use super::args::config;
use super::args::Args;
use super::bucket::{self, Bucket};
use super::failure::emit;
use super::failure::Failure;
use super::overrides::rule_allows_overrides;
use super::store::{check, Client};
use crate::key::syncers_key;
use crate::limiter::reply::parse;
use crate::limiter::script::{encode_peek, encode_shaped_peek, is_missing, limiter, Invocation};
use crate::limiter::{Algorithm, Check, Decision};
use crate::resp::{decode, Limits, Value};
use crate::store::printable;
use std::io::Write;
use std::num::NonZeroU64;
use std::rc::Rc;

/// The lease id the dry run is given: never recorded.
pub const PEEK_LEASE_ID: &str = "tollgate-inspect";

/// What the store holds beside the windows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Raw {
    /// The window key's remaining time to live (ms; -2: absent, -1: none).
    pub window_ttl_ms: i64,
    /// Lease ids and their expiries (ms since the epoch).
    pub leases: Option<Vec<(String, u64)>>,
    /// Syncers and their expiries (a synced rule).
    pub syncers: Option<Vec<(String, u64)>>,
    /// The override hash's fields (empty: none).
    pub override_fields: Vec<(String, String)>,
}

/// The checks a request of this bucket would make, as planning makes them:
/// the window check, then the lease check (with the inspect lease id), each
/// with the override key when the rule reads overrides.
pub fn checks(bucket: &Bucket) -> Vec<Check> {
    let rule = bucket.rule;
    let override_key: Option<Rc<str>> = rule_allows_overrides(rule).then(|| Rc::from(bucket.override_key()));
    let mut checks = vec![Check {
        rule: bucket.index,
        key: bucket.window_key(),
        windows: Rc::clone(&rule.windows),
        cost: rule.cost,
        algorithm: rule.algorithm,
        check_only: false,
        lease: None,
        override_key: override_key.clone(),
    }];
    if let (Some(c), Some(key)) = (&rule.concurrency, bucket.lease_key()) {
        checks.push(Check {
            rule: bucket.index,
            key,
            windows: Rc::clone(&c.window),
            cost: NonZeroU64::MIN,
            algorithm: Algorithm::Lease,
            check_only: false,
            lease: Some(Rc::from(PEEK_LEASE_ID)),
            override_key,
        });
    }
    checks
}

/// The limiter's dry run of `checks` at `at_ms` (`None`: the store's
/// clock): what decide would answer, with nothing recorded. The command is
/// the filter's own encoding (`encode_peek`, or `encode_shaped_peek` for a
/// shaped rule), sent as `FCALL_RO <library>_peek` (a `no-writes`
/// function: a read-only ACL may run it); where the library is not loaded
/// (the filter has not run against this server yet, or runs another
/// version), as `EVAL_RO` of the script. The CLI never loads code.
pub fn peek(
    client: &mut Client,
    checks: &[Check],
    shape: Option<u64>,
    at_ms: Option<u64>,
) -> Result<Decision, Failure> {
    let Some(first) = checks.first() else {
        return Err(Failure { code: 1, message: "no checks to ask about".to_owned() });
    };
    let encode = |how: Invocation| -> Result<Vec<Vec<u8>>, Failure> {
        let mut out = Vec::new();
        match shape {
            Some(max_delay_ms) => encode_shaped_peek(&mut out, limiter(), how, checks, (max_delay_ms, 0), at_ms),
            None => encode_peek(&mut out, limiter(), how, checks, at_ms),
        }
        let (command, _) = decode(&out, &Limits::default())
            .map_err(|e| Failure { code: 1, message: format!("encoding the dry run: {e}") })?;
        let mut args: Vec<Vec<u8>> =
            command.as_array().unwrap_or_default().iter().filter_map(|a| a.as_bytes().map(<[u8]>::to_vec)).collect();
        // The read-only verbs: FCALL_RO, EVAL_RO.
        if let Some(verb) = args.first_mut() {
            verb.extend_from_slice(b"_RO");
        }
        Ok(args)
    };
    let mut reply = Value::Nil;
    for how in [Invocation::FCall, Invocation::Eval] {
        let args = encode(how)?;
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        reply = client.call(&first.key, &args, "the dry run (FCALL_RO)")?;
        if !is_missing(&reply) {
            break;
        }
    }
    if let Some(error) = reply.as_error() {
        let text = printable(error, 300);
        // An ACL refusing a command the function runs is a refusal too.
        let code = if reply.error_kind() == Some("NOPERM") || text.contains("ACL failure") { 5 } else { 1 };
        return Err(Failure { code, message: format!("the store answered the dry run: {text}") });
    }
    parse(&reply, checks).map_err(|e| Failure { code: 1, message: format!("the store's dry run: {e}") })
}

/// Reads the raw state of `bucket`.
pub fn raw(client: &mut Client, bucket: &Bucket) -> Result<Raw, Failure> {
    let window = bucket.window_key();
    let ttl = client.call(&window, &[b"PTTL", window.as_bytes()], "PTTL")?;
    let mut raw = Raw { window_ttl_ms: ttl.as_integer().unwrap_or(-2), ..Raw::default() };
    if let Some(lease) = bucket.lease_key() {
        raw.leases = Some(scored(client, &lease)?);
    }
    if bucket.rule.sync.is_some() {
        raw.syncers = Some(scored(client, &syncers_key(&window))?);
    }
    let ovr = bucket.override_key();
    let reply = check(client.call(&ovr, &[b"HGETALL", ovr.as_bytes()], "HGETALL")?, "the store", "HGETALL")?;
    let text = |v: &Value| String::from_utf8_lossy(v.as_bytes().unwrap_or_default()).into_owned();
    raw.override_fields = reply
        .as_array()
        .unwrap_or_default()
        .chunks(2)
        .filter_map(|c| Some((text(c.first()?), text(c.get(1)?))))
        .collect();
    Ok(raw)
}

/// `ZRANGE key 0 -1 WITHSCORES` as (member, score).
fn scored(client: &mut Client, key: &str) -> Result<Vec<(String, u64)>, Failure> {
    let reply = client.call(key, &[b"ZRANGE", key.as_bytes(), b"0", b"-1", b"WITHSCORES"], "ZRANGE")?;
    let reply = check(reply, "the store", "ZRANGE")?;
    let text = |v: &Value| String::from_utf8_lossy(v.as_bytes().unwrap_or_default()).into_owned();
    Ok(reply
        .as_array()
        .unwrap_or_default()
        .chunks(2)
        .filter_map(|c| {
            let score = text(c.get(1)?);
            let score = score.parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0)? as u64;
            Some((text(c.first()?), score))
        })
        .collect())
}

pub fn run(args: &Args, out: &mut dyn Write) -> Result<(), Failure> {
    let config = config(args)?;
    let bucket = bucket::resolve(&config, args.rule()?, &args.keys)?;
    let mut client = Client::connect(&args.address()?)?;
    let raw = raw(&mut client, &bucket)?;
    let checks = checks(&bucket);
    let at = args.at_ms()?;
    let shape = bucket.rule.shaping.as_ref().map(|s| s.max_delay_ms);
    let verdict = peek(&mut client, &checks, shape, at);
    let now = at.unwrap_or_else(super::clock::now_ms);
    let text = if args.json {
        show::json(&config, &bucket, &checks, &raw, verdict.as_ref().ok(), now)
    } else {
        show::text(&config, &bucket, &checks, &raw, verdict.as_ref().ok(), now)
    };
    emit(out, &text)?;
    verdict.map(|_| ())
}
