//! The fields the oracle (`oracle_raw.rs`) knows, declared the way
//! `raw.rs` declares the configuration's, for the reader to read in
//! `oracle.rs`. Frozen with the oracle: one struct per struct of
//! `oracle_raw.rs`, the same fields in the same order, never updated when the
//! configuration grows.
#![allow(dead_code)]

use serde_json::Number;

use super::super::shape::{objects, RawDuration, StrOrObj};

objects! {
    RawConfig {
        valkey: RawValkey,
        failure_mode: Option<String>,
        rules: Vec<RawRule>,
        response: Option<RawResponse>,
        shadow: Option<bool>,
        denial_cache: Option<RawDenialCache>,
        testing: Option<RawTesting>,
    }

    RawValkey {
        cluster: String,
        timeout: Option<RawDuration>,
        key_prefix: Option<String>,
        max_in_flight: Option<u64>,
        max_batch: Option<u64>,
        max_queue: Option<u64>,
        username: Option<String>,
        password_env: Option<String>,
        sentinel: Option<RawSentinel>,
    }

    RawSentinel {
        cluster: String,
        master_name: String,
        refresh: Option<RawDuration>,
    }

    RawDenialCache {
        max_keys: Option<u64>,
    }

    RawRule {
        name: String,
        r#match: Option<RawMatch>,
        key: Option<Vec<StrOrObj<RawKeyPart>>>,
        limits: Vec<RawLimit>,
        algorithm: Option<String>,
        cost: Option<Number>,
        shadow: Option<bool>,
    }

    RawMatch {
        path: Option<String>,
        path_prefix: Option<String>,
        path_regex: Option<String>,
        methods: Option<Vec<String>>,
        authority: Option<String>,
        headers: Option<Vec<RawHeaderMatch>>,
    }

    RawHeaderMatch {
        name: String,
        present: Option<bool>,
        exact: Option<String>,
        prefix: Option<String>,
        regex: Option<String>,
        invert: Option<bool>,
    }

    RawKeyPart {
        header: Option<String>,
        query: Option<String>,
        cookie: Option<String>,
        remote_address: Option<RawPrefixes>,
        forwarded_for: Option<RawForwardedFor>,
        literal: Option<String>,
        property: Option<Vec<String>>,
        on_missing: Option<StrOrObj<RawOnMissing>>,
    }

    RawPrefixes {
        v4_prefix: Option<u32>,
        v6_prefix: Option<u32>,
    }

    RawForwardedFor {
        trusted_hops: Option<u32>,
        v4_prefix: Option<u32>,
        v6_prefix: Option<u32>,
    }

    RawOnMissing {
        default: String,
    }

    RawResponse {
        status: Option<u64>,
        headers: Option<Vec<String>>,
        body: Option<String>,
        text: Option<String>,
        on_allowed: Option<bool>,
        filter_state: Option<bool>,
    }

    RawLimit {
        limit: Number,
        period: RawDuration,
    }

    RawTesting {
        now_header: Option<String>,
    }
}
