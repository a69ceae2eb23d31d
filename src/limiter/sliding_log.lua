-- tollgate: transactional multi-window sliding log.
--
-- One call decides for every window of every rule that matched a request.
-- The request is admitted only if every window of every key has room for it;
-- only then is it recorded (in every key). A denied request changes no count.
-- The algorithm is specified by the pure model in src/limiter/model.rs; this
-- script only makes it atomic inside Valkey/Redis.
--
-- KEYS[i]   the sorted set of bucket i (one per matching rule). Every entry is
--           one consumed unit: score = admission time in ms, member =
--           "<time>:<n>", where n counts the entries of that same score, so
--           members are unique without randomness (entries of one score are
--           always trimmed together).
-- ARGV[1]   now, in ms since the Unix epoch; "" = the server's clock (TIME).
--           Proxies never supply the time in production, so skewed proxy
--           clocks cannot disagree; tests inject it.
-- ARGV[2..] for each key, in KEYS order:
--             cost, n, then n pairs: limit, period_ms
--
-- Reply     { allowed (1|0), now_ms, then for each key, for each window:
--             remaining, reset_ms, retry_ms }
--           remaining: units left in the window after this decision
--           reset_ms:  ms until the oldest counted entry leaves (0 if none)
--           retry_ms:  ms until this request would fit this window (0 = fits);
--                      the request fits every window at max(retry_ms).
-- Errors    "ERR tollgate: ..." on malformed arguments.

local now
local injected = ARGV[1] ~= ""
if not injected then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
if not now or now < 0 then
  return redis.error_reply('ERR tollgate: bad now')
end

local function num(s) return string.format('%.0f', s) end

-- Parse the windows of every key.
local buckets = {}
local a = 2
for i = 1, #KEYS do
  local cost = tonumber(ARGV[a])
  local n = tonumber(ARGV[a + 1])
  if not cost or not n or cost < 1 or n < 1 then
    return redis.error_reply('ERR tollgate: bad cost or window count for key ' .. i)
  end
  a = a + 2
  local windows = {}
  local max_period = 0
  for w = 1, n do
    local limit = tonumber(ARGV[a])
    local period = tonumber(ARGV[a + 1])
    if not limit or not period or limit < 1 or period < 1 then
      return redis.error_reply('ERR tollgate: bad window ' .. w .. ' for key ' .. i)
    end
    a = a + 2
    windows[w] = { limit = limit, period = period }
    if period > max_period then max_period = period end
  end
  buckets[i] = { key = KEYS[i], cost = cost, windows = windows, max_period = max_period }
end
if a ~= #ARGV + 1 then
  return redis.error_reply('ERR tollgate: argument count does not match KEYS')
end

-- Entries at or before now - max_period have left every window.
for _, b in ipairs(buckets) do
  redis.call('ZREMRANGEBYSCORE', b.key, '-inf', num(now - b.max_period))
end

-- Phase 1: does the request fit every window of every key?
local allowed = true
for _, b in ipairs(buckets) do
  for _, w in ipairs(b.windows) do
    local from = '(' .. num(now - w.period)
    local count = redis.call('ZCOUNT', b.key, from, '+inf')
    local excess = count + b.cost - w.limit
    w.retry = 0
    if excess > 0 then
      allowed = false
      -- The window fits once the excess-th oldest counted entry has left.
      local e = redis.call('ZRANGEBYSCORE', b.key, from, '+inf', 'WITHSCORES', 'LIMIT', excess - 1, 1)
      if e[2] then
        w.retry = tonumber(e[2]) + w.period - now
      else
        w.retry = w.period -- cost above the limit: never fits; config forbids it
      end
      if w.retry < 1 then w.retry = 1 end
    end
  end
end

-- Phase 2: record the request in every key, only if every window had room.
if allowed then
  for _, b in ipairs(buckets) do
    local first = redis.call('ZCOUNT', b.key, num(now), num(now))
    local args = {}
    for n = 0, b.cost - 1 do
      args[#args + 1] = num(now)
      args[#args + 1] = num(now) .. ':' .. num(first + n)
      if #args >= 512 or n == b.cost - 1 then -- bounded unpack() per call
        redis.call('ZADD', b.key, unpack(args))
        args = {}
      end
    end
    -- The key is useless once its newest entry has left the longest window.
    -- With an injected clock Valkey still expires by its own clock, so tests
    -- get a minute of slack (correctness never depends on expiry: trimming
    -- above does that; expiry only collects idle keys).
    local ttl = b.max_period
    if injected then ttl = ttl + 60000 end
    redis.call('PEXPIRE', b.key, num(ttl))
  end
end

-- Phase 3: statistics per window, after the decision.
local reply = { allowed and 1 or 0, now }
for _, b in ipairs(buckets) do
  for _, w in ipairs(b.windows) do
    local from = '(' .. num(now - w.period)
    local count = redis.call('ZCOUNT', b.key, from, '+inf')
    local remaining = w.limit - count
    if remaining < 0 then remaining = 0 end
    local reset = 0
    local oldest = redis.call('ZRANGEBYSCORE', b.key, from, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if oldest[2] then reset = tonumber(oldest[2]) + w.period - now end
    reply[#reply + 1] = remaining
    reply[#reply + 1] = reset
    reply[#reply + 1] = w.retry
  end
end
return reply
