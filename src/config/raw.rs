//! The document as written, after the shape check: plain structs that mirror
//! [`shape`](super::shape) one to one and carry no meaning of their own.
//! Every check beyond "this is the right JSON type" happens in
//! [`super::validate`] and its parts.
//!
//! Values whose checks need full control over the message (durations, the
//! failure mode, limits and costs) are kept loosely typed here ([`Loose`],
//! [`String`], [`Number`]).

use serde_json::Number;

pub(crate) use super::read::Loose;
use super::read::{Fields, Node};

/// The whole document.
#[derive(Debug)]
pub(crate) struct RawConfig {
    pub(crate) valkey: RawValkey,
    pub(crate) failure_mode: Option<String>,
    pub(crate) local_limiter: Option<RawLocalLimiter>,
    pub(crate) overload: Option<String>,
    pub(crate) rules: Vec<RawRule>,
    pub(crate) response: Option<RawResponse>,
    pub(crate) shadow: Option<bool>,
    pub(crate) denial_cache_max_keys: Option<Option<u64>>,
    pub(crate) max_body_bytes: Option<u64>,
    pub(crate) testing: Option<RawTesting>,
}

/// `local_limiter`.
#[derive(Debug)]
pub(crate) struct RawLocalLimiter {
    pub(crate) share: Option<Number>,
    pub(crate) max_keys: Option<u64>,
}

/// `valkey`.
#[derive(Debug)]
pub(crate) struct RawValkey {
    pub(crate) cluster: String,
    pub(crate) timeout: Option<Loose>,
    pub(crate) key_prefix: Option<String>,
    pub(crate) max_in_flight: Option<u64>,
    pub(crate) max_batch: Option<u64>,
    pub(crate) max_queue: Option<u64>,
    pub(crate) invoke: Option<String>,
    pub(crate) username: Option<String>,
    pub(crate) password_env: Option<String>,
    pub(crate) sentinel: Option<RawSentinel>,
    pub(crate) cluster_mode: Option<RawClusterMode>,
}

/// `valkey.sentinel`.
#[derive(Debug)]
pub(crate) struct RawSentinel {
    pub(crate) cluster: String,
    pub(crate) master_name: String,
    pub(crate) refresh: Option<Loose>,
}

/// `valkey.cluster_mode`.
#[derive(Debug)]
pub(crate) struct RawClusterMode {
    pub(crate) seeds: String,
    pub(crate) refresh: Option<Loose>,
}

/// `rules[i]`.
#[derive(Debug)]
pub(crate) struct RawRule {
    pub(crate) name: String,
    pub(crate) matcher: Option<RawMatch>,
    pub(crate) key: Option<Vec<RawKeyPart>>,
    pub(crate) limits: Vec<RawLimit>,
    pub(crate) algorithm: Option<String>,
    pub(crate) cost: Option<Number>,
    pub(crate) shadow: Option<bool>,
    pub(crate) hash_tag: Option<u64>,
    pub(crate) count: Option<RawCount>,
}

/// `rules[i].count`.
#[derive(Debug)]
pub(crate) struct RawCount {
    pub(crate) status: Option<Vec<Loose>>,
    pub(crate) header: Option<RawHeaderMatch>,
    pub(crate) reserve: Option<RawReserve>,
    pub(crate) cost: Option<RawCost>,
}

/// `rules[i].count.reserve`.
#[derive(Debug)]
pub(crate) struct RawReserve {
    pub(crate) units: Option<Number>,
    pub(crate) header: Option<String>,
    pub(crate) body: Option<String>,
    pub(crate) default: Option<Number>,
}

/// `rules[i].count.cost`.
#[derive(Debug)]
pub(crate) struct RawCost {
    pub(crate) header: Option<String>,
    pub(crate) body: Option<String>,
}

/// `rules[i].match`.
#[derive(Debug)]
pub(crate) struct RawMatch {
    pub(crate) path: Option<String>,
    pub(crate) path_prefix: Option<String>,
    pub(crate) path_regex: Option<String>,
    pub(crate) methods: Option<Vec<String>>,
    pub(crate) authority: Option<String>,
    pub(crate) headers: Option<Vec<RawHeaderMatch>>,
}

/// `rules[i].match.headers[j]`.
#[derive(Debug)]
pub(crate) struct RawHeaderMatch {
    pub(crate) name: String,
    pub(crate) present: Option<bool>,
    pub(crate) exact: Option<String>,
    pub(crate) prefix: Option<String>,
    pub(crate) regex: Option<String>,
    pub(crate) invert: Option<bool>,
}

/// `rules[i].key[j]`: a name (`"path"`, `"method"`, `"authority"`) or an
/// object with one source field, plus `on_missing`.
#[derive(Debug)]
pub(crate) enum RawKeyPart {
    Named(String),
    Object(RawKeySource),
}

/// `rules[i].key[j]` in object form.
#[derive(Debug)]
pub(crate) struct RawKeySource {
    pub(crate) header: Option<String>,
    pub(crate) query: Option<String>,
    pub(crate) cookie: Option<String>,
    pub(crate) remote_address: Option<RawPrefixes>,
    pub(crate) forwarded_for: Option<RawForwardedFor>,
    pub(crate) literal: Option<String>,
    pub(crate) property: Option<Vec<String>>,
    /// `"skip_rule"` (or another name, an error) or `{ "default": VALUE }`.
    pub(crate) on_missing: Option<Result<String, String>>,
}

/// `remote_address`.
#[derive(Debug)]
pub(crate) struct RawPrefixes {
    pub(crate) v4_prefix: Option<u32>,
    pub(crate) v6_prefix: Option<u32>,
}

/// `forwarded_for`.
#[derive(Debug)]
pub(crate) struct RawForwardedFor {
    pub(crate) trusted_hops: Option<u32>,
    pub(crate) prefixes: RawPrefixes,
}

/// `response`.
#[derive(Debug)]
pub(crate) struct RawResponse {
    pub(crate) status: Option<u64>,
    pub(crate) headers: Option<Vec<String>>,
    pub(crate) body: Option<String>,
    pub(crate) text: Option<String>,
    pub(crate) on_allowed: Option<bool>,
}

/// `rules[i].limits[j]`.
#[derive(Debug)]
pub(crate) struct RawLimit {
    pub(crate) limit: Number,
    pub(crate) period: Loose,
}

/// `testing`.
#[derive(Debug)]
pub(crate) struct RawTesting {
    pub(crate) now_header: Option<String>,
}

/// The objects of an array field (its shape holds only objects).
fn objects(items: Option<Vec<Node>>) -> impl Iterator<Item = Fields> {
    items.unwrap_or_default().into_iter().filter_map(|node| if let Node::Obj(f) = node { Some(f) } else { None })
}

impl RawConfig {
    /// The document's values; `f` passed the shape check of `shape::CONFIG`,
    /// so every required field is there (`None` otherwise).
    pub(crate) fn from_fields(mut f: Fields) -> Option<RawConfig> {
        Some(RawConfig {
            valkey: RawValkey::from_fields(f.obj("valkey")?)?,
            failure_mode: f.str("failure_mode"),
            local_limiter: f
                .obj("local_limiter")
                .map(|mut l| RawLocalLimiter { share: l.number("share"), max_keys: l.u64("max_keys") }),
            overload: f.str("overload"),
            rules: objects(f.arr("rules")).map(RawRule::from_fields).collect::<Option<_>>()?,
            response: f.obj("response").map(RawResponse::from_fields),
            shadow: f.bool("shadow"),
            denial_cache_max_keys: f.obj("denial_cache").map(|mut c| c.u64("max_keys")),
            max_body_bytes: f.u64("max_body_bytes"),
            testing: f.obj("testing").map(|mut t| RawTesting { now_header: t.str("now_header") }),
        })
    }
}

impl RawValkey {
    fn from_fields(mut f: Fields) -> Option<RawValkey> {
        let sentinel = match f.obj("sentinel") {
            None => None,
            Some(mut s) => Some(RawSentinel {
                cluster: s.str("cluster")?,
                master_name: s.str("master_name")?,
                refresh: s.duration("refresh"),
            }),
        };
        let cluster_mode = match f.obj("cluster_mode") {
            None => None,
            Some(mut c) => Some(RawClusterMode { seeds: c.str("seeds")?, refresh: c.duration("refresh") }),
        };
        Some(RawValkey {
            cluster: f.str("cluster")?,
            timeout: f.duration("timeout"),
            key_prefix: f.str("key_prefix"),
            max_in_flight: f.u64("max_in_flight"),
            max_batch: f.u64("max_batch"),
            max_queue: f.u64("max_queue"),
            invoke: f.str("invoke"),
            username: f.str("username"),
            password_env: f.str("password_env"),
            sentinel,
            cluster_mode,
        })
    }
}

impl RawRule {
    fn from_fields(mut f: Fields) -> Option<RawRule> {
        let matcher = match f.obj("match") {
            None => None,
            Some(mut m) => Some(RawMatch {
                path: m.str("path"),
                path_prefix: m.str("path_prefix"),
                path_regex: m.str("path_regex"),
                methods: m.strings("methods"),
                authority: m.str("authority"),
                headers: match m.arr("headers") {
                    None => None,
                    Some(h) => Some(objects(Some(h)).map(RawHeaderMatch::from_fields).collect::<Option<_>>()?),
                },
            }),
        };
        let key = match f.arr("key") {
            None => None,
            Some(parts) => Some(parts.into_iter().map(RawKeyPart::from_node).collect::<Option<_>>()?),
        };
        let limits = objects(f.arr("limits"))
            .map(|mut l| Some(RawLimit { limit: l.number("limit")?, period: l.duration("period")? }))
            .collect::<Option<_>>()?;
        let count = match f.obj("count") {
            None => None,
            Some(mut c) => Some(RawCount {
                status: c.loose_items("status"),
                header: match c.obj("header") {
                    None => None,
                    Some(h) => Some(RawHeaderMatch::from_fields(h)?),
                },
                reserve: c.obj("reserve").map(|mut r| RawReserve {
                    units: r.number("units"),
                    header: r.str("header"),
                    body: r.str("body"),
                    default: r.number("default"),
                }),
                cost: c.obj("cost").map(|mut k| RawCost { header: k.str("header"), body: k.str("body") }),
            }),
        };
        Some(RawRule {
            name: f.str("name")?,
            matcher,
            key,
            limits,
            algorithm: f.str("algorithm"),
            cost: f.number("cost"),
            shadow: f.bool("shadow"),
            hash_tag: f.u64("hash_tag"),
            count,
        })
    }
}

impl RawHeaderMatch {
    fn from_fields(mut h: Fields) -> Option<RawHeaderMatch> {
        Some(RawHeaderMatch {
            name: h.str("name")?,
            present: h.bool("present"),
            exact: h.str("exact"),
            prefix: h.str("prefix"),
            regex: h.str("regex"),
            invert: h.bool("invert"),
        })
    }
}

impl RawKeyPart {
    fn from_node(node: Node) -> Option<RawKeyPart> {
        let mut f = match node {
            Node::Str(name) => return Some(RawKeyPart::Named(name)),
            Node::Obj(f) => f,
            _ => return None,
        };
        let prefixes = |mut p: Fields| RawPrefixes { v4_prefix: p.u32("v4_prefix"), v6_prefix: p.u32("v6_prefix") };
        Some(RawKeyPart::Object(RawKeySource {
            header: f.str("header"),
            query: f.str("query"),
            cookie: f.str("cookie"),
            remote_address: f.obj("remote_address").map(prefixes),
            forwarded_for: f
                .obj("forwarded_for")
                .map(|mut p| RawForwardedFor { trusted_hops: p.u32("trusted_hops"), prefixes: prefixes(p) }),
            literal: f.str("literal"),
            property: f.strings("property"),
            on_missing: match f.str_or_obj("on_missing") {
                None => None,
                Some(Ok(name)) => Some(Ok(name)),
                Some(Err(mut d)) => Some(Err(d.str("default")?)),
            },
        }))
    }
}

impl RawResponse {
    fn from_fields(mut f: Fields) -> RawResponse {
        RawResponse {
            status: f.u64("status"),
            headers: f.strings("headers"),
            body: f.str("body"),
            text: f.str("text"),
            on_allowed: f.bool("on_allowed"),
        }
    }
}
