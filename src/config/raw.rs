//! The document as written: one struct per JSON object, each field named and
//! typed as in the document. These declarations are the only place a field
//! is named: [`objects!`] makes each struct's [`Shape`](super::shape::Shape)
//! (what the reader accepts, and the JSON Schema) from them, and stage 2
//! ([`super::validate`] and its parts) reads the struct fields, so reading a
//! field under a wrong name does not compile. Adding a field is one line
//! here, plus its validation and its schema description.
//!
//! The structs carry no meaning of their own: every check beyond "this is
//! the right JSON type" happens in stage 2. Values whose checks need full
//! control over the message (durations, the failure mode, limits and costs)
//! are kept loosely typed here ([`RawDuration`], [`Loose`], [`String`],
//! [`Number`]).
//!
//! Field order is shape order: the order of "expected one of ..." in unknown
//! field errors and of missing field errors.

#![deny(dead_code)]

use serde_json::Number;

pub(crate) use super::node::Loose;
use super::shape::objects;
pub(crate) use super::shape::{NumOrObj, RawDuration, StrOrObj};

/// `rules[i].key[j]`: a name (`"path"`, `"method"`, `"authority"`) or an
/// object with one source field, plus `on_missing`.
pub(crate) type RawKeyPart = StrOrObj<RawKeySource>;

objects! {
    /// The whole document.
    RawConfig {
        valkey: RawValkey,
        failure_mode: Option<String>,
        local_limiter: Option<RawLocalLimiter>,
        overload: Option<String>,
        rules: Vec<RawRule>,
        response: Option<RawResponse>,
        shadow: Option<bool>,
        denial_cache: Option<RawDenialCache>,
        max_body_bytes: Option<u64>,
        testing: Option<RawTesting>,
    }

    /// `valkey`.
    RawValkey {
        cluster: String,
        timeout: Option<RawDuration>,
        key_prefix: Option<String>,
        max_in_flight: Option<u64>,
        max_batch: Option<u64>,
        max_messages_in_flight: Option<u64>,
        max_queue: Option<u64>,
        invoke: Option<String>,
        username: Option<String>,
        password_env: Option<String>,
        sentinel: Option<RawSentinel>,
        cluster_mode: Option<RawClusterMode>,
    }

    /// `valkey.sentinel`.
    RawSentinel {
        cluster: String,
        master_name: String,
        refresh: Option<RawDuration>,
    }

    /// `valkey.cluster_mode`.
    RawClusterMode {
        seeds: String,
        refresh: Option<RawDuration>,
    }

    /// `denial_cache`.
    RawDenialCache {
        max_keys: Option<u64>,
    }

    /// `local_limiter`.
    RawLocalLimiter {
        share: Option<Number>,
        max_keys: Option<u64>,
    }

    /// `rules[i]`.
    RawRule {
        name: String,
        r#match: Option<RawMatch>,
        key: Option<Vec<RawKeyPart>>,
        limits: Vec<RawLimit>,
        algorithm: Option<String>,
        cost: Option<Number>,
        shadow: Option<bool>,
        hash_tag: Option<u64>,
        count: Option<RawCount>,
        shape: Option<RawShape>,
        sync: Option<RawSync>,
        concurrency: Option<NumOrObj<RawConcurrency>>,
        overrides: Option<bool>,
    }

    /// `rules[i].concurrency` in object form (the number form is `limit`).
    RawConcurrency {
        limit: Number,
        lease_ttl: Option<RawDuration>,
    }

    /// `rules[i].sync`: decide locally, sync every interval.
    RawSync {
        interval: RawDuration,
        max_keys: Option<u64>,
    }

    /// `rules[i].shape`: hold a request until it fits.
    RawShape {
        max_delay: RawDuration,
        max_waiting: Option<u64>,
    }

    /// `rules[i].count`: the rule counts what the response says.
    RawCount {
        /// Status codes (integers) and ranges (`"500-599"`).
        status: Option<Vec<Loose>>,
        header: Option<RawHeaderMatch>,
        reserve: Option<RawReserve>,
        cost: Option<RawCost>,
    }

    /// `rules[i].count.reserve`.
    RawReserve {
        units: Option<Number>,
        header: Option<String>,
        body: Option<String>,
        default: Option<Number>,
    }

    /// `rules[i].count.cost`.
    RawCost {
        header: Option<String>,
        body: Option<String>,
    }

    /// `rules[i].match`.
    RawMatch {
        path: Option<String>,
        path_prefix: Option<String>,
        path_regex: Option<String>,
        methods: Option<Vec<String>>,
        authority: Option<String>,
        headers: Option<Vec<RawHeaderMatch>>,
    }

    /// `rules[i].match.headers[j]` and `rules[i].count.header`.
    RawHeaderMatch {
        name: String,
        present: Option<bool>,
        exact: Option<String>,
        prefix: Option<String>,
        regex: Option<String>,
        invert: Option<bool>,
    }

    /// `rules[i].key[j]` in object form.
    RawKeySource {
        header: Option<String>,
        query: Option<String>,
        cookie: Option<String>,
        remote_address: Option<RawPrefixes>,
        forwarded_for: Option<RawForwardedFor>,
        literal: Option<String>,
        property: Option<Vec<String>>,
        /// `"skip_rule"` (or another name, an error) or `{ "default": VALUE }`.
        on_missing: Option<StrOrObj<RawOnMissing>>,
    }

    /// `remote_address`.
    RawPrefixes {
        v4_prefix: Option<u32>,
        v6_prefix: Option<u32>,
    }

    /// `forwarded_for`.
    RawForwardedFor {
        trusted_hops: Option<u32>,
        v4_prefix: Option<u32>,
        v6_prefix: Option<u32>,
    }

    /// `on_missing` in object form.
    RawOnMissing {
        default: String,
    }

    /// `rules[i].limits[j]`.
    RawLimit {
        limit: Number,
        period: RawDuration,
    }

    /// `response`.
    RawResponse {
        status: Option<u64>,
        headers: Option<Vec<String>>,
        body: Option<String>,
        text: Option<String>,
        on_allowed: Option<bool>,
        filter_state: Option<bool>,
    }

    /// `testing`.
    RawTesting {
        now_header: Option<String>,
    }
}

#[cfg(test)]
mod tests;
