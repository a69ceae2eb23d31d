-- Algorithm "log": the exact sliding log (model: src/limiter/model/sliding_log.rs).
--
-- Bucket    a sorted set. Every entry is one admitted unit: score = admission
--           time in ms, member = "<time>:<n>", where n counts the entries of
--           that same score, so members are unique without randomness
--           (entries of one score are always trimmed together).
-- load      drop entries at or before now - longest period (left every window);
--           not when dry (peek): every count and entry read below is of
--           entries after now - period, so no number changes.
-- check     count = entries with score > now - period; fits when
--           count + cost <= limit, else retry = when the (count + cost -
--           limit)-th oldest counted entry leaves (at least 1 ms).
-- commit    cost entries at now; TTL = longest period.
-- stats     remaining = limit - count; reset = when the oldest counted entry
--           leaves (0 if none).
-- shaping  last = the newest entry (if after now); a window fits at t >= t0 when the
--           (count + cost - limit)-th oldest entry counted at t0 leaves
--           (t0 + period if cost exceeds the limit); stats as above, the
--           entries at future turns counted. Commands: ZREMRANGEBYSCORE,
--           ZCOUNT after now (and the newest entry if any), per window ZCOUNT (and the entry it waits
--           for), when admitted ZCOUNT at the turn, ZADD, PEXPIRE; per window
--           ZCOUNT and the oldest counted entry for stats.
-- adjust    an extra charge records its entries at the later of now and
--           the newest entry: ZCOUNT after now (and the newest entry if
--           any), unless a window counted none.
-- Commands  ZREMRANGEBYSCORE, then ZCOUNT for the longest window, and for
--           each shorter one unless the longest counted none (windows are
--           nested: then none counts any); when admitted ZADD and PEXPIRE
--           (and a ZCOUNT of the entries at now, unless some window counted
--           none); per denying window the entry it waits for; for reset, the
--           oldest counted entry of each window that counted some, unless
--           already known (the entry a window denying by one waits for is
--           its oldest; windows counting the same entries share it; entries
--           just added at now are the oldest of a window that counted none).

-- The oldest entry counted in window w (w.count > 0), after the decision.
local function log_oldest(b, w)
  for v = 1, b.n do
    local other = b[v]
    if other.oldest and other.count == w.count then return other.oldest end
  end
  local e = redis.call('ZRANGEBYSCORE', b.key, w.from, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  w.oldest = tonumber(e[2])
  return w.oldest
end

-- The newest entry of `key` later than now, or 0 if none. (Only a turn
-- after now matters: t0 = max(now, last). ZCOUNT and ZRANGEBYSCORE, not
-- ZRANGE: the limiter's ACL allows no more.)
local function log_newest_after_now(key)
  local after = '(' .. now_str()
  local m = redis.call('ZCOUNT', key, after, '+inf')
  if m == 0 then return 0 end
  local e = redis.call('ZRANGEBYSCORE', key, after, '+inf', 'WITHSCORES', 'LIMIT', m - 1, 1)
  return tonumber(e[2])
end

MAKE_ALGORITHM.log = function() return {
  check = function(b)
    local key, cost, longest = b.key, b.cost, b.max_period
    local cut = num(now - longest)
    if not dry then redis.call('ZREMRANGEBYSCORE', key, '-inf', cut) end
    -- Entries counted by the longest window: all that are left.
    local all = redis.call('ZCOUNT', key, '(' .. cut, '+inf')
    -- Entries at now count in every window: a window counting none proves
    -- there are none.
    b.empty = false
    local fits = true
    for w = 1, b.n do
      local win = b[w]
      win.oldest = false
      local count = 0
      if win.period == longest then
        win.from, count = '(' .. cut, all
      else
        win.from = '(' .. num(now - win.period)
        if all > 0 then count = redis.call('ZCOUNT', key, win.from, '+inf') end
      end
      win.count = count
      if count == 0 then b.empty = true end
      local excess = count + cost - win.limit
      if excess <= 0 then
        win.retry = 0
      else
        fits = false
        local retry = win.period -- cost above the limit: never fits; config forbids it
        if count > 0 then
          local e = redis.call('ZRANGEBYSCORE', key, win.from, '+inf', 'WITHSCORES', 'LIMIT', excess - 1, 1)
          if e[2] then
            local t = tonumber(e[2])
            if excess == 1 then win.oldest = t end
            retry = t + win.period - now
          end
        end
        if retry < 1 then retry = 1 end
        win.retry = retry
      end
    end
    return fits
  end,

  commit = function(b)
    local key, at = b.key, slot_str()
    local first = 0
    if not b.empty then first = redis.call('ZCOUNT', key, at, at) end
    if b.cost == 1 then
      local n = '0'
      if first > 0 then n = num(first) end
      redis.call('ZADD', key, at, at .. ':' .. n)
    else
      local m = 0
      for n = 0, b.cost - 1 do
        ARGS[m + 1], ARGS[m + 2] = at, at .. ':' .. num(first + n)
        m = m + 2
        if m >= 512 or n == b.cost - 1 then -- bounded unpack() per call
          redis.call('ZADD', key, unpack(ARGS, 1, m))
          m = 0
        end
      end
    end
    redis.call('PEXPIRE', key, ttl(commit_ttl(b)))
  end,

  -- adjust(): an extra charge records at most the largest limit.
  max_charge = function(b, units)
    local most = 0
    for w = 1, b.n do
      if b[w].limit > most then most = b[w].limit end
    end
    if units > most then return most end
    return units
  end,

  -- adjust(): the entries at `at` (entries of one instant are
  -- interchangeable), while stored. All of them are removed and the rest
  -- added again as <at>:0.., so that an instant's members stay <at>:0..m-1
  -- and a later commit at `at` names its entries after them; the key keeps
  -- its expiry (removing every entry deletes it, and ZADD makes it again).
  -- One more PTTL and PEXPIRE when some entries stay.
  refund = function(b, at, units)
    if at <= now - b.max_period then return end
    local key, at_s = b.key, num(at)
    local m = redis.call('ZCOUNT', key, at_s, at_s)
    local take = units
    if take > m then take = m end
    if take == 0 then return end
    local keep, k = m - take, 0
    -- Emptied by the removal, the key would come back without its expiry.
    local pttl = 0
    if keep > 0 then pttl = redis.call('PTTL', key) end
    redis.call('ZREMRANGEBYSCORE', key, at_s, at_s)
    for n = 0, keep - 1 do
      ARGS[k + 1], ARGS[k + 2] = at_s, at_s .. ':' .. num(n)
      k = k + 2
      if k >= 512 or n == keep - 1 then
        redis.call('ZADD', key, unpack(ARGS, 1, k))
        k = 0
      end
    end
    if pttl > 0 then redis.call('PEXPIRE', key, pttl) end
  end,

  -- adjust(): the newest entry if later than now, else now (after check:
  -- a window that counted none proves there is none after now).
  charge_at = function(b)
    if b.empty then return now end
    local c = log_newest_after_now(b.key)
    if c > now then return c end
    return now
  end,

  last = function(b)
    if not dry then redis.call('ZREMRANGEBYSCORE', b.key, '-inf', num(now - b.max_period)) end
    b.empty = false
    return log_newest_after_now(b.key)
  end,

  earliest = function(b, w, t0)
    local from = '(' .. num(t0 - w.period)
    local excess = redis.call('ZCOUNT', b.key, from, '+inf') + b.cost - w.limit
    if excess <= 0 then return t0 end
    local e = redis.call('ZRANGEBYSCORE', b.key, from, '+inf', 'WITHSCORES', 'LIMIT', excess - 1, 1)
    if e[2] then return tonumber(e[2]) + w.period end
    return t0 + w.period
  end,

  shaped_stats = function(b, w)
    local from = '(' .. num(now - w.period)
    local count = redis.call('ZCOUNT', b.key, from, '+inf')
    if count == 0 then return w.limit, 0 end
    local remaining = w.limit - count
    if remaining < 0 then remaining = 0 end
    local e = redis.call('ZRANGEBYSCORE', b.key, from, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    return remaining, tonumber(e[2]) + w.period - now
  end,

  stats = function(b, w, allowed)
    local count = w.count
    if allowed then count = count + b.cost end
    local remaining = w.limit - count
    if remaining < 0 then remaining = 0 end
    if count == 0 then return remaining, 0 end
    -- Admitted into a window that counted none: the oldest is what was just
    -- added. Otherwise read (after the commit, so the new entries count).
    local oldest = now
    if w.count > 0 then oldest = log_oldest(b, w) end
    return remaining, oldest + w.period - now
  end,
} end
