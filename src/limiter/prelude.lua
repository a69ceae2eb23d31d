-- tollgate: transactional multi-window rate limiting, four algorithms, one call.
--
-- One call decides for every window of every rule that matched a request,
-- whatever algorithm each rule uses. The request is admitted only if every
-- window of every key has room for it; only then is it recorded (in every
-- key). A denied request changes no count. Each algorithm is specified by its
-- pure model in src/limiter/model/; this script only makes it atomic.
--
-- The script is the concatenation of prelude.lua (this file: contract, clock,
-- exact integer helpers), sliding_log.lua, gcra.lua, sliding_window.lua,
-- fixed_window.lua (each registers one algorithm in ALGORITHMS and states its
-- per-bucket contract) and decide.lua (argument parsing and the three phases).
--
-- KEYS[i]   the bucket of check i (one per matching rule, distinct keys; the
--           key's suffix names the algorithm: log, gcra, sw, fw).
-- ARGV[1]   now, in ms since the Unix epoch; "" = the server's clock (TIME).
--           Proxies never supply the time in production, so skewed proxy
--           clocks cannot disagree; tests inject it.
-- ARGV[2..] for each key, in KEYS order:
--             algorithm (log | gcra | sw | fw), cost, n, then n pairs:
--             limit, period_ms
--
-- Reply     { allowed (1|0), now_ms, then for each key, for each window:
--             remaining, reset_ms, retry_ms }
--           remaining: units left in the window after this decision
--           reset_ms:  ms until the window is empty again (0 if it is)
--           retry_ms:  ms until this request would fit this window (0 = fits);
--                      the request fits every window at max(retry_ms).
-- Errors    "ERR tollgate: ..." on malformed arguments.
--
-- Every number is an integer below 2^53 (gcra and sliding_window compute with
-- products up to limit * period_ms, which the configuration bounds by 2^53),
-- so Lua's doubles compute exactly what the Rust model computes.

local now
local injected = ARGV[1] ~= ''
if not injected then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
if not now or now < 0 or now ~= math.floor(now) then
  return redis.error_reply('ERR tollgate: bad now')
end

-- With an injected clock Valkey still expires keys by its own clock, so tests
-- get a minute of slack (correctness never depends on expiry: expired state
-- reads as empty, and the algorithms ignore stale state; expiry only collects
-- idle keys).
local ttl_slack = 0
if injected then ttl_slack = 60000 end

-- An integer as a decimal string (never an exponent).
local function num(x) return string.format('%.0f', x) end

-- floor(a / b) for integers 0 <= a <= 2^53, b > 0; exact (fmod is exact).
local function idiv(a, b) return (a - math.fmod(a, b)) / b end

-- ceil(a / b) for integers 0 <= a <= 2^53, b > 0.
local function cdiv(a, b)
  local q = idiv(a, b)
  if q * b < a then q = q + 1 end
  return q
end

-- The algorithms, by id. Each is a table of functions over a bucket
-- b = { key, cost, windows = { { limit, period }, ... }, max_period }:
--   load(b)       read the bucket's state into b (housekeeping writes that
--                 never change a decision are allowed, e.g. trimming)
--   retry(b, w)   phase 1: ms until b.cost fits window w (0 = fits); no writes
--   commit(b)     phase 2: record b.cost in every window, set the key's TTL
--   stats(b, w)   phase 3: remaining, reset_ms of window w after the decision
local ALGORITHMS = {}
