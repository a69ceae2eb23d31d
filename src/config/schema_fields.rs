//! What the JSON Schema says about each field beyond its JSON type: a
//! description and the value rules the schema can express, from the same
//! constants the validator uses. Keyed by the field's path in the shape
//! table: `valkey.cluster`, `rules[].limits` (the array), `rules[]` (its
//! items), `rules[]{}` (rules that span an object's fields), `X:string` and
//! `X:number` (the other form of a field that is a string or a number, or
//! an object).

use serde_json::{json, Map, Value};

use super::{
    Algorithm, Bounds, DEFAULT_DENIAL_CACHE_KEYS, DEFAULT_KEY_PREFIX, DEFAULT_LOCAL_KEYS, DEFAULT_MAX_BATCH,
    DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_IN_FLIGHT, DEFAULT_MAX_MESSAGES_IN_FLIGHT, DEFAULT_MAX_QUEUE,
    DENIAL_CACHE_KEYS_BOUNDS, LOCAL_KEYS_BOUNDS, MAX_ACCESS_NAME_BYTES, MAX_BATCH_BOUNDS, MAX_BODY_BYTES_BOUNDS,
    MAX_CLUSTER_BYTES, MAX_HEADER_MATCHES, MAX_IN_FLIGHT_BOUNDS, MAX_JSON_PATH_BYTES, MAX_KEY_PARTS, MAX_LIMIT,
    MAX_LITERAL_BYTES, MAX_MESSAGES_IN_FLIGHT_BOUNDS, MAX_NAME_CHARS, MAX_PROPERTY_SEGMENTS, MAX_QUEUE_BOUNDS,
    MAX_TEXT_BYTES, MAX_WAITING_BOUNDS, MAX_WINDOWS,
};
use super::{DEFAULT_LEASE_TTL_MS, DEFAULT_MAX_WAITING, DEFAULT_SYNC_MAX_KEYS, MAX_CONCURRENCY, SYNC_MAX_KEYS_BOUNDS};

/// A duration string.
pub(crate) const DURATION_PATTERN: &str = "^[0-9]+(ms|s|m|h|d)$";
/// Rule names and the key prefix.
const NAME_PATTERN: &str = "^[A-Za-z0-9._:-]+$";
/// No whitespace or control characters (cluster names, users, master names).
const TOKEN_PATTERN: &str = "^[^\\s\\x00-\\x1f\\x7f-\\x9f]+$";
/// A status range of `count.status`.
const STATUS_RANGE_PATTERN: &str = "^[1-5][0-9][0-9](-[1-5][0-9][0-9])?$";
/// A JSON path: 1 to 16 fields (or array indices) separated by dots.
const JSON_PATH_PATTERN: &str = "^[^.]+(\\.[^.]+){0,15}$";
/// An HTTP field name, or a pseudo-header.
const HEADER_PATTERN: &str = "^:?[A-Za-z0-9!#$%&'*+.^_`|~-]+$";

fn count(description: &str, default: usize, (min, max): Bounds) -> Value {
    json!({ "description": description, "minimum": min, "maximum": max, "default": default })
}

fn cluster(description: &str) -> Value {
    json!({ "description": description, "minLength": 1, "maxLength": MAX_CLUSTER_BYTES, "pattern": TOKEN_PATTERN })
}

fn header(description: &str) -> Value {
    json!({ "description": description, "pattern": HEADER_PATTERN })
}

/// Exactly one of `fields` is given (and not `null`).
fn exactly_one(fields: &[&str]) -> Value {
    let one = |f: &str| json!({ "required": [f], "properties": { f: { "not": { "type": "null" } } } });
    json!({ "oneOf": fields.iter().map(|f| {
        let others: Vec<Value> = fields.iter().filter(|o| *o != f).map(|o| one(o)).collect();
        let mut this = one(f);
        if let Value::Object(map) = &mut this {
            map.insert("not".into(), json!({ "anyOf": others }));
        }
        this
    }).collect::<Vec<_>>() })
}

const KEY_SOURCES: [&str; 7] = ["header", "query", "cookie", "remote_address", "forwarded_for", "literal", "property"];

/// The facts about the field at `path` (empty when there are none).
pub(crate) fn field_facts(path: &str) -> Map<String, Value> {
    let algorithms: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
    let facts = match path {
        "valkey" => {
            json!({ "description": "Where the limiter's state lives: the Envoy cluster that tunnels to Valkey (or Redis)." })
        }
        "valkey.cluster" => cluster(
            "The Envoy cluster (HTTP/2) each worker's store stream goes to: it must reach an internal listener that tunnels to Valkey.",
        ),
        "valkey.timeout" => {
            json!({ "description": "> 0 and <= 60s. The store stream is reset when decisions await replies and none came for this long (failure_mode for its requests); a request waits at most this long for a stream that is not there.", "default": "100ms" })
        }
        "valkey.key_prefix" => {
            json!({ "description": "First component of every Valkey key.", "pattern": NAME_PATTERN, "maxLength": MAX_NAME_CHARS, "default": DEFAULT_KEY_PREFIX })
        }
        "valkey.max_in_flight" => {
            count("Decisions awaiting replies on a worker's store stream, at most.", DEFAULT_MAX_IN_FLIGHT, MAX_IN_FLIGHT_BOUNDS)
        }
        "valkey.max_batch" => {
            count("Decisions sent in one message on the store stream, at most.", DEFAULT_MAX_BATCH, MAX_BATCH_BOUNDS)
        }
        "valkey.max_messages_in_flight" => count(
            "Messages awaiting replies on a worker's store stream, at most; while it is reached, decisions wait and leave together in the next message (group commit).",
            DEFAULT_MAX_MESSAGES_IN_FLIGHT,
            MAX_MESSAGES_IN_FLIGHT_BOUNDS,
        ),
        "valkey.max_queue" => count(
            "Requests waiting per worker beyond what the store stream can take; beyond it a request is refused (503, overloaded).",
            DEFAULT_MAX_QUEUE,
            MAX_QUEUE_BOUNDS,
        ),
        "valkey.invoke" => {
            json!({ "description": "How the limiter is called: fcall (its function library, loaded with FUNCTION LOAD when missing; Valkey, Redis 7+) or evalsha (the script, sent with EVAL when missing).", "enum": ["fcall", "evalsha", null], "default": "fcall" })
        }
        "valkey.username" => {
            json!({ "description": "ACL user of AUTH; requires password_env.", "minLength": 1, "maxLength": MAX_ACCESS_NAME_BYTES, "pattern": TOKEN_PATTERN })
        }
        "valkey.password_env" => {
            json!({ "description": "Name of the VM environment variable (vm_config.environment_variables) holding the AUTH password; the password itself never appears in the configuration.", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "maxLength": MAX_ACCESS_NAME_BYTES })
        }
        "valkey.sentinel" => {
            json!({ "description": "Learn the current master from the Sentinels behind an Envoy cluster." })
        }
        "valkey{}" => {
            let given = |f: &str| json!({ f: { "not": { "type": "null" } } });
            let mut both = given("sentinel");
            if let (Value::Object(map), Value::Object(other)) = (&mut both, given("cluster_mode")) {
                map.extend(other);
            }
            json!({ "not": { "required": ["sentinel", "cluster_mode"], "properties": both } })
        }
        "valkey.cluster_mode" => {
            json!({ "description": "A Valkey Cluster: each worker reads the slot map (CLUSTER SHARDS) from the seeds and keeps one store stream per master, through valkey.cluster's ORIGINAL_DST route. Not with sentinel." })
        }
        "valkey.cluster_mode.seeds" => cluster(
            "The Envoy cluster that tunnels to seed nodes of the Valkey Cluster (any of its nodes), where the slot map is read; not valkey.cluster.",
        ),
        "valkey.cluster_mode.refresh" => {
            json!({ "description": "How often the slot map is read while nothing goes wrong (also at once after MOVED, CLUSTERDOWN or an unreachable master), > 0 and <= 1h.", "default": "5s" })
        }
        "valkey.sentinel.cluster" => cluster("The Envoy cluster that tunnels to the Sentinels."),
        "valkey.sentinel.master_name" => {
            json!({ "description": "The name the Sentinels monitor the master under.", "minLength": 1, "maxLength": MAX_ACCESS_NAME_BYTES, "pattern": TOKEN_PATTERN })
        }
        "valkey.sentinel.refresh" => {
            json!({ "description": "How often the master is asked for, > 0 and <= 1h.", "default": "5s" })
        }
        "failure_mode" => {
            json!({ "description": "What happens when the store cannot answer: allow lets the request pass, deny answers 503, local has each worker limit by itself (local_limiter).", "enum": ["allow", "deny", "local", null], "default": "allow" })
        }
        "local_limiter" => json!({ "description": "The local limiter of failure_mode local: what each worker admits by itself while the store cannot answer." }),
        "local_limiter.share" => json!({ "description": "The share of each window's limit a worker admits per period by itself (rounded up, at least 1), > 0 and <= 1; for a bucket the store answered recently, also at most what it said remained.", "exclusiveMinimum": 0, "maximum": 1, "default": 0.1 }),
        "local_limiter.max_keys" => count(
            "Buckets the local limiter tracks per worker; the least recently used go first.",
            DEFAULT_LOCAL_KEYS,
            LOCAL_KEYS_BOUNDS,
        ),
        "overload" => json!({ "description": "A request the worker cannot take (its queue full, or max_wait passed on a busy store): reject answers 503 (rate limiter overloaded); allow lets it through unchecked.", "enum": ["reject", "allow", null], "default": "reject" }),
        "rules" => json!({ "description": "The rules, in order; rule names must be unique.", "minItems": 1 }),
        "rules[]" => json!({ "description": "One rate-limiting rule: which requests, which bucket, which windows." }),
        "rules[].name" => {
            json!({ "description": "Unique name, used in policy names (\"<name>/<period>\") and stats.", "pattern": NAME_PATTERN, "maxLength": MAX_NAME_CHARS })
        }
        "rules[].match" => {
            json!({ "description": "Conditions that must all hold; left out, the rule matches every request." })
        }
        "rules[].match.path" => {
            json!({ "description": "The path without its query string equals this.", "pattern": "^/" })
        }
        "rules[].match.path_prefix" => {
            json!({ "description": "The path without its query string starts with this.", "pattern": "^/" })
        }
        "rules[].match.path_regex" => {
            json!({ "description": "A regular expression the whole path (without query string) must match." })
        }
        "rules[].match.methods" => {
            json!({ "description": "Methods (letters only, case-insensitive, distinct).", "minItems": 1 })
        }
        "rules[].match.methods[]" => json!({ "pattern": "^[A-Za-z]+$" }),
        "rules[].match.authority" => {
            json!({ "description": "The :authority equals this, case-insensitively.", "minLength": 1 })
        }
        "rules[].match.headers" => {
            json!({ "description": "Header conditions, all of which must hold.", "maxItems": MAX_HEADER_MATCHES })
        }
        "rules[].match.headers[]{}" => exactly_one(&["present", "exact", "prefix", "regex"]),
        "rules[].match.headers[].name" => header("The header's name (pseudo-headers allowed)."),
        "rules[].match.headers[].present" => json!({ "description": "true: the header exists; false: it does not." }),
        "rules[].match.headers[].exact" => json!({ "description": "The value equals this." }),
        "rules[].match.headers[].prefix" => json!({ "description": "The value starts with this." }),
        "rules[].match.headers[].regex" => json!({ "description": "A regular expression the whole value must match." }),
        "rules[].match.headers[].invert" => json!({ "description": "Negates the condition.", "default": false }),
        "rules[].key" => {
            json!({ "description": "The parts of the bucket key; left out, one bucket is shared by every matching request. A part with no value skips the rule unless on_missing gives a default.", "maxItems": MAX_KEY_PARTS })
        }
        "rules[].key[]" => {
            json!({ "description": "A key part: \"path\", \"method\", \"authority\", or an object with exactly one source (and on_missing)." })
        }
        "rules[].key[]:string" => json!({ "enum": ["path", "method", "authority"] }),
        "rules[].key[]{}" => exactly_one(&KEY_SOURCES),
        "rules[].key[].header" => header("A request header."),
        "rules[].key[].query" => {
            json!({ "description": "A query-string parameter of the path.", "minLength": 1, "maxLength": MAX_LITERAL_BYTES })
        }
        "rules[].key[].cookie" => json!({ "description": "A cookie.", "minLength": 1, "maxLength": MAX_LITERAL_BYTES }),
        "rules[].key[].remote_address" => json!({ "description": "The downstream address, masked to a prefix." }),
        "rules[].key[].remote_address.v4_prefix" | "rules[].key[].forwarded_for.v4_prefix" => {
            json!({ "description": "Leading bits of an IPv4 address kept.", "maximum": 32, "default": 32 })
        }
        "rules[].key[].remote_address.v6_prefix" | "rules[].key[].forwarded_for.v6_prefix" => {
            json!({ "description": "Leading bits of an IPv6 address kept.", "maximum": 128, "default": 128 })
        }
        "rules[].key[].forwarded_for" => {
            json!({ "description": "The client address from x-forwarded-for, masked to a prefix." })
        }
        "rules[].key[].forwarded_for.trusted_hops" => {
            json!({ "description": "Entries skipped from the right (added by trusted proxies).", "maximum": 32, "default": 0 })
        }
        "rules[].key[].literal" => json!({ "description": "A fixed value.", "maxLength": MAX_LITERAL_BYTES }),
        "rules[].key[].property" => {
            json!({ "description": "An Envoy attribute by path, e.g. a JWT claim in filter metadata.", "minItems": 1, "maxItems": MAX_PROPERTY_SEGMENTS })
        }
        "rules[].key[].property[]" => json!({ "minLength": 1 }),
        "rules[].key[].on_missing" => {
            json!({ "description": "When the part has no value: \"skip_rule\" (the default) or { \"default\": VALUE }." })
        }
        "rules[].key[].on_missing:string" => json!({ "const": "skip_rule" }),
        "rules[].key[].on_missing.default" => {
            json!({ "description": "The value that stands in.", "maxLength": MAX_LITERAL_BYTES })
        }
        "rules[].limits" => {
            json!({ "description": "The windows; every one must be able to bind, and periods must be distinct.", "minItems": 1, "maxItems": MAX_WINDOWS })
        }
        "rules[].limits[]" => json!({ "description": "One window: at most limit units per period." }),
        "rules[].limits[].limit" => {
            json!({ "description": "Units allowed per period.", "type": "integer", "minimum": 1, "maximum": MAX_LIMIT })
        }
        "rules[].limits[].period" => {
            json!({ "description": "The window's length, > 0 and <= 366d; spelled as written in policy names." })
        }
        "rules[].algorithm" => {
            json!({ "description": "How the rule's buckets count.", "enum": algorithms.iter().map(|a| json!(a)).chain([Value::Null]).collect::<Vec<_>>(), "default": "sliding_log" })
        }
        "rules[].cost" => {
            json!({ "description": "Units one request consumes in every window: 1 to the rule's smallest limit (at most 10000 for sliding_log).", "type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 1 })
        }
        "rules[].shadow" => {
            json!({ "description": "Decide and consume as if enforced, but never deny.", "default": false })
        }
        "rules[].hash_tag" => {
            json!({ "description": "The index of the key part whose value alone is the hash tag of the rule's keys: rules tagged by the same value share a Valkey Cluster slot, so one call decides them together. Left out, the tag is the rule name and every part.", "maximum": MAX_KEY_PARTS - 1 })
        }
        "rules[].shape" => {
            json!({ "description": "Hold a request that does not fit until it does, at most max_delay, instead of denying it (not in shadow mode; on a Valkey Cluster a request whose buckets span slots is held in rounds until every slot gives it the same turn, or, if it also matches a rule that does not shape, admitted now or denied)." })
        }
        "rules[].shape.max_delay" => {
            json!({ "description": "The longest a request may wait for its turn: > 0 and <= 30s; a request that would wait longer is denied." })
        }
        "rules[].shape.max_waiting" => count(
            "Requests of the rule held or being decided per worker, at most; beyond, a request is denied (429) without a store call.",
            DEFAULT_MAX_WAITING,
            MAX_WAITING_BOUNDS,
        ),
        "rules[].sync" => {
            json!({ "description": "Decide the rule's requests on each worker from its view of every window, and every interval send the store what it admitted and read the windows back (docs/sync.md): no store call per request, within a stated bound. Not with count, shape, concurrency or overrides." })
        }
        "rules[].sync.interval" => {
            json!({ "description": "How often a worker syncs: >= 10ms, <= 1m, and shorter than the rule's shortest period." })
        }
        "rules[].sync.max_keys" => count(
            "Buckets of the rule one worker keeps, at most; a new key beyond is decided by the store until room is made.",
            DEFAULT_SYNC_MAX_KEYS,
            SYNC_MAX_KEYS_BOUNDS,
        ),
        "rules[]{}" => json!({ "allOf": [
            { "not": { "required": ["sync", "concurrency"], "properties": {
                "sync": { "not": { "type": "null" } }, "concurrency": { "not": { "type": "null" } }
            } } },
            { "not": { "required": ["sync", "overrides"], "properties": {
                "sync": { "not": { "type": "null" } }, "overrides": { "const": true }
            } } },
        ] }),
        "rules[].overrides" => {
            json!({ "description": "Read the bucket's per-key override (set with tollgate override set) in each decision's store call: its limits apply instead of the configured ones until it expires. Costs one HGETALL per decision and key; the rule's denials are not cached. Not with sync.", "default": false })
        }
        "rules[].concurrency" => {
            json!({ "description": format!("At most this many of the rule's requests in flight per bucket: each admitted request holds a lease (one sorted-set entry) until it ends, renewed while it goes on; a full set denies at once (never shaped). A number (the limit, lease_ttl {}s) or an object. Not with sync.", DEFAULT_LEASE_TTL_MS / 1000) })
        }
        "rules[].concurrency:number" | "rules[].concurrency.limit" => {
            json!({ "description": "Requests in flight per bucket, at most.", "type": "integer", "minimum": 1, "maximum": MAX_CONCURRENCY })
        }
        "rules[].concurrency.lease_ttl" => {
            json!({ "description": "How long a lease counts after it was taken or last renewed: >= 1s, <= 1h. A proxy that dies leaves its leases counted this long at most.", "default": format!("{}s", DEFAULT_LEASE_TTL_MS / 1000) })
        }
        "rules[].count" => {
            json!({ "description": "Count what the response says: only some statuses or responses with a header, a cost the response reports, and an optional reservation on the request that the response settles. A request is still denied when the rule's windows are full." })
        }
        "rules[].count.status" => {
            json!({ "description": "Only responses with one of these statuses count: a code, or a range \"first-last\". Left out: every status.", "minItems": 1 })
        }
        "rules[].count.status[]" => json!({ "anyOf": [
            { "type": "integer", "minimum": 100, "maximum": 599 },
            { "type": "string", "pattern": STATUS_RANGE_PATTERN }
        ] }),
        "rules[].count.header" => {
            json!({ "description": "Only responses whose headers satisfy this condition count." })
        }
        "rules[].count.header{}" => exactly_one(&["present", "exact", "prefix", "regex"]),
        "rules[].count.header.name" => header("The response header's name."),
        "rules[].count.header.present" => json!({ "description": "true: the header exists; false: it does not." }),
        "rules[].count.header.exact" => json!({ "description": "The value equals this." }),
        "rules[].count.header.prefix" => json!({ "description": "The value starts with this." }),
        "rules[].count.header.regex" => json!({ "description": "A regular expression the whole value must match." }),
        "rules[].count.header.invert" => json!({ "description": "Negates the condition.", "default": false }),
        "rules[].count.reserve" => {
            json!({ "description": "Units recorded on the request, in every window, for the response to settle (refund or extra charge). Not with gcra." })
        }
        "rules[].count.reserve{}" => exactly_one(&["units", "header", "body"]),
        "rules[].count.reserve.units" => {
            json!({ "description": "A fixed reservation: 1 to the rule's smallest limit.", "type": "integer", "minimum": 1, "maximum": MAX_LIMIT })
        }
        "rules[].count.reserve.header" => header("A request header holding the reservation (an integer)."),
        "rules[].count.reserve.body" => {
            json!({ "description": "A JSON path into the request body holding the reservation (an integer), e.g. max_tokens.", "pattern": JSON_PATH_PATTERN, "maxLength": MAX_JSON_PATH_BYTES })
        }
        "rules[].count.reserve.default" => {
            json!({ "description": "The reservation when the header or field is missing or not an integer. Default: the rule's smallest limit.", "type": "integer", "minimum": 1, "maximum": MAX_LIMIT })
        }
        "rules[].count.cost" => {
            json!({ "description": "Where the response says what the request cost; left out, the rule's cost." })
        }
        "rules[].count.cost{}" => exactly_one(&["header", "body"]),
        "rules[].count.cost.header" => header("A response header holding the cost (an integer)."),
        "rules[].count.cost.body" => {
            json!({ "description": "A JSON path into the response body (or the last data: event of a text/event-stream body carrying it) holding the cost, e.g. usage.total_tokens.", "pattern": JSON_PATH_PATTERN, "maxLength": MAX_JSON_PATH_BYTES })
        }
        "response" => json!({ "description": "How denials are answered and which headers are added." }),
        "response.status" => {
            json!({ "description": "Status of a denial.", "minimum": 400, "maximum": 599, "default": 429 })
        }
        "response.headers" => {
            json!({ "description": "Header families: ratelimit (draft-11 RateLimit-Policy and RateLimit) and/or x-ratelimit.", "uniqueItems": true, "default": ["ratelimit"] })
        }
        "response.headers[]" => json!({ "enum": ["ratelimit", "x-ratelimit"] }),
        "response.body" => {
            json!({ "description": "Body of a denial.", "enum": ["problem+json", "text", "none", null], "default": "problem+json" })
        }
        "response.text" => json!({ "description": "The text of body \"text\".", "maxLength": MAX_TEXT_BYTES }),
        "response.on_allowed" => {
            json!({ "description": "Add the headers to admitted requests' responses too.", "default": true })
        }
        "response.filter_state" => json!({
            "description": "Set each decided request's decision as filter state wasm.tollgate.decision, for the access log.",
            "default": false
        }),
        "shadow" => {
            json!({ "description": "Global shadow mode: every rule decides and counts, none denies.", "default": false })
        }
        "denial_cache" => json!({ "description": "The per-worker cache of buckets known to deny." }),
        "denial_cache.max_keys" => count(
            "Keys remembered per worker; 0 disables the cache.",
            DEFAULT_DENIAL_CACHE_KEYS,
            DENIAL_CACHE_KEYS_BOUNDS,
        ),
        "max_body_bytes" => count(
            "The most bytes of a request or response body read for a reservation or a cost; past it, the reservation's default (request) or the reservation (response) is used.",
            DEFAULT_MAX_BODY_BYTES,
            MAX_BODY_BYTES_BOUNDS,
        ),
        "testing" => json!({ "description": "Tests only: never set in production." }),
        "testing.now_header" => {
            header("Tests only: a request header whose value (ms since the epoch) replaces the store's clock.")
        }
        _ => json!({}),
    };
    match facts {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}
