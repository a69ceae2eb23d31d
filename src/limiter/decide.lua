-- The driver (last part of the script; contract in prelude.lua): parse
-- KEYS/ARGV into buckets, then phase 1 (check every window of every key, no
-- writes), phase 2 (commit every key, only if every window fits), phase 3
-- (statistics per window, after the decision).

local buckets = {}
local a = 2
for i = 1, #KEYS do
  local algorithm = ALGORITHMS[ARGV[a]]
  local cost = tonumber(ARGV[a + 1])
  local n = tonumber(ARGV[a + 2])
  if not algorithm then
    return redis.error_reply('ERR tollgate: unknown algorithm for key ' .. i)
  end
  if not cost or not n or cost < 1 or n < 1 or cost ~= math.floor(cost) then
    return redis.error_reply('ERR tollgate: bad cost or window count for key ' .. i)
  end
  a = a + 3
  local windows = {}
  local max_period = 0
  for w = 1, n do
    local limit = tonumber(ARGV[a])
    local period = tonumber(ARGV[a + 1])
    if not limit or not period or limit < 1 or period < 1
        or limit ~= math.floor(limit) or period ~= math.floor(period) then
      return redis.error_reply('ERR tollgate: bad window ' .. w .. ' for key ' .. i)
    end
    a = a + 2
    windows[w] = { limit = limit, period = period }
    if period > max_period then max_period = period end
  end
  buckets[i] = { key = KEYS[i], algorithm = algorithm, cost = cost, windows = windows, max_period = max_period }
end
if a ~= #ARGV + 1 then
  return redis.error_reply('ERR tollgate: argument count does not match KEYS')
end

for _, b in ipairs(buckets) do
  b.algorithm.load(b)
end

-- Phase 1: does the request fit every window of every key?
local allowed = true
for _, b in ipairs(buckets) do
  for _, w in ipairs(b.windows) do
    w.retry = b.algorithm.retry(b, w)
    if w.retry > 0 then allowed = false end
  end
end

-- Phase 2: record the request in every key, only if every window had room.
if allowed then
  for _, b in ipairs(buckets) do
    b.algorithm.commit(b)
  end
end

-- Phase 3: statistics per window, after the decision.
local reply = { allowed and 1 or 0, now }
for _, b in ipairs(buckets) do
  for _, w in ipairs(b.windows) do
    local remaining, reset = b.algorithm.stats(b, w)
    reply[#reply + 1] = remaining
    reply[#reply + 1] = reset
    reply[#reply + 1] = w.retry
  end
end
return reply
