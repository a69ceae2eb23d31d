-- tollgate: transactional multi-window rate limiting, four algorithms and
-- concurrency leases, one call.
--
-- One call decides for every window of every rule that matched a request,
-- whatever algorithm each rule uses, and for every lease set of a rule's
-- concurrency limit. The request is admitted only if every window of every
-- key has room for it; only then is it recorded (in every key). A denied
-- request changes no count and takes no lease. Each algorithm is specified
-- by its pure model in src/limiter/model/; this code only makes it atomic.
--
-- The code is prelude.lua (this file: contract, clock, exact integer
-- helpers), sliding_log.lua, gcra.lua, sliding_window.lua, fixed_window.lua
-- (each registers one algorithm in MAKE_ALGORITHM and states its per-bucket
-- contract), lease.lua (the lease sets of concurrency limits, read through
-- lease_arg(); its contract), decide.lua (decide(KEYS, ARGV, once): argument
-- parsing and the three phases), adjust.lua (adjust(KEYS, ARGV, once):
-- changes what a decision recorded, an extra charge never before a bucket's
-- last turn; its own contract), flush.lua (flush(KEYS, ARGV, once): records
-- what a worker admitted locally; its own contract) and lease_ops.lua
-- (lease(KEYS, ARGV, once): ends or renews leases; its own contract);
-- overrides.lua (per-key overrides of a bucket's limits, read by decide,
-- peek and adjust) comes before decide.lua, which also defines
-- peek(KEYS, ARGV, once): decide's dry run.
-- src/limiter/script.rs ships it as scripts (the definitions, then `return
-- decide(KEYS, ARGV, true)`, or peek, adjust, flush or lease, for
-- EVAL/EVALSHA)
-- and as a function library (the definitions once, at FUNCTION LOAD; one
-- entry point per FCALL). Code
-- at the top level must therefore only define: a library's top level runs
-- without the standard libraries (string, math, tonumber, ... exist only
-- inside calls).
--
-- Cost (see "What a decision costs in Valkey" in docs/algorithms.md): every
-- redis.call is 0.6-1.3 us of Valkey time, string.format('%.0f') 0.24 us,
-- string.format('%d') 0.1 us, a table of 7 fields 0.2 us. So each algorithm reads
-- all of a key's windows in one command where it can, skips commands whose
-- answer it already knows, and formats numbers only for what it writes.
-- Overrides cost one HMGET per marked check of a call, nothing for
-- unmarked checks (overrides.lua).
--
-- KEYS[i]   the bucket of check i (one per matching rule, distinct keys; the
--           key's suffix names the algorithm: log, gcra, sw, fw, lease),
--           i = 1..k for the k checks ARGV describes.
-- KEYS[k+j] the override key (overrides.lua) of the j-th check whose
--           algorithm argument is marked "@", in check order: one per
--           marked check, a key may repeat (a rule's window and lease
--           checks share one). #KEYS = k + the marked checks.
-- ARGV[1]   now, in ms since the Unix epoch; "" = the server's clock (TIME).
--           Proxies never supply the time in production, so skewed proxy
--           clocks cannot disagree; tests inject it.
-- ARGV[2]   optionally "~<max_delay_ms>" or "~<max_delay_ms>:<floor_ms>":
--           shape the call (docs/shaping.md; model:
--           src/limiter/model/shape.rs). The request is given the earliest
--           time >= now + floor_ms (0 when absent) at which it fits every
--           window of every key and at or after every key's last turn (its
--           turn); if the turn is at most max_delay_ms away it is recorded
--           there, else nothing is.
-- ARGV[2..] (ARGV[3..] when shaped) for each key, in KEYS order:
--             algorithm (log | gcra | sw | fw | lease=<id>), cost, n, then
--             n pairs: limit, period_ms
--           An algorithm written "@<algorithm>" (e.g. "@gcra",
--           "@lease=<id>") marks a check whose bucket may be overridden:
--           its override key is read (one HMGET of the fields it uses,
--           per marked check) before phase 1, and a live override's limits replace
--           the limits sent (overrides.lua), in checking, recording and
--           the reply.
--           A cost written "?<cost>" only checks: the key must have room
--           for cost in every window (or the request is denied), but
--           nothing is recorded in it (a rule counted on the response,
--           charged later by adjust()).
--           A lease set (a rule's concurrency limit, lease.lua) is written
--           "lease=<id>", the id 1..64 bytes of [0-9A-Za-z:._-] (the lease
--           the admission takes), with cost 1 and exactly one window:
--           limit = the leases live at once, period_ms = the lease's TTL.
--           It has room while fewer than limit leases are live; its
--           retry_ms is until the earliest expires. Shaped, a full lease
--           set denies at once (a lease is never waited for), its retry_ms
--           the unshaped one; an admission at a turn takes a lease until
--           the turn + TTL. lease() ends and renews leases.
--           Numbers are decimal integers as the proxy writes them (no sign,
--           leading zero or exponent): limits and periods are used as sent
--           in hash field names and TTLs.
--
-- Reply     { allowed (1|0), now_ms, then for each key, for each window:
--             remaining, reset_ms, retry_ms }; a marked check's part is
--             { overridden (1 if a live override set the limit of at least
--             one of its windows, else 0), then per window: limit (the
--             limit in force), remaining, reset_ms, retry_ms }
--           remaining: units left in the window after this decision
--           reset_ms:  ms until the window is empty again (0 if it is)
--           retry_ms:  ms until this request would fit this window (0 = fits);
--                      the request fits every window at max(retry_ms).
--           A shaped call's reply has one more item, delay_ms: ms from now
--           to the admitted request's turn (0 when denied). Its retry_ms is
--           max(0, the window's earliest fitting time - now - max_delay_ms),
--           and remaining, reset_ms count the entries or debt at future
--           turns. An unshaped call's reply is unchanged.
-- Errors    "ERR tollgate: ..." on malformed arguments (an unknown
--           algorithm, "lease" without an id or with a bad one, a lease
--           key of another cost or window count, KEYS not as many as the
--           checks plus the marked ones); WRONGTYPE if an override key is
--           not a hash.
-- peek      peek(KEYS, ARGV): the same KEYS and ARGV (shaped too), a dry
--           run that writes nothing (no housekeeping either: the log and
--           the lease sets read around their expired entries instead of
--           dropping them), registered no-writes (FCALL_RO). Its reply is
--           decide's with nothing committed: allowed = the request would
--           be admitted; per window remaining and reset_ms of the state as
--           it is, retry_ms as decide's; shaped, delay_ms = the turn it
--           would get (0 if denied), not recorded.
--
-- Every number is an integer below 2^53 (gcra and sliding_window compute with
-- products up to limit * period_ms, which the configuration bounds by 2^53,
-- and overrides.lua too), so Lua's doubles compute exactly what the Rust
-- model computes.

-- The clock of the current call, set by decide() on every call (the
-- algorithms read it): now in ms, now_s its decimal string (made on first
-- use). With an injected clock Valkey still expires keys by its own clock, so
-- tests get a minute of slack (ttl_slack; correctness never depends on
-- expiry: expired state reads as empty, and the algorithms ignore stale
-- state; expiry only collects idle keys).
local now, now_s, ttl_slack = 0, nil, 0

-- A dry run (peek): set by decide's driver after read_clock(), which makes
-- it false for every other entry point. The algorithms' check() and last()
-- then skip their housekeeping writes (no number changes).
local dry = false

-- The time a commit records at: now, a shaped request's turn (set by
-- decide()), or an extra charge's c (adjust.lua's change()); read_clock()
-- makes it now. (`slot` here and in slot_str, at_slot, note_slot names this
-- turn, never a hash slot.)
local slot = 0

-- An integer (|x| < 2^53) as a decimal string, never an exponent. ('%d' is
-- exact there and 2.5 times cheaper than '%.0f'.)
local function num(x) return string.format('%d', x) end

-- now as a decimal string.
local function now_str()
  if not now_s then now_s = num(now) end
  return now_s
end

-- The TTL argument for a key that must live `ms` after now: `ms_s` (the same
-- number as sent by the proxy, a string) when there is no slack.
local function ttl(ms, ms_s)
  if ttl_slack == 0 and ms_s then return ms_s end
  return num(ms + ttl_slack)
end

-- The time a commit records at, as a decimal string.
local function slot_str()
  if slot == now then return now_str() end
  return num(slot)
end

-- The TTL of bucket b after a commit at the turn: its longest period after
-- the turn (the number as sent when the turn is now), for ttl().
local function commit_ttl(b)
  if slot == now then return b.max_period, b.max_period_s end
  return b.max_period + slot - now, nil
end

-- Shaping for the counters (fixed_window.lua, sliding_window.lua), whose
-- records do not say when they were made: the bucket's field "s" holds the
-- last turn given later than its call's now. `check(b, t)` reads the state
-- at time t (default now), so the turn is found, recorded and reported at
-- the time it concerns; `check(b, nil, true)` also reads "s" into b.last0
-- (for adjust()'s charge_at). b.stats_at: the time the state was read at,
-- for shaped_stats.
local COUNTER_SHAPING = {
  last = function(b)
    b.last0 = tonumber(redis.call('HGET', b.key, 's')) or 0
    b.read_at = nil
    return b.last0
  end,
  -- (The state is read at t0 once per bucket.)
  earliest = function(b, w, t0)
    if b.read_at ~= t0 then
      b.algorithm.check(b, t0)
      b.read_at = t0
    end
    return t0 + w.retry
  end,
  -- Before a commit at the turn: the state at the turn.
  at_slot = function(b)
    b.algorithm.check(b, slot)
    b.stats_at = slot
  end,
  -- Not committed: the state at the later of now and its last turn.
  restat = function(b)
    local from = now
    if b.last0 > from then from = b.last0 end
    b.algorithm.check(b, from)
    b.stats_at = from
  end,
  -- adjust(): an extra charge records at the later of now and the last turn.
  charge_at = function(b)
    if b.last0 > now then return b.last0 end
    return now
  end,
}

-- After a counter's commit at a turn later than now: the turn, in "s".
local function note_slot(b)
  if slot ~= now then redis.call('HSET', b.key, 's', slot_str()) end
end

-- The earliest of a window that no wait makes fit (a full lease set): what
-- shape() denies at once.
local NEVER = 1 / 0

-- The largest count a window counter keeps (2^52; only adjust() charges
-- past a limit): sums stay exact.
local STATE_MAX = 4503599627370496

-- math.fmod (set by decide(): a library's top level has no math).
local fmod

-- floor(a / b) for integers 0 <= a <= 2^53, b > 0; exact (fmod is exact).
local function idiv(a, b) return (a - fmod(a, b)) / b end

-- ceil(a / b) for integers 0 <= a <= 2^53, b > 0.
local function cdiv(a, b)
  local q = idiv(a, b)
  if q * b < a then q = q + 1 end
  return q
end

-- Tables kept from call to call by a library (a script makes them again on
-- every call): the argument list below, the buckets and windows of decide(),
-- the cache of configuration numbers. Every field a call reads is written
-- earlier in the same call.
local ARGS = {}

-- Buckets and windows: BUCKETS[i] is the bucket of check i, BUCKETS[i][w]
-- its window w.
local BUCKETS = {}

-- tonumber() of a limit, period, cost or window count as sent: these repeat
-- from call to call, and a cached lookup is cheaper than parsing (strtod).
-- At most 4096 strings are kept, and none when the definitions live for one
-- call only (a script: decide() sets config_room to 0). A missing argument
-- (s nil: fewer ARGV than the counts announce) is nil, never cached.
local CONFIG_NUMBERS, config_room = {}, 4096
local function config_number(s)
  local x = CONFIG_NUMBERS[s]
  if x == nil then
    x = tonumber(s)
    if config_room > 0 and s then
      CONFIG_NUMBERS[s] = x or false
      config_room = config_room - 1
    end
  end
  return x or nil
end

-- Names the hash fields of window w for algorithm `id`: `base` followed by
-- each suffix, in w.f1, w.f2 (, w.f3). A reused window keeps the names of
-- its last call, so the strings are made again only when they change.
local function name_fields(w, id, base, s1, s2, s3)
  if w.named_for == id and w.named_limit == w.limit_s and w.named_period == w.period_s then return end
  w.f1, w.f2 = base .. s1, base .. s2
  if s3 then w.f3 = base .. s3 end
  w.named_for, w.named_limit, w.named_period = id, w.limit_s, w.period_s
end

-- HMGET of `per` (2 or 3) fields of every window w of bucket b, named w.f1,
-- w.f2 (, w.f3): one command for all windows; values in window order, then
-- (with_last) the counters' field "s".
local function hmget(b, per, with_last)
  local w1 = b[1]
  if b.n == 1 and not with_last then
    if per == 2 then return redis.call('HMGET', b.key, w1.f1, w1.f2) end
    return redis.call('HMGET', b.key, w1.f1, w1.f2, w1.f3)
  end
  local m = 0
  for i = 1, b.n do
    local w = b[i]
    ARGS[m + 1], ARGS[m + 2] = w.f1, w.f2
    if per == 3 then ARGS[m + 3] = w.f3 end
    m = m + per
  end
  if with_last then
    ARGS[m + 1] = 's'
    m = m + 1
  end
  return redis.call('HMGET', b.key, unpack(ARGS, 1, m))
end

-- HSET of `per` fields of every window (w.f1 = w.v1, ...), then the key's
-- TTL: `ms` after now (`ms_s`: the same number as sent, if it was).
local function hset_expire(b, per, ms, ms_s)
  local w1 = b[1]
  if b.n == 1 then
    if per == 2 then
      redis.call('HSET', b.key, w1.f1, w1.v1, w1.f2, w1.v2)
    else
      redis.call('HSET', b.key, w1.f1, w1.v1, w1.f2, w1.v2, w1.f3, w1.v3)
    end
  else
    local m = 0
    for i = 1, b.n do
      local w = b[i]
      ARGS[m + 1], ARGS[m + 2], ARGS[m + 3], ARGS[m + 4] = w.f1, w.v1, w.f2, w.v2
      if per == 3 then ARGS[m + 5], ARGS[m + 6] = w.f3, w.v3 end
      m = m + 2 * per
    end
    redis.call('HSET', b.key, unpack(ARGS, 1, m))
  end
  redis.call('PEXPIRE', b.key, ttl(ms, ms_s))
end

-- The algorithms, by id. Each is a table of functions over a bucket
-- b = { key, cost, n, max_period, max_period_s, [1..n] = windows }, a window
-- w = { limit, period, limit_s, period_s (as sent), retry, ... }:
--   check(b, t, charge)  phase 1: read the bucket's state, set w.retry for
--                        every window (ms until b.cost fits, 0 = fits now);
--                        true if every window fits. No writes, except
--                        housekeeping that never changes a decision, and
--                        none at all when dry. (t:
--                        the counters read at t, default now; charge: also
--                        read what charge_at needs, when it costs nothing
--                        more than a field.)
--   commit(b)            phase 2: record b.cost in every window at the turn
--                        (now, unless shaped or charge_at says later), set
--                        the TTL: the longest period after the turn (not
--                        called for a key that only checks)
--   stats(b, w, allowed) phase 3: remaining, reset_ms of window w after the
--                        decision
-- and, for shaping (decide.lua's shape()):
--   last(b)              the latest turn recorded in the bucket (0 if none),
--                        after housekeeping (none when dry); reads the state
--   earliest(b, w, t0)   the first time >= t0 at which b.cost fits window w
--                        (t0 >= last(b)); NEVER if no wait makes it fit
--   at_slot(b)           (optional) before a commit at the turn
--   restat(b)            (optional) before stats, when not committed
--   shaped_stats(b, w)   as stats, at now, with state at future turns
-- and, for adjust():
--   charge_at(b)         after check(b, nil, true): the time an extra charge
--                        records at, the later of now and the bucket's last
--                        turn (what last(b) finds)
--   max_charge(b, units) (optional) the units an extra charge records
--   refund(b, at, units) takes units back from a decision at `at`; true
--                        when b's state is current after it (else
--                        check(b) reads it again)
-- Each algorithm file registers a function making its table in
-- MAKE_ALGORITHM; the table is made on first use, so a script (which makes
-- everything again on every call) makes only the algorithms it uses. (The
-- lease sets' table is reached through lease_arg() instead: lease.lua.)
local ALGORITHMS, MAKE_ALGORITHM = {}, {}

-- The algorithm with id `id`, or nil.
local function algorithm_for(id)
  local algorithm = ALGORITHMS[id]
  if algorithm == nil then
    local make = MAKE_ALGORITHM[id]
    if not make then return nil end
    algorithm = make()
    ALGORITHMS[id] = algorithm
  end
  return algorithm
end
