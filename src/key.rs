//! The Valkey key of a rate-limit bucket.
//!
//! A bucket is one rule applied to one client, identified by the values the
//! rule's key parts took for the request (a header, an address...). Its key is
//! `<prefix>:{<rule>:<part1>:<part2>...}:<suffix>`, or `<prefix>:{<rule>}:<suffix>`
//! for a rule without parts. The `{...}` is the Redis Cluster hash tag, so every
//! key of one bucket (whatever the suffix) lands in the same slot and one Lua
//! script may touch them all.
//!
//! Part values come from requests and are untrusted, so each is encoded: bytes
//! in `[A-Za-z0-9._~-]` stay, every other byte becomes `%XX` (uppercase hex).
//! An encoded part therefore never contains `:`, `{`, `}`, `#`, whitespace,
//! control characters or non-ASCII, and the parts of a key can be split back
//! apart at `:` — distinct part lists give distinct keys. An encoded part
//! longer than [`MAX_PART_LEN`] bytes is replaced by `#` and the hex SHA-1 of
//! the raw value, which bounds the key's size (and stays unambiguous, since `#`
//! never appears in an encoded part). An empty value is an empty part.
//!
//! ```
//! use tollgate::key::bucket_key;
//!
//! assert_eq!(
//!     bucket_key("tollgate", "auth.createToken", &[b"alice"], "log"),
//!     "tollgate:{auth.createToken:alice}:log"
//! );
//! assert_eq!(
//!     bucket_key("tollgate", "api", &[b"10.0.0.1", b"a b:{c}"], "log"),
//!     "tollgate:{api:10.0.0.1:a%20b%3A%7Bc%7D}:log"
//! );
//! assert_eq!(bucket_key("tollgate", "global", &[], "log"), "tollgate:{global}:log");
//! // Huge values are hashed: the key stays small.
//! let key = bucket_key("tollgate", "api", &[&[b'x'; 65_536]], "log");
//! assert_eq!(key.len(), "tollgate:{api:#}:log".len() + 40);
//! ```

/// Longest encoded part kept as is; longer ones are replaced by `#<sha1 hex>`.
pub const MAX_PART_LEN: usize = 64;

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// A rule's name as its keys carry it: percent-encoded like a part (a
/// no-op for valid rule names, so that no rule name can ever forge another
/// rule's parts or close the hash tag), once, at configuration time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyName(String);

impl KeyName {
    pub fn new(rule: &str) -> KeyName {
        let mut name = String::with_capacity(encoded_len(rule.as_bytes()));
        push_encoded(&mut name, rule.as_bytes());
        KeyName(name)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Builds the key `<prefix>:{<rule>:<part>...}:<suffix>` of a bucket.
///
/// `prefix`, `rule` and `suffix` are trusted (validated by the configuration);
/// `rule` is nevertheless encoded ([`KeyName`]). Every part is encoded as
/// described in the [module docs](self).
pub fn bucket_key(prefix: &str, rule: &str, parts: &[&[u8]], suffix: &str) -> String {
    rule_key(prefix, &KeyName::new(rule), parts, None, suffix)
}

/// Builds the key `<prefix>:{<tag>}:<rule>:<part>...:<suffix>` of a bucket
/// whose hash tag is its part number `tag` alone (a rule's `hash_tag`), or
/// [`bucket_key`] when `tag` is `None` or names no part. Rules tagged by
/// the same value land in the same Valkey Cluster slot, so one call can
/// decide them together. The tag is the part as encoded in the key (`%` for
/// an empty value: an empty `{}` would hash the whole key); the parts that
/// follow make the key unique, and a tagged key never equals an untagged
/// one (after `}` an untagged key has only `:<suffix>`).
///
/// ```
/// use tollgate::key::tagged_bucket_key;
///
/// assert_eq!(tagged_bucket_key("tollgate", "api", &[b"alice", b"/x"], Some(0), "log"), "tollgate:{alice}:api:alice:%2Fx:log");
/// assert_eq!(tagged_bucket_key("tollgate", "api", &[b""], Some(0), "log"), "tollgate:{%}:api::log");
/// assert_eq!(tagged_bucket_key("tollgate", "api", &[b"alice"], None, "log"), "tollgate:{api:alice}:log");
/// ```
pub fn tagged_bucket_key(prefix: &str, rule: &str, parts: &[&[u8]], tag: Option<usize>, suffix: &str) -> String {
    rule_key(prefix, &KeyName::new(rule), parts, tag, suffix)
}

/// [`tagged_bucket_key`] (or [`bucket_key`] for no `tag`) of the rule
/// whose encoded name is `rule`.
pub fn rule_key(prefix: &str, rule: &KeyName, parts: &[&[u8]], tag: Option<usize>, suffix: &str) -> String {
    let tag = tag.and_then(|i| parts.get(i)).copied();
    let mut key = KeyBuilder::new(prefix, rule, (parts.len(), tag), suffix);
    for part in parts {
        key.part(part);
    }
    key.finish(suffix)
}

/// A key, `<prefix>:{<rule>:<part>...}:<suffix>` or, hash-tagged by one
/// part's value, `<prefix>:{<tag>}:<rule>:<part>...:<suffix>`, built as the
/// parts come (planning pushes each value as it reads it).
pub struct KeyBuilder {
    key: String,
    tagged: bool,
}

impl KeyBuilder {
    /// A key of `parts` parts of the rule `rule`, tagged by `tag` (the raw
    /// value of one of them) if given, ending in `suffix`.
    pub fn new(prefix: &str, rule: &KeyName, (parts, tag): (usize, Option<&[u8]>), suffix: &str) -> KeyBuilder {
        let room = room(prefix, rule, parts.saturating_add(usize::from(tag.is_some())), suffix);
        let mut key = String::with_capacity(room);
        key.push_str(prefix);
        key.push_str(":{");
        if let Some(tag) = tag {
            if tag.is_empty() {
                key.push('%');
            } else {
                push_part(&mut key, tag);
            }
            key.push_str("}:");
        }
        key.push_str(rule.as_str());
        KeyBuilder { key, tagged: tag.is_some() }
    }

    /// Appends the next part, encoded as the [module docs](self) say.
    pub fn part(&mut self, part: &[u8]) {
        self.key.push(':');
        push_part(&mut self.key, part);
    }

    pub fn finish(mut self, suffix: &str) -> String {
        self.key.push_str(if self.tagged { ":" } else { "}:" });
        self.key.push_str(suffix);
        self.key
    }
}

/// Room for a key of `parts` parts, each at its longest (encoded, or
/// hashed), so that it never grows.
fn room(prefix: &str, rule: &KeyName, parts: usize, suffix: &str) -> usize {
    let fixed = prefix.len().saturating_add(rule.0.len()).saturating_add(suffix.len()).saturating_add(4);
    fixed.saturating_add(parts.saturating_mul(MAX_PART_LEN + 1))
}

/// The token key of a flush whose first bucket key is `first_key`, for the
/// flushes of `name` (the worker's syncer name, or another name for
/// another series of its flushes): `<first_key>:flush:<name>`, in the slot
/// of `first_key`'s hash tag. One key per bucket and series: a worker has
/// at most one flush of a series unanswered per bucket, so a token is never
/// replaced before the flush it stands for is answered.
///
/// ```
/// use tollgate::key::flush_token_key;
///
/// assert_eq!(flush_token_key("tollgate:{api:alice}:log", "w1"), "tollgate:{api:alice}:log:flush:w1");
/// ```
pub fn flush_token_key(first_key: &str, name: &str) -> String {
    format!("{first_key}:flush:{name}")
}

/// The sorted set of the syncers of bucket `bucket_key` (`flush.lua`): in
/// its slot, since it keeps its hash tag.
pub fn syncers_key(bucket_key: &str) -> String {
    format!("{bucket_key}{SYNCERS_SUFFIX}")
}

/// What [`syncers_key`] appends to a bucket's key.
pub const SYNCERS_SUFFIX: &str = ":syncers";

/// The per-key override of the bucket whose key is `bucket_key` (a rule
/// with `"overrides": true`; `tollgate override set` writes it, the
/// decision reads it in the same call): the bucket's key with its suffix
/// (the algorithm's id) replaced by [`OVERRIDE_SUFFIX`], so one hash
/// serves the rule's window check and its lease check, in their slot.
///
/// ```
/// use tollgate::key::override_key;
///
/// assert_eq!(override_key("tollgate:{api:alice}:log"), "tollgate:{api:alice}:ovr");
/// assert_eq!(override_key("tollgate:{alice}:api:alice:lease"), "tollgate:{alice}:api:alice:ovr");
/// ```
pub fn override_key(bucket_key: &str) -> String {
    let base = bucket_key.rfind(':').map_or(bucket_key, |i| bucket_key.get(..i).unwrap_or(bucket_key));
    format!("{base}:{OVERRIDE_SUFFIX}")
}

/// The suffix of a bucket's override key ([`override_key`]).
pub const OVERRIDE_SUFFIX: &str = "ovr";

/// Appends one part: percent-encoded, or `#<sha1 hex>` when that is
/// longer than [`MAX_PART_LEN`] (a part longer than that raw is, since
/// encoding never shortens it).
fn push_part(key: &mut String, part: &[u8]) {
    let start = key.len();
    if part.len() <= MAX_PART_LEN {
        push_encoded(key, part);
        if key.len().saturating_sub(start) <= MAX_PART_LEN {
            return;
        }
        key.truncate(start);
    }
    key.push('#');
    key.push_str(&sha1_smol::Sha1::from(part).digest().to_string());
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-')
}

/// Length of the percent-encoded form of `bytes`.
fn encoded_len(bytes: &[u8]) -> usize {
    bytes.iter().map(|&b| if is_unreserved(b) { 1 } else { 3 }).fold(0, usize::saturating_add)
}

/// Appends `bytes` percent-encoded: unreserved bytes as is, others as `%XX`.
fn push_encoded(key: &mut String, bytes: &[u8]) {
    let mut rest = bytes;
    loop {
        // A run of unreserved bytes (ASCII, so always a str) in one copy.
        let run = rest.iter().position(|&b| !is_unreserved(b)).unwrap_or(rest.len());
        let (plain, tail) = rest.split_at(run);
        key.push_str(std::str::from_utf8(plain).unwrap_or_default());
        let Some((&b, tail)) = tail.split_first() else { return };
        let hex = |nibble: u8| HEX.get(usize::from(nibble)).copied().unwrap_or(b'0');
        let escaped = [b'%', hex(b >> 4), hex(b & 0x0f)];
        key.push_str(std::str::from_utf8(&escaped).unwrap_or_default());
        rest = tail;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn key(parts: &[&[u8]]) -> String {
        bucket_key("tollgate", "rule", parts, "log")
    }

    /// The encoded parts of a key built by [`key`].
    fn parts_of(key: &str) -> Vec<&str> {
        let inner = key.strip_prefix("tollgate:{rule").and_then(|k| k.strip_suffix("}:log")).unwrap();
        inner.split(':').skip(1).collect()
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn rules_tagged_by_one_value_share_a_slot_and_keep_distinct_keys() {
        use crate::store::cluster::key_slot;
        let long = [b'x'; 100];
        for value in [&b"alice"[..], b"", b"a b:{c}", &long] {
            let a = tagged_bucket_key("tollgate", "a", &[value], Some(0), "log");
            let b = tagged_bucket_key("tollgate", "b", &[b"t", value], Some(1), "gcra");
            assert_eq!(key_slot(a.as_bytes()), key_slot(b.as_bytes()), "{a} {b}");
            assert_ne!(a, tagged_bucket_key("tollgate", "a", &[value, b""], Some(0), "log"));
        }
        // Untagged keys of two rules hash their own tags.
        let (a, b) = (bucket_key("tollgate", "a", &[b"alice"], "log"), bucket_key("tollgate", "b", &[b"alice"], "log"));
        assert_ne!(key_slot(a.as_bytes()), key_slot(b.as_bytes()));
        // A tagged key never equals an untagged one.
        assert_ne!(tagged_bucket_key("p", "r", &[b"log"], Some(0), "log"), bucket_key("p", "log", &[], "log"));
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn seed_example() {
        assert_eq!(
            bucket_key("tollgate", "auth.createToken", &[b"alice"], "log"),
            "tollgate:{auth.createToken:alice}:log"
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn no_parts_and_empty_parts() {
        assert_eq!(key(&[]), "tollgate:{rule}:log");
        assert_eq!(key(&[b""]), "tollgate:{rule:}:log");
        assert_eq!(key(&[b"", b""]), "tollgate:{rule::}:log");
        assert_eq!(key(&[b"a", b""]), "tollgate:{rule:a:}:log");
        assert_eq!(bucket_key("tg:prod", "r-1_x.y", &[b"v"], "state"), "tg:prod:{r-1_x.y:v}:state");
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn unreserved_bytes_stay_everything_else_is_escaped() {
        assert_eq!(key(&[b"AZaz09._~-"]), "tollgate:{rule:AZaz09._~-}:log");
        assert_eq!(key(&[b"a:b{c}d e%f#g/h+i"]), "tollgate:{rule:a%3Ab%7Bc%7Dd%20e%25f%23g%2Fh%2Bi}:log");
        assert_eq!(key(&[b"\r\n\t\0\x7f"]), "tollgate:{rule:%0D%0A%09%00%7F}:log");
        assert_eq!(key(&[b"\xff\xc3\xa9"]), "tollgate:{rule:%FF%C3%A9}:log");
        assert_eq!(key(&["é".as_bytes()]), "tollgate:{rule:%C3%A9}:log");
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn every_byte_encodes_to_safe_ascii() {
        for b in 0..=255u8 {
            let k = key(&[&[b]]);
            let part = parts_of(&k);
            assert_eq!(part.len(), 1, "{b:#x}: {k}");
            let part = part[0];
            assert!(part.len() == 1 || part.len() == 3, "{b:#x}: {part}");
            assert!(part.bytes().all(|c| c.is_ascii_graphic()), "{b:#x}: {part}");
            assert!(!part.contains([':', '{', '}', '#']), "{b:#x}: {part}");
            // The hash tag is exactly the braces of the key.
            assert_eq!(k.matches('{').count(), 1);
            assert_eq!(k.matches('}').count(), 1);
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn injective() {
        let cases: &[&[&[u8]]] = &[
            &[],
            &[b""],
            &[b"", b""],
            &[b"a:b"],
            &[b"a", b"b"],
            &[b"a", b""],
            &[b"", b"a"],
            &[b"%3A"],
            &[b":"],
            &[b"%"],
            &[b"%25"],
            &[b"a%3Ab"],
            &[b"}"],
            &[b"}:{"],
            &[b"a b"],
            &[b"a%20b"],
            &[b"A"],
            &[b"a"],
            &[b"\xff"],
            &[b"%FF"],
            &[b"%ff"],
            &[b"#"],
        ];
        let mut seen = HashSet::new();
        for parts in cases {
            assert!(seen.insert(key(parts)), "collision for {parts:?}");
        }
        assert_ne!(key(&[b"a:b"]), key(&[b"a", b"b"]));
        assert_ne!(key(&[b"%3A"]), key(&[b":"]));
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn rule_names_cannot_forge_parts() {
        assert_ne!(bucket_key("p", "a:b", &[], "s"), bucket_key("p", "a", &[b"b"], "s"));
        assert_eq!(bucket_key("p", "a}b", &[], "s"), "p:{a%7Db}:s");
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn long_parts_are_hashed() {
        // 64 encoded bytes stay; 65 are hashed.
        let exact = [b'x'; 64];
        assert_eq!(key(&[&exact]), format!("tollgate:{{rule:{}}}:log", "x".repeat(64)));
        let over = [b'x'; 65];
        let hashed = format!("#{}", sha1_smol::Sha1::from(&over[..]).digest());
        assert_eq!(key(&[&over]), format!("tollgate:{{rule:{hashed}}}:log"));
        // 21 escaped bytes are 63 encoded bytes; 22 are 66.
        assert_eq!(parts_of(&key(&[&[b' '; 21]]))[0].len(), 63);
        assert!(parts_of(&key(&[&[b' '; 22]]))[0].starts_with('#'));

        let huge = vec![b'{'; 64 * 1024];
        let k = key(&[&huge, b"ok", &huge]);
        assert!(k.len() < 128, "{k}");
        let parts = parts_of(&k);
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].len(), 41);
        assert!(parts[0].starts_with('#'));
        assert!(parts[0][1..].bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(parts[0], parts[2]);
        assert_eq!(parts[1], "ok");
        // Distinct huge values still give distinct keys.
        let mut other = huge.clone();
        other[1000] = b'}';
        assert_ne!(key(&[&huge]), key(&[&other]));
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn a_flush_token_key_keeps_the_first_keys_slot() {
        use crate::store::cluster::key_slot;
        for first in [
            bucket_key("tollgate", "api", &[b"a b:{c}"], "sw"),
            tagged_bucket_key("tollgate", "api", &[b"alice", b"/x"], Some(0), "gcra"),
        ] {
            let token = flush_token_key(&first, "worker-1");
            assert_eq!(token, format!("{first}:flush:worker-1"));
            assert_eq!(key_slot(token.as_bytes()), key_slot(first.as_bytes()), "{token}");
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn a_syncer_set_keeps_its_buckets_slot() {
        use crate::store::cluster::key_slot;
        let bucket = bucket_key("tollgate", "api", &[b"alice"], "log");
        assert_eq!(syncers_key(&bucket), "tollgate:{api:alice}:log:syncers");
        assert_eq!(key_slot(syncers_key(&bucket).as_bytes()), key_slot(bucket.as_bytes()));
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn key_size_is_bounded() {
        let values: Vec<Vec<u8>> = (0..4).map(|i| vec![i; 10_000]).collect();
        let parts: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        let k = key(&parts);
        let bound = "tollgate:{rule}:log".len() + parts.len() * (1 + MAX_PART_LEN);
        assert!(k.len() <= bound, "{} > {bound}", k.len());
    }
}
