//! The defaults and bounds of the configuration's numbers (the fields of
//! [`super::ValkeyConfig`], [`super::Config`] and its rules): every stage
//! that checks or describes a field takes them from here.

/// `valkey.timeout` when omitted, in milliseconds.
pub const DEFAULT_TIMEOUT_MS: u64 = 100;
/// Largest `valkey.timeout`, in milliseconds (60 s).
pub const MAX_TIMEOUT_MS: u64 = 60_000;
/// `valkey.key_prefix` when omitted.
pub const DEFAULT_KEY_PREFIX: &str = "tollgate";
/// Longest `valkey.cluster`, in bytes.
pub const MAX_CLUSTER_BYTES: usize = 255;
/// Longest `valkey.username`, `valkey.password_env` and
/// `valkey.sentinel.master_name`, in bytes.
pub const MAX_ACCESS_NAME_BYTES: usize = 128;
/// The smallest and largest value of a count setting, inclusive.
pub type Bounds = (u64, u64);
/// `valkey.max_in_flight` when omitted: decisions awaiting replies on a
/// worker's store stream.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 256;
/// The bounds of `valkey.max_in_flight`.
pub const MAX_IN_FLIGHT_BOUNDS: Bounds = (1, 16_384);
/// `valkey.max_batch` when omitted: decisions in one message on the stream.
pub const DEFAULT_MAX_BATCH: usize = 64;
/// The bounds of `valkey.max_batch`.
pub const MAX_BATCH_BOUNDS: Bounds = (1, 1024);
/// `valkey.max_messages_in_flight` when omitted: messages on the stream
/// awaiting replies (group commit: while it is reached, decisions wait and
/// leave together when a reply frees the window).
pub const DEFAULT_MAX_MESSAGES_IN_FLIGHT: usize = 1;
/// The bounds of `valkey.max_messages_in_flight`.
pub const MAX_MESSAGES_IN_FLIGHT_BOUNDS: Bounds = (1, 64);
/// `valkey.max_queue` when omitted: requests waiting per worker beyond what
/// the stream can take.
pub const DEFAULT_MAX_QUEUE: usize = 4096;
/// The bounds of `valkey.max_queue`.
pub const MAX_QUEUE_BOUNDS: Bounds = (0, 100_000);
/// `denial_cache.max_keys` when omitted: keys remembered as denied per worker.
pub const DEFAULT_DENIAL_CACHE_KEYS: usize = 10_000;
/// The bounds of `denial_cache.max_keys` (0 disables the cache).
pub const DENIAL_CACHE_KEYS_BOUNDS: Bounds = (0, 1_000_000);
/// Longest rule name or key prefix, in characters (all ASCII).
pub const MAX_NAME_CHARS: usize = 64;
/// Most windows (limits) in one rule.
pub const MAX_WINDOWS: usize = 8;
/// Largest `limit` of a window.
pub const MAX_LIMIT: u64 = 1_000_000_000;
/// Largest `cost` of a `sliding_log` rule: the log stores one entry per unit,
/// and one call must not write more than this many.
pub const MAX_LOG_COST: u64 = 10_000;
/// Longest window period, in milliseconds (366 days).
pub const MAX_PERIOD_MS: u64 = 366 * 86_400_000;
/// `local_limiter.share` when omitted, in millionths (0.1).
pub const DEFAULT_LOCAL_SHARE_PPM: u32 = 100_000;
/// `local_limiter.max_keys` when omitted: buckets the local limiter tracks per worker.
pub const DEFAULT_LOCAL_KEYS: usize = 10_000;
/// The bounds of `local_limiter.max_keys`.
pub const LOCAL_KEYS_BOUNDS: Bounds = (1, 1_000_000);
