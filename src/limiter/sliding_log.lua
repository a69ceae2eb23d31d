-- Algorithm "log": the exact sliding log (model: src/limiter/model/sliding_log.rs).
--
-- Bucket    a sorted set. Every entry is one admitted unit: score = admission
--           time in ms, member = "<time>:<n>", where n counts the entries of
--           that same score, so members are unique without randomness
--           (entries of one score are always trimmed together).
-- load      drop entries at or before now - longest period (left every window).
-- check     count = entries with score > now - period; fits when
--           count + cost <= limit, else retry = when the (count + cost -
--           limit)-th oldest counted entry leaves (at least 1 ms).
-- commit    cost entries at now; TTL = longest period.
-- stats     remaining = limit - count; reset = when the oldest counted entry
--           leaves (0 if none).

ALGORITHMS.log = {
  load = function(b)
    redis.call('ZREMRANGEBYSCORE', b.key, '-inf', num(now - b.max_period))
  end,

  retry = function(b, w)
    local from = '(' .. num(now - w.period)
    local count = redis.call('ZCOUNT', b.key, from, '+inf')
    local excess = count + b.cost - w.limit
    if excess <= 0 then return 0 end
    local e = redis.call('ZRANGEBYSCORE', b.key, from, '+inf', 'WITHSCORES', 'LIMIT', excess - 1, 1)
    local retry = w.period -- cost above the limit: never fits; config forbids it
    if e[2] then retry = tonumber(e[2]) + w.period - now end
    if retry < 1 then retry = 1 end
    return retry
  end,

  commit = function(b)
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
    redis.call('PEXPIRE', b.key, num(b.max_period + ttl_slack))
  end,

  stats = function(b, w)
    local from = '(' .. num(now - w.period)
    local count = redis.call('ZCOUNT', b.key, from, '+inf')
    local remaining = w.limit - count
    if remaining < 0 then remaining = 0 end
    local reset = 0
    local oldest = redis.call('ZRANGEBYSCORE', b.key, from, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if oldest[2] then reset = tonumber(oldest[2]) + w.period - now end
    return remaining, reset
  end,
}
