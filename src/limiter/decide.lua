-- The driver (last part of the definitions; contract in prelude.lua):
-- decide(KEYS, ARGV[, once]) parses KEYS/ARGV into buckets, then phase 1 (check
-- every window of every key, no writes), phase 2 (commit every key, only if
-- every window fits), phase 3 (statistics per window, after the decision);
-- peek(KEYS, ARGV[, once]), the same without phase 2 and without writes.

-- Sets the call's clock from ARGV[1] ('' = the server's TIME); false if
-- it is not a time.
local function read_clock(s)
  fmod = math.fmod
  now_s = nil
  if s == '' then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    ttl_slack = 0
    slot = now
    return true
  end
  now = tonumber(s)
  ttl_slack = 60000
  slot = now
  return now and now >= 0 and now % 1 == 0
end

-- Reads bucket b's n windows (limit, period pairs) from ARGV[a..]; the
-- number of the first bad window, or nil.
local function read_windows(b, n, ARGV, a)
  b.n, b.max_period = n, 0
  for w = 1, n do
    local limit_s, period_s = ARGV[a], ARGV[a + 1]
    local limit, period = config_number(limit_s), config_number(period_s)
    if not limit or not period or limit < 1 or period < 1 or limit % 1 ~= 0 or period % 1 ~= 0 then
      return w
    end
    a = a + 2
    local win = b[w]
    if not win then
      win = {}
      b[w] = win
    end
    win.limit, win.period, win.limit_s, win.period_s = limit, period, limit_s, period_s
    if period > b.max_period then b.max_period, b.max_period_s = period, period_s end
  end
  return nil
end

-- Bucket i (its table reused from call to call) for key `key` by
-- `algorithm`, with its n windows read from ARGV[a..]: the bucket and the
-- index past its windows, or nil and the error reply.
local function read_bucket(i, key, algorithm, n, ARGV, a)
  local b = BUCKETS[i]
  if not b then
    b = {}
    BUCKETS[i] = b
  end
  b.key, b.algorithm = key, algorithm
  local bad = read_windows(b, n, ARGV, a)
  if bad then
    return nil, redis.error_reply('ERR tollgate: bad window ' .. bad .. ' for key ' .. i)
  end
  return b, a + 2 * n
end

-- Phase 3: statistics per window of every key, after the decision (a
-- bucket's `committed`: whether phase 2 recorded its cost): the reply
-- { allowed, now, then remaining, reset, retry per window }, a marked
-- bucket's part { overridden, then limit, remaining, reset, retry per
-- window }. `shaped`: true for shaping's stats in every bucket, 'later' in
-- the buckets that adjust() charged at a turn later than now (b.later).
-- `marked`: how many buckets are marked. (The reply is made at its final
-- size when that is 1 or 2 windows, unmarked: growing a table costs.)
local function report(keys, allowed, shaped, marked)
  local flag, reply = allowed and 1 or 0, nil
  local windows = 0
  if marked == 0 then
    for i = 1, keys do windows = windows + BUCKETS[i].n end
  end
  if windows == 1 then
    reply = { flag, now, 0, 0, 0 }
  elseif windows == 2 then
    reply = { flag, now, 0, 0, 0, 0, 0, 0 }
  else
    reply = { flag, now }
  end
  local r = 2
  for i = 1, keys do
    local b = BUCKETS[i]
    local stats = b.algorithm.stats
    if shaped == true or (shaped == 'later' and b.later) then stats = b.algorithm.shaped_stats end
    local mark = b.marked
    if mark then
      r = r + 1
      reply[r] = b.overridden and 1 or 0
    end
    for w = 1, b.n do
      local win = b[w]
      local remaining, reset = stats(b, win, b.committed)
      if mark then
        r = r + 1
        reply[r] = win.limit
      end
      reply[r + 1], reply[r + 2], reply[r + 3] = remaining, reset, win.retry
      r = r + 3
    end
  end
  return reply
end

-- A shaped call (contract in prelude.lua; model: src/limiter/model/shape.rs):
-- t0 = the latest of now + floor and every bucket's last turn; the turn =
-- the latest time any window fits from t0; recorded at the turn in every
-- bucket (but those that only check) if it is at most max_delay ms away.
-- A full lease set never fits by waiting (its earliest is NEVER): the call
-- is denied, whatever max_delay, and that window's retry is its unshaped
-- one.
local function shape(keys, max_delay, floor, marked)
  local t0 = now + floor
  for i = 1, keys do
    local b = BUCKETS[i]
    local last = b.algorithm.last(b)
    if last > t0 then t0 = last end
  end
  local at = t0
  for i = 1, keys do
    local b = BUCKETS[i]
    for w = 1, b.n do
      local e = b.algorithm.earliest(b, b[w], t0)
      b[w].earliest = e
      if e > at then at = e end
    end
  end
  local allowed = at - now <= max_delay
  slot = at
  for i = 1, keys do
    local b = BUCKETS[i]
    b.committed = allowed and not b.check_only and not dry
    if b.committed then
      if b.algorithm.at_slot then b.algorithm.at_slot(b) end
      b.algorithm.commit(b)
    elseif b.algorithm.restat then
      b.algorithm.restat(b)
    end
    for w = 1, b.n do
      local win = b[w]
      -- A full lease set (NEVER) keeps the unshaped retry its check set.
      if win.earliest ~= NEVER then
        local retry = win.earliest - now - max_delay
        if retry < 0 then retry = 0 end
        win.retry = retry
      end
    end
  end
  local reply = report(keys, allowed, true, marked)
  local delay = 0
  if allowed then delay = at - now end
  reply[#reply + 1] = delay
  return reply
end

-- Reads the checks of ARGV[a..] into BUCKETS: the number of checks and of
-- marked ones, or nil and the error reply.
local function read_checks(KEYS, ARGV, a)
  local argc, i, marked = #ARGV, 0, 0
  while a <= argc do
    i = i + 1
    local arg, mark, exact = unmarked(ARGV[a])
    local algorithm, id = algorithm_for(arg), nil
    local cost_s = ARGV[a + 1]
    local cost = config_number(cost_s)
    local check_only = false
    if cost == nil and string.byte(cost_s or '', 1) == 63 then -- '?': check only
      cost, check_only = config_number(string.sub(cost_s, 2)), true
    end
    local n = config_number(ARGV[a + 2])
    if not algorithm then
      -- "lease=<id>" (lease.lua), or the error reply in id.
      algorithm, id = lease_arg(arg, i)
      if not algorithm then return nil, id end
    end
    if not cost or not n or cost < 1 or n < 1 or cost % 1 ~= 0 then
      return nil, redis.error_reply('ERR tollgate: bad cost or window count for key ' .. i)
    end
    if id and (cost ~= 1 or n ~= 1) then
      return nil, redis.error_reply('ERR tollgate: a lease key takes cost 1 and one window (key ' .. i .. ')')
    end
    local b, next_or_error = read_bucket(i, KEYS[i], algorithm, n, ARGV, a + 3)
    if not b then
      return nil, next_or_error
    end
    b.cost, b.check_only, b.marked, b.exact, b.id = cost, check_only, mark, exact, id
    if mark then marked = marked + 1 end
    a = next_or_error
  end
  if i + marked ~= #KEYS then
    return nil, redis.error_reply('ERR tollgate: argument count does not match KEYS')
  end
  return i, marked
end

-- decide(), or its dry run (peek) when `is_dry`. `once`: the definitions
-- were made for this call only (a script), so nothing is worth keeping for
-- later calls.
local function run_decide(KEYS, ARGV, once, is_dry)
  if once then config_room = 0 end
  if not read_clock(ARGV[1]) then
    return redis.error_reply('ERR tollgate: bad now')
  end
  dry = is_dry

  local a = 2
  local max_delay, floor = nil, 0
  if string.byte(ARGV[2] or '', 1) == 126 then -- '~': shape
    local delay_s, floor_s = ARGV[2], '0'
    local colon = string.find(delay_s, ':', 2, true)
    if colon then delay_s, floor_s = string.sub(delay_s, 1, colon - 1), string.sub(delay_s, colon + 1) end
    max_delay, floor = tonumber(string.sub(delay_s, 2)), tonumber(floor_s)
    if not max_delay or max_delay < 0 or max_delay % 1 ~= 0 or not floor or floor < 0 or floor % 1 ~= 0 then
      return redis.error_reply('ERR tollgate: bad max_delay')
    end
    a = 3
  end
  local keys, marked = read_checks(KEYS, ARGV, a)
  if not keys then return marked end
  if marked > 0 then apply_overrides(KEYS, keys) end

  if max_delay then return shape(keys, max_delay, floor, marked) end

  -- Phase 1: does the request fit every window of every key?
  local allowed = true
  for i = 1, keys do
    local b = BUCKETS[i]
    if not b.algorithm.check(b) then allowed = false end
  end

  -- Phase 2: record the request in every key, only if every window had room
  -- (keys that only check record nothing; a dry run records nothing).
  for i = 1, keys do
    local b = BUCKETS[i]
    b.committed = allowed and not b.check_only and not dry
    if b.committed then b.algorithm.commit(b) end
  end

  return report(keys, allowed, false, marked)
end

local function decide(KEYS, ARGV, once) return run_decide(KEYS, ARGV, once, false) end

local function peek(KEYS, ARGV, once) return run_decide(KEYS, ARGV, once, true) end
